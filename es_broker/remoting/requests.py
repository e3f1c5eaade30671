"""The declared shape of every request the broker and the name server serve.

Each request code names its header class (headers.py, es_headers.py: the fields,
their types, ranges and Java names, declared once next to each field) and the
shape of its body. `decode` turns a command into its typed header, which is its
shape check, before any processor runs: the server's dispatch decodes once and
attaches the header to the command (`RemotingCommand.header`), and processors
read it with `HeaderClass.of(request)`. A violation is a value, not an
exception: a `Refusal` with the response code RocketMQ gives for it and a
one-line remark naming the field. Processors then keep only the checks of
meaning (the topic exists, the perm allows it), never of type.

What RocketMQ answers (4.9.8): a header that does not decode into its
CommandCustomHeader (a required field null, a number that does not parse,
NettyRemotingAbstract#processRequestCommand's catch) is SYSTEM_ERROR; a body
that fastjson cannot map onto its class throws inside the processor, which is
SYSTEM_ERROR too. So every violation here is SYSTEM_ERROR unless a field says
otherwise; docs/semantics.md (B-135..B-139) lists the per-code choices.

Sans-IO: pure functions over `RemotingCommand`, no sockets, no broker state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack

from . import es_headers as es
from . import headers as h
from . import pop_headers as pop
from .bean import Bean
from .bodies import (
    CheckClientRequestBody,
    DataVersion,
    HeartbeatData,
    LockBatchRequestBody,
    SubscriptionGroupConfig,
    UnlockBatchRequestBody,
)
from .codes import EsRequestCode, RequestCode, ResponseCode
from .command import RemotingCommand, codec
from .errors import BodyDecodeError, CommandError
from .header_fields import (
    INT32,
    INT64,
    NAME_MAX,
    NO_HEADER,
    TEXT_MAX,
    CustomHeader,
    HeaderField,
    Kind,
    read_fields,
    rules_of,
)
from .headers import SEND_V2_FIELDS

__all__ = [
    "INT32",
    "INT64",
    "NAME_MAX",
    "SEND_V2_FIELDS",
    "SHAPES",
    "TEXT_MAX",
    "HeaderField",
    "Kind",
    "Refusal",
    "RequestShape",
    "check",
    "check_text",
    "decode",
    "shape_of",
]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was not served: RocketMQ's response code and a one-line remark."""

    code: int
    remark: str


BodyCheck = Callable[[RemotingCommand], str | None]


class NameField(NamedTuple):
    """A header field that names a topic or a group, as `check_text` holds it."""

    wire: str  # its name on the wire (a one-letter name under renames)
    declared: str
    what: str  # how a refusal names it
    kind: str  # "topic" or "group"


@dataclass(frozen=True, slots=True)
class RequestShape:
    """A request code's header fields (its header class's, see `shape`) and body check."""

    code: int
    name: str
    fields: tuple[HeaderField, ...] = ()
    body: BodyCheck | None = None
    renames: Mapping[str, str] | None = None  # wire name -> declared name (SEND_MESSAGE_V2)
    header: type[CustomHeader] | None = None  # what `decode` builds; None: check only
    by_name: dict[str, HeaderField] = field(init=False, repr=False, compare=False)
    # each field's declared (Java) name, and with renames its wire name; the renamed declared names
    names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    wire_names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    renamed: frozenset[str] = field(init=False, repr=False, compare=False)
    # the topic and group fields, with renames and without (what `check_text` holds against the
    # name rules, for each request)
    name_fields: tuple[NameField, ...] = field(init=False, repr=False, compare=False)
    plain_name_fields: tuple[NameField, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})
        wire = {declared: name for name, declared in (self.renames or {}).items()}
        object.__setattr__(self, "names", tuple(f.name for f in self.fields))
        object.__setattr__(self, "wire_names", tuple(wire.get(f.name, f.name) for f in self.fields))
        object.__setattr__(self, "renamed", frozenset(wire))
        object.__setattr__(self, "name_fields", _name_fields(self, self.renames))
        object.__setattr__(self, "plain_name_fields", _name_fields(self, None))


