"""Consume queues: per (topic, queue id), logical offset -> unit (B-09).

A unit is RocketMQ's 20 bytes (physical offset i64, size i32, tags code i64)
followed by the message's store time i64, which the time lookup (B-68) needs.
Database `cq_meta` holds (min, max) per queue (B-11).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import lmdb

from es_broker import compiled
from es_broker.log import LogCorruptError, Record, RecordLog
from es_broker.log.scan import prefixed
from es_broker.log.types import CommitlogExpired, RecordType, as_view
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import U64, queue_key, unit_key

UNIT = struct.Struct(">qiqq")
_BOUNDS = struct.Struct(">qq")
UNITS_PER_FILE = 300_000  # mappedFileSizeConsumeQueue / 20 (B-01, B-09)


@dataclass(frozen=True, slots=True)
class Unit:
    offset: int
    physical_offset: int
    size: int
    tags_code: int
    store_time: int


def queue_units(
    prefix: bytes, offset: int, units: list[list[int]], ts: int
) -> list[tuple[bytes, bytes]]:
    """The (key, unit) pairs of a `messages_stored` record's messages in the queue whose keys
    start with `prefix`, the first at `offset`, all stored at `ts`."""
    pack_offset, pack_unit = U64.pack, UNIT.pack
    return [
        (prefix + pack_offset(offset + i), pack_unit(phy, size, tags_code, ts))
        for i, (phy, size, tags_code) in enumerate(units)
    ]


# the pure-Python function that has a compiled twin (es_broker/projections/_speedups.pyx)
REFERENCE = {"queue_units": queue_units}


class ConsumeQueueProjection(Dispatching):
    name = "consume_queue"
    databases = ("cq", "cq_meta")

    def bind(self, log: RecordLog) -> None:
        self.db = log.db("cq")
        self.meta = log.db("cq_meta")

    def _expired(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        expired = CommitlogExpired.from_record(record)
        for topic, qid, _, new_min in expired.queues:  # min-offset correction (B-18)
            _, hi = self.bounds(txn, topic, qid)
            txn.put(queue_key(topic, qid), _BOUNDS.pack(new_min, hi), db=self.meta)

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        stored = as_view(record, RecordType.MESSAGES_STORED)
        topic, qid, offset, ts, units = (
            stored["topic"],
            stored["queue_id"],
            stored["queue_offset"],
            stored["ts"],
            stored["units"],
        )
        txn.cursor(db=self.db).putmulti(queue_units(queue_key(topic, qid), offset, units, ts))
        lo, _ = self.bounds(txn, topic, qid)
        txn.put(queue_key(topic, qid), _BOUNDS.pack(lo, offset + len(units)), db=self.meta)

    HANDLERS = handlers(
        {RecordType.COMMITLOG_EXPIRED: _expired, RecordType.MESSAGES_STORED: _stored}
    )

    # ------------------------------------------------------------------ reads
    def bounds(self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) of a queue; (0, 0) for a queue that never received a message."""
        raw = txn.get(queue_key(topic, queue_id), db=self.meta)
        return _BOUNDS.unpack(raw) if raw else (0, 0)

    def unit(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offset: int
    ) -> Unit | None:
        raw = txn.get(unit_key(topic, queue_id, offset), db=self.db)
        return Unit(offset, *UNIT.unpack(raw)) if raw else None

    def unit_at(self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offset: int) -> Unit:
        """The unit at an offset within the queue's bounds, where every offset has one."""
        unit = self.unit(txn, topic, queue_id, offset)
        if unit is None:
            raise LogCorruptError(
                f"consume queue {topic}:{queue_id} has no unit at {offset}, within its bounds"
            )
        return unit

    def units(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, start: int, end: int
    ) -> Iterator[Unit]:
        """Units with start <= offset < end, in offset order."""
        prefix = queue_key(topic, queue_id)
        plen = len(prefix)
        for key, raw in prefixed(txn, self.db, prefix, start=prefix + U64.pack(start)):
            offset = U64.unpack(key[plen:])[0]
            if offset >= end:
                return
            yield Unit(offset, *UNIT.unpack(raw))

    def unit_tuples(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, start: int, end: int
    ) -> Iterator[tuple[int, int, int, int]]:
        """(offset, physical offset, size, tags code) for start <= offset < end: the pull's hot loop."""
        prefix = queue_key(topic, queue_id)
        cur = txn.cursor(db=self.db)
        if not cur.set_range(prefix + U64.pack(start)):
            return
        plen = len(prefix)
        unpack_unit, unpack_offset = UNIT.unpack, U64.unpack
        for key, raw in cur:
            if key[:plen] != prefix:
                return
            offset = unpack_offset(key[plen:])[0]
            if offset >= end:
                return
            phy, size, tags_code, _ = unpack_unit(raw)
            yield offset, phy, size, tags_code

    def queues(self, txn: lmdb.Transaction[bytes]) -> Iterator[tuple[str, int, int, int]]:
        """Every queue with data: (topic, queue id, min, max)."""
        for key, raw in txn.cursor(db=self.meta):
            topic, _, qid = key.partition(b"\x00")
            lo, hi = _BOUNDS.unpack(raw)
            yield topic.decode(), struct.unpack(">I", qid)[0], lo, hi


_compiled = compiled.load("es_broker.projections._speedups")
if _compiled is not None:
    queue_units = _compiled.queue_units  # noqa: F811
