"""Sealing: segments of the log leave the hot log for the archive, in one recorded step (B-401..B-406).

A segment of `history_segment_records` records (cut by sequence, from the last
sealed record on) is sealed when all of these hold:

- it is whole: its last record is in the log;
- its last record's effective time is before the cut-off (`--before`, or
  `history_hot_days` before now);
- every consumer of the log is past it: the SQL read model's follower
  (`readmodel.position`), each Parquet export named (`_export_checkpoint.json`);
  a slave's acknowledged sequence is known only to the running master, so a
  stopped master's directory is sealed only up to what those files prove
  (see B-405).

The steps, each of which a kill can interrupt (`ES_BROKER_SEAL_CRASH_AT` names
the step after which the process exits, for the tests):

1. `written`: each segment's Parquet files and manifest, under a temporary name
   renamed once whole;
2. `verified`: read back, the records' SHA-256 compared with the manifest;
3. `snapshot`: the projections' state after the log's last record, written to
   `<data dir>/history/snapshot-<seq>.msgpack` (temporary file, fsync, rename);
4. `recorded`: one LMDB write transaction appends a `history_archived` record per
   segment (its apply removes the segment's records from the hot log), committed
   and flushed;
5. `cleaned`: older snapshots are removed.

Killed before 4, the segments are still hot (what was written to the archive is
rewritten next time); killed after 4 they are archived and recorded. Never half.
"""

from __future__ import annotations

import hashlib
import os
import time as _time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lmdb
import msgpack

from es_broker.history.reader import StoreView
from es_broker.log import AppendContext, records
from es_broker.log.types import HistoryArchived
from es_broker.projections.keys import U64

CRASH_ENV = "ES_BROKER_SEAL_CRASH_AT"
STEPS = ("written", "verified", "snapshot", "recorded", "cleaned")
SNAPSHOT_DIR = "history"
SNAPSHOT_FORMAT = 1
NOT_SNAPSHOT = ("log", "commitlog_chunks")  # the log itself, and message bytes (copied by a replay)
READMODEL_POSITION = "readmodel.position"
EXPORT_CHECKPOINT = "_export_checkpoint.json"
DAY_MS = 86_400_000


def crash_point(name: str) -> None:
    """A step's end, where the tests kill the process (kill -9 has the same effect: nothing after runs)."""
    if os.environ.get(CRASH_ENV) == name:
        os._exit(137)


def crash_passed_on(returncode: int) -> None:
    """A running broker whose sealing's process (B-675) was killed at a step's end by `crash_point`
    dies there too: a kill of the broker at that step, as the tests inject it."""
    if returncode == 137 and os.environ.get(CRASH_ENV) in STEPS:
        os._exit(137)


def archive_location(data_dir: str | Path, configured: str = "") -> str:
    """The archive: broker.conf's `history_archive`, else `<data dir>/archive`."""
    return configured or str(Path(data_dir).resolve() / "archive")


# ---------------------------------------------------------------------- what may be sealed


def consumers_position(
    data_dir: str | Path, export_dirs: list[str]
) -> tuple[int | None, list[str]]:
    """The lowest position every known consumer of the log reached (None: no limit), and who they are."""
    found: list[tuple[int, str]] = []
    position = Path(data_dir) / READMODEL_POSITION
    if position.exists():
        found.append((int(position.read_text().split()[0] or 0), "the SQL read model"))
    for out in export_dirs:
        import json

        checkpoint = Path(out) / EXPORT_CHECKPOINT
        seq = json.loads(checkpoint.read_text())["last_seq"] if checkpoint.exists() else 0
        found.append((int(seq), f"the export to {out}"))
    if not found:
        return None, []
    low = min(seq for seq, _ in found)
    return low, [who for seq, who in found if seq == low]


def lowest(*bounds: tuple[int | None, list[str]]) -> tuple[int | None, list[str]]:
    """The lowest of several (position, who holds it) bounds; (None, []) when none is known."""
    known = [(seq, who) for seq, who in bounds if seq is not None]
    if not known:
        return None, []
    low = min(seq for seq, _ in known)
    return low, [w for seq, who in known if seq == low for w in who]


def recorded_slaves(store: StoreView) -> tuple[int | None, list[str]]:
    """The lowest seq a slave is recorded to hold (B-462), and which slaves: what bounds sealing
    of a stopped master's directory, whose slaves cannot be asked."""
    with store.read() as txn:
        held = store.history.slaves_held(txn)
    if not held:
        return None, []
    low = min(held.values())
    return low, [f"slave {bid}" for bid, seq in sorted(held.items()) if seq == low]


def time_of(store: StoreView, txn: lmdb.Transaction[bytes], seq: int) -> int:
    """The effective time of a record (0 before the first)."""
    if seq <= 0:
        return 0
    cur = txn.cursor(db=store.timeindex.seq_db)
    found = cur.prev() if cur.set_range(U64.pack(seq + 1)) else cur.last()
    return U64.unpack(cur.value())[0] if found else 0


