"""What each request code needs under ACL: the resources and perms, or an admin account.

RocketMQ 4.9.8 reads these in `PlainAccessValidator#parse` (resources) and
`Permission.ADMIN_CODE` (admin-only codes); every other code needs a valid
signature only. es-broker declares a rule for every code it serves (a test
fails on a served code without one; a code without a rule is refused), and
goes further than 4.9.8 where 4.9.8 leaves a side door (docs/semantics.md,
B-160..B-179):

- SEND_BATCH_MESSAGE needs PUB on its topic as SEND_MESSAGE_V2 does (4.9.8
  checks nothing but the signature);
- a send to a retry topic `%RETRY%G` needs SUB on group G, read from the
  topic (4.9.8 reads a `group` field SendMessageRequestHeader does not have,
  so a V1 send checks nothing, and V2 checks the producer group);
- QUERY_CONSUMER_OFFSET and LOCK/UNLOCK_BATCH_MQ need SUB on the group (and
  topic) as UPDATE_CONSUMER_OFFSET does;
- every code that changes what other clients see is admin-only: offset
  resets (INVOKE_BROKER_TO_RESET_OFFSET, es-broker's RESET_OFFSET, CLONE_GROUP_OFFSET),
  re-drives, CONSUME_MESSAGE_DIRECTLY, the message trace (its topic is
  unknown before it runs), and replication (HA_FETCH_RECORDS, HA_MERGE_SLAVE_OFFSETS);
- reads of a topic's or a group's offsets and clients (GET_MAX/MIN_OFFSET,
  SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME, GET_TOPIC_STATS_INFO,
  GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST, GET_CONSUMER_RUNNING_INFO) need SUB
  on it; the handlers filter lists to the caller's scope (B-350, B-351);
- on the name server, REGISTER_BROKER, UNREGISTER_BROKER and the codes that
  change routes or KV config are admin-only; the reads stay open (RocketMQ's
  name server checks nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from es_broker.acl.plain import Perm, group_resource, is_group_resource
from es_broker.remoting import fastjson
from es_broker.remoting import headers as h
from es_broker.remoting import pop_headers as pop
from es_broker.remoting.codes import EsRequestCode, RequestCode
from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.es_headers import StatsHistoryRequestHeader

Needs = list[tuple[str, int]]
_Needs = Callable[[RemotingCommand], Needs]
TRACE_TOPIC = (
    "RMQ_SYS_TRACE_TOPIC"  # TopicValidator.RMQ_SYS_TRACE_TOPIC: a PUB to it skips the perm check
)


@dataclass(frozen=True, slots=True)
class Rule:
    """How one request code is checked.

    open: no check at all (name-server reads). Otherwise the full check
    (white lists, account, signature), then admin if `admin`, then each
    resource `needs` returns against the account's perms.
    """

    admin: bool = False
    needs: Callable[[RemotingCommand], Needs] | None = None
    admin_when: Callable[[RemotingCommand], bool] | None = None  # admin for some requests only
    open: bool = False
    beyond_rocketmq: str = (
        ""  # why es-broker checks more than 4.9.8 does, for the docs and the reader
    )


def _topic_or_retry(topic: str | None) -> Needs:
    if topic is None:
        return []
    if is_group_resource(topic):  # %RETRY%G: the group's own retry topic, checked as group G
        return [(topic, Perm.SUB)]
    return [(topic, Perm.PUB)]


def _send(req: RemotingCommand) -> Needs:
    """SEND_MESSAGE, V2 and batch: PUB on the topic (a retry topic as its group), read as the send
    path reads it (a V2 header's one-letter name, or its Java name)."""
    return _topic_or_retry(h.SendMessageRequestHeader.of(req).topic)


def _group_sub(group: str | None) -> Needs:
    return [] if group is None else [(group_resource(group), Perm.SUB)]


def _group_and_topic(group: str, topic: str) -> Needs:
    return [(group_resource(group), Perm.SUB), (topic, Perm.SUB)]


def _pull(req: RemotingCommand) -> Needs:
    pulled = h.PullMessageRequestHeader.of(req)
    return _group_and_topic(pulled.consumer_group, pulled.topic)


def _popped(
    header: type[pop.PopMessageRequestHeader]
    | type[pop.AckMessageRequestHeader]
    | type[pop.ChangeInvisibleTimeRequestHeader],
) -> _Needs:
    """RocketMQ 5's pop codes: SUB on the group and the topic (their @RocketMQAction is SUB)."""

    def needs(req: RemotingCommand) -> Needs:
        asked = header.of(req)
        return _group_and_topic(asked.consumer_group, asked.topic)

    return needs


def _query_offset(req: RemotingCommand) -> Needs:
    asked = h.QueryConsumerOffsetRequestHeader.of(req)
    return _group_and_topic(asked.consumer_group, asked.topic)


def _update_offset(req: RemotingCommand) -> Needs:
    update = h.UpdateConsumerOffsetRequestHeader.of(req)
    return _group_and_topic(update.consumer_group, update.topic)


def _send_back(req: RemotingCommand) -> Needs:
    return _group_sub(h.ConsumerSendMsgBackRequestHeader.of(req).group)


def _unregister(req: RemotingCommand) -> Needs:
    return _group_sub(h.UnregisterClientRequestHeader.of(req).consumer_group)


def _consumer_group(req: RemotingCommand) -> Needs:
    return _group_sub(h.ConsumerGroupRequestHeader.of(req).consumer_group)


def _consume_stats(req: RemotingCommand) -> Needs:
    return _group_sub(h.GetConsumeStatsRequestHeader.of(req).consumer_group)


def _running_info(req: RemotingCommand) -> Needs:
    return _group_sub(h.GetConsumerRunningInfoRequestHeader.of(req).consumer_group)


def _query_message(req: RemotingCommand) -> Needs:
    return [(h.QueryMessageRequestHeader.of(req).topic, Perm.SUB)]


def _json(req: RemotingCommand) -> Any:
    if not req.body:
        return {}
    data = fastjson.loads(req.body)
    return data if isinstance(data, dict) else {}


def _heartbeat(req: RemotingCommand) -> Needs:
    """Each consumer group SUB, each subscribed topic SUB (retry topics as their group)."""
    out: Needs = []
    for consumer in _json(req).get("consumerDataSet") or ():
        if not isinstance(consumer, dict):
            continue
        group = consumer.get("groupName")
        if isinstance(group, str):
            out.append((group_resource(group), Perm.SUB))
        for sub in consumer.get("subscriptionDataSet") or ():
            if isinstance(sub, dict) and isinstance(sub.get("topic"), str):
                out.append((sub["topic"], Perm.SUB))
    return out


def _lock(req: RemotingCommand) -> Needs:
    data = _json(req)
    out: Needs = []
    group = data.get("consumerGroup")
    if isinstance(group, str):
        out.append((group_resource(group), Perm.SUB))
    for mq in data.get("mqSet") or ():
        if isinstance(mq, dict) and isinstance(mq.get("topic"), str):
            out.append((mq["topic"], Perm.SUB))
    return out


def _topic_sub(header: type[h.TopicRequestHeader | h.TopicQueueRequestHeader]) -> _Needs:
    """SUB on the header's topic (a retry topic as its group)."""

    def needs(req: RemotingCommand) -> Needs:
        return [(header.of(req).topic, Perm.SUB)]

    return needs


def _search_offset(req: RemotingCommand) -> Needs:
    return [(h.SearchOffsetRequestHeader.of(req).topic, Perm.SUB)]


READ_BEYOND = "a read of offsets or clients; 4.9.8 asks only for a signature (B-350)"
TOPIC_READ = Rule(needs=_topic_sub(h.TopicRequestHeader), beyond_rocketmq=READ_BEYOND)
QUEUE_READ = Rule(needs=_topic_sub(h.TopicQueueRequestHeader), beyond_rocketmq=READ_BEYOND)
SEARCH_READ = Rule(needs=_search_offset, beyond_rocketmq=READ_BEYOND)
GROUP_READ = Rule(needs=_consumer_group, beyond_rocketmq=READ_BEYOND)


def _stats_key_sub(req: RemotingCommand) -> Needs:
    """VIEW_BROKER_STATS_DATA: SUB on the topic (and group) its statsKey names (B-363)."""
    asked = h.ViewBrokerStatsDataRequestHeader.of(req)
    name, key = asked.stats_name, asked.stats_key
    if name.startswith("BROKER_"):  # the cluster's name: counts of the whole broker
        return []
    topic, at, group = key.partition("@")
    if name.startswith(("GROUP_", "SNDBCK_")) and at:
        return [(topic, Perm.SUB), (group_resource(group), Perm.SUB)]
    return [(key, Perm.SUB)]


STATS_READ = Rule(needs=_stats_key_sub, beyond_rocketmq=READ_BEYOND)


def _history_topic(req: RemotingCommand) -> str | None:
    return StatsHistoryRequestHeader.of(req).topic or None


# STATS_HISTORY (B-515): a topic's history needs SUB on it (its own topics for a normal account,
# the dashboard's throughput page); the whole broker's, every topic's, is an admin's
STATS_HISTORY = Rule(
    needs=lambda req: [(topic, Perm.SUB)] if (topic := _history_topic(req)) else [],
    admin_when=lambda req: _history_topic(req) is None,
    beyond_rocketmq="es-broker's code: every topic's counts are an admin's, one topic's its readers'",
)

C, E = RequestCode, EsRequestCode
SIGNED = Rule()  # the signature (and white lists) only, as 4.9.8 for codes it does not name
ADMIN = Rule(admin=True)  # Permission.ADMIN_CODE in 4.9.8
ADMIN_ES = Rule(
    admin=True,
    beyond_rocketmq="changes state other clients see (or ships the log); "
    "4.9.8 asks only for a signature",
)

ADMIN_ACL = Rule(
    admin=True,
    beyond_rocketmq="the ACL admin codes: 4.9.8 leaves them out of ADMIN_CODE, so any "
    "signed account could change the rules or read them",
)

BROKER_RULES: dict[int, Rule] = {
    # -- producer
    C.SEND_MESSAGE: Rule(needs=_send),
    C.SEND_MESSAGE_V2: Rule(needs=_send),
    C.SEND_BATCH_MESSAGE: Rule(needs=_send, beyond_rocketmq="4.9.8 checks no topic for a batch"),
    C.END_TRANSACTION: SIGNED,
    C.SEND_REPLY_MESSAGE: SIGNED,  # 4.9.8's PlainAccessValidator names neither reply code
    C.SEND_REPLY_MESSAGE_V2: SIGNED,
    # -- consumer
    C.PULL_MESSAGE: Rule(needs=_pull),
    C.QUERY_CONSUMER_OFFSET: Rule(
        needs=_query_offset, beyond_rocketmq="4.9.8 checks only the signature"
    ),
    C.UPDATE_CONSUMER_OFFSET: Rule(needs=_update_offset),
    C.CONSUMER_SEND_MSG_BACK: Rule(needs=_send_back),
    C.POP_MESSAGE: Rule(needs=_popped(pop.PopMessageRequestHeader)),
    C.ACK_MESSAGE: Rule(needs=_popped(pop.AckMessageRequestHeader)),
    C.CHANGE_MESSAGE_INVISIBLETIME: Rule(needs=_popped(pop.ChangeInvisibleTimeRequestHeader)),
    C.QUERY_MESSAGE: Rule(needs=_query_message),
    C.HEART_BEAT: Rule(needs=_heartbeat),
    C.UNREGISTER_CLIENT: Rule(needs=_unregister),
    C.GET_CONSUMER_LIST_BY_GROUP: Rule(needs=_consumer_group),
    C.LOCK_BATCH_MQ: Rule(needs=_lock, beyond_rocketmq="4.9.8 checks only the signature"),
    C.UNLOCK_BATCH_MQ: Rule(needs=_lock, beyond_rocketmq="4.9.8 checks only the signature"),
    C.CHECK_CLIENT_CONFIG: SIGNED,
    C.SEARCH_OFFSET_BY_TIMESTAMP: SEARCH_READ,
    C.GET_MAX_OFFSET: QUEUE_READ,
    C.GET_MIN_OFFSET: QUEUE_READ,
    C.GET_EARLIEST_MSG_STORETIME: QUEUE_READ,
    C.VIEW_MESSAGE_BY_ID: SIGNED,  # SUB on the message's topic: checked by the handler (B-350)
    C.GET_ALL_DELAY_OFFSET: SIGNED,
    # -- admin: 4.9.8's ADMIN_CODE
    C.UPDATE_AND_CREATE_TOPIC: ADMIN,
    C.UPDATE_BROKER_CONFIG: ADMIN,
    C.DELETE_EXPIRED_COMMITLOG: ADMIN_ES,  # deletes commit-log files
    C.DELETE_TOPIC_IN_BROKER: ADMIN,
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ADMIN,
    C.DELETE_SUBSCRIPTIONGROUP: ADMIN,
    # -- admin: es-broker's additions
    C.INVOKE_BROKER_TO_RESET_OFFSET: ADMIN_ES,
    C.CLONE_GROUP_OFFSET: ADMIN_ES,
    C.CONSUME_MESSAGE_DIRECTLY: ADMIN_ES,
    E.RESET_OFFSET: ADMIN_ES,
    E.REDRIVE_DLQ: ADMIN_ES,
    E.HISTORY_ARCHIVE: ADMIN_ES,  # removes records from the hot log (B-411)
    E.MESSAGE_TRACE: ADMIN_ES,
    E.OFFSETS_AT: ADMIN_ES,
    E.OFFSET_HISTORY: ADMIN_ES,
    E.OFFSET_TIMELINE: ADMIN_ES,
    E.EXPLAIN_GROUP: ADMIN_ES,
    E.ACCOUNT_SCOPE: SIGNED,  # an account asks about itself only; lists filtered (B-351)
    E.OPEN_TRANSACTIONS: ADMIN_ES,
    E.STATS_HISTORY: STATS_HISTORY,
    E.HA_FETCH_RECORDS: ADMIN_ES,
    E.HA_MERGE_SLAVE_OFFSETS: ADMIN_ES,
    # automatic fail-over (B-381, B-386): a returning node's set-aside report, a planned switch-over
    E.HA_REPORT_SET_ASIDE: ADMIN_ES,
    E.HA_SWITCH: ADMIN_ES,
    # -- ACL administration (B-171): 4.9.8 asks only for a signature, so any account could grant itself anything
    C.UPDATE_AND_CREATE_ACL_CONFIG: ADMIN_ACL,
    C.DELETE_ACL_CONFIG: ADMIN_ACL,
    C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: ADMIN_ACL,
    C.GET_BROKER_CLUSTER_ACL_INFO: ADMIN_ACL,
    C.GET_BROKER_CLUSTER_ACL_CONFIG: ADMIN_ACL,
    # -- admin reads: a signature, as 4.9.8
    C.GET_ALL_TOPIC_CONFIG: SIGNED,
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: SIGNED,
    C.GET_TOPIC_STATS_INFO: TOPIC_READ,
    C.GET_CONSUMER_CONNECTION_LIST: GROUP_READ,
    C.GET_PRODUCER_CONNECTION_LIST: SIGNED,
    C.GET_CONSUME_STATS: Rule(needs=_consume_stats, beyond_rocketmq=READ_BEYOND),
    C.GET_ALL_CONSUMER_OFFSET: SIGNED,
    C.GET_BROKER_RUNTIME_INFO: SIGNED,
    C.GET_BROKER_CONFIG: SIGNED,
    C.GET_CONSUMER_RUNNING_INFO: Rule(needs=_running_info, beyond_rocketmq=READ_BEYOND),
    C.VIEW_BROKER_STATS_DATA: STATS_READ,
    C.QUERY_TOPIC_CONSUME_BY_WHO: TOPIC_READ,
}

OPEN = Rule(open=True)
ADMIN_NS = Rule(admin=True, beyond_rocketmq="RocketMQ's name server has no ACL")

NAMESRV_RULES: dict[int, Rule] = {
    C.REGISTER_BROKER: ADMIN_NS,
    C.UNREGISTER_BROKER: ADMIN_NS,
    C.DELETE_TOPIC_IN_NAMESRV: ADMIN_NS,
    C.PUT_KV_CONFIG: ADMIN_NS,
    C.DELETE_KV_CONFIG: ADMIN_NS,
    C.GET_ROUTEINFO_BY_TOPIC: OPEN,
    C.GET_BROKER_CLUSTER_INFO: OPEN,
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: OPEN,
    C.GET_TOPICS_BY_CLUSTER: OPEN,
    C.QUERY_DATA_VERSION: OPEN,
    C.GET_KV_CONFIG: OPEN,
    C.GET_KVLIST_BY_NAMESPACE: OPEN,
}