def shape(
    code: RequestCode | EsRequestCode,
    header: type[CustomHeader] | None = None,
    body: BodyCheck | None = None,
) -> RequestShape:
    """The shape of `code`: its header class's fields (under their one-letter names when the class
    says `code` uses them) and `body`."""
    if header is None:
        return RequestShape(int(code), code.name, body=body)
    rules = rules_of(header)
    renames = None
    if header.uses_v2_names(code):
        renames = {rule.v2: rule.name for rule in rules if rule.v2 is not None}
    return RequestShape(int(code), code.name, rules, body, renames, header)


# -- body checks ----------------------------------------------------------------------------


def json_body(bean: type[Bean], *, optional: bool = False) -> BodyCheck:
    """The body must be JSON that maps onto `bean` (fastjson's tolerance, Java's types), its text
    storable and its names within the key limits (B-335, B-336)."""

    def check(cmd: RemotingCommand) -> str | None:
        if not cmd.body:
            return None if optional else f"the request body ({bean.__name__}) is empty"
        try:
            decoded = bean.decode(cmd.body)
        except BodyDecodeError as exc:
            return f"the request body is not a valid {bean.__name__}: {exc}"
        validate = _BEAN_RULES.get(bean)
        return (validate(decoded) if validate else None) or _body_text_error(decoded, bean.__name__)

    return check


def properties_text(cmd: RemotingCommand) -> str | None:
    """UPDATE_BROKER_CONFIG: key=value lines in UTF-8."""
    try:
        cmd.body.decode("utf-8")
    except UnicodeDecodeError:
        return "the request body is not UTF-8 key=value text"
    return None


# HA_MERGE_SLAVE_OFFSETS rows (es_broker/ha/protocol.py): the type of each column, in order
_LONG, _QID, _TEXT, _LONGS = "long", "queue id", "text", "longs"
COMMIT_ROW = (_LONG, _LONG, _TEXT, _TEXT, _QID, _LONG, _LONG, _TEXT, _TEXT, _LONG)
DELIVERY_ROW = (_LONG, _LONG, _TEXT, _TEXT, _QID, _LONG, _LONGS, _LONG, _TEXT, _LONG)


def ha_merge_body(cmd: RemotingCommand) -> str | None:
    """A msgpack list of commit rows, or a map of commit rows and delivery rows."""
    if not cmd.body:
        return None
    try:
        body = msgpack.unpackb(cmd.body, raw=False)
    except Exception as exc:  # msgpack raises several types for bad input
        return f"the merge body is not msgpack: {type(exc).__name__}"
    if isinstance(body, list):
        body = {"commits": body}
    if not isinstance(body, dict):
        return "the merge body is neither a map of commits and deliveries nor a list of commits"
    for name, columns in (("commits", COMMIT_ROW), ("deliveries", DELIVERY_ROW)):
        rows = body.get(name, [])
        if not isinstance(rows, list):
            return f"the merge body's {name} is not a list"
        for n, row in enumerate(rows):
            error = _row_error(row, columns)
            if error:
                return f"{name}[{n}]: {error}"
    return None


def _row_error(row: Any, columns: tuple[str, ...]) -> str | None:
    if not isinstance(row, list) or len(row) != len(columns):
        return f"expected a row of {len(columns)} values"
    for i, (value, kind) in enumerate(zip(row, columns, strict=True)):
        if kind == _TEXT:
            ok = isinstance(value, str) and len(value) <= TEXT_MAX
        elif kind == _LONGS:
            ok = isinstance(value, list) and all(_is_int(v, INT64) for v in value)
        else:
            ok = _is_int(value, (0, INT32[1]) if kind == _QID else INT64)
        if not ok:
            return f"column {i} is not a {kind}"
    return None


def _is_int(value: Any, bounds: tuple[int, int]) -> bool:
    return type(value) is int and bounds[0] <= value <= bounds[1]


# ConsumeFromWhere, MessageModel and ConsumeType as fastjson maps them: by name or by ordinal.
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)
MESSAGE_MODEL = ("BROADCASTING", "CLUSTERING")
CONSUME_TYPE = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")


def enum_name(value: str, names: tuple[str, ...]) -> str | None:
    """The enum constant a fastjson value names (a name, or an ordinal's digits); None if neither."""
    if value in names:
        return value
    if value.isdigit() and int(value) < len(names):
        return names[int(value)]
    return None