def plan(
    store: StoreView, before: int, segment_records: int, limit: int | None
) -> list[tuple[int, int]]:
    """The (first, last) seqs of every segment the rules let seal now, oldest first."""
    if segment_records <= 0:
        raise ValueError(f"history_segment_records must be positive, got {segment_records}")
    out = []
    with store.read() as txn:
        first = store.history.sealed_upto(txn) + 1
        while True:
            last = first + segment_records - 1
            if last > store.log.last_seq or (limit is not None and last > limit):
                break
            if time_of(store, txn, last) >= before:
                break
            out.append((first, last))
            first = last + 1
    return out


def held_back(
    store: StoreView, before: int, segment_records: int, limit: int | None, limited_by: list[str]
) -> dict[str, Any]:
    """Why the first segment `plan` left unsealed was not sealed: the condition that held it.

    `reason` is `not_full` (the log does not reach the segment's end yet), `consumers`
    (`limited_by` have not read to its end: they are at `limit`) or `not_before` (its last
    record is from `last_time`, not before `before`); with the segment's seqs and the log's end.
    """
    with store.read() as txn:
        first = store.history.sealed_upto(txn) + 1
        last = first + segment_records - 1
        end = store.log.last_seq
        while (
            last <= end and (limit is None or last <= limit) and time_of(store, txn, last) < before
        ):
            first, last = last + 1, last + segment_records  # sealed by this run
        held: dict[str, Any] = {"first_seq": first, "last_seq": last, "log_end": end}
        if last > end:
            return {"reason": "not_full", **held}
        if limit is not None and last > limit:
            return {"reason": "consumers", "position": limit, "who": limited_by, **held}
        return {"reason": "not_before", "last_time": time_of(store, txn, last), **held}


# ---------------------------------------------------------------------- snapshots


def snapshot_path(data_dir: str | Path, seq: int) -> Path:
    return Path(data_dir) / SNAPSHOT_DIR / f"snapshot-{seq:012d}.msgpack"


def write_snapshot(store: StoreView, data_dir: str | Path) -> tuple[int, str]:
    """The projections' state after the log's last record, as a file; (seq, SHA-256 of the file).

    Format: a msgpack stream, first a header map {format, seq, databases}, then
    one [database, key, value] array per entry, databases in the order named and
    keys in LMDB order. The snapshot holds no record and no message bytes.
    """
    names = [n for n in store.log.database_names() if n not in NOT_SNAPSHOT]
    h = hashlib.sha256()
    pack = msgpack.Packer(use_bin_type=True)
    with store.read() as txn:
        # the log's last record as this transaction sees it: a running broker's writer goes on
        cur = txn.cursor(db=store.log.log_db)
        seq = records.key_seq(cur.key()) if cur.last() else 0
        path = snapshot_path(data_dir, seq)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with tmp.open("wb") as f:

            def put(item: Any) -> None:
                data = pack.pack(item)
                h.update(data)
                f.write(data)

            put({"format": SNAPSHOT_FORMAT, "seq": seq, "databases": names})
            for n, name in enumerate(names):
                db = store.log.db(name)
                if db is None:
                    continue
                for key, value in txn.cursor(db=db):
                    put([n, bytes(key), bytes(value)])
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return seq, h.hexdigest()


def read_snapshot(path: Path, sha256: str) -> tuple[int, list[str], Iterator[list[Any]]]:
    """(seq, database names, entries) of a snapshot file, after checking its SHA-256."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    if h.hexdigest() != sha256:
        raise ValueError(f"{path}: the snapshot's SHA-256 is not the one recorded")
    unpacker = msgpack.Unpacker(path.open("rb"), raw=False, use_list=True, max_buffer_size=0)
    header = next(unpacker)
    return int(header["seq"]), list(header["databases"]), unpacker


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- sealing


@dataclass(frozen=True, slots=True)
class Sealed:
    first_seq: int
    last_seq: int
    records: int
    first_time: int
    last_time: int
    location: str
    manifest_sha256: str
    seq: int  # the history_archived record's

    def to_json(self) -> dict[str, Any]:
        """What `es-broker archive --json` and HISTORY_ARCHIVE's answer say of a sealed segment."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Prepared:
    """Segments written to the archive and read back, and the snapshot written: all but the record."""

    written: list[Any]  # archive.Written, oldest first
    snapshot_seq: int
    snapshot_sha256: str


