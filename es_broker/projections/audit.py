"""Audit indexes (B-415..B-417): what `explain` and `acl --at` need, kept as the records arrive.

Read from the records alone, `explain` would read every record of a group and `acl --at`
every ACL record: their cost would grow with the log, and once sealed, with the archive. These
databases keep, in the same write transaction as the record, what their
answers are made of, so each answer is a few seeks and reads at most a few
records by sequence.

| database       | key                                  | value                                       |
|----------------|--------------------------------------|---------------------------------------------|
| audit_explain  | group NUL topic NUL queue (U32)      | msgpack {start, first_change, latest_change, changes} |
| audit_groups   | group                                | msgpack [consume_from_where, clients] of its last `consumer_group_changed` |
| audit_acl      | `L` + effective time + seq (U64s)    | empty: an `acl_loaded` record               |
| audit_acl      | `D` + window_to + seq (U64s)         | window_from (U64): an `access_denied` summary |
| audit_acl      | `\\x00span`                           | the longest window of any summary (U64)     |
| audit_acl      | `\\x00built`                          | empty: written at seq 1                     |

A directory written before these indexes existed is indexed once when a broker
opens it (`ensure_built`, from the archive and the hot log, one transaction),
and a replay that starts from a snapshot older than them does the same, so a
replay reaches the same databases.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import lmdb
import msgpack

from es_broker.log import Record, RecordLog, records
from es_broker.log.types import RecordType
from es_broker.projections.dispatch import handlers
from es_broker.projections.keys import U64
from es_broker.projections.offset_rule import OFFSET_RECORD_TYPES, change_view, offset_changes

TIMED = frozenset({RecordType.ACL_LOADED, RecordType.ACCESS_DENIED})
# every record type the offset rule says moves offsets (commits, server-side resets, removals,
# group deletions, slave merges): `explain` sees each change `history` sees (B-504)
INDEXED = (
    TIMED | {RecordType.CONSUMER_GROUP_CHANGED, RecordType.OFFSET_QUERIED} | OFFSET_RECORD_TYPES
)
U32 = struct.Struct(">I")
LOAD = b"L"
DENIAL = b"D"
SPAN = b"\x00span"
BUILT = b"\x00built"


def explain_key(group: str, topic: str, queue_id: int) -> bytes:
    return f"{group}\x00{topic}\x00".encode() + U32.pack(queue_id)


def note_change(entry: dict[str, Any], change: dict[str, Any]) -> None:
    """Count a change (a `change_view`) into an `explain` entry: the first, the latest, how many."""
    entry["first_change"] = entry["first_change"] or change
    entry["latest_change"] = change
    entry["changes"] += 1


def empty_entry() -> dict[str, Any]:
    return {"start": None, "first_change": None, "latest_change": None, "changes": 0}


def _pack(value: Any) -> bytes:
    return records.packb(value)


_CHANGES = _pack("changes")
KEPT_ENTRIES = 8192  # the explain entries `_offset_moved` keeps the bytes of, at most


def _head(packed: bytes, entry: dict[str, Any], latest: dict[str, Any]) -> bytes | None:
    """The bytes of an explain entry (`packed`, just noted a change: `latest`) before its
    latest change, when the next change leaves them as they are: its last two keys are
    `latest_change` and `changes` (so a change packs at the end) and its count an int. Its
    first change is set by then, so the next change keeps it. None otherwise."""
    changes = entry["changes"]
    if list(entry)[-2:] != ["latest_change", "changes"] or type(changes) is not int:
        return None
    tail = _pack(latest) + _CHANGES + _pack(changes)
    return packed[: -len(tail)] if packed.endswith(tail) else None


class AuditProjection:
    name = "audit"
    databases = ("audit_explain", "audit_groups", "audit_acl")

    def bind(self, log: RecordLog) -> None:
        self.log = log
        self.explain_db = log.db("audit_explain")
        self.groups_db = log.db("audit_groups")
        self.acl_db = log.db("audit_acl")
        self.tt_seq_db = log.db("tt_seq")  # the time index, applied before this projection
        # by explain key, the bytes `_offset_moved` last wrote and what of them the next change
        # keeps (`_head`) with the count: a commit then neither unpacks its entry nor packs it
        # whole. Used only when the stored bytes are those kept, so whatever else wrote the
        # entry since (a query's start, a rebuild, an aborted transaction) is read as before.
        self._kept: dict[bytes, tuple[bytes, bytes, int]] = {}

    def is_built(self, txn: lmdb.Transaction[bytes], last_seq: int) -> bool:
        """False for a log written before these indexes existed (seq 1 always writes BUILT)."""
        return last_seq == 0 or (
            self.acl_db is not None and txn.get(BUILT, db=self.acl_db) is not None
        )

    def apply(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        if seq == 1:
            txn.put(BUILT, b"", db=self.acl_db)
        kind = record["type"]
        if kind in INDEXED:  # the ACL's records need their effective time, the others not
            self.index(txn, seq, record, self._time(txn, seq) if kind in TIMED else 0)

    def applier(self, kind: str) -> Callable[[lmdb.Transaction[bytes], int, Record], None] | None:
        """What indexes a record of type `kind` (RecordLog.apply): `apply` for the ACL's types,
        which need their effective time, the type's indexer for the other INDEXED types, none for
        the rest. The mark of seq 1 is `apply`'s: the log applies its first record through every
        projection's `apply`."""
        if kind in TIMED:
            return self.apply
        if kind in OFFSET_RECORD_TYPES:  # a commit's: no time, so no call in between
            return self._offset_moved
        index = self._INDEX.get(kind)
        if index is None:
            return None
        return lambda txn, seq, record: index(self, txn, seq, record, 0)

    def _time(self, txn: lmdb.Transaction[bytes], seq: int) -> int:
        """The effective time of seq, as the time index (applied before) has it (B-132)."""
        cur = txn.cursor(db=self.tt_seq_db)
        found = cur.prev() if cur.set_range(U64.pack(seq + 1)) else cur.last()
        return U64.unpack(cur.value())[0] if found else 0

    def index(self, txn: lmdb.Transaction[bytes], seq: int, record: Record, time: int) -> None:
        """Index a record of an INDEXED type, applied at effective time `time`."""
        self._INDEX[record["type"]](self, txn, seq, record, time)

    def _group_changed(
        self, txn: lmdb.Transaction[bytes], seq: int, record: Record, time: int
    ) -> None:
        value = [record["consume_from_where"], record["clients"]]
        txn.put(record["group"].encode(), _pack(value), db=self.groups_db)

    def _offset_queried(
        self, txn: lmdb.Transaction[bytes], seq: int, record: Record, time: int
    ) -> None:
        key = explain_key(record["group"], record["topic"], record["queue_id"])
        entry = self._entry(txn, key)
        if entry["start"] is None:
            raw = txn.get(record["group"].encode(), db=self.groups_db)
            cfw = msgpack.unpackb(raw)[0] if raw is not None else None
            entry["start"] = {
                "seq": seq,
                "ts": record["ts"],
                "requester": record["requester"],
                "row": record["row"],
                "answer": record["offset"] if record["row"] == 2 else "QUERY_NOT_FOUND",
                "min_offset": record["min_offset"],
                "head_in_memory": record["head_in_memory"],
                "phy_max": record["phy_max"],
                "consume_from_where": cfw,
            }
            txn.put(key, _pack(entry), db=self.explain_db)

    def _offset_moved(
        self, txn: lmdb.Transaction[bytes], seq: int, record: Record, time: int = 0
    ) -> None:
        """Each queue the offset rule says the record moves or removes (B-504)."""
        ts, db, kept = record["ts"], self.explain_db, self._kept
        for change in offset_changes(record):
            key = explain_key(change.group, change.topic, change.queue_id)
            raw = txn.get(key, None, db)
            latest = change_view(seq, ts, change)
            known, head = kept.get(key), None
            if known is not None and raw == known[0]:  # as written last: its head stays
                head, count = known[1], known[2] + 1
                packed = head + _pack(latest) + _CHANGES + _pack(count)
            else:
                entry = empty_entry() if raw is None else msgpack.unpackb(raw)
                note_change(entry, latest)
                packed = _pack(entry)
                head, count = _head(packed, entry, latest), entry["changes"]
            txn.put(key, packed, True, True, False, db)
            if head is None:
                kept.pop(key, None)
                continue
            if len(kept) >= KEPT_ENTRIES and key not in kept:
                kept.clear()
            kept[key] = (packed, head, count)

    def _acl_loaded(
        self, txn: lmdb.Transaction[bytes], seq: int, record: Record, time: int
    ) -> None:
        txn.put(LOAD + U64.pack(time) + U64.pack(seq), b"", db=self.acl_db)

    def _access_denied(
        self, txn: lmdb.Transaction[bytes], seq: int, record: Record, time: int
    ) -> None:
        lo = max(int(record.get("window_from", time)), 0)
        hi = max(int(record.get("window_to", time)), 0)
        txn.put(DENIAL + U64.pack(hi) + U64.pack(seq), U64.pack(lo), db=self.acl_db)
        span = txn.get(SPAN, db=self.acl_db)
        if span is None or U64.unpack(span)[0] < hi - lo:
            txn.put(SPAN, U64.pack(max(hi - lo, 0)), db=self.acl_db)

    _INDEX = handlers(
        {
            RecordType.CONSUMER_GROUP_CHANGED: _group_changed,
            RecordType.OFFSET_QUERIED: _offset_queried,
            RecordType.ACL_LOADED: _acl_loaded,
            RecordType.ACCESS_DENIED: _access_denied,
        }
        | dict.fromkeys(map(RecordType, OFFSET_RECORD_TYPES), _offset_moved)
    )

    def _entry(self, txn: lmdb.Transaction[bytes], key: bytes) -> dict[str, Any]:
        raw = txn.get(key, db=self.explain_db)
        if raw is not None:
            entry: dict[str, Any] = msgpack.unpackb(raw)
            return entry
        return empty_entry()

    # ------------------------------------------------------------------ reads
    def group(self, txn: lmdb.Transaction[bytes], group: str) -> tuple[str | None, list[str]]:
        """(consumeFromWhere, clients) of the group's last `consumer_group_changed`."""
        raw = txn.get(group.encode(), db=self.groups_db) if self.groups_db else None
        if raw is None:
            return None, []
        cfw, clients = msgpack.unpackb(raw)
        return cfw, list(clients)

    def queues(
        self, txn: lmdb.Transaction[bytes], group: str, topic: str
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """(queue id, {start, first_change, latest_change, changes}) of (group, topic), by queue."""
        if self.explain_db is None:
            return
        prefix = f"{group}\x00{topic}\x00".encode()
        cur = txn.cursor(db=self.explain_db)
        if not cur.set_range(prefix):
            return
        for key, raw in cur:
            if not key.startswith(prefix):
                return
            yield U32.unpack(key[len(prefix) :])[0], msgpack.unpackb(raw)

    def load_at(self, txn: lmdb.Transaction[bytes], at: int) -> tuple[int, int] | None:
        """(seq, effective time) of the last `acl_loaded` at or before `at`, or None."""
        if self.acl_db is None:
            return None
        cur = txn.cursor(db=self.acl_db)
        if not cur.set_range(LOAD + U64.pack(at + 1)):
            if not cur.last():
                return None
        elif not cur.prev():
            return None
        key = cur.key()
        if not key.startswith(LOAD):
            return None
        time, seq = U64.unpack(key[1:9])[0], U64.unpack(key[9:17])[0]
        return seq, time

    def denials_near(self, txn: lmdb.Transaction[bytes], lo: int, hi: int) -> list[int]:
        """The seqs of `access_denied` summaries whose window meets [lo, hi], in seq order."""
        if self.acl_db is None:
            return []
        span_raw = txn.get(SPAN, db=self.acl_db)
        span = U64.unpack(span_raw)[0] if span_raw is not None else 0
        out = []
        cur = txn.cursor(db=self.acl_db)
        if cur.set_range(DENIAL + U64.pack(max(lo, 0))):
            for key, raw in cur:
                if not key.startswith(DENIAL):
                    break
                to = U64.unpack(key[1:9])[0]
                if to > hi + span:  # its window starts after hi, and so do the later ones'
                    break
                if U64.unpack(raw)[0] <= hi:
                    out.append(U64.unpack(key[9:17])[0])
        return sorted(out)

    def forget(self, txn: lmdb.Transaction[bytes]) -> int:
        """Mark the indexes unbuilt, so `ensure_built` builds them again; the entries they held."""
        held = txn.stat(self.explain_db)["entries"] if self.explain_db is not None else 0
        if self.acl_db is not None:
            txn.delete(BUILT, db=self.acl_db)
        return int(held)

    # ------------------------------------------------------------------ a log older than this
    def ensure_built(self, log: RecordLog, records: Iterable[tuple[int, Record, int]]) -> bool:
        """Index a log written before these indexes existed; True if it had to (one transaction).

        `records`: (seq, record, effective time) of the INDEXED types, the archive's and the hot
        log's, read only if iterated (`Store.audit_records`).
        """
        with log.env.begin() as txn:
            if self.is_built(txn, log.last_seq):
                return False
        items = list(records)
        while True:
            try:
                with log.env.begin(write=True) as txn:
                    self._rebuild(txn, items)
                return True
            except lmdb.MapFullError:
                log.grow()

    def _rebuild(self, txn: lmdb.Transaction[bytes], items: Iterable[Any]) -> None:
        for db in (self.explain_db, self.groups_db, self.acl_db):
            txn.drop(db, delete=False)
        txn.put(BUILT, b"", db=self.acl_db)
        for seq, record, time in items:
            if record["type"] in INDEXED:  # the hot log's records come unfiltered
                self.index(txn, seq, record, time)
