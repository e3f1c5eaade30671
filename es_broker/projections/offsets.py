"""The consumer offset table and the history of every change to it (B-27, B-131).

`offsets`: (topic@group, queue id) -> current offset, as ConsumerOffsetManager
holds it. `offset_history`: (topic@group, queue id, seq) -> (time, old, new,
cause, requester), so "who moved it, when, from what" is a range read.
`reset_pending`: a compat reset's target per queue, until a client commits it.
What each record does to them is `offset_rule`'s; this module only stores it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import lmdb
import msgpack

from es_broker.log import Record, RecordLog, records
from es_broker.log.scan import prefixed
from es_broker.projections.keys import I64, U64, offset_key, split_offset_key
from es_broker.projections.offset_rule import OFFSET_RECORD_TYPES, ResetPending, offset_effects

KEPT_QUEUES = 4096  # the most queues whose `commit_state` a write transaction hands the next


@dataclass(frozen=True, slots=True)
class OffsetHistoryEntry:
    """One stored change of a queue's offset: what `offset_rule.OffsetChange` did, at `seq`."""

    seq: int
    ts: int
    topic: str
    group: str
    queue_id: int
    old: int
    new: int
    cause: str
    requester: str


class OffsetTableProjection:
    name = "offsets"
    databases = ("offsets", "offset_history", "reset_pending")

    def bind(self, log: RecordLog) -> None:
        self.db = log.db("offsets")
        self.history = log.db("offset_history")
        self.pending = log.db("reset_pending")
        self.log = log
        # `commit_state` by queue key as the write transaction `_txn` read it or `_store` wrote
        # it, so that a queue's next commit reads neither database back; the next write
        # transaction keeps it when it follows `_txn`'s commit (RecordLog.follows)
        self._txn: lmdb.Transaction[bytes] | None = None
        self._kept: dict[bytes, tuple[int, tuple[int, int, int] | None]] = {}

    def applier(self, kind: str) -> Callable[[lmdb.Transaction[bytes], int, Record], None] | None:
        """`_store` for the record types that change the table; none for the others (a send or
        a delivery costs this projection no call, RecordLog.apply)."""
        return self._store if kind in OFFSET_RECORD_TYPES else None

    def apply(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        if record["type"] in OFFSET_RECORD_TYPES:  # the rule's own table says which
            self._store(txn, seq, record)

    def _store(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        """Store what the offset rule says a record of an OFFSET_RECORD_TYPES type does."""
        ts, packb = record["ts"], records.packb
        if txn is not self._txn:
            self._begin(txn)
        kept = self._kept
        for effect in offset_effects(record):
            key = offset_key(effect.topic, effect.group, effect.queue_id)
            # what `commit_state` answers after this effect, when known without a read
            known = kept.pop(key, None)
            if isinstance(effect, ResetPending):
                txn.put(key, packb([effect.target, seq, ts]), True, True, False, self.pending)
                continue
            if effect.removed:
                txn.delete(key, db=self.db)
                txn.delete(key, db=self.pending)
            else:
                txn.put(key, I64.pack(effect.new), True, True, False, self.db)
            entry = [ts, effect.old, effect.new, effect.cause, effect.requester]
            txn.put(key + U64.pack(seq), packb(entry), True, True, False, self.history)
            if effect.settles_reset:
                txn.delete(key, db=self.pending)
                if not effect.removed:
                    kept[key] = (effect.new, None)
            elif known is not None and not effect.removed:
                kept[key] = (effect.new, known[1])

    def _begin(self, txn: lmdb.Transaction[bytes]) -> None:
        """`txn`, a write transaction, is to use what `_txn` kept: still what is stored when
        `txn` is the first after `_txn`'s commit (`RecordLog.follows`), else forgotten."""
        if len(self._kept) > KEPT_QUEUES or not self.log.follows(self._txn, txn):
            self._kept.clear()
        self._txn = txn

    def commit_state(
        self, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> tuple[int, tuple[int, int, int] | None]:
        """(`query`, `pending_reset`) of one queue, its key built once (a commit reads both), in
        the writer's transaction `txn`: kept for the queue's next commit (`_kept`)."""
        key = offset_key(topic, group, queue_id)
        if txn is not self._txn:
            self._begin(txn)
        known = self._kept.get(key)
        if known is None:
            raw, pending = txn.get(key, None, self.db), txn.get(key, None, self.pending)
            known = (I64.unpack(raw)[0] if raw else -1, _pending(pending) if pending else None)
            self._kept[key] = known
        return known

    def pending_reset(
        self, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> tuple[int, int, int] | None:
        """(target, reset seq, reset time) of a compat reset not yet applied by a client commit."""
        return _pending(txn.get(offset_key(topic, group, queue_id), db=self.pending))

    # ------------------------------------------------------------------ reads
    def query(self, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int) -> int:
        """The stored offset, or -1 when there is none (B-29)."""
        return _offset(txn.get(offset_key(topic, group, queue_id), db=self.db))

    def table(self, txn: lmdb.Transaction[bytes]) -> Iterator[tuple[str, str, int, int]]:
        """The whole table: (topic, group, queue id, offset)."""
        for key, raw in txn.cursor(db=self.db):
            yield (*split_offset_key(key), I64.unpack(raw)[0])

    def of_topic(
        self, txn: lmdb.Transaction[bytes], topic: str
    ) -> Iterator[tuple[bytes, str, int, int]]:
        """The table's rows of one topic: (key, group, queue id, offset), in the table's order."""
        for key, raw in prefixed(txn, self.db, f"{topic}@".encode()):
            row_topic, group, queue_id = split_offset_key(key)
            if row_topic == topic:  # not a longer topic's row, whose name goes on after an @
                yield key, group, queue_id, I64.unpack(raw)[0]

    def changes(
        self, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> Iterator[OffsetHistoryEntry]:
        """Every change of one queue's offset, oldest first."""
        prefix = offset_key(topic, group, queue_id)
        for key, raw in prefixed(txn, self.history, prefix):
            if len(key) != len(prefix) + 8:
                return
            ts, old, new, cause, requester = msgpack.unpackb(raw)
            yield OffsetHistoryEntry(
                U64.unpack(key[-8:])[0], ts, topic, group, queue_id, old, new, cause, requester
            )


def _offset(raw: bytes | None) -> int:
    """A stored offset, or -1 when there is none (B-29)."""
    return I64.unpack(raw)[0] if raw else -1


def _pending(raw: bytes | None) -> tuple[int, int, int] | None:
    """A pending compat reset's (target, reset seq, reset time), or None."""
    return tuple(msgpack.unpackb(raw)) if raw else None
