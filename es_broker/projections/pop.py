"""Pop consumption's state: each group's pop cursor and handles per queue (RocketMQ 5, B-580..B-599).

- `pop_queues`: (group, topic, queue) -> the pop cursor, the next offset never
  handed out.
- `pop_leases`: (group, topic, queue, offset) -> the handle out on that
  message: [pop time, invisible until, delivery count, client, ready]; `ready`
  once its invisible time passed and the revive service made it visible to the
  group again (it is handed out before newer messages). An acked or
  dead-lettered message has no entry, so the queue's first entry (or the
  cursor, when there is none) is the group's lowest message not acked: the
  committed offset its records write into the 4.x offset table (B-585).
- `pop_deadlines`: (invisible until, group, topic, queue, offset) for every
  handle out and not ready: what the revive service reads, earliest first.
- `pop_trace`: (topic, queue, offset, seq) of every pop record that names the
  message, so its pops, acks, changes and expiry are found from the message.
  A sealing removes the entries of an expired message's sealed records
  (`expire_traced`, B-642); those are read from the archive then.

Everything is taken from the records' fields; nothing here reads the clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lmdb
import msgpack

from es_broker.log import Record, RecordLog
from es_broker.log.scan import prefixed
from es_broker.log.types import (
    MessagesPopped,
    PopAcked,
    PopExpired,
    PopInvisibleChanged,
    RecordType,
)
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import U32, U64, queue_key

DATABASES = ("pop_queues", "pop_leases", "pop_deadlines", "pop_trace")


@dataclass(frozen=True, slots=True)
class Lease:
    """The handle out on one message: who holds it, from when, until when."""

    offset: int
    pop_time: int
    invisible_until: int
    times: int  # how often the message was handed out
    client: str
    ready: bool  # its invisible time passed: visible to the group again


@dataclass(frozen=True, slots=True)
class Due:
    """A handle whose invisible time ends at `invisible_until` (the revive service's work)."""

    invisible_until: int
    group: str
    topic: str
    queue_id: int
    offset: int


def pop_queue_key(group: str, topic: str, queue_id: int) -> bytes:
    """Key of a group's pop state on one queue: group NUL topic NUL queue id."""
    return group.encode() + b"\x00" + topic.encode() + b"\x00" + U32.pack(queue_id)


def split_pop_queue_key(key: bytes) -> tuple[str, str, int]:
    group, _, rest = key.partition(b"\x00")
    topic, _, qid = rest.partition(b"\x00")
    return group.decode(), topic.decode(), U32.unpack(qid[:4])[0]


class PopProjection(Dispatching):
    name = "pop"
    databases = DATABASES

    def bind(self, log: RecordLog) -> None:
        # each None in a read-only view of a directory written before pop consumption
        self.queues = log.db("pop_queues")
        self.leases = log.db("pop_leases")
        self.deadlines = log.db("pop_deadlines")
        self.trace = log.db("pop_trace")

    # ------------------------------------------------------------------ apply
    def _popped(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        popped = MessagesPopped.from_record(record)
        queue = pop_queue_key(popped.group, popped.topic, popped.queue_id)
        if popped.resynced is not None:
            for lease in list(self._leases(txn, queue)):
                self._end(txn, queue, lease)
        for offset in popped.gone or ():
            self._end_at(txn, queue, offset)
        for offset, times in popped.offsets:
            self._end_at(txn, queue, offset)
            holder = popped.for_client or popped.client
            lease = Lease(offset, popped.pop_time, popped.invisible_until, times, holder, False)
            self._put(txn, queue, lease)
        txn.put(queue, msgpack.packb([popped.next_cursor]), db=self.queues)
        self._traced(txn, popped.topic, popped.queue_id, named_offsets(record), seq)

    def _acked(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        acked = PopAcked.from_record(record)
        queue = pop_queue_key(acked.group, acked.topic, acked.queue_id)
        self._end_at(txn, queue, acked.offset)
        self._traced(txn, acked.topic, acked.queue_id, named_offsets(record), seq)

    def _changed(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        changed = PopInvisibleChanged.from_record(record)
        queue = pop_queue_key(changed.group, changed.topic, changed.queue_id)
        self._end_at(txn, queue, changed.offset)
        lease = Lease(
            changed.offset,
            changed.pop_time,
            changed.invisible_until,
            changed.times,
            changed.for_client or changed.client,
            False,
        )
        self._put(txn, queue, lease)
        self._traced(txn, changed.topic, changed.queue_id, named_offsets(record), seq)

    def _expired(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        expired = PopExpired.from_record(record)
        queue = pop_queue_key(expired.group, expired.topic, expired.queue_id)
        for offset, pop_time, times, client in expired.revived:
            self._end_at(txn, queue, offset)
            self._put(txn, queue, Lease(offset, pop_time, 0, times, client, True))
        for offset, *_ in expired.dead:
            self._end_at(txn, queue, offset)
        self._traced(txn, expired.topic, expired.queue_id, named_offsets(record), seq)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_POPPED: _popped,
            RecordType.POP_ACKED: _acked,
            RecordType.POP_INVISIBLE_CHANGED: _changed,
            RecordType.POP_EXPIRED: _expired,
        }
    )

    def _put(self, txn: lmdb.Transaction[bytes], queue: bytes, lease: Lease) -> None:
        key = queue + U64.pack(lease.offset)
        value = [lease.pop_time, lease.invisible_until, lease.times, lease.client, lease.ready]
        txn.put(key, msgpack.packb(value), db=self.leases)
        if not lease.ready:
            txn.put(U64.pack(lease.invisible_until) + key, b"", db=self.deadlines)

    def _end_at(self, txn: lmdb.Transaction[bytes], queue: bytes, offset: int) -> None:
        raw = txn.get(queue + U64.pack(offset), db=self.leases)
        if raw is not None:
            self._end(txn, queue, _lease(offset, raw))

    def _end(self, txn: lmdb.Transaction[bytes], queue: bytes, lease: Lease) -> None:
        key = queue + U64.pack(lease.offset)
        txn.delete(key, db=self.leases)
        if not lease.ready:
            txn.delete(U64.pack(lease.invisible_until) + key, db=self.deadlines)

    def _traced(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offsets: list[int], seq: int
    ) -> None:
        prefix = queue_key(topic, queue_id)
        for offset in offsets:
            txn.put(prefix + U64.pack(offset) + U64.pack(seq), b"", db=self.trace)

    def _leases(self, txn: lmdb.Transaction[bytes], queue: bytes) -> Iterator[Lease]:
        for key, raw in prefixed(txn, self.leases, queue):
            if len(key) == len(queue) + 8:
                yield _lease(U64.unpack(key[-8:])[0], raw)

    # ------------------------------------------------------------------ reads
    def cursor(
        self, txn: lmdb.Transaction[bytes], group: str, topic: str, queue_id: int
    ) -> int | None:
        """The queue's pop cursor for the group; None before its first pop."""
        raw = txn.get(pop_queue_key(group, topic, queue_id), db=self.queues)
        return None if raw is None else int(msgpack.unpackb(raw)[0])

    def leases_of(
        self, txn: lmdb.Transaction[bytes], group: str, topic: str, queue_id: int
    ) -> Iterator[Lease]:
        """The group's handles out on the queue (and those ready to hand out again), by offset."""
        return self._leases(txn, pop_queue_key(group, topic, queue_id))

    def lease(
        self, txn: lmdb.Transaction[bytes], group: str, topic: str, queue_id: int, offset: int
    ) -> Lease | None:
        raw = txn.get(pop_queue_key(group, topic, queue_id) + U64.pack(offset), db=self.leases)
        return None if raw is None else _lease(offset, raw)

    def low_watermark(
        self, txn: lmdb.Transaction[bytes], group: str, topic: str, queue_id: int
    ) -> int | None:
        """The group's lowest message of the queue not acked: its first handle, else the cursor."""
        first = next(self.leases_of(txn, group, topic, queue_id), None)
        if first is not None:
            return first.offset
        return self.cursor(txn, group, topic, queue_id)

    def due(self, txn: lmdb.Transaction[bytes], now: int, limit: int) -> list[Due]:
        """Up to `limit` handles whose invisible time ended at or before `now`, earliest first."""
        out: list[Due] = []
        for key in txn.cursor(db=self.deadlines).iternext(keys=True, values=False):
            until = U64.unpack(key[:8])[0]
            if until > now or len(out) >= limit:
                break
            group, topic, queue_id = split_pop_queue_key(bytes(key[8:-8]))
            out.append(Due(until, group, topic, queue_id, U64.unpack(key[-8:])[0]))
        return out

    def next_deadline(self, txn: lmdb.Transaction[bytes]) -> int | None:
        """The earliest end of an invisible time among the handles out; None when none is out."""
        cur = txn.cursor(db=self.deadlines)
        return U64.unpack(cur.key()[:8])[0] if cur.first() else None

    def queues_of(self, txn: lmdb.Transaction[bytes]) -> Iterator[tuple[str, str, int, int]]:
        """(group, topic, queue id, cursor) of every queue some group popped."""
        for key, raw in txn.cursor(db=self.queues):
            yield (*split_pop_queue_key(bytes(key)), int(msgpack.unpackb(raw)[0]))

    def records_of(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offset: int
    ) -> list[int]:
        """Seqs of the pop records that name the message at (topic, queue, offset), in order."""
        if self.trace is None:  # a read-only view of a directory older than pop consumption
            return []
        prefix = queue_key(topic, queue_id) + U64.pack(offset)
        return [
            U64.unpack(key[-8:])[0]
            for key, _ in prefixed(txn, self.trace, prefix)
            if len(key) == len(prefix) + 8
        ]


def named_offsets(record: Record) -> list[int]:
    """The queue offsets of the messages a pop record names (its `pop_trace` entries): those a
    pop handed out, the one an ack or change used, those an expiry revived or dead-lettered."""
    kind = record["type"]
    if kind == RecordType.MESSAGES_POPPED:
        return [int(offset) for offset, _ in record["offsets"]]
    if kind in (RecordType.POP_ACKED, RecordType.POP_INVISIBLE_CHANGED):
        return [int(record["offset"])]
    if kind == RecordType.POP_EXPIRED:
        return sorted(int(e[0]) for e in [*record["revived"], *record["dead"]])
    return []


TRACED = (
    RecordType.MESSAGES_POPPED,
    RecordType.POP_ACKED,
    RecordType.POP_INVISIBLE_CHANGED,
    RecordType.POP_EXPIRED,
)
"""The record types `pop_trace` indexes."""


def expire_traced(
    txn: lmdb.Transaction[bytes], trace: Any, queue: bytes, low: int, horizon: int
) -> None:
    """Drop a queue's `pop_trace` entries of messages below `low` (its minimum, moved by
    retention) whose record is at or before `horizon`: sealing calls it, so a message's pop
    records leave the hot index only when the archive holds them (B-642)."""
    cur = txn.cursor(db=trace)
    if not cur.set_range(queue + U64.pack(0)):
        return
    size = len(queue) + 16
    while True:
        key = cur.key()
        if key[: len(queue)] != queue or len(key) != size:
            return
        if U64.unpack_from(key, len(queue))[0] >= low:
            return
        if U64.unpack_from(key, len(queue) + 8)[0] <= horizon:
            if not cur.delete():  # the cursor moves on to the next entry itself
                return
        elif not cur.next():
            return


def _lease(offset: int, raw: bytes) -> Lease:
    pop_time, until, times, client, ready = msgpack.unpackb(raw)
    return Lease(offset, pop_time, until, times, client, ready)