def prepare(
    store: StoreView, data_dir: str | Path, location: str, segments: list[tuple[int, int]]
) -> Prepared:
    """Steps 1 to 3 (`written`, `verified`, `snapshot`): nothing here goes through the writer.

    The snapshot is also copied to the archive (`<archive>/snapshots/`), where a
    slave, whose directory has no snapshot of its own, finds it (B-413).
    """
    from es_broker.history.archive import (  # loads when a sealing runs
        put_snapshot,
        read_back,
        write_segment,
    )

    # in a running broker this runs in a worker thread: it holds the map where it is while it
    # reads the store (MapGate, B-674), not while it writes and reads back Parquet files, so that
    # the writer may grow the map meanwhile
    gate = store.log.map_gate
    written = []
    with gate.reading(), store.read() as txn:
        start = time_of(store, txn, segments[0][0] - 1)
    for first, last in segments:
        with gate.reading():
            raws = list(_raw_range(store, first, last))
        written.append(write_segment(location, raws, start))
        start = written[-1].manifest["last_time"]
    crash_point("written")
    for w in written:
        read_back(w)
    crash_point("verified")
    with gate.reading():  # one transaction: every projection as of one seq
        snapshot_seq, snapshot_sha = write_snapshot(store, data_dir)
    put_snapshot(location, snapshot_path(data_dir, snapshot_seq))
    crash_point("snapshot")
    return Prepared(written, snapshot_seq, snapshot_sha)


def record_job(
    store: StoreView,
    prepared: Prepared,
    requester: str,
    ts: int,
    *,
    exact: bool,
    slaves: dict[int, int] | None = None,
) -> Callable[[AppendContext], list[int]]:
    """Step 4's writer job: one `history_archived` record per segment, appended in one transaction.

    `exact` (a stopped broker's directory): the log must still end at the
    snapshot. A running broker's log goes on after it, which a replay handles
    (the records after the snapshot are applied); what must hold is that no
    other sealing was recorded meanwhile and that every segment is still hot.
    `slaves`: what each slave the master knows has acknowledged, recorded with
    the segments so that a restarted master bounds sealing by it (B-462).
    """
    held = [[bid, seq] for bid, seq in sorted(slaves.items())] if slaves else None
    snapshot_seq = prepared.snapshot_seq
    first_seq = prepared.written[0].manifest["first_seq"]

    def job(ctx: AppendContext) -> list[int]:
        if exact and ctx.next_seq != snapshot_seq + 1:
            raise RuntimeError("the log grew while it was being sealed: run on a stopped broker")
        if ctx.next_seq <= snapshot_seq or store.history.sealed_upto(ctx.txn) != first_seq - 1:
            raise RuntimeError("another sealing was recorded meanwhile: nothing recorded")
        seqs = []
        for w in prepared.written:
            m = w.manifest
            seqs.append(
                ctx.append(
                    HistoryArchived(
                        first_seq=m["first_seq"],
                        last_seq=m["last_seq"],
                        first_time=m["first_time"],
                        last_time=m["last_time"],
                        records=m["records"],
                        raw_sha256=m["raw_sha256"],
                        manifest_sha256=w.manifest_sha256,
                        location=w.location,
                        snapshot_seq=snapshot_seq,
                        snapshot_sha256=prepared.snapshot_sha256,
                        requester=requester,
                        slaves=held,
                    ).to_record(ts)
                )
            )
        return seqs

    return job


def sealed_of(prepared: Prepared, seqs: list[int]) -> list[Sealed]:
    return [
        Sealed(
            w.manifest["first_seq"],
            w.manifest["last_seq"],
            w.manifest["records"],
            w.manifest["first_time"],
            w.manifest["last_time"],
            w.location,
            w.manifest_sha256,
            seq,
        )
        for w, seq in zip(prepared.written, seqs, strict=True)
    ]


def seal(
    store: StoreView,
    data_dir: str | Path,
    location: str,
    segments: list[tuple[int, int]],
    *,
    requester: str = "es-broker archive",
    now: Callable[[], int] | None = None,
) -> list[Sealed]:
    """Seal `segments` (from `plan`) into the archive at `location`, in the steps of the module docstring."""
    if not segments:
        return []
    prepared = prepare(store, data_dir, location, segments)
    ts = (now or (lambda: int(_time.time() * 1000)))()
    [(ok, value)] = store.log.write_batch([record_job(store, prepared, requester, ts, exact=True)])
    if not ok:
        raise value
    store.log.flush()
    crash_point("recorded")
    clean_snapshots(data_dir, keep=prepared.snapshot_seq)
    crash_point("cleaned")
    return sealed_of(prepared, value)


def clean_snapshots(data_dir: str | Path, keep: int) -> None:
    """Remove every snapshot file but the one recorded last (and temporary files of killed runs)."""
    folder = Path(data_dir) / SNAPSHOT_DIR
    for path in folder.glob("*snapshot-*"):
        if path != snapshot_path(data_dir, keep):
            path.unlink(missing_ok=True)


def _raw_range(store: StoreView, first: int, last: int) -> Iterator[tuple[int, bytes]]:
    for seq, raw in store.log.read_raw(first):
        if seq > last:
            return
        yield seq, bytes(raw)


def default_before(now_ms: int, hot_days: int) -> int:
    return now_ms - hot_days * DAY_MS
