"""Commit-log bounds: phyMin and phyMax of the message bytes (B-08, B-11), and walk marks.

The bytes themselves are the log's payload (database `commitlog_chunks`,
es_broker/log/chunks.py), written with the record that places them. This
projection keeps the bounds that the "in memory" verdict (B-38) and
retention need, and `commitlog_marks`: offsets from which a walk over the
messages may start (B-475). The chunks do not say where a message starts;
a walk goes from a known start by each message's TOTALSIZE. A message whose
bytes cross a multiple of MARK_SPAN marks the offset where it ends (the next
message's start, or a gap's zeros, which a walk skips), so a walk to any
offset starts at most MARK_SPAN bytes (and a file's blank) before it.
Retention's question "when was the last message of this file stored" reads
the messages after the last mark before the file's end only.
"""

from __future__ import annotations

from collections.abc import Sequence

import lmdb

from es_broker.log import Record, RecordLog, chunks
from es_broker.log.types import CommitlogExpired, ImportSkipped, MessagesStoredRecord, RecordType
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import I64, U64

_PHY_MAX = b"phy_max"
_PHY_MIN = b"phy_min"
MARK_SPAN = 1 << 16  # 64 KiB: a mark per 145 messages of 450 bytes, 18 bytes each in LMDB


def marks_of(units: Sequence[tuple[int, int] | list[int]]) -> list[int]:
    """The walk marks of messages (physical offset, size, ...), ascending: the ends of those
    crossing a multiple of MARK_SPAN."""
    if not units or units[0][0] // MARK_SPAN == (units[-1][0] + units[-1][1]) // MARK_SPAN:
        return []  # a record's messages within one span, the usual case: no loop over them
    return [phy + size for phy, size, *_ in units if phy // MARK_SPAN != (phy + size) // MARK_SPAN]


class CommitLogProjection(Dispatching):
    name = "commitlog"
    databases = ("commitlog_meta", "commitlog_marks")

    def bind(self, log: RecordLog) -> None:
        self.db = log.db("commitlog_meta")
        self.marks = log.db("commitlog_marks")
        self.payloads = log.commitlog_db
        self.log = log
        # the commit log's end as the write transaction `_txn` moved it, written once by `settle`
        # before it commits (and read back by `phy_max` meanwhile): a group commit of sends puts
        # it once, not once a record
        self._txn: lmdb.Transaction[bytes] | None = None
        self._max = 0

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        units = stored["units"]
        phy, size, _ = units[-1]
        self._txn, self._max = txn, phy + size
        if units[0][0] // MARK_SPAN != self._max // MARK_SPAN:  # else within a span: no mark
            for mark in marks_of(units):
                txn.put(U64.pack(mark), b"", db=self.marks)

    def _import_skipped(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        """An import's skipped span, and the units it kept without a message (B-527): the commit
        log's end moves past them, so no later message lies where they point."""
        skipped = ImportSkipped.from_record(record)
        ends = [phy + size for _, _, _, phy, size, _ in skipped.units]
        if skipped.kind == "commit_log":
            ends.append(skipped.phy + skipped.size)
        end = max(ends, default=0)
        if end > self.phy_max(txn):
            self._txn, self._max = txn, end

    def _expired(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        expired = CommitlogExpired.from_record(record)
        # retention removes the bodies below the new phyMin (whole chunks, and the straddling
        # chunk's bytes below it); the records about them stay
        self.log.expire_payloads(txn, expired.phy_min)
        cur = txn.cursor(db=self.marks)
        while cur.first() and U64.unpack(cur.key())[0] <= expired.phy_min:
            cur.delete()
        txn.put(_PHY_MIN, I64.pack(expired.phy_min), db=self.db)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_STORED: _stored,
            RecordType.IMPORT_SKIPPED: _import_skipped,
            RecordType.COMMITLOG_EXPIRED: _expired,
        }
    )

    def settle(self, txn: lmdb.Transaction[bytes]) -> None:
        """Write the commit log's end `txn`'s records moved (before it commits)."""
        if txn is self._txn:
            txn.put(_PHY_MAX, I64.pack(self._max), True, True, False, self.db)
        self._txn = None

    def phy_max(self, txn: lmdb.Transaction[bytes]) -> int:
        if txn is self._txn:
            return self._max
        raw = txn.get(_PHY_MAX, None, self.db)
        return I64.unpack(raw)[0] if raw else 0

    def phy_min(self, txn: lmdb.Transaction[bytes]) -> int:
        raw = txn.get(_PHY_MIN, None, self.db)
        return I64.unpack(raw)[0] if raw else 0

    def walk_start(self, txn: lmdb.Transaction[bytes], before: int) -> int:
        """An offset below `before` from which a walk over the messages may start: the last mark
        below it, else the start of the commit log."""
        if self.marks is None:
            return 0
        cur = txn.cursor(db=self.marks)
        found = cur.set_range(U64.pack(before))
        found = cur.prev() if found else cur.last()
        return U64.unpack(cur.key())[0] if found else 0

    def last_before(
        self, txn: lmdb.Transaction[bytes], start: int, end: int
    ) -> tuple[int, bytes] | None:
        """The last message stored in [start, end) of the commit log, None if none is.

        A mark may lie in the blank at a file's end, after the last message before `end`: then
        the walk from the mark before it finds that message.
        """
        if self.payloads is None:
            return None
        before = end
        while True:
            begin, last = self.walk_start(txn, before), None
            for phy, raw in chunks.messages(txn, self.payloads, begin):
                if phy >= end:
                    break
                last = (phy, raw)
            if last is not None or begin == 0:
                break
            before = begin
        return last if last is not None and last[0] >= start else None

    def rebuild_marks(
        self, txn: lmdb.Transaction[bytes], messages: Sequence[tuple[int, int]]
    ) -> None:
        """Write the marks of messages (physical offset, size) above phyMin (the upgrade to format 7)."""
        floor = self.phy_min(txn)
        txn.drop(self.marks, delete=False)
        for mark in marks_of(messages):
            if mark > floor:
                txn.put(U64.pack(mark), b"", db=self.marks)
