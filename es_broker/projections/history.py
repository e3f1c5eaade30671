"""The sealed segments of the log (B-401..B-406): what left the hot log, where it went.

`history_segments`: first seq of a segment (U64) -> msgpack map of its
`history_archived` record (range, times, hashes, archive folder, snapshot).

Applying a `history_archived` record removes the segment's records from the
`log` database in the same transaction, so the hot log and this index always
agree, and a replay of the whole history (archive, then hot log) removes them
at the same position and reaches the same databases.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lmdb
import msgpack

from es_broker.log import Record, RecordLog, records
from es_broker.log.types import RecordType
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import U64


class HistoryProjection(Dispatching):
    name = "history"
    databases = ("history_segments",)

    def bind(self, log: RecordLog) -> None:
        self.log = log
        self.db = log.db("history_segments")

    def _archived(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        first, last = int(record["first_seq"]), int(record["last_seq"])
        entry = {k: v for k, v in record.items() if k not in ("type", "v")}
        entry["seq"] = seq
        txn.put(U64.pack(first), msgpack.packb(entry), db=self.db)
        cur = txn.cursor(db=self.log.log_db)
        if cur.set_range(records.seq_key(first)):
            while records.key_seq(cur.key()) <= last:
                if not cur.delete():  # the cursor moves on to the next record itself
                    break
                if not cur.key():
                    break

    HANDLERS = handlers({RecordType.HISTORY_ARCHIVED: _archived})

    # ------------------------------------------------------------------ reads
    def segments(self, txn: lmdb.Transaction[bytes]) -> Iterator[dict[str, Any]]:
        """Every sealed segment, oldest first (the fields of its `history_archived` record, and its seq)."""
        if self.db is None:
            return
        for _, raw in txn.cursor(db=self.db):
            yield msgpack.unpackb(raw)

    def latest(self, txn: lmdb.Transaction[bytes]) -> dict[str, Any] | None:
        """The newest sealed segment, or None while nothing is sealed."""
        if self.db is None:
            return None
        cur = txn.cursor(db=self.db)
        return msgpack.unpackb(cur.value()) if cur.last() else None

    def sealed_upto(self, txn: lmdb.Transaction[bytes]) -> int:
        """The last seq that left the hot log (0: nothing sealed)."""
        latest = self.latest(txn)
        return int(latest["last_seq"]) if latest else 0

    def segment_of(self, txn: lmdb.Transaction[bytes], seq: int) -> dict[str, Any] | None:
        """The sealed segment holding seq, or None when seq is hot (or never was)."""
        if self.db is None:
            return None
        cur = txn.cursor(db=self.db)
        found = cur.prev() if cur.set_range(U64.pack(seq + 1)) else cur.last()
        if not found:
            return None
        entry: dict[str, Any] = msgpack.unpackb(cur.value())
        return entry if entry["first_seq"] <= seq <= entry["last_seq"] else None
