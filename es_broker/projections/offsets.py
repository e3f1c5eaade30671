"""The consumer offset table and the history of every change to it (B-27, B-131).

`offsets`: (topic@group, queue id) -> current offset, as ConsumerOffsetManager
holds it. `offset_history`: (topic@group, queue id, seq) -> (time, old, new,
cause, requester), so "who moved it, when, from what" is a range read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import lmdb
import msgpack

from es_broker.log import Record, RecordLog
from es_broker.log.scan import prefixed
from es_broker.log.types import (
    Cause,
    OffsetCommittedRecord,
    OffsetsRemoved,
    RecordType,
    ResetRequested,
    SlaveOffsetsMerged,
)
from es_broker.projections.keys import I64, U64, offset_key, split_offset_key

OFFSETS_REMOVED = RecordType.OFFSETS_REMOVED
OFFSET_COMMITTED = RecordType.OFFSET_COMMITTED
RESET_REQUESTED = RecordType.RESET_REQUESTED
SLAVE_OFFSETS_MERGED = RecordType.SLAVE_OFFSETS_MERGED
RESET = Cause.RESET.value


@dataclass(frozen=True, slots=True)
class OffsetChange:
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

    def apply(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        kind = record["type"]
        if kind == OFFSET_COMMITTED:
            committed: OffsetCommittedRecord = record  # type: ignore[assignment]
            key = offset_key(committed["topic"], committed["group"], committed["queue_id"])
            self._set(
                txn,
                seq,
                key,
                committed["ts"],
                committed["old"],
                committed["offset"],
                committed["cause"],
                committed["requester"],
            )
            if committed["cause"] == RESET:
                txn.delete(key, db=self.pending)
        elif kind == OFFSETS_REMOVED:
            removed = OffsetsRemoved.from_record(record)
            ts = record["ts"]
            for topic, qid, old in removed.entries:
                key = offset_key(topic, removed.group, qid)
                txn.delete(key, db=self.db)
                txn.delete(key, db=self.pending)
                entry = [ts, old, -1, str(removed.cause), removed.requester]
                txn.put(key + U64.pack(seq), msgpack.packb(entry), db=self.history)
        elif kind == SLAVE_OFFSETS_MERGED:
            merged = SlaveOffsetsMerged.from_record(record)
            # commits a slave took while the master was away; only the queues where they won move (S-5)
            for topic, group, qid, old, new, outcome, requester in merged.queues:
                if outcome == "applied":
                    self._set(
                        txn,
                        seq,
                        offset_key(topic, group, qid),
                        record["ts"],
                        old,
                        new,
                        "slave_merge",
                        requester,
                    )
        elif kind == RESET_REQUESTED:
            reset = ResetRequested.from_record(record)
            ts = record["ts"]
            for qid, current, _, final, _ in reset.queues:
                key = offset_key(reset.topic, reset.group, qid)
                # the reset record moves the offset itself (S-2)
                if reset.mode == "server_side":
                    self._set(txn, seq, key, ts, current, final, RESET, reset.requester)
                else:  # the clients' commits of these values will be recorded as caused by the reset
                    txn.put(key, msgpack.packb([final, seq, ts]), db=self.pending)

    def _set(
        self,
        txn: lmdb.Transaction[bytes],
        seq: int,
        key: bytes,
        ts: int,
        old: int,
        new: int,
        cause: str,
        requester: str,
    ) -> None:
        txn.put(key, I64.pack(new), db=self.db)
        txn.put(
            key + U64.pack(seq), msgpack.packb([ts, old, new, cause, requester]), db=self.history
        )

    def pending_reset(
        self, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> tuple[int, int, int] | None:
        """(target, reset seq, reset time) of a compat reset not yet applied by a client commit."""
        raw = txn.get(offset_key(topic, group, queue_id), db=self.pending)
        return tuple(msgpack.unpackb(raw)) if raw else None

    # ------------------------------------------------------------------ reads
    def query(self, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int) -> int:
        """The stored offset, or -1 when there is none (B-29)."""
        raw = txn.get(offset_key(topic, group, queue_id), db=self.db)
        return I64.unpack(raw)[0] if raw else -1

    def table(self, txn: lmdb.Transaction[bytes]) -> Iterator[tuple[str, str, int, int]]:
        """The whole table: (topic, group, queue id, offset)."""
        for key, raw in txn.cursor(db=self.db):
            yield (*split_offset_key(key), I64.unpack(raw)[0])

    def changes(
        self, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> Iterator[OffsetChange]:
        """Every change of one queue's offset, oldest first."""
        prefix = offset_key(topic, group, queue_id)
        for key, raw in prefixed(txn, self.history, prefix):
            if len(key) != len(prefix) + 8:
                return
            ts, old, new, cause, requester = msgpack.unpackb(raw)
            yield OffsetChange(
                U64.unpack(key[-8:])[0], ts, topic, group, queue_id, old, new, cause, requester
            )