def _heartbeat_rules(data: Any) -> str | None:
    if len(data.client_id) > NAME_MAX:
        return f"HeartbeatData.clientID is longer than {NAME_MAX}"
    for n, consumer in enumerate(data.consumer_data_set):
        where = f"HeartbeatData.consumerDataSet[{n}]"
        for name, value, names in (
            ("consumeFromWhere", consumer.consume_from_where, CONSUME_FROM_WHERE),
            ("messageModel", consumer.message_model, MESSAGE_MODEL),
            ("consumeType", consumer.consume_type, CONSUME_TYPE),
        ):
            if enum_name(value, names) is None:
                return f"{where}.{name} is not one of {', '.join(names)}: {value[:40]!r}"
        if len(consumer.group_name) > NAME_MAX:
            return f"{where}.groupName is longer than {NAME_MAX}"
        for k, sub in enumerate(consumer.subscription_data_set):
            error = _subscription_rules(sub, f"{where}.subscriptionDataSet[{k}]")
            if error:
                return error
    for n, producer in enumerate(data.producer_data_set):
        if len(producer.group_name) > NAME_MAX:
            return f"HeartbeatData.producerDataSet[{n}].groupName is longer than {NAME_MAX}"
    return None


def _subscription_rules(sub: Any, where: str) -> str | None:
    if not INT64[0] <= sub.sub_version <= INT64[1]:
        return f"{where}.subVersion is out of the range of a long"
    if len(sub.topic) > NAME_MAX:
        return f"{where}.topic is longer than {NAME_MAX}"
    if any(not INT32[0] <= c <= INT32[1] for c in sub.code_set):
        return f"{where}.codeSet holds a value out of the range of an int"
    return None


def _check_client_rules(data: Any) -> str | None:
    if data.subscription_data is None:
        return None
    return _subscription_rules(data.subscription_data, "CheckClientRequestBody.subscriptionData")


def _lock_rules(data: Any) -> str | None:
    for n, mq in enumerate(data.mq_set):
        if not 0 <= mq.queue_id <= INT32[1]:
            return f"{type(data).__name__}.mqSet[{n}].queueId is not an int >= 0: {mq.queue_id}"
    return None


def _group_rules(data: Any) -> str | None:
    for name in (
        "retry_queue_nums",
        "retry_max_times",
        "broker_id",
        "which_broker_when_consume_slowly",
    ):
        value = getattr(data, name)
        if not INT32[0] <= value <= INT32[1]:
            return f"SubscriptionGroupConfig.{name} is out of the range of an int: {value}"
    if data.retry_queue_nums < 0:
        return f"SubscriptionGroupConfig.retryQueueNums must be >= 0, got {data.retry_queue_nums}"
    if data.broker_id < 0 or data.which_broker_when_consume_slowly < 0:
        return "SubscriptionGroupConfig.brokerId and whichBrokerWhenConsumeSlowly must be >= 0"
    return None


_BEAN_RULES: dict[type, Callable[[Any], str | None]] = {
    HeartbeatData: _heartbeat_rules,
    CheckClientRequestBody: _check_client_rules,
    LockBatchRequestBody: _lock_rules,
    UnlockBatchRequestBody: _lock_rules,
    SubscriptionGroupConfig: _group_rules,
}


