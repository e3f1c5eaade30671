"""The message trace records clients write (4.9.8's client trace package), for broker, client and admin.

A client with message trace on (`enableMsgTrace`) sends, besides its own messages,
messages to the trace topic (RMQ_SYS_TRACE_TOPIC unless renamed) whose body is a run
of *contexts*: each context's fields are separated by char 1 (TraceConstants
CONTENT_SPLITOR) and each context ends with char 2 (FIELD_SPLITOR). The first field
names the kind (TraceType): Pub for a send, SubBefore and SubAfter around a
consume, EndTransaction for a transaction's end. The trace message's KEYS are the
traced messages' ids (and their own keys), so a query by key in the trace topic
finds every context of a message (mqadmin queryMsgTraceById, B-484). The client
host of a context is the trace message's born host, as TraceView reads it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

CONTENT_SPLITOR = "\x01"  # TraceConstants.CONTENT_SPLITOR
FIELD_SPLITOR = "\x02"  # TraceConstants.FIELD_SPLITOR
DEFAULT_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # TopicValidator.RMQ_SYS_TRACE_TOPIC
TRACE_PRODUCER_PREFIX = "_INNER_TRACE_PRODUCER-"  # TraceConstants.GROUP_NAME_PREFIX
DEFAULT_REGION = "DefaultRegion"  # MixAll.DEFAULT_TRACE_REGION_ID
TRACE_SWITCH = "TRACE_ON"  # MessageConst.PROPERTY_TRACE_SWITCH: "false" skips a message


class TraceType(enum.StrEnum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


# MessageType's ordinals, as a Pub or EndTransaction context writes them
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg")
# ConsumeReturnType's ordinals, a SubAfter context's contextCode
CONSUME_RETURN_TYPES = ("SUCCESS", "TIME_OUT", "EXCEPTION", "RETURNNULL", "FAILED")


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One context of one message (TraceContext with its single TraceBean)."""

    trace_type: TraceType
    msg_id: str
    timestamp: int = 0
    region_id: str = DEFAULT_REGION
    group: str = ""
    topic: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    cost_time: int = 0
    msg_type: int = 0
    offset_msg_id: str = ""
    success: bool = True
    request_id: str = ""
    retry_times: int = 0
    context_code: int = 0
    transaction_id: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False
    client_host: str = ""  # not written: the born host of the trace message that carried it

    def encode(self) -> str:
        """The context as TraceDataEncoder writes it, FIELD_SPLITOR included."""
        return CONTENT_SPLITOR.join(str_field(v) for v in self._fields()) + FIELD_SPLITOR

    def _fields(self) -> tuple[object, ...]:
        t = self.trace_type
        if t == TraceType.PUB:
            return (
                t, self.timestamp, self.region_id, self.group, self.topic, self.msg_id,
                self.tags, self.keys, self.store_host, self.body_length, self.cost_time,
                self.msg_type, self.offset_msg_id, self.success,
            )  # fmt: skip
        if t == TraceType.SUB_BEFORE:
            return (
                t, self.timestamp, self.region_id, self.group, self.request_id, self.msg_id,
                self.retry_times, self.keys,
            )  # fmt: skip
        if t == TraceType.SUB_AFTER:
            return (
                t, self.request_id, self.msg_id, self.cost_time, self.success, self.keys,
                self.context_code, self.timestamp, self.group,
            )  # fmt: skip
        return (
            t, self.timestamp, self.region_id, self.group, self.topic, self.msg_id, self.tags,
            self.keys, self.store_host, self.msg_type, self.transaction_id,
            self.transaction_state, self.from_transaction_check,
        )  # fmt: skip

    def view(self) -> dict[str, Any]:
        """The context as messageTrace and queryMsgTraceById show it (TraceView's fields and more)."""
        out: dict[str, Any] = {
            "type": str(self.trace_type),
            "msgId": self.msg_id,
            "group": self.group,
            "clientHost": self.client_host,
            "timestamp": self.timestamp,
        }
        t = self.trace_type
        if t in (TraceType.PUB, TraceType.END_TRANSACTION):
            out.update(topic=self.topic, tags=self.tags, keys=self.keys, storeHost=self.store_host)
            out["msgType"] = _name(MESSAGE_TYPES, self.msg_type)
        if t == TraceType.PUB:
            out.update(
                costTime=self.cost_time,
                status="success" if self.success else "failed",
                offsetMsgId=self.offset_msg_id,
                bodyLength=self.body_length,
            )
        elif t == TraceType.SUB_BEFORE:
            out.update(requestId=self.request_id, retryTimes=self.retry_times)
        elif t == TraceType.SUB_AFTER:
            out.update(
                requestId=self.request_id,
                costTime=self.cost_time,
                status="success" if self.success else "failed",
                consumeReturnType=_name(CONSUME_RETURN_TYPES, self.context_code),
            )
        else:
            out.update(
                transactionId=self.transaction_id,
                transactionState=self.transaction_state,
                fromTransactionCheck=self.from_transaction_check,
            )
        return out


