"""The declared shape of every request the broker and the name server serve.

Each request code names its header fields once (type, range, required or
not) and the shape of its body, and `check` holds a decoded command against
that declaration before any processor runs. A violation is a value, not an
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import msgpack

from .bodies import (
    Bean,
    CheckClientRequestBody,
    DataVersion,
    HeartbeatData,
    LockBatchRequestBody,
    SubscriptionGroupConfig,
    UnlockBatchRequestBody,
)
from .codes import EsRequestCode, RequestCode, ResponseCode
from .command import RemotingCommand, codec
from .errors import BodyDecodeError
from .request_headers import SEND_V2_FIELDS

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
# The longest text a name field may hold: RocketMQ's CHARACTER_MAX_LENGTH (Validators) is 255;
# other text fields (properties, subscription expressions) are bounded by the frame.
NAME_MAX = 255
TEXT_MAX = 1 << 20


class Kind(Enum):
    """The Java type of a header field."""

    STR = "String"
    INT = "int"
    LONG = "long"
    BOOL = "boolean"


@dataclass(frozen=True, slots=True)
class HeaderField:
    """One extField of a request header, as its CommandCustomHeader declares it."""

    name: str
    kind: Kind
    required: bool = False
    min: int | None = None
    max: int | None = None
    max_len: int = NAME_MAX
    choices: frozenset[str] | None = None
    pattern: re.Pattern[str] | None = None  # text fields of a fixed form (message ids)
    form: str = ""  # what the pattern means, for the remark


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was not served: RocketMQ's response code and a one-line remark."""

    code: int
    remark: str


BodyCheck = Callable[[RemotingCommand], str | None]


@dataclass(frozen=True, slots=True)
class RequestShape:
    """A request code's header fields and body check."""

    code: int
    name: str
    fields: tuple[HeaderField, ...] = ()
    body: BodyCheck | None = None
    renames: Mapping[str, str] | None = None  # wire name -> declared name (SEND_MESSAGE_V2)
    by_name: dict[str, HeaderField] = field(init=False, repr=False, compare=False)
    # with renames: each field's wire name, and the declared names that have another wire name
    wire_names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    renamed: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})
        wire = {declared: name for name, declared in (self.renames or {}).items()}
        object.__setattr__(self, "wire_names", tuple(wire.get(f.name, f.name) for f in self.fields))
        object.__setattr__(self, "renamed", frozenset(wire))


# -- field constructors: the vocabulary of the table below ------------------------------------


def s(
    name: str,
    required: bool = False,
    *,
    max_len: int = NAME_MAX,
    choices: frozenset[str] | None = None,
) -> HeaderField:
    return HeaderField(name, Kind.STR, required, max_len=max_len, choices=choices)


#: An offset message id: the store host (IPv4 and port) and the physical offset, in hex
#: (MessageDecoder#createMessageId); decodeMessageId throws on anything else, answered SYSTEM_ERROR.
#: es-broker's brokers store IPv4 hosts, so their ids are 32 digits.
OFFSET_MSG_ID = re.compile(r"[0-9A-Fa-f]{32}")


def offset_msg_id(name: str = "msgId") -> HeaderField:
    return HeaderField(
        name, Kind.STR, True, pattern=OFFSET_MSG_ID, form="an offset message id (32 hex digits)"
    )


def i32(
    name: str, required: bool = False, *, min: int = INT32[0], max: int = INT32[1]
) -> HeaderField:
    return HeaderField(name, Kind.INT, required, min=min, max=max)


def i64(
    name: str, required: bool = False, *, min: int = INT64[0], max: int = INT64[1]
) -> HeaderField:
    return HeaderField(name, Kind.LONG, required, min=min, max=max)


def flag(name: str, required: bool = False) -> HeaderField:
    return HeaderField(name, Kind.BOOL, required)


def queue_id(required: bool = True) -> HeaderField:
    """A queue id: an int >= 0 (PullMessageProcessor: "queueId[%d] is illegal")."""
    return i32("queueId", required, min=0)


