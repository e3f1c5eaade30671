"""The records of RocketMQ 5's pop consumption (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME).

A pop hands messages of one queue to one client for an invisible time; each
message is then acked, its invisible time changed, or, when the time passed
without an ack, made visible again to the group or dead-lettered by the pop
revive service. Every decision (the pop time, the time a message stays
invisible until, which offsets, how often each was handed out, the group's
offset that results) is written into these records, so a replay re-decides
nothing (docs/semantics.md B-580..B-599). `types.py` imports them with the
other record classes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from es_broker.log.typed import TypedRecord, typed
from es_broker.log.vocabulary import RecordType


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MessagesPopped(TypedRecord):
    """POP_MESSAGE on one queue: the messages handed out and what the pop cursor did (B-580).

    `offsets` holds [queue offset, delivery count] of each message handed out: 1 the first
    time, one more each time it comes back after its invisible time. `cursor` and
    `next_cursor` are the queue's pop cursor (the next offset never handed out) before and
    after; the messages between them not handed out did not match the pop's filter.
    """

    TYPE = RecordType.MESSAGES_POPPED
    group: str
    topic: str
    queue_id: int
    client: str
    pop_time: int
    invisible_time: int
    invisible_until: int  # pop_time + invisible_time: when the revive service takes them back
    order: bool  # a FIFO pop: the queue's next messages wait until these are acked
    offsets: list[list[int]]
    cursor: int
    next_cursor: int
    # [old, new] of the group's committed offset, when the pop moved it: the first pop of the
    # queue commits where it starts (5.x's init offset), and messages filtered out are passed
    commit: list[int] | None = None
    # the offset table moved under the queue's pop state (a reset, a 4.x commit): the cursor it
    # had, its handles dropped, and the pop started again from the table's offset
    resynced: int | None = None
    # messages that were due for redelivery but retention removed: their handles end
    gone: list[int] | None = None
    # the client a proxy popped for (its `forClient`); `client` is the connection's
    for_client: str | None = None


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PopAcked(TypedRecord):
    """ACK_MESSAGE with a valid receipt handle: the message is consumed (B-581)."""

    TYPE = RecordType.POP_ACKED
    group: str
    topic: str
    queue_id: int
    offset: int
    pop_time: int  # of the handle acked
    client: str
    commit: list[int] | None = None  # [old, new] of the group's offset, when this ack moved it
    for_client: str | None = None  # the client a proxy acked for


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PopInvisibleChanged(TypedRecord):
    """CHANGE_MESSAGE_INVISIBLETIME: the message stays invisible until a new time, under a new
    handle (its pop time is the change's time; the old handle is stale), B-583."""

    TYPE = RecordType.POP_INVISIBLE_CHANGED
    group: str
    topic: str
    queue_id: int
    offset: int
    old_pop_time: int
    pop_time: int
    invisible_time: int
    invisible_until: int
    times: int  # the message's delivery count, unchanged
    client: str
    for_client: str | None = None  # the client a proxy changed it for


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PopExpired(TypedRecord):
    """The pop revive service found handles of one queue past their invisible time (B-582, B-587).

    `revived`: [queue offset, pop time of the lapsed handle, delivery count, client that held it]
    of the messages visible again to the group, handed out again before newer ones; `dead`:
    [queue offset, pop time, delivery count, client, physical offset of the copy in %DLQ%G
    (-1: the message was gone), its msg id] of those handed out more than `max_reconsume_times`
    + 1 times, dead-lettered as a consumer's send-back dead-letters (B-91).
    """

    TYPE = RecordType.POP_EXPIRED
    group: str
    topic: str
    queue_id: int
    revived: list[list[Any]]
    dead: list[list[Any]]
    max_reconsume_times: int
    commit: list[int] | None = None  # [old, new] of the group's offset, when a dead letter moved it


__all__ = ["MessagesPopped", "PopAcked", "PopExpired", "PopInvisibleChanged"]
