"""Messages between the two wires: a 5.x `Message` as 4.x properties, a stored message as a 5.x one.

The 5.x system properties map onto RocketMQ's message properties the way
RocketMQ 5's proxy maps them (docs/protocol.md §15): tag → TAGS, keys → KEYS,
message id → UNIQ_KEY, message group → __SHARDINGKEY, delivery timestamp →
TIMER_DELIVER_MS, a transactional message → TRAN_MSG and PGROUP, the orphaned
transaction recovery duration → CHECK_IMMUNITY_TIME_IN_SECONDS. User
properties travel as they are; one that takes a system property's name is
refused.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from es_broker.proxy.status import Code, Refused
from es_broker.remoting.message import StoredMessage

TAGS = "TAGS"
KEYS = "KEYS"
UNIQ_KEY = "UNIQ_KEY"
SHARDING_KEY = "__SHARDINGKEY"  # the 5.x message group
DELIVER_MS = "TIMER_DELIVER_MS"  # the 5.x delivery time, epoch milliseconds
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
RECONSUME_TIME = "RECONSUME_TIME"
RETRY_TOPIC = "RETRY_TOPIC"
POP_CK = "POP_CK"

# properties the broker and the 4.x client set; a 5.x user property may not take their names
SYSTEM_PROPERTY_NAMES = frozenset(
    {
        TAGS,
        KEYS,
        UNIQ_KEY,
        SHARDING_KEY,
        DELIVER_MS,
        TRAN_MSG,
        PGROUP,
        CHECK_IMMUNITY,
        RECONSUME_TIME,
        RETRY_TOPIC,
        POP_CK,
        "1ST_POP_TIME",
        "POP_ORDER_COUNT",
        "DELAY",
        "WAIT",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "REAL_TOPIC",
        "REAL_QID",
        "ORIGIN_MESSAGE_ID",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "TRANSACTION_CHECK_TIMES",
        "__transactionId__",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_OUT_MS",
        "MSG_REGION",
        "TRACE_ON",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "MSG_TYPE",
        "CLUSTER",
        "BORN_HOST",
    }
)
# a user's property the 4.x frame can carry (MessageDecoder's separators)
_FORBIDDEN_CHARS = ("\x01", "\x02")
MAX_PROPERTY_BYTES = 16 * 1024  # RocketMQ 5's maxUserPropertySize


def _check_text(what: str, value: str, code: int) -> str:
    if any(c in value for c in _FORBIDDEN_CHARS):
        raise Refused(code, f"{what} {value!r} holds a control character the wire cannot carry")
    return value


def body_of(message: pb.Message, max_body: int) -> bytes:
    """The body as stored: a GZIP-encoded 5.x body is decompressed (bounded by `max_body`)."""
    body: bytes = message.body
    encoding = message.system_properties.body_encoding
    if encoding == pb.Encoding.GZIP:
        try:
            body = _gunzip(body, max_body)
        except (OSError, EOFError, zlib.error) as exc:
            raise Refused(Code.MESSAGE_CORRUPTED, f"the GZIP body cannot be read: {exc}") from None
    elif encoding not in (pb.Encoding.IDENTITY, pb.Encoding.ENCODING_UNSPECIFIED):
        raise Refused(Code.BAD_REQUEST, f"unknown body encoding {encoding}")
    if not body:
        raise Refused(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > max_body:
        raise Refused(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"the message body is {len(body)} bytes, over the limit of {max_body}",
        )
    return body


def _gunzip(data: bytes, limit: int) -> bytes:
    out = zlib.decompressobj(16 + zlib.MAX_WBITS)
    body = out.decompress(data, limit + 1)
    if len(body) > limit:
        raise Refused(Code.MESSAGE_BODY_TOO_LARGE, f"the GZIP body unpacks to over {limit} bytes")
    if not out.eof:
        raise EOFError("truncated GZIP body")
    return body


def message_type_of(message: pb.Message) -> int:
    """The 5.x type the client declared (NORMAL when it declared none)."""
    declared: int = message.system_properties.message_type
    return declared or pb.MessageType.NORMAL


def properties_of(message: pb.Message, now_ms: int) -> dict[str, str]:
    """The 4.x properties of a 5.x message to send (not its TRAN_MSG/PGROUP: the send adds them)."""
    sp = message.system_properties
    props: dict[str, str] = {}
    for key, value in message.user_properties.items():
        if key in SYSTEM_PROPERTY_NAMES:
            raise Refused(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"the user property {key!r} takes the name of a system property",
            )
        props[_check_text("user property", key, Code.ILLEGAL_MESSAGE_PROPERTY_KEY)] = _check_text(
            "user property value", value, Code.ILLEGAL_MESSAGE_PROPERTY_KEY
        )
    if sum(len(k) + len(v) for k, v in props.items()) > MAX_PROPERTY_BYTES:
        raise Refused(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"the user properties are over {MAX_PROPERTY_BYTES} bytes",
        )
    if not sp.message_id:
        raise Refused(Code.ILLEGAL_MESSAGE_ID, "the message has no message id")
    props[UNIQ_KEY] = _check_text("message id", sp.message_id, Code.ILLEGAL_MESSAGE_ID)
    if sp.tag:
        if "|" in sp.tag or not sp.tag.strip():
            raise Refused(Code.ILLEGAL_MESSAGE_TAG, f"the tag {sp.tag!r} is not a single tag")
        props[TAGS] = _check_text("tag", sp.tag, Code.ILLEGAL_MESSAGE_TAG)
    keys = [_check_text("key", k, Code.ILLEGAL_MESSAGE_KEY) for k in sp.keys]
    if any(not k.strip() or " " in k for k in keys):
        raise Refused(Code.ILLEGAL_MESSAGE_KEY, "a message key is blank or holds a space")
    if keys:
        props[KEYS] = " ".join(keys)
    if sp.HasField("message_group"):
        if not sp.message_group.strip():
            raise Refused(Code.ILLEGAL_MESSAGE_GROUP, "the message group is blank")
        props[SHARDING_KEY] = _check_text("message group", sp.message_group, Code.BAD_REQUEST)
    if sp.HasField("delivery_timestamp"):
        props[DELIVER_MS] = str(_deliver_ms(sp.delivery_timestamp, now_ms))
    if sp.HasField("orphaned_transaction_recovery_duration"):
        seconds = sp.orphaned_transaction_recovery_duration.seconds
        if seconds < 0:
            raise Refused(
                Code.BAD_REQUEST, "the orphaned transaction recovery duration is negative"
            )
        props[CHECK_IMMUNITY] = str(seconds)
    return props


MAX_DELAY_MS = 40 * 24 * 3600 * 1000  # a delivery time further ahead is refused


def _deliver_ms(stamp: Any, now_ms: int) -> int:
    ms = int(stamp.seconds) * 1000 + int(stamp.nanos) // 1_000_000
    if ms <= 0:
        raise Refused(Code.ILLEGAL_DELIVERY_TIME, "the delivery timestamp is not positive")
    if ms - now_ms > MAX_DELAY_MS:
        raise Refused(
            Code.ILLEGAL_DELIVERY_TIME,
            f"the delivery timestamp is more than {MAX_DELAY_MS // 86_400_000} days ahead",
        )
    return ms


def stored_type(props: Mapping[str, str]) -> int:
    """The 5.x type of a stored message, from what its properties say."""
    if props.get(TRAN_MSG, "").lower() == "true":
        return int(pb.MessageType.TRANSACTION)
    if SHARDING_KEY in props:
        return int(pb.MessageType.FIFO)
    if DELIVER_MS in props or "DELAY" in props:
        return int(pb.MessageType.DELAY)
    return int(pb.MessageType.NORMAL)


def _host(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


def to_v5(stored: StoredMessage, topic: str, *, receipt: str | None = None) -> pb.Message:
    """A stored message as a 5.x client receives it (`topic` is the topic the client asked for)."""
    props = stored.properties
    body = stored.uncompressed_body()
    sp = pb.SystemProperties(
        message_id=props.get(UNIQ_KEY) or stored.msg_id,
        message_type=stored_type(props),
        born_host=_host(stored.born_host),
        store_host=_host(stored.store_host),
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
        delivery_attempt=stored.reconsume_times + 1,
        body_encoding=pb.Encoding.IDENTITY,
    )
    sp.body_digest.type = pb.DigestType.CRC32
    sp.body_digest.checksum = format(zlib.crc32(body) & 0xFFFFFFFF, "08X")
    sp.born_timestamp.FromMilliseconds(stored.born_timestamp)
    sp.store_timestamp.FromMilliseconds(stored.store_timestamp)
    if TAGS in props:
        sp.tag = props[TAGS]
    sp.keys.extend(props.get(KEYS, "").split())
    if SHARDING_KEY in props:
        sp.message_group = props[SHARDING_KEY]
    if props.get(DELIVER_MS, "").isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(props[DELIVER_MS]))
    if receipt is not None:
        sp.receipt_handle = receipt
    message = pb.Message(body=body, system_properties=sp)
    message.topic.name = topic
    message.user_properties.update(
        {k: v for k, v in props.items() if k not in SYSTEM_PROPERTY_NAMES}
    )
    return message


__all__ = ["body_of", "message_type_of", "properties_of", "stored_type", "to_v5"]