# -- the text rules (B-335..B-337) ------------------------------------------------------------
#
# What the broker stores must be UTF-8 (LMDB keys, msgpack records, the read model), and every
# name is part of LMDB keys of at most 511 bytes (es_broker/projections/keys.py: MAX_KEY); the
# longest key holding names is an offset's time-travel entry, `topic@group NUL queue seq`
# (time_index.py: offset_key + seq), topic + group + 14 bytes. A stored message holds its topic's
# length in one signed byte (RocketMQ's commit-log format; DefaultMessageStore#putMessage refuses
# a longer topic), so no topic of over 127 bytes can hold a message: a topic field is at most 127
# bytes (RocketMQ 4.9.8's TopicValidator.TOPIC_MAX_LENGTH), a group at most 255 (Validators.
# CHARACTER_MAX_LENGTH; both ^[%|a-zA-Z0-9_-]+$ there, one byte a character): 127 + 255 + 14 = 396.
# A request that stores messages in a group's derived topics (%RETRY%<group>, %DLQ%<group>: a
# send-back, a redrive) needs the longer of them, %RETRY%, within 127 bytes: its group is at most
# 120 bytes there.
TOPIC_BYTES_MAX = 127
GROUP_BYTES_MAX = 255
#: the characters a topic's or a group's name may hold (TopicValidator, Validators)
LEGAL_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
DERIVED_GROUP_BYTES_MAX = TOPIC_BYTES_MAX - len("%RETRY%")
#: a group's derived topic prefixes alone: topics of no group, invalid (B-500)
GROUPLESS_TOPICS = frozenset({"%RETRY%", "%DLQ%"})
_SEND_MESSAGE = int(RequestCode.SEND_MESSAGE)  # an int: a comparison with an enum member costs more
#: the codes whose `group` names the derived topics they store messages in
DERIVING = frozenset({int(RequestCode.CONSUMER_SEND_MSG_BACK), int(EsRequestCode.REDRIVE_DLQ)})
#: the header fields that name a topic or a group, by their declared (V1) names
TOPIC_FIELDS = frozenset({"topic", "defaultTopic", "originTopic"})
GROUP_FIELDS = frozenset(
    {"consumerGroup", "producerGroup", "group", "groupName", "srcGroup", "destGroup"}
)
#: the body fields (JSON names) that name a topic or a group
_BODY_TOPICS = frozenset({"topic"})
_BODY_GROUPS = frozenset({"groupName", "consumerGroup", "group"})


def is_utf8(text: str) -> bool:
    """True if `text` can be written as UTF-8: it holds no lone surrogate (a JSON `\\ud800` escape,
    or a ROCKETMQ header's byte that is not UTF-8, which its decoder keeps as one)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def name_error(what: str, value: str, kind: str, *, deriving: bool = False) -> str | None:
    """Why `value` cannot be a topic or group name ("topic" or "group"); None if it can be.
    `deriving`: the group's retry and dead-letter topics will hold messages."""
    if "\x00" in value:
        return f"{what} holds a NUL character, which a {kind} name cannot hold"
    if kind == "topic" and value in GROUPLESS_TOPICS:
        return (
            f"{what} {value!r} names no group: a retry or dead-letter topic is the prefix "
            "followed by its consumer group's name"
        )
    limit = TOPIC_BYTES_MAX if kind == "topic" else GROUP_BYTES_MAX
    if deriving and len(value) * 4 > DERIVED_GROUP_BYTES_MAX:
        if len(value.encode("utf-8")) > DERIVED_GROUP_BYTES_MAX:
            return (
                f"{what} is longer than {DERIVED_GROUP_BYTES_MAX} bytes in UTF-8: its retry topic "
                f"%RETRY%<group> would be longer than {TOPIC_BYTES_MAX}, the longest topic"
            )
    elif len(value) * 4 > limit and len(value.encode("utf-8")) > limit:
        return f"{what} is longer than {limit} bytes in UTF-8, the longest {kind} name"
    return None


def check_text(cmd: RemotingCommand, shape: RequestShape | None = None) -> Refusal | None:
    """Hold a request's text against what the broker can store (B-335, B-336); None when it can.

    Every header field's name and value and the remark must be UTF-8 text; the declared topic and
    group fields must hold names whose keys fit (no NUL, TOPIC_BYTES_MAX / GROUP_BYTES_MAX). Bodies
    are held by their shape's body check. Run after `check`, before any processor.
    """
    shape = shape or SHAPES.get(cmd.code)
    if shape is None:
        return None
    fields = cmd.ext_fields
    try:  # the usual request is ASCII throughout, so UTF-8: one test of every name and value
        ascii_only = "".join([*fields, *fields.values()]).isascii()
    except TypeError:  # a value that is not text: held field by field
        ascii_only = False
    if not ascii_only:
        for key, value in fields.items():
            if not (key.isascii() or is_utf8(key)):
                return _refuse(shape, f"a header field name is not UTF-8 text: {ascii(key)[:60]}")
            if type(value) is str and not is_utf8(value):
                return _refuse(shape, f"header field {_shown(key)!r} is not UTF-8 text")
    if cmd.remark is not None and not is_utf8(cmd.remark):
        return _refuse(shape, "the remark is not UTF-8 text")
    names = shape.name_fields if cmd.code != _SEND_MESSAGE else shape.plain_name_fields
    for wire, declared, what, kind in names:
        raw = fields.get(wire)
        if raw is None and wire != declared:
            raw = fields.get(declared)
        if raw is None:
            continue
        deriving = declared == "group" and cmd.code in DERIVING
        error = name_error(what, raw, kind, deriving=deriving)
        if error is not None:
            return _refuse(shape, error)
    return None


