"""The headers of RocketMQ 5's pop consumption, as its broker serves them to its proxy.

POP_MESSAGE (200050), ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053)
carry the fields of RocketMQ 5's PopMessageRequestHeader, AckMessageRequestHeader and
ChangeInvisibleTimeRequestHeader under their Java names; the answers those of
PopMessageResponseHeader and ChangeInvisibleTimeResponseHeader. Declared as headers.py
declares RocketMQ 4's (docs/protocol.md §14).

`extraInfo` is the receipt handle the broker puts in each popped message's POP_CK
property, RocketMQ 5's fields by position (`ReceiptHandle` below) and a MAC after them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .header_fields import TEXT_MAX, CustomHeader, boolean, i32, i64, queue_id, text

#: ConsumeInitMode: where a group's first pop of a queue starts
INIT_MODE_MIN = 0
INIT_MODE_MAX = 1
#: KeyBuilder.POP_ORDER_REVIVE_QUEUE: the reviveQid of an order pop's handles
ORDER_REVIVE_QID = 999
#: the longest invisible time taken: a year (the broker's arithmetic stays far inside a long)
INVISIBLE_TIME_MAX = 366 * 24 * 3600 * 1000
#: the longest a pop may be held waiting for messages (pollTime)
POLL_TIME_MAX = 24 * 3600 * 1000
#: PROPERTY_POP_CK: the property of a popped message that holds its receipt handle
PROPERTY_POP_CK = "POP_CK"
#: PROPERTY_FIRST_POP_TIME
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
#: MessageConst.KEY_SEPARATOR, between the handle's fields
SEPARATOR = " "


@dataclass(frozen=True, slots=True, kw_only=True)
class PopMessageRequestHeader(CustomHeader):
    """POP_MESSAGE: up to `maxMsgNums` messages of one queue (`queueId` -1: any) for a group,
    invisible to the group for `invisibleTime` ms; held up to `pollTime` ms while none is there."""

    consumer_group: str = text(True)
    topic: str = text(True)
    queue_id: int = i32(True)  # below 0: any read queue
    max_msg_nums: int = i32(True)  # 1..32, checked by the processor (INVALID_PARAMETER, as 5.x)
    invisible_time: int = i64(True, min=1, max=INVISIBLE_TIME_MAX)
    poll_time: int = i64(True, min=0, max=POLL_TIME_MAX)
    born_time: int | None = i64()
    init_mode: int = i32(True, min=INIT_MODE_MIN, max=INIT_MODE_MAX)
    exp_type: str | None = text()
    exp: str | None = text(max_len=TEXT_MAX)
    order: bool | None = boolean()
    attempt_id: str | None = text()
    # es-broker's: the client a proxy pops for, recorded as who holds the messages
    for_client: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class AckMessageRequestHeader(CustomHeader):
    """ACK_MESSAGE: the message at `offset` consumed, named by the handle `extraInfo`."""

    consumer_group: str = text(True)
    topic: str = text(True)
    queue_id: int = queue_id()
    extra_info: str = text(True, max_len=1024)
    offset: int = i64(True, min=0)
    for_client: str | None = text()  # es-broker's: the client a proxy acks for


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeInvisibleTimeRequestHeader(CustomHeader):
    """CHANGE_MESSAGE_INVISIBLETIME: the message stays invisible `invisibleTime` ms from now."""

    consumer_group: str = text(True)
    topic: str = text(True)
    queue_id: int = queue_id()
    extra_info: str = text(True, max_len=1024)
    offset: int = i64(True, min=0)
    invisible_time: int = i64(True, min=1, max=INVISIBLE_TIME_MAX)
    for_client: str | None = text()  # es-broker's: the client a proxy changes it for


@dataclass(frozen=True, slots=True, kw_only=True)
class PopMessageResponseHeader(CustomHeader):
    """POP_MESSAGE's answer: when the messages were popped, for how long, and where each was."""

    pop_time: int = i64(True)
    invisible_time: int = i64(True)
    revive_qid: int = i32(True)
    rest_num: int = i64(True)
    start_offset_info: str | None = text(max_len=TEXT_MAX)
    msg_offset_info: str | None = text(max_len=TEXT_MAX)
    order_count_info: str | None = text(max_len=TEXT_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeInvisibleTimeResponseHeader(CustomHeader):
    """CHANGE_MESSAGE_INVISIBLETIME's answer; `extraInfo` (es-broker's) is the new handle, which
    replaces the one the request named."""

    pop_time: int = i64(True)
    invisible_time: int = i64(True)
    revive_qid: int = i32(True)
    extra_info: str | None = text(max_len=1024)


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """A popped message's handle, as its POP_CK property and `extraInfo` carry it.

    RocketMQ 5's fields by position (ExtraInfoUtil, ReceiptHandle): ckQueueOffset, popTime,
    invisibleTime, reviveQid, topic type ("0": a normal topic), brokerName, queueId,
    queueOffset, commitLogOffset; then es-broker's MAC over the group, topic, queue, offset
    and pop time. A RocketMQ 5 proxy appends the commit-log offset again: fields past the
    tenth are ignored.
    """

    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    broker_name: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    mac: str

    def encode(self) -> str:
        return SEPARATOR.join(
            str(v)
            for v in (
                self.ck_queue_offset,
                self.pop_time,
                self.invisible_time,
                self.revive_qid,
                "0",
                self.broker_name,
                self.queue_id,
                self.queue_offset,
                self.commit_log_offset,
                self.mac,
            )
        )

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """The handle `text` holds; ValueError saying what is wrong with it."""
        parts = text.split(SEPARATOR)
        if len(parts) < 10:
            raise ValueError(f"a receipt handle has 10 fields, this one {len(parts)}")
        numbers = []
        for name, raw in zip(_NUMBERED, parts, strict=False):
            if name is None:
                continue
            try:
                numbers.append(int(raw))
            except ValueError:
                raise ValueError(
                    f"the receipt handle's {name} is not a number: {raw[:40]!r}"
                ) from None
        ck, pop_time, invisible, revive, qid, offset, phy = numbers
        return cls(ck, pop_time, invisible, revive, parts[5], qid, offset, phy, parts[9])


# the numbers among the handle's first nine fields (None: text)
_NUMBERED = (
    "ckQueueOffset",
    "popTime",
    "invisibleTime",
    "reviveQid",
    None,
    None,
    "queueId",
    "queueOffset",
    "commitLogOffset",
)


__all__ = [
    "INIT_MODE_MAX",
    "INIT_MODE_MIN",
    "INVISIBLE_TIME_MAX",
    "ORDER_REVIVE_QID",
    "POLL_TIME_MAX",
    "PROPERTY_FIRST_POP_TIME",
    "PROPERTY_POP_CK",
    "SEPARATOR",
    "AckMessageRequestHeader",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "ReceiptHandle",
]