def physical_offset(name: str = "offset") -> HeaderField:
    """A commit-log offset: a long >= 0."""
    return i64(name, True, min=0)


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
DERIVED_GROUP_BYTES_MAX = TOPIC_BYTES_MAX - len("%RETRY%")
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
    for key, value in fields.items():
        if not (key.isascii() or is_utf8(key)):
            return _refuse(shape, f"a header field name is not UTF-8 text: {ascii(key)[:60]}")
        if type(value) is str and not is_utf8(value):
            return _refuse(shape, f"header field {_shown(key)!r} is not UTF-8 text")
    if cmd.remark is not None and not is_utf8(cmd.remark):
        return _refuse(shape, "the remark is not UTF-8 text")
    renames = shape.renames if cmd.code != RequestCode.SEND_MESSAGE else None
    for wire, declared in _name_fields(shape, renames):
        raw = fields.get(wire)
        if raw is None and wire != declared:
            raw = fields.get(declared)
        if raw is None:
            continue
        kind = "topic" if declared in TOPIC_FIELDS else "group"
        deriving = declared == "group" and cmd.code in DERIVING
        error = name_error(f"header field {declared!r}", raw, kind, deriving=deriving)
        if error is not None:
            return _refuse(shape, error)
    return None


def _name_fields(
    shape: RequestShape, renames: Mapping[str, str] | None
) -> tuple[tuple[str, str], ...]:
    """(wire name, declared name) of the shape's topic and group fields."""
    wire = {declared: name for name, declared in (renames or {}).items()}
    return tuple(
        (wire.get(spec.name, spec.name), spec.name)
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
_SEND_FIELDS = (
    s("producerGroup"),
    s("topic", True),
    s("defaultTopic"),
    i32("defaultTopicQueueNums", min=0),
    # a negative queue id asks the broker to pick one (SendMessageProcessor#sendMessage)
    i32("queueId", True),
    i32("sysFlag", True),
    i64("bornTimestamp", True),
    i32("flag"),
    s("properties", max_len=TEXT_MAX),
    i32("reconsumeTimes", min=0),
    flag("unitMode"),
    i32("maxReconsumeTimes"),
    flag("batch"),
)
_TOPIC_QUEUE = (s("topic", True), queue_id())
_KV = (s("namespace", True), s("key", True))

SHAPES: dict[int, RequestShape] = {
    shape.code: shape
    for shape in (
        # -- producer
        RequestShape(C.SEND_MESSAGE, "SEND_MESSAGE", _SEND_FIELDS),
        RequestShape(C.SEND_MESSAGE_V2, "SEND_MESSAGE_V2", _SEND_FIELDS, renames=SEND_V2_FIELDS),
        RequestShape(
            C.SEND_BATCH_MESSAGE, "SEND_BATCH_MESSAGE", _SEND_FIELDS, renames=SEND_V2_FIELDS
        ),
        # -- consumer
        RequestShape(
            C.PULL_MESSAGE,
            "PULL_MESSAGE",
            (
                s("consumerGroup", True),
                s("topic", True),
                queue_id(),
                i64("queueOffset", True),
                i32("maxMsgNums", True),
                i32("sysFlag", True),
                i64("commitOffset", True),
                i64("suspendTimeoutMillis", min=0),
                s("subscription", max_len=TEXT_MAX),
                i64("subVersion"),
                s("expressionType"),
            ),
        ),
        RequestShape(
            C.QUERY_CONSUMER_OFFSET,
            "QUERY_CONSUMER_OFFSET",
            (s("consumerGroup", True), *_TOPIC_QUEUE),
        ),
        RequestShape(
            C.UPDATE_CONSUMER_OFFSET,
            "UPDATE_CONSUMER_OFFSET",
            (s("consumerGroup", True), *_TOPIC_QUEUE, i64("commitOffset", True)),
        ),
        RequestShape(
            C.SEARCH_OFFSET_BY_TIMESTAMP,
            "SEARCH_OFFSET_BY_TIMESTAMP",
            (*_TOPIC_QUEUE, i64("timestamp", True)),
        ),
        RequestShape(C.GET_MAX_OFFSET, "GET_MAX_OFFSET", _TOPIC_QUEUE),
        RequestShape(C.GET_MIN_OFFSET, "GET_MIN_OFFSET", _TOPIC_QUEUE),
        RequestShape(C.GET_EARLIEST_MSG_STORETIME, "GET_EARLIEST_MSG_STORETIME", _TOPIC_QUEUE),
        RequestShape(C.VIEW_MESSAGE_BY_ID, "VIEW_MESSAGE_BY_ID", (physical_offset(),)),
        RequestShape(
            C.QUERY_MESSAGE,
            "QUERY_MESSAGE",
            (
                s("topic", True),
                s("key", True, max_len=TEXT_MAX),
                i32("maxNum", True, min=0),
                i64("beginTimestamp", True),
                i64("endTimestamp", True),
            ),
        ),
        RequestShape(
            C.CONSUMER_SEND_MSG_BACK,
            "CONSUMER_SEND_MSG_BACK",
            (
                s("group", True),
                physical_offset(),
                i32("delayLevel", True),
                s("originMsgId"),
                s("originTopic"),
                i32("maxReconsumeTimes"),
                flag("unitMode"),
            ),
        ),
        RequestShape(C.GET_ALL_DELAY_OFFSET, "GET_ALL_DELAY_OFFSET"),
        # -- clients
        RequestShape(C.HEART_BEAT, "HEART_BEAT", body=json_body(HeartbeatData, optional=True)),
        RequestShape(
            C.UNREGISTER_CLIENT,
            "UNREGISTER_CLIENT",
            (s("clientID"), s("producerGroup"), s("consumerGroup")),
        ),
        RequestShape(
            C.GET_CONSUMER_LIST_BY_GROUP, "GET_CONSUMER_LIST_BY_GROUP", (s("consumerGroup", True),)
        ),
        RequestShape(
            C.CHECK_CLIENT_CONFIG,
            "CHECK_CLIENT_CONFIG",
            body=json_body(CheckClientRequestBody, optional=True),
        ),
        RequestShape(C.LOCK_BATCH_MQ, "LOCK_BATCH_MQ", body=json_body(LockBatchRequestBody)),
        RequestShape(
            C.UNLOCK_BATCH_MQ,
            "UNLOCK_BATCH_MQ",
            body=json_body(UnlockBatchRequestBody, optional=True),
        ),
        RequestShape(
            C.END_TRANSACTION,
            "END_TRANSACTION",
            (
                s("producerGroup", True),
                i64("tranStateTableOffset", True),
                physical_offset("commitLogOffset"),
                i32("commitOrRollback", True),
                flag("fromTransactionCheck"),
                s("msgId", True),
                s("transactionId"),
                s("bname"),
            ),
        ),
        RequestShape(
            C.GET_CONSUMER_RUNNING_INFO,
            "GET_CONSUMER_RUNNING_INFO",
            (s("consumerGroup", True), s("clientId", True), flag("jstackEnable")),
        ),
        RequestShape(
            C.CONSUME_MESSAGE_DIRECTLY,
            "CONSUME_MESSAGE_DIRECTLY",
            (s("consumerGroup", True), s("clientId", True), offset_msg_id(), s("brokerName")),
        ),
        # -- admin
        RequestShape(
            C.UPDATE_AND_CREATE_TOPIC,
            "UPDATE_AND_CREATE_TOPIC",
            (
                s("topic", True),
                s("defaultTopic"),
                i32("readQueueNums", True, min=0),
                i32("writeQueueNums", True, min=0),
                i32("perm", True, min=0, max=7),
                s("topicFilterType"),
                i32("topicSysFlag"),
                flag("order"),
            ),
        ),
        RequestShape(C.DELETE_TOPIC_IN_BROKER, "DELETE_TOPIC_IN_BROKER", (s("topic", True),)),
        RequestShape(C.GET_ALL_TOPIC_CONFIG, "GET_ALL_TOPIC_CONFIG"),
        RequestShape(
            C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
            body=json_body(SubscriptionGroupConfig),
        ),
        RequestShape(C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "GET_ALL_SUBSCRIPTIONGROUP_CONFIG"),
        RequestShape(
            C.DELETE_SUBSCRIPTIONGROUP,
            "DELETE_SUBSCRIPTIONGROUP",
            (s("groupName", True), flag("removeOffset")),
        ),
        RequestShape(C.GET_TOPIC_STATS_INFO, "GET_TOPIC_STATS_INFO", (s("topic", True),)),
        RequestShape(
            C.GET_CONSUMER_CONNECTION_LIST,
            "GET_CONSUMER_CONNECTION_LIST",
            (s("consumerGroup", True),),
        ),
        RequestShape(
            C.GET_PRODUCER_CONNECTION_LIST,
            "GET_PRODUCER_CONNECTION_LIST",
            (s("producerGroup", True),),
        ),
        RequestShape(
            C.GET_CONSUME_STATS, "GET_CONSUME_STATS", (s("consumerGroup", True), s("topic"))
        ),
        RequestShape(C.GET_ALL_CONSUMER_OFFSET, "GET_ALL_CONSUMER_OFFSET"),
        RequestShape(C.GET_BROKER_RUNTIME_INFO, "GET_BROKER_RUNTIME_INFO"),
        RequestShape(C.GET_BROKER_CONFIG, "GET_BROKER_CONFIG"),
        RequestShape(C.DELETE_EXPIRED_COMMITLOG, "DELETE_EXPIRED_COMMITLOG"),
        RequestShape(C.UPDATE_BROKER_CONFIG, "UPDATE_BROKER_CONFIG", body=properties_text),
        RequestShape(
            C.INVOKE_BROKER_TO_RESET_OFFSET,
            "INVOKE_BROKER_TO_RESET_OFFSET",
            (s("topic", True), s("group", True), i64("timestamp", True), flag("isForce")),
        ),
        RequestShape(
            C.CLONE_GROUP_OFFSET,
            "CLONE_GROUP_OFFSET",
            (s("srcGroup", True), s("destGroup", True), s("topic"), flag("offline")),
        ),
        RequestShape(
            E.RESET_OFFSET,
            "RESET_OFFSET",
            (
                s("topic", True),
                s("group", True),
                s(
                    "kind",
                    True,
                    choices=frozenset({"time", "offset", "shift", "earliest", "latest"}),
                ),
                i64("value"),
                flag("isForce"),
                flag("dryRun"),
                s("mode"),
                s("scope"),
            ),
        ),
        RequestShape(
            E.REDRIVE_DLQ,
            "REDRIVE_DLQ",
            (
                s("group", True),
                s("topic"),
                s("target", choices=frozenset({"retry", "original"})),
                i32("maxCount", min=0),
                flag("dryRun"),
            ),
        ),
        RequestShape(E.MESSAGE_TRACE, "MESSAGE_TRACE", (s("msgId", True),)),
        RequestShape(E.HISTORY_ARCHIVE, "HISTORY_ARCHIVE", (i64("before", True),)),
        RequestShape(
            E.OFFSETS_AT,
            "OFFSETS_AT",
            (s("group", True), s("topic"), i64("at", True), flag("durable")),
        ),
        RequestShape(
            E.OFFSET_HISTORY,
            "OFFSET_HISTORY",
            (
                s("group", True),
                s("topic"),
                i64("since"),
                i64("until"),
                i32("maxEntries", min=1, max=10_000),
                flag("changesOnly"),
            ),
        ),
        RequestShape(
            E.OFFSET_TIMELINE,
            "OFFSET_TIMELINE",
            (
                s("group", True),
                s("topic"),
                i64("since"),
                i64("until"),
                i32("points", min=2, max=1_000),
                i32("maxEvents", min=1, max=10_000),
            ),
        ),
        RequestShape(E.EXPLAIN_GROUP, "EXPLAIN_GROUP", (s("group", True), s("topic", True))),
        RequestShape(E.ACCOUNT_SCOPE, "ACCOUNT_SCOPE", (s("topic"), s("group"))),
        RequestShape(E.OPEN_TRANSACTIONS, "OPEN_TRANSACTIONS", (s("producerGroup"),)),
        # -- message counts (es_broker/server/stats_processors.py)
        RequestShape(
            C.VIEW_BROKER_STATS_DATA,
            "VIEW_BROKER_STATS_DATA",
            (s("statsName", True), s("statsKey", True, max_len=2 * NAME_MAX + 1), i64("at", min=0)),
        ),
        RequestShape(
            C.QUERY_TOPIC_CONSUME_BY_WHO, "QUERY_TOPIC_CONSUME_BY_WHO", (s("topic", True),)
        ),
        RequestShape(
            E.STATS_HISTORY,
            "STATS_HISTORY",
            (
                i64("since", True, min=0),
                i64("until", True, min=0),
                i32("stepMinutes", min=1, max=24 * 60),
                s("topic"),
            ),
        ),
        # -- ACL administration (es_broker/server/acl_processors.py)
        RequestShape(
            C.UPDATE_AND_CREATE_ACL_CONFIG,
            "UPDATE_AND_CREATE_ACL_CONFIG",
            (
                s("accessKey", True),
                s("secretKey"),
                s("whiteRemoteAddress", max_len=TEXT_MAX),
                flag("admin"),
                s("defaultTopicPerm"),
                s("defaultGroupPerm"),
                s("topicPerms", max_len=TEXT_MAX),
                s("groupPerms", max_len=TEXT_MAX),
            ),
        ),
        RequestShape(C.DELETE_ACL_CONFIG, "DELETE_ACL_CONFIG", (s("accessKey", True),)),
        RequestShape(
            C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
            "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG",
            (s("globalWhiteAddrs", max_len=TEXT_MAX), s("aclFileFullPath", max_len=4096)),
        ),
        RequestShape(C.GET_BROKER_CLUSTER_ACL_INFO, "GET_BROKER_CLUSTER_ACL_INFO"),
        RequestShape(C.GET_BROKER_CLUSTER_ACL_CONFIG, "GET_BROKER_CLUSTER_ACL_CONFIG"),
        # -- replication (es_broker/ha/protocol.py)
        RequestShape(
            E.HA_FETCH_RECORDS,
            "HA_FETCH_RECORDS",
            (
                i32("slaveId", True, min=0),
                s("slaveAddr", True),
                i64("fromSeq", True, min=0),
                i64("lastRecordCrc", True),
                i64("slavePhyMax", True),
                i32("maxWaitMillis", True, min=0),
                i32("maxBytes", min=1),
            ),
        ),
        RequestShape(
            E.HA_MERGE_SLAVE_OFFSETS,
            "HA_MERGE_SLAVE_OFFSETS",
            (i32("slaveId", True, min=0), s("slaveAddr", True), i64("journalUpto", True)),
            body=ha_merge_body,
        ),
        # -- name server
        RequestShape(
            C.REGISTER_BROKER,
            "REGISTER_BROKER",
            (
                s("brokerName", True),
                s("brokerAddr", True),
                s("clusterName", True),
                s("haServerAddr"),
                i64("brokerId", True, min=0),
                flag("compressed"),
                i32("bodyCrc32"),
            ),
        ),
        RequestShape(
            C.UNREGISTER_BROKER,
            "UNREGISTER_BROKER",
            (
                s("brokerName", True),
                s("brokerAddr", True),
                s("clusterName"),
                i64("brokerId", True, min=0),
            ),
        ),
        RequestShape(
            C.GET_ROUTEINFO_BY_TOPIC,
            "GET_ROUTEINFO_BY_TOPIC",
            (s("topic", True), flag("acceptStandardJsonOnly")),
        ),
        RequestShape(C.GET_BROKER_CLUSTER_INFO, "GET_BROKER_CLUSTER_INFO"),
        RequestShape(C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, "GET_ALL_TOPIC_LIST_FROM_NAMESERVER"),
        RequestShape(C.GET_TOPICS_BY_CLUSTER, "GET_TOPICS_BY_CLUSTER", (s("cluster", True),)),
        RequestShape(
            C.QUERY_DATA_VERSION,
            "QUERY_DATA_VERSION",
            (s("brokerName"), s("brokerAddr", True), s("clusterName"), i64("brokerId", min=0)),
            body=json_body(DataVersion, optional=True),
        ),
        RequestShape(C.DELETE_TOPIC_IN_NAMESRV, "DELETE_TOPIC_IN_NAMESRV", (s("topic", True),)),
        RequestShape(C.PUT_KV_CONFIG, "PUT_KV_CONFIG", (*_KV, s("value", True, max_len=TEXT_MAX))),
        RequestShape(C.GET_KV_CONFIG, "GET_KV_CONFIG", _KV),
        RequestShape(C.DELETE_KV_CONFIG, "DELETE_KV_CONFIG", _KV),
        RequestShape(C.GET_KVLIST_BY_NAMESPACE, "GET_KVLIST_BY_NAMESPACE", (s("namespace", True),)),
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


def check(cmd: RemotingCommand, shape: RequestShape | None = None) -> Refusal | None:
    """Hold a request against its declared shape; None when it conforms.

    Unknown header fields are ignored, as Java ignores extFields its header
    class does not declare. A code without a declared shape passes (the
    server answers REQUEST_CODE_NOT_SUPPORTED for codes it does not serve).
    """
    shape = shape or SHAPES.get(cmd.code)
    if shape is None:
        return None
    fields = cmd.ext_fields
    names: Iterator[str] = (spec.name for spec in shape.fields)
    if shape.renames is not None and cmd.code != RequestCode.SEND_MESSAGE:
        if shape.renamed.isdisjoint(fields):
            names = iter(shape.wire_names)  # only wire names: read them where they are
        else:
            fields = {shape.renames.get(k, k): v for k, v in fields.items()}
    for spec, name in zip(shape.fields, names, strict=True):
        raw = fields.get(name)
        if raw is None:
            if spec.required:
                return _refuse(shape, f"missing required header field {spec.name!r}")
            continue
        error = _field_error(spec, raw)
        if error is not None:
            return _refuse(shape, error)
    if shape.body is not None:
        error = shape.body(cmd)
        if error is not None:
            return _refuse(shape, error)
    return None


def _field_error(spec: HeaderField, raw: str) -> str | None:
    if spec.kind is Kind.STR:
        # a blank name is as unusable as a missing one (TopicValidator: "blank")
        if not raw and spec.required:
            return f"header field {spec.name!r} is blank"
        if len(raw) > spec.max_len:
            return f"header field {spec.name!r} is longer than {spec.max_len} characters"
        if spec.pattern is not None and not spec.pattern.fullmatch(raw):
            return f"header field {spec.name!r} is not {spec.form}: {raw[:40]!r}"
        if spec.choices is not None and raw not in spec.choices:
            return f"header field {spec.name!r} must be one of {', '.join(sorted(spec.choices))}, got {raw[:40]!r}"
        return None
    if spec.kind is Kind.BOOL:
        return (
            None  # Boolean.parseBoolean reads any text: "true" in any case, everything else false
        )
    if not (raw.isascii() and raw.isdigit()) and not _JAVA_INTEGER.fullmatch(raw):
        return f"header field {spec.name!r} is not a valid {spec.kind.value}: {raw[:40]!r}"
    value = int(raw)
    lo, hi = INT32 if spec.kind is Kind.INT else INT64
    if not lo <= value <= hi:
        return f"header field {spec.name!r} is out of the range of a Java {spec.kind.value}: {raw[:40]}"
    if spec.min is not None and value < spec.min or spec.max is not None and value > spec.max:
        bounds = f">= {spec.min}" if spec.max in (None, hi) else f"in [{spec.min}, {spec.max}]"
        return f"header field {spec.name!r} must be {bounds}, got {value}"
    return None


def _refuse(shape: RequestShape, remark: str) -> Refusal:
    return Refusal(int(ResponseCode.SYSTEM_ERROR), f"{shape.name}: {remark}")


# -- the compiled hot path (see command.py) ---------------------------------------
REFERENCE = {"check": check}

if codec is not None:
    check = codec.check  # noqa: F811
