"""Placing encoded messages at the commit-log end, shared by every path that stores a message.

A send (`messages.py`), a half message and its commit (`transaction.py`), a
retry or dead letter (`sendback.py`), a delayed delivery (`schedule.py`) and a
re-drive (`redrive.py`) all encode a message with `encode_message` and store it
with `place`, which decides its offsets and records `messages_stored` (B-09..B-12).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from es_broker.commands.errors import MessageIllegal
from es_broker.log import AppendContext
from es_broker.log.types import Cause
from es_broker.log.views import messages_stored_record
from es_broker.remoting import message as wire
from es_broker.store import Store


class MessageIn(NamedTuple):
    """A message as a producer hands it over (read-only, like its properties).

    A named tuple rather than a frozen dataclass: the send path builds one
    per message of every batch, and a tuple is built in one C call where a
    frozen dataclass sets each field through `object.__setattr__`.
    """

    body: bytes
    properties: dict[str, str] = {}  # noqa: RUF012  (shared by the messages without any; never mutated)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0


class PutResult(NamedTuple):
    """Where a store placed its messages (read-only; `_replace` gives a changed copy).

    A named tuple, as MessageIn: built per send on the hot path, where a frozen
    dataclass sets each of its fields through `object.__setattr__`.
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offsets: tuple[int, ...]
    msg_ids: tuple[str, ...]
    store_timestamp: int
    seq: int
    # a delayed message is stored in SCHEDULE_TOPIC_XXXX (topic, queue_id); these name where it goes (B-96)
    real_topic: str | None = None
    real_queue_id: int | None = None
    delay_level: int = 0
    deliver_at: int = 0
    diverted_from: str | None = None  # a SEND to %RETRY%G that went to %DLQ%G (B-95)
    created_topic: bool = (
        False  # the send auto-created its topic (the name server is to hear of it)
    )

    @property
    def answer_queue_id(self) -> int:
        """The queueId a SEND answer names: the intended queue of a delayed message."""
        return self.real_queue_id if self.real_queue_id is not None else self.queue_id


def encode_message(
    topic: str,
    queue_id: int,
    msg: MessageIn,
    properties: dict[str, str],
    store_host: tuple[str, int],
) -> tuple[bytes, int]:
    """A message in the stored encoding with placeholder offsets, and its tags code (B-09)."""
    tags = properties.get("TAGS")
    try:
        raw = wire.encode_fields(
            topic,
            queue_id,
            msg.body,
            properties,
            msg.flag,
            msg.sys_flag,
            0,
            0,
            msg.born_timestamp,
            msg.born_host,
            0,
            store_host,
            msg.reconsume_times,
            0,
            None,
        )
    except ValueError as exc:
        raise MessageIllegal(f"the message cannot be stored: {exc}") from None
    except struct.error as exc:
        raise MessageIllegal(f"a message field is out of range: {exc}") from None
    return raw, (wire.tag_hash(tags) if tags else 0)


def place(
    store: Store,
    ctx: AppendContext,
    topic: str,
    queue_id: int,
    encoded: tuple[bytes, ...] | list[bytes],
    tags_codes: tuple[int, ...] | list[int],
    *,
    ts: int,
    host: tuple[str, int],
    producer_group: str = "",
    requester: str = "",
    diverted_from: str | None = None,
    delay: dict[str, Any] | None = None,
    cause: Cause | None = None,
    delivery: dict[str, Any] | None = None,
    transaction: dict[str, Any] | None = None,
) -> PutResult:
    """Append encoded messages to (topic, queue) at the commit-log end and record them: `messages_stored`.

    Decides the physical and queue offsets and writes them, with the store
    time, into the bytes and the record; the optional fields go into the record when given.
    """
    txn = ctx.txn
    phy = store.commitlog.phy_max(txn)
    _, queue_offset = store.cq.writer_bounds(txn, topic, queue_id)
    # the id is this prefix and the physical offset (B-12)
    host_hex = wire.offset_msg_id(host, 0)[:16]
    payloads, units, ids, _ = wire.place_batch(
        encoded,
        tags_codes,
        queue_id,
        queue_offset,
        phy,
        ts,
        store.config.mappedFileSizeCommitLog,
        host_hex,
    )
    ctx.put_payloads(payloads)
    seq = ctx.append(
        messages_stored_record(  # MessagesStored(...).to_record(ts), without the object
            ts,
            topic=topic,
            queue_id=queue_id,
            queue_offset=queue_offset,
            units=units,
            producer_group=producer_group,
            requester=requester,
            diverted_from=diverted_from,
            delay=delay,
            cause=cause,
            delivery=delivery,
            transaction=transaction,
        )
    )
    return PutResult(
        topic,
        queue_id,
        queue_offset,
        tuple([phy for phy, _ in payloads]),
        tuple(ids),
        ts,
        seq,
        diverted_from=diverted_from,
    )
