"""The horizon (B-460): what only history needs leaves LMDB with the records it came from.

A `history_archived` record moves the horizon, the last sealed seq H, and its
application removes from the offset history and the time index every entry
of a record at or before H that no answer after H needs:

- `offset_history`, `tt_qmax` (per queue, keyed by queue then seq): every
  entry of seq <= H but the newest one (the *floor*: the queue's state at H);
- `tt_removed`: the entries whose `offset_history` twin went;
- `tt_seq` and `tt_time` (one entry where the effective time grew): every
  entry of seq <= H but the first (the broker's start, B-133) and the floor;
- `tt_events` (per group, keyed by group then seq): every entry of seq <= H.

What is left answers every moment at or after the effective time of H
exactly as before. A moment before it is answered by the *archive index*: the
same two projections (time index, offset table) applied to the archived
records in a side LMDB environment (`<data dir>/history/index`, a cache
rebuilt from the archive at will, never part of the verified state), so the
answer comes from the same code over the same entries
(`es_broker.timetravel.query.TimeTravel` routes there).

The same application removes expired messages' consume-queue units and
delivery trace entries (B-461, `projections.history.prune_expired`); their
deliveries are then read from the archive (`deliveries`). The pruning itself
is in es_broker/projections/history.py, applied in the record's transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb

from es_broker.config import BrokerConfig
from es_broker.log import records
from es_broker.projections.keys import U64
from es_broker.projections.offsets import OffsetTableProjection
from es_broker.projections.time_index import TimeIndexProjection

INDEX_DIR = "index"


# ---------------------------------------------------------------------- the archive index


class _SideLog:
    """Just enough of a RecordLog for the two projections and TimeTravel."""

    def __init__(self, env: lmdb.Environment, names: list[str], path: Path) -> None:
        self.env = env
        self.path = path
        self._dbs = {name: env.open_db(name.encode()) for name in names}
        self.meta = env.open_db(b"meta")
        self.last_seq = 0

    def db(self, name: str) -> Any:
        return self._dbs[name]

    def read_txn(self) -> lmdb.Transaction[bytes]:
        return self.env.begin(buffers=False)


class ArchiveIndex:
    """The time index and the offset table's history of the archived records, for moments
    before the horizon: quacks like a Store for TimeTravel (`timeindex`, `offsets`, `log`, `config`)."""

    def __init__(self, path: Path, config: BrokerConfig) -> None:
        path.mkdir(parents=True, exist_ok=True)
        env = lmdb.open(str(path), map_size=1 << 30, max_dbs=16, sync=False, metasync=False)
        self.timeindex = TimeIndexProjection()
        self.offsets = OffsetTableProjection()
        names = list(self.timeindex.databases) + list(self.offsets.databases)
        self.log = _SideLog(env, names, path)
        self.timeindex.bind(self.log)  # type: ignore[arg-type]
        self.offsets.bind(self.log)  # type: ignore[arg-type]
        self.config = config
        self._lock = threading.Lock()
        self.log.last_seq = self.upto()

    def read(self) -> lmdb.Transaction[bytes]:
        return self.log.read_txn()

    def upto(self) -> int:
        with self.log.env.begin() as txn:
            raw = txn.get(b"upto", db=self.log.meta)
        return U64.unpack(raw)[0] if raw else 0

    def catch_up(self, segments: list[dict[str, Any]]) -> None:
        """Apply the records of every segment not applied yet, one write transaction each."""
        from es_broker.history.archive import raw_records

        if not segments or segments[-1]["last_seq"] <= self.log.last_seq:
            return  # caught up already (last_seq: what this process applied or found)
        with self._lock:
            for segment in segments:
                if segment["last_seq"] <= self.upto():
                    continue
                raws = list(raw_records(segment["location"]))
                while True:
                    try:
                        with self.log.env.begin(write=True) as txn:
                            raw = txn.get(b"upto", db=self.log.meta)
                            if raw and U64.unpack(raw)[0] >= segment["last_seq"]:
                                break  # another process applied it meanwhile
                            for seq, data in raws:
                                record = records.unpack(data)
                                self.timeindex.apply(txn, seq, record)
                                self.offsets.apply(txn, seq, record)
                            txn.put(b"upto", U64.pack(segment["last_seq"]), db=self.log.meta)
                        break
                    except lmdb.MapFullError:
                        self.log.env.set_mapsize(self.log.env.info()["map_size"] * 2)
            self.log.last_seq = self.upto()


_OPEN: dict[Path, ArchiveIndex] = {}  # LMDB allows one handle on an environment per process
_OPEN_LOCK = threading.Lock()


def archive_index(store: Any, txn: lmdb.Transaction[bytes]) -> ArchiveIndex:
    """The archive index of a store's data directory, caught up with the segments sealed as of txn
    (the segments are listed only when some are not applied yet)."""
    path = (Path(store.log.path).parent / "history" / INDEX_DIR).resolve()
    with _OPEN_LOCK:
        index = _OPEN.get(path)
        if index is None:
            index = _OPEN[path] = ArchiveIndex(path, store.config)
    if store.history.sealed_upto(txn) > index.log.last_seq:
        index.catch_up(list(store.history.segments(txn)))
    return index


def offset_changes(
    store: Any, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
) -> Iterator[Any]:
    """Every change of one queue's offset, oldest first: those up to the horizon from the archive
    index, the rest from the offset history (whose floor entry is the archive index's last)."""
    horizon = int(store.history.sealed_upto(txn))
    if horizon:
        index = archive_index(store, txn)
        with index.read() as stxn:
            yield from index.offsets.changes(stxn, topic, group, queue_id)
    for change in store.offsets.changes(txn, topic, group, queue_id):
        if change.seq > horizon:
            yield change


def deliveries(
    store: Any, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offset: int
) -> list[int]:
    """Seqs of the `messages_delivered` records that handed out (topic, queue, offset), oldest
    first: from the trace index, and for an expired message also from the archive, whose
    entries sealing removed (B-461)."""
    seqs = set(store.trace.deliveries_of(txn, topic, queue_id, offset))
    low, _ = store.cq.bounds(txn, topic, queue_id)
    if offset < low and store.history.sealed_upto(txn):
        from es_broker.history.archive import scan
        from es_broker.log.types import RecordType

        segments = list(store.history.segments(txn))
        wanted = {RecordType.MESSAGES_DELIVERED.value}
        for seq, record in scan(segments, topic=topic, types=wanted):
            if record.get("queue_id") == queue_id and offset in (record.get("offsets") or ()):
                seqs.add(seq)
    return sorted(seqs)


def catch_up(store: Any) -> None:
    """Bring the archive index up to the segments sealed so far (a running master does it after
    each sealing, in a worker thread, so no question on the event loop waits for it)."""
    with store.read() as txn:
        archive_index(store, txn)
