"""The sealed segments of the log (B-401..B-406): what left the hot log, where it went.

`history_segments`: first seq of a segment (U64) -> msgpack map of its
`history_archived` record (range, times, hashes, archive folder, snapshot).
`history_slaves`: broker id (U64) -> the highest seq that slave is known to
hold (U64), from the `slave_caught_up` records and the `slaves` a sealing
recorded (B-462); key `built` marks a directory indexed (written at seq 1).

Applying a `history_archived` record removes the segment's records from the
`log` database in the same transaction, so the hot log and this index always
agree, and a replay of the whole history (archive, then hot log) removes them
at the same position and reaches the same databases. The same application
removes what only history needs before the segment's end (B-460, `prune`):
the offset history's and the time index's entries that no answer after the
horizon reads; moments before it are answered from the archive
(es_broker/history/horizon.py). The store index of the sealed records
(`trace_stored`) goes too, kept in the archive index instead (B-465).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any

import lmdb
import msgpack

from es_broker.log import Record, RecordLog, records
from es_broker.log.types import RecordType
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import U64
from es_broker.projections.message_trace import expire_pulls, seal_stored
from es_broker.projections.pop import expire_traced

SLAVE_CAUGHT_UP = RecordType.SLAVE_CAUGHT_UP
BUILT = b"built"  # 5 bytes: never a broker id's key (8 bytes)
_AFTER_EVERY_SEQ = b"\xff" * 9  # sorts after every (prefix + U64 seq) key of a prefix


class HistoryProjection(Dispatching):
    name = "history"
    databases = ("history_segments", "history_slaves")

    def bind(self, log: RecordLog) -> None:
        self.log = log
        self.db = log.db("history_segments")
        self.slaves_db = log.db("history_slaves")
        self.pruned = {name: log.db(name) for name in PRUNED}

    def mark_built(self, txn: lmdb.Transaction[bytes]) -> None:
        txn.put(BUILT, b"", db=self.slaves_db)

    def _caught_up(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._held(txn, int(record["broker_id"]), int(record["seq"]))

    def _archived(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        for broker_id, held in record.get("slaves") or ():
            self._held(txn, int(broker_id), int(held))
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
        # what only history needs goes with the records (B-460, B-461)
        prune(txn, self.pruned, last)
        prune_expired(txn, self.pruned, last)
        if self.pruned["trace_stored"] is not None:  # the store index of sealed records (B-465)
            seal_stored(txn, self.pruned["trace_stored"], last)

    HANDLERS = handlers(
        {RecordType.SLAVE_CAUGHT_UP: _caught_up, RecordType.HISTORY_ARCHIVED: _archived}
    )

    def _held(self, txn: lmdb.Transaction[bytes], broker_id: int, seq: int) -> None:
        key = U64.pack(broker_id)
        raw = txn.get(key, db=self.slaves_db)
        if raw is None or U64.unpack(raw)[0] < seq:
            txn.put(key, U64.pack(seq), db=self.slaves_db)

    def ensure_built(self, log: RecordLog, reading: Iterable[tuple[int, Record]]) -> bool:
        """Index `history_slaves` of a log written before it existed (one transaction); True if it had to.

        `reading`: the records (archive and hot log) of types `slave_caught_up`
        and `history_archived`, read only when the index is missing.
        """
        with log.env.begin() as txn:
            if log.last_seq == 0 or self.slaves_db is None:
                return False
            if txn.get(BUILT, db=self.slaves_db) is not None:
                return False
        held: dict[int, int] = {}
        for _, record in reading:
            pairs = (
                [[record["broker_id"], record["seq"]]]
                if record["type"] == SLAVE_CAUGHT_UP
                else record.get("slaves") or []
            )
            for broker_id, seq in pairs:
                held[int(broker_id)] = max(held.get(int(broker_id), 0), int(seq))
        with log.env.begin(write=True) as txn:
            txn.put(BUILT, b"", db=self.slaves_db)
            for broker_id, seq in held.items():
                self._held(txn, broker_id, seq)
        return True

    # ------------------------------------------------------------------ reads
    def slaves_held(self, txn: lmdb.Transaction[bytes]) -> dict[int, int]:
        """Broker id -> the highest seq each slave is known to hold, as recorded (B-462)."""
        if self.slaves_db is None:
            return {}
        return {
            U64.unpack(key)[0]: U64.unpack(value)[0]
            for key, value in txn.cursor(db=self.slaves_db)
            if key != BUILT
        }

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


# ---------------------------------------------------------------------- pruning (B-460)


def _prune_by_prefix(txn: lmdb.Transaction[bytes], db: Any, horizon: int, keep_floor: bool) -> None:
    """In a database keyed (prefix + U64 seq): remove each prefix's entries of seq <= horizon,
    but its newest such entry when `keep_floor`."""
    if db is None:
        return
    cur = txn.cursor(db=db)
    if not cur.first():
        return
    while True:
        key = bytes(cur.key())
        prefix = key[:-8]
        old: list[bytes] = []
        while key[:-8] == prefix and U64.unpack(key[-8:])[0] <= horizon:
            old.append(key)
            if not cur.next():
                break
            key = bytes(cur.key())
        for k in old[:-1] if keep_floor else old:
            txn.delete(k, db=db)
        if not cur.set_range(prefix + _AFTER_EVERY_SEQ):
            return


def prune(txn: lmdb.Transaction[bytes], dbs: dict[str, Any], horizon: int) -> None:
    """Remove what only history needs before `horizon` (the rules: es_broker/history/horizon.py)."""
    _prune_by_prefix(txn, dbs["offset_history"], horizon, keep_floor=True)
    _prune_by_prefix(txn, dbs["tt_qmax"], horizon, keep_floor=True)
    _prune_by_prefix(txn, dbs["tt_events"], horizon, keep_floor=False)
    removed, history = dbs["tt_removed"], dbs["offset_history"]
    if removed is not None and history is not None:
        gone = []
        for key in txn.cursor(db=removed).iternext(values=False):
            if U64.unpack(key[-8:])[0] <= horizon and txn.get(key, db=history) is None:
                gone.append(bytes(key))
        for key in gone:
            txn.delete(key, db=removed)
    seq_db, time_db = dbs["tt_seq"], dbs["tt_time"]
    if seq_db is None or time_db is None:
        return
    cur = txn.cursor(db=seq_db)
    found = cur.prev() if cur.set_range(U64.pack(horizon + 1)) else cur.last()
    if not found:
        return
    floor = U64.unpack(cur.key())[0]
    doomed = []
    cur = txn.cursor(db=seq_db)
    if cur.first() and cur.next():  # the first entry (the broker's start) stays
        while True:
            seq = U64.unpack(cur.key())[0]
            if seq >= floor:
                break
            doomed.append((bytes(cur.key()), bytes(cur.value())))
            if not cur.next():
                break
    for seq_key, time_key in doomed:
        txn.delete(seq_key, db=seq_db)
        txn.delete(time_key, db=time_db)


def prune_expired(txn: lmdb.Transaction[bytes], dbs: dict[str, Any], horizon: int) -> None:
    """Remove the delivery and pop trace entries of expired messages whose records are sealed.

    An expired message is one below its queue's minimum (`cq_meta`, moved by
    retention, B-18); its `trace_pulls` entries (B-461) and its `pop_trace`
    entries (B-642) of records at or before the horizon go (messageTrace finds
    those deliveries and pop records in the archive: es_broker/history/horizon.py
    `deliveries`, `pop_records`). Retention itself drops the consume-queue
    blocks of expired messages (B-473).
    """
    meta, pulls, pops = dbs["cq_meta"], dbs["trace_pulls"], dbs["pop_trace"]
    if meta is None:
        return
    for queue, bounds in txn.cursor(db=meta):
        low = _BOUNDS.unpack(bounds)[0]
        if low > 0:
            if pulls is not None:
                expire_pulls(txn, pulls, bytes(queue), low, horizon)
            if pops is not None:
                expire_traced(txn, pops, bytes(queue), low, horizon)


_BOUNDS = struct.Struct(">qq")  # cq_meta's value (projections/consume_queue.py)
PRUNED = (
    "offset_history",
    "tt_qmax",
    "tt_events",
    "tt_removed",
    "tt_seq",
    "tt_time",
    "cq_meta",
    "trace_pulls",
    "trace_stored",
    "pop_trace",
)