def _name(names: tuple[str, ...], ordinal: int) -> str:
    return names[ordinal] if 0 <= ordinal < len(names) else str(ordinal)


def str_field(value: object) -> str:
    """A field as Java's StringBuilder appends it: booleans in lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _bool(text: str) -> bool:
    return text.strip().lower() == "true"  # Boolean.parseBoolean


def _text(text: str) -> str:
    return "" if text == "null" else text  # a Java null appended as "null"


def _decode_one(line: list[str]) -> TraceContext | None:
    kind = line[0]
    if kind == TraceType.PUB and len(line) >= 12:
        ctx = TraceContext(
            TraceType.PUB, _text(line[5]), int(line[1]), _text(line[2]), _text(line[3]),
            topic=_text(line[4]), tags=_text(line[6]), keys=_text(line[7]),
            store_host=_text(line[8]), body_length=int(line[9]), cost_time=int(line[10]),
            msg_type=int(line[11]),
        )  # fmt: skip
        if len(line) == 13:
            return dataclasses.replace(ctx, success=_bool(line[12]))
        if len(line) >= 14:
            return dataclasses.replace(ctx, offset_msg_id=_text(line[12]), success=_bool(line[13]))
        return ctx
    if kind == TraceType.SUB_BEFORE and len(line) >= 8:
        return TraceContext(
            TraceType.SUB_BEFORE, _text(line[5]), int(line[1]), _text(line[2]), _text(line[3]),
            request_id=_text(line[4]), retry_times=int(line[6]), keys=_text(line[7]),
        )  # fmt: skip
    if kind == TraceType.SUB_AFTER and len(line) >= 6:
        return TraceContext(
            TraceType.SUB_AFTER, _text(line[2]), request_id=_text(line[1]),
            cost_time=int(line[3]), success=_bool(line[4]), keys=_text(line[5]),
            context_code=int(line[6]) if len(line) >= 7 else 0,
            timestamp=int(line[7]) if len(line) >= 9 else 0,
            group=_text(line[8]) if len(line) >= 9 else "",
        )  # fmt: skip
    if kind == TraceType.END_TRANSACTION and len(line) >= 13:
        return TraceContext(
            TraceType.END_TRANSACTION, _text(line[5]), int(line[1]), _text(line[2]),
            _text(line[3]), topic=_text(line[4]), tags=_text(line[6]), keys=_text(line[7]),
            store_host=_text(line[8]), msg_type=int(line[9]), transaction_id=_text(line[10]),
            transaction_state=_text(line[11]), from_transaction_check=_bool(line[12]),
        )  # fmt: skip
    return None


def decode(body: bytes, client_host: str = "") -> list[TraceContext]:
    """The contexts of a trace message's body (TraceDataEncoder#decoderFromTraceDataString).

    A context that is not one of the four kinds, or whose numbers do not parse, is
    skipped: a trace topic is written by any client, and reading it must not fail.
    """
    out: list[TraceContext] = []
    for text in body.decode("utf-8", errors="replace").split(FIELD_SPLITOR):
        if not text:
            continue
        try:
            ctx = _decode_one(text.split(CONTENT_SPLITOR))
        except ValueError:
            continue
        if ctx is not None:
            out.append(dataclasses.replace(ctx, client_host=client_host))
    return out


def encode(contexts: Iterable[TraceContext]) -> bytes:
    """The body of one trace message carrying `contexts`."""
    return "".join(c.encode() for c in contexts).encode("utf-8")


def trace_keys(contexts: Iterable[TraceContext]) -> list[str]:
    """The trace message's KEYS: each message id, and each message's own keys (TraceTransferBean)."""
    keys: dict[str, None] = {}
    for c in contexts:
        keys[c.msg_id] = None
        if c.keys:
            keys[c.keys] = None
    return list(keys)


def of_message(contexts: Iterable[TraceContext], msg_ids: Iterable[str]) -> list[TraceContext]:
    """The contexts about one message, named by any of its ids (TraceView keeps msgId == key)."""
    wanted = {m for m in msg_ids if m}
    return [c for c in contexts if c.msg_id in wanted]
