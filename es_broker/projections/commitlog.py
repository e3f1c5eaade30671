"""Commit-log bounds: phyMin and phyMax of the message bytes (B-08, B-11).

The bytes themselves are the log's payload (database `commitlog`, keyed by
physical offset), written with the record that places them. This projection
keeps the bounds that the "in memory" verdict (B-38) and retention need.
"""

from __future__ import annotations

import lmdb

from es_broker.log import Record, RecordLog
from es_broker.log.types import CommitlogExpired, RecordType, as_view
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import I64

_PHY_MAX = b"phy_max"
_PHY_MIN = b"phy_min"


class CommitLogProjection(Dispatching):
    name = "commitlog"
    databases = ("commitlog_meta",)

    def bind(self, log: RecordLog) -> None:
        self.db = log.db("commitlog_meta")
        self.payloads = log.commitlog_db

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        phy, size, _ = as_view(record, RecordType.MESSAGES_STORED)["units"][-1]
        txn.put(_PHY_MAX, I64.pack(phy + size), db=self.db)

    def _expired(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        expired = CommitlogExpired.from_record(record)
        # retention removes the bodies below the new phyMin; the records about them stay
        cur = txn.cursor(db=self.payloads)
        while cur.first() and int.from_bytes(cur.key(), "big") < expired.phy_min:
            cur.delete()
        txn.put(_PHY_MIN, I64.pack(expired.phy_min), db=self.db)

    HANDLERS = handlers(
        {RecordType.MESSAGES_STORED: _stored, RecordType.COMMITLOG_EXPIRED: _expired}
    )

    def phy_max(self, txn: lmdb.Transaction[bytes]) -> int:
        raw = txn.get(_PHY_MAX, db=self.db)
        return I64.unpack(raw)[0] if raw else 0

    def phy_min(self, txn: lmdb.Transaction[bytes]) -> int:
        raw = txn.get(_PHY_MIN, db=self.db)
        return I64.unpack(raw)[0] if raw else 0
