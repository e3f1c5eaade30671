"""Consume queues: per (topic, queue id), logical offset -> unit (B-09).

A unit is RocketMQ's 20 bytes (physical offset i64, size i32, tags code i64)
followed by the message's store time i64, which the time lookup (B-68) needs.
Database `cq_meta` holds (min, max) per queue (B-11).

Units are kept in blocks (B-473): `cq_pages` maps (topic, queue id, first
offset) to the units of up to BLOCK_UNITS consecutive offsets, a block
starting at a multiple of BLOCK_UNITS (or after a gap), so the queue costs a
B-tree entry per block instead of one per message, and the blocks are a
function of the units alone: a replay, and the upgrades from an older
directory's `cq` (an entry per unit) or `cq_blocks` (blocks of 32), write the
same ones. A whole block is 145 units, 4,060 bytes: the most one LMDB
overflow page holds (store format 6, B-474), so a queue's blocks fill their
pages whatever order the queues' writes interleave in, where smaller blocks
shared leaf pages that split half empty. A `commitlog_expired` record drops
the blocks wholly below a queue's new minimum, but the one at offset 0 (B-37
judges the queue's head by it).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, overload

import lmdb

from es_broker import compiled
from es_broker.log import LogCorruptError, Record, RecordLog
from es_broker.log.types import (
    CommitlogExpired,
    ImportSkipped,
    MessagesStoredRecord,
    RecordType,
)
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import U64, queue_key

UNIT = struct.Struct(">qiqq")
_BOUNDS = struct.Struct(">qq")
_PHY = struct.Struct(">q")  # a unit's first field
_QID = struct.Struct(">I")
UNITS_PER_FILE = 300_000  # mappedFileSizeConsumeQueue / 20 (B-01, B-09)
BLOCK_UNITS = 145  # (4096 - 16 page header) // 28: one overflow page a block (B-474)
LEGACY_DATABASES = ("cq",)  # store format 3 and before: an entry per unit
BLOCKS_OF_32 = ("cq_blocks",)  # store formats 4 and 5: blocks of 32 units (B-473)
KEPT_QUEUES = 1024  # the most queues whose last block a commit keeps for the next transaction


@dataclass(frozen=True, slots=True)
class Unit:
    offset: int
    physical_offset: int
    size: int
    tags_code: int
    store_time: int


def queue_block(units: list[list[int]], ts: int) -> bytes:
    """The units of a `messages_stored` record's messages, (physical offset, size, tags code)
    each, all stored at `ts`, back to back."""
    pack_unit = UNIT.pack
    return b"".join([pack_unit(phy, size, tags_code, ts) for phy, size, tags_code in units])


@overload
def queue_units(
    cur: lmdb.Cursor[bytes], queue: bytes, start: int, end: int, timed: Literal[True]
) -> Iterator[tuple[int, int, int, int, int]]: ...
@overload
def queue_units(
    cur: lmdb.Cursor[bytes], queue: bytes, start: int, end: int, timed: Literal[False]
) -> Iterator[tuple[int, int, int, int]]: ...
def queue_units(
    cur: lmdb.Cursor[bytes], queue: bytes, start: int, end: int, timed: bool
) -> Iterator[tuple[int, ...]]:
    """The units of `queue` with start <= offset < end, in offset order: (offset, physical
    offset, size, tags code), and the store time when `timed`. Read from `cur`, a cursor on
    cq_pages at the queue's block holding start, or at a block before the queue's first, or
    after it (`ConsumeQueueProjection._cursor_at`)."""
    qlen, size, iter_unpack = len(queue), UNIT.size, UNIT.iter_unpack
    for key, value in cur:
        if len(key) != qlen + 8 or key[:qlen] != queue:
            if key[:qlen] < queue:
                continue  # the block before the queue's first
            return
        first = U64.unpack_from(key, qlen)[0]
        if first >= end:
            return
        count = len(value) // size
        if first + count <= start:
            continue
        lo, hi = max(start - first, 0), min(end - first, count)
        offset = first + lo
        units = iter_unpack(value[lo * size : hi * size])
        if timed:
            for phy, unit_size, tags_code, ts in units:
                yield offset, phy, unit_size, tags_code, ts
                offset += 1
        else:
            for phy, unit_size, tags_code, _ in units:
                yield offset, phy, unit_size, tags_code
                offset += 1


# the pure-Python functions that have a compiled twin (es_broker/projections/_speedups.pyx)
REFERENCE = {"queue_block": queue_block, "queue_units": queue_units}


class ConsumeQueueProjection(Dispatching):
    name = "consume_queue"
    databases = ("cq_pages", "cq_meta")

    def bind(self, log: RecordLog) -> None:
        self.db = log.db("cq_pages")
        self.meta = log.db("cq_meta")
        self.log = log
        # what the write transaction `_txn` wrote or read of its queues, so that its next send to
        # a queue reads neither its bounds nor its last block back: the bounds it wrote or read,
        # by (topic, queue id), and by queue key the queue's last block (first offset, units) as
        # a send wrote it or a delivery's `sizes` read it. Only the sends' placement and appends
        # and `sizes` keep it; any other write to cq_pages or cq_meta forgets it. The next write
        # transaction keeps it when it follows `_txn`'s commit (`_begin`), and forgets it after
        # an abort or another writer's commit.
        self._txn: lmdb.Transaction[bytes] | None = None
        self._bounds: dict[tuple[str, int], tuple[int, int]] = {}
        self._tails: dict[bytes, tuple[int, bytes]] = {}

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        topic, qid, offset, ts, units = (
            stored["topic"],
            stored["queue_id"],
            stored["queue_offset"],
            stored["ts"],
            stored["units"],
        )
        if txn is not self._txn:
            self._begin(txn)
        queue, name = queue_key(topic, qid), (topic, qid)
        known = self._bounds.get(name)
        lo = known[0] if known is not None else self.bounds(txn, topic, qid)[0]
        packed = queue_block(units, ts)
        tail, at, count = self._tails.get(queue), offset % BLOCK_UNITS, len(units)
        if (
            tail is not None
            and 0 < at <= BLOCK_UNITS - count
            and count
            and tail[0] + len(tail[1]) // UNIT.size == offset
        ):
            # the usual send: its units fit the queue's last block, kept and ending at offset
            # (what `_append` does then, without its loop)
            first, block = tail[0], tail[1] + packed
            txn.put(queue + U64.pack(first), block, True, True, False, self.db)
            self._tails[queue] = (first, block)
        else:
            self._append(txn, queue, offset, packed, keep=True)
        bounds = self._bounds[name] = (lo, offset + count)
        txn.put(queue, _BOUNDS.pack(*bounds), True, True, False, self.meta)

    def _begin(self, txn: lmdb.Transaction[bytes]) -> None:
        """`txn`, a write transaction, is to use what `_txn` kept: still what is stored when
        `txn` is the first after `_txn`'s commit (`RecordLog.follows`), else forgotten."""
        if not self.log.follows(self._txn, txn):
            self._bounds.clear()
            self._tails.clear()
        self._txn = txn

    def forget(self) -> None:
        """Drop what `_stored` and `sizes` kept of their transaction (before a write of another
        kind)."""
        self._txn = None
        self._bounds.clear()
        self._tails.clear()

    def settle(self, txn: lmdb.Transaction[bytes]) -> None:
        """The transaction is about to commit: what it kept serves the next one, up to a bound
        on the blocks kept (a block each queue written to)."""
        if len(self._tails) > KEPT_QUEUES:
            self.forget()

    def _import_skipped(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        """The units an import kept without their message (B-527), each at its queue offset."""
        self.forget()
        for topic, qid, offset, phy, size, tags_code in ImportSkipped.from_record(record).units:
            block = queue_block([[phy, size, tags_code]], record["ts"])
            self._append(txn, queue_key(topic, qid), offset, block)
            lo, _ = self.bounds(txn, topic, qid)
            txn.put(queue_key(topic, qid), _BOUNDS.pack(lo, offset + 1), db=self.meta)

    def _expired(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        expired = CommitlogExpired.from_record(record)
        self.forget()
        for topic, qid, _, new_min in expired.queues:  # min-offset correction (B-18)
            _, hi = self.bounds(txn, topic, qid)
            txn.put(queue_key(topic, qid), _BOUNDS.pack(new_min, hi), db=self.meta)
            self._expire(txn, queue_key(topic, qid), new_min)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_STORED: _stored,
            RecordType.IMPORT_SKIPPED: _import_skipped,
            RecordType.COMMITLOG_EXPIRED: _expired,
        }
    )

    def _append(
        self,
        txn: lmdb.Transaction[bytes],
        queue: bytes,
        offset: int,
        packed: bytes,
        *,
        keep: bool = False,
    ) -> None:
        """Write units (packed, the first at offset) into the queue's blocks; with `keep`, the
        last block written is kept in `_tails` for the next append when no block starts after it
        (a send's append, in the transaction `_txn`)."""
        size, at = UNIT.size, 0
        while at < len(packed):
            room = BLOCK_UNITS - offset % BLOCK_UNITS
            chunk = packed[at : at + room * size]
            last = True  # no block of the queue starts at offset or after (known when looked up)
            if offset % BLOCK_UNITS == 0:
                block, last = None, False
            elif (
                keep
                and (tail := self._tails.get(queue)) is not None
                and tail[0] + len(tail[1]) // size == offset
            ):
                block = tail  # the block written last, ending at offset, none after it
            else:
                block, last = self._block_before(txn, queue, offset)
            if block is not None and block[0] + len(block[1]) // size == offset:
                first, units = block[0], block[1] + chunk
            else:  # a new block: at a multiple of BLOCK_UNITS, or after a gap
                first, units = offset, chunk
            txn.put(queue + U64.pack(first), units, True, True, False, self.db)
            offset += len(chunk) // size
            at += len(chunk)
            if keep:
                if last:
                    self._tails[queue] = (first, units)
                else:
                    self._tails.pop(queue, None)

    def _block_before(
        self, txn: lmdb.Transaction[bytes], queue: bytes, offset: int
    ) -> tuple[tuple[int, bytes] | None, bool]:
        """(first offset, units) of the queue's last block starting before offset (None when
        none does), and whether no block of the queue starts at offset or after it."""
        if self.db is None:  # a read-only view of a directory in an older store format
            return None, False
        cur, qlen = txn.cursor(db=self.db), len(queue)
        if cur.set_range(queue + U64.pack(offset)):
            key = cur.key()
            last = len(key) != qlen + 8 or key[:qlen] != queue
            found = cur.prev()
        else:
            last, found = True, cur.last()
        if not found:
            return None, last
        key = cur.key()
        if len(key) != qlen + 8 or key[:qlen] != queue:
            return None, last
        return (U64.unpack_from(key, qlen)[0], bytes(cur.value())), last

    def _expire(self, txn: lmdb.Transaction[bytes], queue: bytes, new_min: int) -> None:
        """Drop the queue's blocks whose every unit is below new_min, but the first: a query of
        a new group's offset judges the queue's head by the unit at offset 0 (B-37)."""
        cur, qlen, size = txn.cursor(db=self.db), len(queue), UNIT.size
        if not cur.set_range(queue + U64.pack(1)):
            return
        while True:
            key = cur.key()
            if len(key) != qlen + 8 or key[:qlen] != queue:
                return
            if U64.unpack_from(key, qlen)[0] + len(cur.value()) // size > new_min:
                return
            if not cur.delete():
                return

    def convert(self, txn: lmdb.Transaction[bytes], legacy: Any) -> None:
        """Write the blocks from an older directory's units (`cq`: one per entry; `cq_blocks`:
        up to 32 per entry), trimmed at each queue's minimum as retention trims them."""
        self.forget()
        txn.drop(self.db, delete=False)
        size = UNIT.size
        run: tuple[bytes, int, list[bytes]] | None = None  # consecutive units of one queue
        end = 0  # the offset after the run's last unit
        for key, raw in txn.cursor(db=legacy):
            queue, offset = bytes(key[:-8]), U64.unpack(key[-8:])[0]
            if run is not None and (run[0] != queue or end != offset):
                self._append(txn, run[0], run[1], b"".join(run[2]))
                run = None
            if run is None:
                run = (queue, offset, [])
            run[2].append(bytes(raw))
            end = offset + len(raw) // size
        if run is not None:
            self._append(txn, run[0], run[1], b"".join(run[2]))
        for key, bounds in txn.cursor(db=self.meta):
            self._expire(txn, bytes(key), _BOUNDS.unpack(bounds)[0])

    def writer_bounds(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int
    ) -> tuple[int, int]:
        """`bounds` in the writer's transaction `txn` (a send's placement), kept for the
        queue's `messages_stored` record that follows and for the next send."""
        if txn is not self._txn:
            self._begin(txn)
        known = self._bounds.get((topic, queue_id))
        if known is None:
            raw = txn.get(queue_key(topic, queue_id), None, self.meta)
            known = self._bounds[topic, queue_id] = _BOUNDS.unpack(raw) if raw else (0, 0)
        return known

    # ------------------------------------------------------------------ reads
    def bounds(self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) of a queue; (0, 0) for a queue that never received a message."""
        if txn is self._txn and (known := self._bounds.get((topic, queue_id))) is not None:
            return known
        raw = txn.get(queue_key(topic, queue_id), None, self.meta)
        return _BOUNDS.unpack(raw) if raw else (0, 0)

    def unit(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offset: int
    ) -> Unit | None:
        if offset < 0:
            return None
        block, _ = self._block_before(txn, queue_key(topic, queue_id), offset + 1)
        if block is None:
            return None
        at = (offset - block[0]) * UNIT.size
        if at >= len(block[1]):
            return None
        return Unit(offset, *UNIT.unpack_from(block[1], at))

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
        for offset, phy, size, tags_code, ts in self._tuples(txn, topic, queue_id, start, end):
            yield Unit(offset, phy, size, tags_code, ts)

    def unit_tuples(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, start: int, end: int
    ) -> Iterator[tuple[int, int, int, int]]:
        """(offset, physical offset, size, tags code) for start <= offset < end: the pull's hot loop."""
        queue = queue_key(topic, queue_id)
        cur = self._cursor_at(txn, queue, start, end)
        return iter(()) if cur is None else queue_units(cur, queue, max(start, 0), end, False)

    def _tuples(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, start: int, end: int
    ) -> Iterator[tuple[int, int, int, int, int]]:
        queue = queue_key(topic, queue_id)
        cur = self._cursor_at(txn, queue, start, end)
        return iter(()) if cur is None else queue_units(cur, queue, max(start, 0), end, True)

    def _cursor_at(
        self, txn: lmdb.Transaction[bytes], queue: bytes, start: int, end: int
    ) -> lmdb.Cursor[bytes] | None:
        """A cursor on the queue's block holding start, else the first after it (for
        `queue_units`); None when no unit can be in [start, end)."""
        start = max(start, 0)
        if start >= end or self.db is None:
            return None
        cur = txn.cursor(db=self.db)
        if cur.set_range(queue + U64.pack(start + 1)):
            if not cur.prev():
                cur.first()
        elif not cur.last():
            return None
        return cur

    def sizes(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offsets: list[int]
    ) -> int:
        """The total size of the messages at offsets (those still in the queue).

        One seek finds an offset's block and where the next block starts, so
        the offsets of a gap (expired units, B-473) cost no seek each. The queue's last block
        is looked at first when the write transaction keeps it (`_tails`: a send of `txn`
        wrote it, or an earlier `sizes` read it), and kept when a seek finds it: a delivery is
        mostly of the messages just stored, and the queue's next send appends to that block.
        Called by the writer only (the stats of a delivery or a pop), in its write transaction.
        """
        total = 0
        queue, size = queue_key(topic, queue_id), UNIT.size
        if txn is not self._txn:
            self._begin(txn)
        # the block last found, and where the next starts: at first the last block, if kept
        tail = self._tails.get(queue)
        first, units, gap_end = (0, b"", -1) if tail is None else (*tail, 2**64)
        for offset in offsets:
            at = (offset - first) * size
            if 0 <= at < len(units):
                total += UNIT.unpack_from(units, at)[1]
                continue
            if first + len(units) // size <= offset < gap_end:
                continue  # between the block last found and the next: no unit there
            first, units, gap_end = self._block_around(txn, queue, offset)
            if gap_end == 2**64 and units:  # the queue's last block: kept for the transaction
                self._tails[queue] = (first, units)
            at = (offset - first) * size
            if 0 <= at < len(units):
                total += UNIT.unpack_from(units, at)[1]
        return total

    def _block_around(
        self, txn: lmdb.Transaction[bytes], queue: bytes, offset: int
    ) -> tuple[int, bytes, int]:
        """(first offset, units) of the queue's last block starting at or before offset ((0, b"")
        when none), and the first offset of the block after it (2**64 when none)."""
        if self.db is None:  # a read-only view of a directory in an older store format
            return 0, b"", -1
        qlen = len(queue)
        cur = txn.cursor(db=self.db)
        gap_end = 2**64
        if cur.set_range(queue + U64.pack(offset + 1)):
            key = cur.key()
            if len(key) == qlen + 8 and key[:qlen] == queue:
                gap_end = U64.unpack_from(key, qlen)[0]
            found = cur.prev()
        else:
            found = cur.last()
        if not found:
            return 0, b"", gap_end
        key = cur.key()
        if len(key) != qlen + 8 or key[:qlen] != queue:
            return 0, b"", gap_end
        return U64.unpack_from(key, qlen)[0], bytes(cur.value()), gap_end

    def queues(self, txn: lmdb.Transaction[bytes]) -> Iterator[tuple[str, int, int, int]]:
        """Every queue with data: (topic, queue id, min, max)."""
        for key, raw in txn.cursor(db=self.meta):
            topic, _, qid = key.partition(b"\x00")
            lo, hi = _BOUNDS.unpack(raw)
            yield topic.decode(), struct.unpack(">I", qid)[0], lo, hi

    def heads(self, txn: lmdb.Transaction[bytes]) -> Iterator[tuple[int, bytes, str, int]]:
        """Every queue that received a message and the physical offset of its head (the unit at its
        minimum): (head's physical offset, queue key, topic, queue id). One walk of the queues with
        one cursor on the blocks: a retention pass reads them all at once (B-678)."""
        if self.db is None:  # a read-only view of a directory in an older store format
            for topic, qid, lo, hi in self.queues(txn):
                if hi:
                    phy = self.unit_at(txn, topic, qid, lo).physical_offset
                    yield phy, queue_key(topic, qid), topic, qid
            return
        blocks = txn.cursor(db=self.db)
        for key, raw in txn.cursor(db=self.meta):
            lo, hi = _BOUNDS.unpack(raw)
            if not hi:
                continue
            qlen = len(key)
            # the queue's last block starting at or before lo
            found = blocks.prev() if blocks.set_range(key + U64.pack(lo + 1)) else blocks.last()
            block = blocks.key() if found else b""
            at = -1
            if len(block) == qlen + 8 and block[:qlen] == key:
                at = (lo - U64.unpack_from(block, qlen)[0]) * UNIT.size
            units = blocks.value() if at >= 0 else b""
            if at < 0 or at + UNIT.size > len(units):
                raise LogCorruptError(f"consume queue {key!r} has no unit at its minimum {lo}")
            name, _, number = key.partition(b"\x00")
            yield _PHY.unpack_from(units, at)[0], key, name.decode(), _QID.unpack(number)[0]


compiled.install(globals(), "es_broker.projections._speedups", "queue_block", "queue_units")
