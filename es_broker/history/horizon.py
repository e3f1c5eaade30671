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

The same application removes expired messages' consume-queue units,
delivery trace entries (B-461) and pop trace entries (B-642,
`projections.history.prune_expired`); their deliveries and pop records are
then read from the archive (`deliveries`, `pop_records`). It also removes
the sealed records' entries of the store index (`trace_stored`, B-465): the
archive index keeps them (the message trace projection applied to the
archived store records), and `store_seq` asks it for an offset below the
first entry left in LMDB. The pruning itself
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
from es_broker.log.types import RecordType
from es_broker.projections.keys import U64
from es_broker.projections.message_trace import MessageTraceProjection
from es_broker.projections.offsets import OffsetTableProjection
from es_broker.projections.pop import TRACED, named_offsets
from es_broker.projections.time_index import TimeIndexProjection

INDEX_DIR = "index"
# 2: the index also holds the store index of the archived records (B-465); an index of an older
# format is emptied and built again from the archive (it is a cache)
INDEX_FORMAT = 2
_TRACE_DATABASES = ("trace_stored", "trace_links")


# ---------------------------------------------------------------------- the archive index


def begin_resized(env: lmdb.Environment, *, write: bool = False) -> lmdb.Transaction[bytes]:
    """A transaction of the index's environment, taken at the map another process grew (a sealing's
    catch-up runs in a process of its own, B-675): LMDB refuses a transaction while this process's
    map is smaller than the data file's (MDB_MAP_RESIZED) until it adopts the new size."""
    try:
        return env.begin(write=write, buffers=False)
    except lmdb.MapResizedError:
        env.set_mapsize(0)  # the size the data file records
        return env.begin(write=write, buffers=False)


class _SideLog:
    """Just enough of a RecordLog for the two projections and TimeTravel."""

    def __init__(self, env: lmdb.Environment, names: list[str], path: Path) -> None:
        self.env = env
        self.path = path
        self._dbs = {name: env.open_db(name.encode()) for name in names}
        self.meta = env.open_db(b"meta")
        self.last_seq = 0

    def db(self, name: str) -> Any:
        return self._dbs.get(name)  # None: a database the index does not keep (trace_pulls)

    def read_txn(self) -> lmdb.Transaction[bytes]:
        return begin_resized(self.env)

    def follows(self, kept: lmdb.Transaction[bytes] | None, txn: lmdb.Transaction[bytes]) -> bool:
        """Never: a projection keeps nothing from one of the index's transactions to the next
        (RecordLog.follows)."""
        return False