def _name_fields(shape: RequestShape, renames: Mapping[str, str] | None) -> tuple[NameField, ...]:
    """The shape's topic and group fields, under their wire names with `renames`."""
    wire = {declared: name for name, declared in (renames or {}).items()}
    return tuple(
        NameField(
            wire.get(spec.name, spec.name),
            spec.name,
            f"header field {spec.name!r}",
            "topic" if spec.name in TOPIC_FIELDS else "group",
        )
        for spec in shape.fields
        if spec.name in TOPIC_FIELDS or spec.name in GROUP_FIELDS
    )


def _shown(key: str) -> str:
    return key if len(key) <= 40 else key[:40] + "..."


def _body_text_error(value: Any, path: str) -> str | None:
    """The first text of a decoded body that is not UTF-8, or a name that cannot be one (B-335)."""
    if isinstance(value, str):
        return None if is_utf8(value) else f"{path} is not UTF-8 text"
    if isinstance(value, Bean):
        for name, item in value.__fastjson__().items():
            where = f"{path}.{name}"
            error = _body_text_error(item, where)
            if error is None and isinstance(item, str) and item:
                if name in _BODY_TOPICS:
                    error = name_error(where, item, "topic")
                elif name in _BODY_GROUPS:
                    error = name_error(where, item, "group")
            if error is not None:
                return error
    elif isinstance(value, tuple | list):
        for n, item in enumerate(value):
            error = _body_text_error(item, f"{path}[{n}]")
            if error is not None:
                return error
    elif isinstance(value, dict):
        for key, item in value.items():
            error = _body_text_error(key, f"{path} key") or _body_text_error(
                item, f"{path}[{key!r}]" if is_utf8(str(key)) else f"{path}[...]"
            )
            if error is not None:
                return error
    return None


# -- the table ------------------------------------------------------------------------------

C, E = RequestCode, EsRequestCode

