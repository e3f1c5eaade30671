"""The headers of answers, and of the requests a broker sends its clients, one class per shape.

Declared as headers.py declares the requests' (header_fields.py): each field's
rule once, next to it. The side that writes one builds the class and sends
`to_fields()`; the side that reads one calls `Class.of(command)`, which
raises the `CommandError` naming a missing or malformed field.
"""

from __future__ import annotations

from dataclasses import dataclass

from .header_fields import TEXT_MAX, CustomHeader, boolean, i32, i64, text

# -- answers ------------------------------------------------------------------------------------

#: The region a send's answer names (4.9.8: BrokerConfig#regionId's default, MixAll.DEFAULT_TRACE_REGION_ID)
DEFAULT_REGION = "DefaultRegion"


@dataclass(frozen=True, slots=True, kw_only=True)
class SendMessageResponseHeader(CustomHeader):
    """SEND_MESSAGE / V2 / SEND_BATCH_MESSAGE's answer: where the message was stored."""

    msg_id: str | None = text(max_len=TEXT_MAX)  # a batch's ids, comma-separated
    queue_id: int | None = i32()
    queue_offset: int | None = i64()
    transaction_id: str | None = text()
    msg_region: str | None = text(name="MSG_REGION")
    trace_on: str | None = text(name="TRACE_ON")

    @staticmethod
    def stored(msg_id: str, queue_id: int, queue_offset: int) -> dict[str, str]:
        """The extFields of a stored send's answer, in the default region with trace on.

        What `SendMessageResponseHeader(msg_id=..., queue_id=..., queue_offset=...,
        msg_region=DEFAULT_REGION, trace_on="true").to_fields()` gives, written
        directly: every send is answered with it, and building the frozen class first
        costs more than the dict (tests/test_response_headers.py holds the two equal).
        """
        return {
            "msgId": msg_id,
            "queueId": str(queue_id),
            "queueOffset": str(queue_offset),
            "MSG_REGION": DEFAULT_REGION,
            "TRACE_ON": "true",
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class PullMessageResponseHeader(CustomHeader):
    """PULL_MESSAGE's answer: where to pull next, the queue's ends, and which broker to ask."""

    suggest_which_broker_id: int | None = i64()
    next_begin_offset: int = i64(True)
    min_offset: int = i64(True)
    max_offset: int = i64(True)

    @staticmethod
    def pulled(
        suggest_which_broker_id: int, next_begin_offset: int, min_offset: int, max_offset: int
    ) -> dict[str, str]:
        """The extFields of a pull's answer: what `PullMessageResponseHeader(...).to_fields()`
        gives for these values, written directly, as every pull is answered with it
        (tests/test_response_headers.py holds the two equal)."""
        return {
            "suggestWhichBrokerId": str(suggest_which_broker_id),
            "nextBeginOffset": str(next_begin_offset),
            "minOffset": str(min_offset),
            "maxOffset": str(max_offset),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryConsumerOffsetResponseHeader(CustomHeader):
    """QUERY_CONSUMER_OFFSET's answer: the group's committed offset, when it has one."""

    offset: int | None = i64()


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetResponseHeader(CustomHeader):
    """GET_MIN_OFFSET, GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP's answers (GetMinOffsetResponseHeader,
    GetMaxOffsetResponseHeader, SearchOffsetResponseHeader): one offset."""

    offset: int = i64(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class GetBrokerAclConfigResponseHeader(CustomHeader):
    """GET_BROKER_CLUSTER_ACL_INFO's answer: the broker, its default file's and every file's
    dataVersion (JSON)."""

    version: str | None = text(max_len=TEXT_MAX)
    all_acl_file_version: str | None = text(max_len=TEXT_MAX)
    broker_name: str | None = text()
    broker_addr: str | None = text()
    cluster_name: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerResponseHeader(CustomHeader):
    """REGISTER_BROKER's answer: the master of the broker's name and its HA address (a slave
    follows it, B-121)."""

    ha_server_addr: str | None = text()
    master_addr: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryDataVersionResponseHeader(CustomHeader):
    """QUERY_DATA_VERSION's answer: whether the name server holds another data version."""

    changed: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class GetKVConfigResponseHeader(CustomHeader):
    """GET_KV_CONFIG's answer."""

    value: str | None = text(max_len=TEXT_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class GetBrokerConfigResponseHeader(CustomHeader):
    """GET_BROKER_CONFIG's answer: the config's data version (JSON)."""

    version: str = text(True, max_len=TEXT_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class GetEarliestMsgStoretimeResponseHeader(CustomHeader):
    """GET_EARLIEST_MSG_STORETIME's answer."""

    timestamp: int = i64(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryMessageResponseHeader(CustomHeader):
    """QUERY_MESSAGE's answer: how far the index had come (es-broker's index is always current)."""

    index_last_update_timestamp: int = i64(True)
    index_last_update_phyoffset: int = i64(True)


# -- requests a broker sends its clients ---------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckTransactionStateRequestHeader(CustomHeader):
    """CHECK_TRANSACTION_STATE: the half message whose producer must say commit or roll back."""

    tran_state_table_offset: int | None = i64()
    commit_log_offset: int | None = i64()
    msg_id: str | None = text()
    transaction_id: str | None = text()
    offset_msg_id: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyMessageRequestHeader(CustomHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT: the reply as its sender sent it, with where it was stored.

    A null field is left out, as RemotingCommand#makeCustomHeaderToNet does; unitMode and
    storeTimestamp are primitives, always written.
    """

    producer_group: str | None = text()
    topic: str = text(True)
    default_topic: str | None = text()
    default_topic_queue_nums: int | None = i32()
    queue_id: int = i32(True)
    sys_flag: int = i32(True)
    born_timestamp: int = i64(True)
    flag: int = i32(True)
    properties: str | None = text(max_len=TEXT_MAX)
    reconsume_times: int | None = i32()
    unit_mode: bool = boolean(default=False)
    born_host: str | None = text()
    store_host: str | None = text()
    store_timestamp: int = i64(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupNoticeHeader(CustomHeader):
    """NOTIFY_CONSUMER_IDS_CHANGED (NotifyConsumerIdsChangedRequestHeader): the group whose
    members changed."""

    consumer_group: str = text(True)