class ArchiveIndex:
    """The time index, the offset table's history and the store index (`trace_stored`,
    `trace_links`) of the archived records, for moments before the horizon: quacks like a Store
    for TimeTravel (`timeindex`, `offsets`, `log`, `config`)."""

    def __init__(self, path: Path, config: BrokerConfig) -> None:
        path.mkdir(parents=True, exist_ok=True)
        env = lmdb.open(str(path), map_size=1 << 30, max_dbs=16, sync=False, metasync=False)
        self.timeindex = TimeIndexProjection()
        self.offsets = OffsetTableProjection()
        self.trace = MessageTraceProjection()
        names = [*self.timeindex.databases, *self.offsets.databases, *_TRACE_DATABASES]
        self.log = _SideLog(env, names, path)
        self.projections = (self.timeindex, self.offsets, self.trace)
        for projection in self.projections:
            projection.bind(self.log)  # type: ignore[arg-type]
        self.config = config
        self._lock = threading.Lock()
        self._check_format()
        self.log.last_seq = self.upto()

    def _check_format(self) -> None:
        """Empty an index an older es-broker built (it lacks what this one keeps): it is built
        again from the archive, segment by segment, on the next question."""
        with begin_resized(self.log.env, write=True) as txn:
            raw = txn.get(b"format", db=self.log.meta)
            if raw is not None and U64.unpack(raw)[0] == INDEX_FORMAT:
                return
            if txn.get(b"upto", db=self.log.meta) is not None:
                for db in self.log._dbs.values():
                    txn.drop(db, delete=False)
                txn.delete(b"upto", db=self.log.meta)
            txn.put(b"format", U64.pack(INDEX_FORMAT), db=self.log.meta)

    def read(self) -> lmdb.Transaction[bytes]:
        return self.log.read_txn()

    def upto(self) -> int:
        with begin_resized(self.log.env) as txn:
            raw = txn.get(b"upto", db=self.log.meta)
        return U64.unpack(raw)[0] if raw else 0

    def catch_up(self, segments: list[dict[str, Any]]) -> None:
        """Apply the records of every segment not applied yet, one write transaction each."""
        from es_broker.history.archive import (
            raw_records,  # the archive loads once something is sealed
        )

        if not segments or segments[-1]["last_seq"] <= self.log.last_seq:
            return  # caught up already (last_seq: what this process applied or found)
        with self._lock:
            for segment in segments:
                if segment["last_seq"] <= self.upto():
                    continue
                raws = list(raw_records(segment["location"]))
                while True:
                    try:
                        with begin_resized(self.log.env, write=True) as txn:
                            raw = txn.get(b"upto", db=self.log.meta)
                            if raw and U64.unpack(raw)[0] >= segment["last_seq"]:
                                break  # another process applied it meanwhile
                            for seq, data in raws:
                                record = records.unpack(data)
                                for projection in self.projections:
                                    projection.apply(txn, seq, record)
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


def store_seq(store: Any, txn: lmdb.Transaction[bytes], phy: int) -> int | None:
    """Seq of the store record whose messages begin at or before phy: from the store index, and
    below its first entry (sealing removed the entries of archived records, B-465) from the
    archive index."""
    seq: int | None = store.trace.store_seq(txn, phy)
    if seq is None and phy >= 0 and store.history.sealed_upto(txn):
        index = archive_index(store, txn)
        with index.read() as stxn:
            seq = index.trace.store_seq(stxn, phy)
    return seq


def deliveries(
    store: Any, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offset: int
) -> list[int]:
    """Seqs of the `messages_delivered` records that handed out (topic, queue, offset), oldest
    first: from the trace index, and for an expired message also from the archive, whose
    entries sealing removed (B-461)."""
    seqs = set(store.trace.deliveries_of(txn, topic, queue_id, offset))
    low, _ = store.cq.bounds(txn, topic, queue_id)
    if offset < low and store.history.sealed_upto(txn):
        from es_broker.history.archive import scan  # the archive loads once something is sealed

        segments = list(store.history.segments(txn))
        wanted = {RecordType.MESSAGES_DELIVERED.value}
        for seq, record in scan(segments, topic=topic, types=wanted):
            if record.get("queue_id") == queue_id and offset in (record.get("offsets") or ()):
                seqs.add(seq)
    return sorted(seqs)


def pop_records(
    store: Any, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offset: int
) -> list[int]:
    """Seqs of the pop records (pop, ack, change, expiry) that name (topic, queue, offset), oldest
    first: from the pop trace index, and for an expired message also from the archive, whose
    entries sealing removed (B-642)."""
    seqs = set(store.pop.records_of(txn, topic, queue_id, offset))
    low, _ = store.cq.bounds(txn, topic, queue_id)
    if offset < low and store.history.sealed_upto(txn):
        from es_broker.history.archive import scan  # the archive loads once something is sealed

        segments = list(store.history.segments(txn))
        wanted = {kind.value for kind in TRACED}
        for seq, record in scan(segments, topic=topic, types=wanted):
            if record.get("queue_id") == queue_id and offset in named_offsets(record):
                seqs.add(seq)
    return sorted(seqs)


def catch_up(store: Any) -> None:
    """Bring the archive index up to the segments sealed so far (a running master does it after
    each sealing, in a worker thread, so no question on the event loop waits for it)."""
    with store.read() as txn:
        archive_index(store, txn)