SHAPES: dict[int, RequestShape] = {
    s.code: s
    for s in (
        # -- producer
        shape(C.SEND_MESSAGE, h.SendMessageRequestHeader),
        shape(C.SEND_MESSAGE_V2, h.SendMessageRequestHeader),
        shape(C.SEND_BATCH_MESSAGE, h.SendMessageRequestHeader),
        # request-reply: SendMessageRequestHeader under Java names (324) or V2's letters (325), B-327
        shape(C.SEND_REPLY_MESSAGE, h.SendMessageRequestHeader),
        shape(C.SEND_REPLY_MESSAGE_V2, h.SendMessageRequestHeader),
        # -- consumer
        shape(C.PULL_MESSAGE, h.PullMessageRequestHeader),
        shape(C.QUERY_CONSUMER_OFFSET, h.QueryConsumerOffsetRequestHeader),
        shape(C.UPDATE_CONSUMER_OFFSET, h.UpdateConsumerOffsetRequestHeader),
        shape(C.SEARCH_OFFSET_BY_TIMESTAMP, h.SearchOffsetRequestHeader),
        shape(C.GET_MAX_OFFSET, h.TopicQueueRequestHeader),
        shape(C.GET_MIN_OFFSET, h.TopicQueueRequestHeader),
        shape(C.GET_EARLIEST_MSG_STORETIME, h.TopicQueueRequestHeader),
        shape(C.VIEW_MESSAGE_BY_ID, h.ViewMessageRequestHeader),
        shape(C.QUERY_MESSAGE, h.QueryMessageRequestHeader),
        shape(C.CONSUMER_SEND_MSG_BACK, h.ConsumerSendMsgBackRequestHeader),
        shape(C.GET_ALL_DELAY_OFFSET),
        # -- RocketMQ 5's pop consumption (es_broker/server/processors/pop.py)
        shape(C.POP_MESSAGE, pop.PopMessageRequestHeader),
        shape(C.ACK_MESSAGE, pop.AckMessageRequestHeader),
        shape(C.CHANGE_MESSAGE_INVISIBLETIME, pop.ChangeInvisibleTimeRequestHeader),
        # -- clients
        shape(C.HEART_BEAT, body=json_body(HeartbeatData, optional=True)),
        shape(C.UNREGISTER_CLIENT, h.UnregisterClientRequestHeader),
        shape(C.GET_CONSUMER_LIST_BY_GROUP, h.ConsumerGroupRequestHeader),
        shape(C.CHECK_CLIENT_CONFIG, body=json_body(CheckClientRequestBody, optional=True)),
        shape(C.LOCK_BATCH_MQ, body=json_body(LockBatchRequestBody)),
        shape(C.UNLOCK_BATCH_MQ, body=json_body(UnlockBatchRequestBody, optional=True)),
        shape(C.END_TRANSACTION, h.EndTransactionRequestHeader),
        shape(C.GET_CONSUMER_RUNNING_INFO, h.GetConsumerRunningInfoRequestHeader),
        shape(C.CONSUME_MESSAGE_DIRECTLY, h.ConsumeMessageDirectlyResultRequestHeader),
        # -- admin
        shape(C.UPDATE_AND_CREATE_TOPIC, h.CreateTopicRequestHeader),
        shape(C.DELETE_TOPIC_IN_BROKER, h.TopicRequestHeader),
        shape(C.GET_ALL_TOPIC_CONFIG),
        shape(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json_body(SubscriptionGroupConfig)),
        shape(C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
        shape(C.DELETE_SUBSCRIPTIONGROUP, h.DeleteSubscriptionGroupRequestHeader),
        shape(C.GET_TOPIC_STATS_INFO, h.TopicRequestHeader),
        shape(C.GET_CONSUMER_CONNECTION_LIST, h.ConsumerGroupRequestHeader),
        shape(C.GET_PRODUCER_CONNECTION_LIST, h.GetProducerConnectionListRequestHeader),
        shape(C.GET_CONSUME_STATS, h.GetConsumeStatsRequestHeader),
        shape(C.GET_ALL_CONSUMER_OFFSET),
        shape(C.GET_BROKER_RUNTIME_INFO),
        shape(C.GET_BROKER_CONFIG),
        shape(C.DELETE_EXPIRED_COMMITLOG),
        shape(C.UPDATE_BROKER_CONFIG, body=properties_text),
        shape(C.INVOKE_BROKER_TO_RESET_OFFSET, h.ResetOffsetRequestHeader),
        shape(C.CLONE_GROUP_OFFSET, h.CloneGroupOffsetRequestHeader),
        shape(E.RESET_OFFSET, es.ResetOffsetsRequestHeader),
        shape(E.REDRIVE_DLQ, es.RedriveDlqRequestHeader),
        shape(E.MESSAGE_TRACE, es.MessageTraceRequestHeader),
        shape(E.HISTORY_ARCHIVE, es.HistoryArchiveRequestHeader),
        shape(E.OFFSETS_AT, es.OffsetsAtRequestHeader),
        shape(E.OFFSET_HISTORY, es.OffsetHistoryRequestHeader),
        shape(E.OFFSET_TIMELINE, es.OffsetTimelineRequestHeader),
        shape(E.EXPLAIN_GROUP, es.ExplainGroupRequestHeader),
        shape(E.ACCOUNT_SCOPE, es.AccountScopeRequestHeader),
        shape(E.OPEN_TRANSACTIONS, es.OpenTransactionsRequestHeader),
        # -- message counts (es_broker/server/processors/stats.py)
        shape(C.VIEW_BROKER_STATS_DATA, h.ViewBrokerStatsDataRequestHeader),
        shape(C.QUERY_TOPIC_CONSUME_BY_WHO, h.TopicRequestHeader),
        shape(E.STATS_HISTORY, es.StatsHistoryRequestHeader),
        # -- ACL administration (es_broker/server/processors/acl.py)
        shape(C.UPDATE_AND_CREATE_ACL_CONFIG, h.CreateAccessConfigRequestHeader),
        shape(C.DELETE_ACL_CONFIG, h.DeleteAccessConfigRequestHeader),
        shape(C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, h.UpdateGlobalWhiteAddrsConfigRequestHeader),
        shape(C.GET_BROKER_CLUSTER_ACL_INFO),
        shape(C.GET_BROKER_CLUSTER_ACL_CONFIG),
        # -- replication (es_broker/ha/protocol.py)
        shape(E.HA_FETCH_RECORDS, es.HaFetchRecordsRequestHeader),
        shape(E.HA_MERGE_SLAVE_OFFSETS, es.HaMergeSlaveOffsetsRequestHeader, ha_merge_body),
        shape(E.HA_SWITCH, es.HaSwitchRequestHeader),
        shape(E.HA_REPORT_SET_ASIDE),  # no header; its JSON report is read by the master (B-381)
        # -- name server
        shape(C.REGISTER_BROKER, h.RegisterBrokerRequestHeader),
        shape(C.UNREGISTER_BROKER, h.UnRegisterBrokerRequestHeader),
        shape(C.GET_ROUTEINFO_BY_TOPIC, h.GetRouteInfoRequestHeader),
        shape(C.GET_BROKER_CLUSTER_INFO),
        shape(C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
        shape(C.GET_TOPICS_BY_CLUSTER, h.GetTopicsByClusterRequestHeader),
        shape(
            C.QUERY_DATA_VERSION,
            h.QueryDataVersionRequestHeader,
            json_body(DataVersion, optional=True),
        ),
        shape(C.DELETE_TOPIC_IN_NAMESRV, h.TopicRequestHeader),
        shape(C.PUT_KV_CONFIG, h.PutKVConfigRequestHeader),
        shape(C.GET_KV_CONFIG, h.KVConfigRequestHeader),
        shape(C.DELETE_KV_CONFIG, h.KVConfigRequestHeader),
        shape(C.GET_KVLIST_BY_NAMESPACE, h.GetKVListByNamespaceRequestHeader),
    )
}


def shape_of(code: int) -> RequestShape | None:
    """The declared shape of a request code, or None for a code nobody declared."""
    return SHAPES.get(code)


def v1_fields(cmd: RemotingCommand) -> dict[str, str]:
    """The header of a SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE with its V1 names (one reader for both)."""
    if cmd.code == RequestCode.SEND_MESSAGE:
        return cmd.ext_fields
    return {SEND_V2_FIELDS.get(k, k): v for k, v in cmd.ext_fields.items()}


def decode(
    cmd: RemotingCommand, shape: RequestShape | None = None
) -> CustomHeader | Refusal | None:
    """The typed header of a request, which is its shape check: the header when the request
    conforms (NO_HEADER for a code that declares no fields), else its `Refusal`; None for a code
    without a declared shape (the server answers REQUEST_CODE_NOT_SUPPORTED for codes it does not
    serve).

    Unknown header fields are ignored, as Java ignores extFields its header class does not declare.
    """
    shape = shape or SHAPES.get(cmd.code)
    if shape is None:
        return None
    fields = cmd.ext_fields
    names = shape.names
    if shape.renames is not None and cmd.code != RequestCode.SEND_MESSAGE:
        if shape.renamed.isdisjoint(fields):
            names = shape.wire_names  # only wire names: read them where they are
        else:
            fields = {shape.renames.get(k, k): v for k, v in fields.items()}
    try:
        values = read_fields(shape.fields, fields, names)
    except CommandError as exc:
        return _refuse(shape, str(exc))
    if shape.body is not None:
        error = shape.body(cmd)
        if error is not None:
            return _refuse(shape, error)
    return NO_HEADER if shape.header is None else shape.header(**values)


def check(cmd: RemotingCommand, shape: RequestShape | None = None) -> Refusal | None:
    """Hold a request against its declared shape: its `Refusal`, or None when it conforms (or its
    code declares no shape). `decode` without the header."""
    decoded = decode(cmd, shape)
    return decoded if type(decoded) is Refusal else None


def _refuse(shape: RequestShape, remark: str) -> Refusal:
    return Refusal(int(ResponseCode.SYSTEM_ERROR), f"{shape.name}: {remark}")


# -- the compiled hot path (see command.py) ---------------------------------------
REFERENCE = {"check": check, "decode": decode, "check_text": check_text}

if codec is not None:
    check = codec.check  # noqa: F811
    decode = codec.decode  # noqa: F811
    check_text = codec.check_text  # noqa: F811
