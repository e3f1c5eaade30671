"""The request headers of RocketMQ's own request codes: one class per CommandCustomHeader shape.

Each class is what RocketMQ 4.9.8 declares for the request (its class name, less
nothing), with each field's rule written once next to it (header_fields.py).
Where several codes carry the same fields, one class serves them all, as
RocketMQ reuses its classes. requests.py derives every code's declared shape
from these classes; the server decodes a request into its class once, at the
edge, and the processor reads it with `Class.of(request)`; clients, the admin
client and the broker's own requests are built from them (`request(code, header)`,
which writes the header's `to_fields(code)`).

es-broker's own request codes have theirs in es_headers.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .codes import RequestCode
from .header_fields import (
    NAME_MAX,
    TEXT_MAX,
    CustomHeader,
    boolean,
    i32,
    i64,
    offset_msg_id,
    physical_offset,
    queue_id,
    rules_of,
    text,
)

if TYPE_CHECKING:
    pass

# -- producer -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendMessageRequestHeader(CustomHeader):
    """SEND_MESSAGE (Java names), SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (one letter a field,
    SendMessageRequestHeaderV2, docs/protocol.md §7.2.1); a V2 header may carry a field under its
    Java name instead. None is a field left out of the frame. Fields are in the order the header is
    written (`maxReconsumeTimes`, only on a consumer's re-send to `%RETRY%`, goes last).
    """

    producer_group: str | None = text(v2="a")
    topic: str = text(True, v2="b", default="")
    default_topic: str | None = text(v2="c")
    default_topic_queue_nums: int | None = i32(min=0, v2="d")
    # a negative queue id asks the broker to pick one (SendMessageProcessor#sendMessage)
    queue_id: int = i32(True, v2="e", default=0)
    sys_flag: int = i32(True, v2="f", default=0)
    born_timestamp: int = i64(True, v2="g", default=0)
    flag: int | None = i32(v2="h")  # required for a single message; a batch has one per entry
    properties: str | None = text(max_len=TEXT_MAX, v2="i")
    reconsume_times: int | None = i32(min=0, v2="j")
    unit_mode: bool | None = boolean(v2="k")
    batch: bool | None = boolean(v2="m")
    max_reconsume_times: int | None = i32(v2="l")

    @classmethod
    def uses_v2_names(cls, code: int) -> bool:
        # SEND_MESSAGE and SEND_REPLY_MESSAGE carry SendMessageRequestHeader's Java names
        return code not in (RequestCode.SEND_MESSAGE, RequestCode.SEND_REPLY_MESSAGE)

    def v2_fields(self) -> dict[str, str]:
        """The SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE extFields: one-letter names, Java's text."""
        return self.to_fields(RequestCode.SEND_MESSAGE_V2)

    def v1_fields(self) -> dict[str, str]:
        """The SEND_MESSAGE extFields: Java's field names."""
        return self.to_fields()


#: SEND_MESSAGE_V2's one-letter names, Java name by letter and letter by Java name.
SEND_V2_FIELDS = {r.v2: r.name for r in rules_of(SendMessageRequestHeader) if r.v2 is not None}
SEND_V1_FIELDS = {name: short for short, name in SEND_V2_FIELDS.items()}

# -- consumer -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PullMessageRequestHeader(CustomHeader):
    """PULL_MESSAGE."""

    consumer_group: str = text(True)
    topic: str = text(True)
    queue_id: int = queue_id()
    queue_offset: int = i64(True)
    max_msg_nums: int = i32(True)
    sys_flag: int = i32(True)
    commit_offset: int = i64(True)
    suspend_timeout_millis: int | None = i64(min=0)
    subscription: str | None = text(max_len=TEXT_MAX)
    sub_version: int | None = i64()
    expression_type: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryConsumerOffsetRequestHeader(CustomHeader):
    """QUERY_CONSUMER_OFFSET."""

    consumer_group: str = text(True)
    topic: str = text(True)
    queue_id: int = queue_id()


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateConsumerOffsetRequestHeader(CustomHeader):
    """UPDATE_CONSUMER_OFFSET."""

    consumer_group: str = text(True)
    topic: str = text(True)
    queue_id: int = queue_id()
    commit_offset: int = i64(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchOffsetRequestHeader(CustomHeader):
    """SEARCH_OFFSET_BY_TIMESTAMP."""

    topic: str = text(True)
    queue_id: int = queue_id()
    timestamp: int = i64(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicQueueRequestHeader(CustomHeader):
    """GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME (GetMaxOffsetRequestHeader...)."""

    topic: str = text(True)
    queue_id: int = queue_id()


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewMessageRequestHeader(CustomHeader):
    """VIEW_MESSAGE_BY_ID: a commit-log offset."""

    offset: int = physical_offset()


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryMessageRequestHeader(CustomHeader):
    """QUERY_MESSAGE: messages by key (or unique key) within a time range."""

    topic: str = text(True)
    key: str = text(True, max_len=TEXT_MAX)
    max_num: int = i32(True, min=0)
    begin_timestamp: int = i64(True)
    end_timestamp: int = i64(True)
    # MixAll.UNIQUE_MSG_QUERY_FLAG, an extField beside the header: `key` is a UNIQ_KEY (B-202)
    # (QueryMessageProcessor compares it with "true" exactly, not as Boolean.parseBoolean)
    unique_key_query: str | None = text(name="_UNIQUE_KEY_QUERY")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerSendMsgBackRequestHeader(CustomHeader):
    """CONSUMER_SEND_MSG_BACK."""

    group: str = text(True)
    offset: int = physical_offset()
    delay_level: int = i32(True)
    origin_msg_id: str | None = text()
    origin_topic: str | None = text()
    max_reconsume_times: int | None = i32()
    unit_mode: bool | None = boolean()


# -- clients ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterClientRequestHeader(CustomHeader):
    """UNREGISTER_CLIENT."""

    client_id: str | None = text(name="clientID")
    producer_group: str | None = text()
    consumer_group: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupRequestHeader(CustomHeader):
    """GET_CONSUMER_LIST_BY_GROUP, GET_CONSUMER_CONNECTION_LIST (GetConsumerListByGroupRequestHeader,
    GetConsumerConnectionListRequestHeader)."""

    consumer_group: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionRequestHeader(CustomHeader):
    """END_TRANSACTION: commit or roll back a half message."""

    producer_group: str = text(True)
    tran_state_table_offset: int = i64(True)
    commit_log_offset: int = physical_offset()
    commit_or_rollback: int = i32(True)
    from_transaction_check: bool | None = boolean()
    msg_id: str = text(True)
    transaction_id: str | None = text()
    bname: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class GetConsumerRunningInfoRequestHeader(CustomHeader):
    """GET_CONSUMER_RUNNING_INFO."""

    consumer_group: str = text(True)
    client_id: str = text(True)
    jstack_enable: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeMessageDirectlyResultRequestHeader(CustomHeader):
    """CONSUME_MESSAGE_DIRECTLY."""

    consumer_group: str = text(True)
    client_id: str = text(True)
    msg_id: str = offset_msg_id()
    broker_name: str | None = text()


# -- admin --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicRequestHeader(CustomHeader):
    """UPDATE_AND_CREATE_TOPIC."""

    topic: str = text(True)
    default_topic: str | None = text()
    read_queue_nums: int = i32(True, min=0)
    write_queue_nums: int = i32(True, min=0)
    perm: int = i32(True, min=0, max=7)
    topic_filter_type: str | None = text()
    topic_sys_flag: int | None = i32()
    order: bool | None = boolean()
    attributes: str | None = text()  # RocketMQ 5: +key=value,-key


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRequestHeader(CustomHeader):
    """DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO, QUERY_TOPIC_CONSUME_BY_WHO,
    DELETE_TOPIC_IN_NAMESRV: a topic name."""

    topic: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteSubscriptionGroupRequestHeader(CustomHeader):
    """DELETE_SUBSCRIPTIONGROUP."""

    group_name: str = text(True)
    remove_offset: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class GetProducerConnectionListRequestHeader(CustomHeader):
    """GET_PRODUCER_CONNECTION_LIST."""

    producer_group: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class GetConsumeStatsRequestHeader(CustomHeader):
    """GET_CONSUME_STATS."""

    consumer_group: str = text(True)
    topic: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetOffsetRequestHeader(CustomHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET."""

    topic: str = text(True)
    group: str = text(True)
    timestamp: int = i64(True)
    is_force: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class CloneGroupOffsetRequestHeader(CustomHeader):
    """CLONE_GROUP_OFFSET."""

    src_group: str = text(True)
    dest_group: str = text(True)
    topic: str | None = text()
    offline: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewBrokerStatsDataRequestHeader(CustomHeader):
    """VIEW_BROKER_STATS_DATA (`at`: es-broker's, a moment to read the counts at)."""

    stats_name: str = text(True)
    stats_key: str = text(True, max_len=2 * NAME_MAX + 1)
    at: int | None = i64(min=0)


# -- ACL administration -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateAccessConfigRequestHeader(CustomHeader):
    """UPDATE_AND_CREATE_ACL_CONFIG."""

    access_key: str = text(True)
    secret_key: str | None = text()
    white_remote_address: str | None = text(max_len=TEXT_MAX)
    admin: bool | None = boolean()
    default_topic_perm: str | None = text()
    default_group_perm: str | None = text()
    topic_perms: str | None = text(max_len=TEXT_MAX)
    group_perms: str | None = text(max_len=TEXT_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAccessConfigRequestHeader(CustomHeader):
    """DELETE_ACL_CONFIG."""

    access_key: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateGlobalWhiteAddrsConfigRequestHeader(CustomHeader):
    """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG."""

    global_white_addrs: str | None = text(max_len=TEXT_MAX)
    acl_file_full_path: str | None = text(max_len=4096)


# -- name server --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRequestHeader(CustomHeader):
    """REGISTER_BROKER."""

    broker_name: str = text(True)
    broker_addr: str = text(True)
    cluster_name: str = text(True)
    ha_server_addr: str | None = text()
    broker_id: int = i64(True, min=0)
    compressed: bool | None = boolean()
    body_crc32: int | None = i32()
    # es-broker's (B-391; a 4.9.8 name server ignores them): the body lists every topic of the
    # broker (its others go), and the topics the broker deleted, `;`-separated
    topic_table_complete: bool | None = boolean()
    deleted_topics: str | None = text(max_len=TEXT_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnRegisterBrokerRequestHeader(CustomHeader):
    """UNREGISTER_BROKER."""

    broker_name: str = text(True)
    broker_addr: str = text(True)
    cluster_name: str | None = text()
    broker_id: int = i64(True, min=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class GetRouteInfoRequestHeader(CustomHeader):
    """GET_ROUTEINFO_BY_TOPIC."""

    topic: str = text(True)
    accept_standard_json_only: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class GetTopicsByClusterRequestHeader(CustomHeader):
    """GET_TOPICS_BY_CLUSTER."""

    cluster: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryDataVersionRequestHeader(CustomHeader):
    """QUERY_DATA_VERSION."""

    broker_name: str | None = text()
    broker_addr: str = text(True)
    cluster_name: str | None = text()
    broker_id: int | None = i64(min=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class PutKVConfigRequestHeader(CustomHeader):
    """PUT_KV_CONFIG."""

    namespace: str = text(True)
    key: str = text(True)
    value: str = text(True, max_len=TEXT_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class KVConfigRequestHeader(CustomHeader):
    """GET_KV_CONFIG, DELETE_KV_CONFIG (GetKVConfigRequestHeader, DeleteKVConfigRequestHeader)."""

    namespace: str = text(True)
    key: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class GetKVListByNamespaceRequestHeader(CustomHeader):
    """GET_KVLIST_BY_NAMESPACE."""

    namespace: str = text(True)
