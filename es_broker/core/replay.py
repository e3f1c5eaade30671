"""Rebuild projections from the log (replay) and prove they match the live ones (verify).

The commit log's message bytes are the log's payload, not derived state, so
replay copies them; every other database is rebuilt by applying the records
in order. Replaying decides nothing: the records carry every decision.
"""

from __future__ import annotations

import hashlib
import itertools
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from es_broker.config import BrokerConfig
from es_broker.history.seal import read_snapshot, snapshot_path
from es_broker.log import RecordLog, records
from es_broker.log.dirlock import LOCK_FILE, in_use
from es_broker.log.store import AppendContext
from es_broker.projections import key_index, pop, timer
from es_broker.projections.store_format import FIRST
from es_broker.store import LMDB_DIR, Store

BATCH = 5000
# databases added after the checksums of existing directories were taken: left out while empty
LATER_DATABASES = frozenset(
    {"history_segments", "audit_explain", "audit_groups", "audit_acl"}
    | set(pop.DATABASES)
    | set(timer.DATABASES)
)

Progress = Callable[[int, int], None]
"""Told (records done, records in all) as long work goes on: replay, verify, export, readmodel sync."""


def replay(
    src_dir: str | Path,
    dst_dir: str | Path,
    progress: Progress | None = None,
    *,
    full: bool = False,
) -> int:
    """Rebuild a broker data directory from src's log into dst; returns the last sequence.

    Once segments were sealed (B-401), the replay starts from the latest
    snapshot and applies the hot records after it (B-407); `full` replays
    every record from the first instead, the sealed ones read from the archive.
    """
    src = Store.open(src_dir, BrokerConfig(storePathRootDir=str(src_dir)), readonly=True)
    dst_path = Path(dst_dir)
    if (dst_path / "lmdb" / "data.mdb").exists():
        raise FileExistsError(
            f"{dst_dir} already holds a broker log; replay needs an empty directory"
        )
    dst = Store.open(dst_path, BrokerConfig(storePathRootDir=str(dst_path)))
    try:
        with src.read() as txn:
            latest = src.history.latest(txn)
            segments = list(src.history.segments(txn))
        for chunk in _chunks(src.log.payloads()):
            dst.log.write_batch([_payload_job(chunk)])
        total = src.log.last_seq
        hot = src.log.read_raw()
        if latest is not None and not full:
            base = _restore_snapshot(src_dir, latest, dst)
            hot = _copy_until(dst, hot, base)
        elif latest is not None:
            from es_broker.history.archive import (
                raw_records,  # the archive loads once something is sealed
            )

            for segment in segments:
                for chunk in _chunks(raw_records(segment["location"])):
                    dst.log.write_batch([_records_job(chunk)])
                    if progress is not None:
                        progress(chunk[-1][0], total)
        for chunk in _chunks(hot):
            dst.log.write_batch([_records_job(chunk)])
            if progress is not None:
                progress(chunk[-1][0], total)
        dst.audit.ensure_built(
            dst.log, dst.audit_records()
        )  # a snapshot older than the audit indexes (B-417)
        dst.log.flush()
        return dst.log.last_seq
    finally:
        src.close()
        dst.close()


def _restore_snapshot(src_dir: str | Path, latest: dict[str, Any], dst: Store) -> int:
    """Load the snapshot the latest `history_archived` record names into dst; its seq."""
    from es_broker.history.archive import get_snapshot  # the archive loads once something is sealed

    path = snapshot_path(src_dir, latest["snapshot_seq"])
    with tempfile.TemporaryDirectory() as tmp:
        if (
            not path.exists()
        ):  # a slave's directory: the master's snapshot, from the archive (B-413)
            path = get_snapshot(latest["location"], path.name, Path(tmp) / path.name)
        seq, names, entries = read_snapshot(path, latest["snapshot_sha256"])
        known = set(dst.log.database_names())
        first = _first_message(dst)
        for chunk in _chunks(iter(entries)):

            def job(ctx: AppendContext, chunk: list[list[Any]] = chunk) -> None:
                for n, key, value in chunk:
                    name = names[n]
                    if name == key_index.DATABASE and key_index.expired_since(value, first):
                        continue  # retention deleted it after the snapshot, reading the bytes (B-670)
                    # a snapshot in an older store format: its layout's databases, upgraded below
                    db = (
                        dst.log.db(name)
                        if name in known
                        else dst.log.env.open_db(name.encode(), txn=ctx.txn)
                    )
                    ctx.txn.put(key, value, db=db)

            dst.log.write_batch([job])
    if "store_meta" not in names:  # taken before the store format was kept: format 1
        dst.log.write_batch([lambda ctx: dst.format.set_number(ctx.txn, FIRST)])
    dst.upgrade(record=False)  # the upgrade's record, if any, is among the records replayed
    return seq


def _first_message(dst: Store) -> int | None:
    """The physical offset of the first message bytes the replay copied, None if none."""
    with dst.read() as txn:
        for phy, _ in dst.log.payloads_in(txn):
            return phy
    return None


def _copy_until(
    dst: Store, hot: Iterator[tuple[int, bytes]], base: int
) -> Iterator[tuple[int, bytes]]:
    """Copy the hot records up to `base` as they are (the snapshot holds their effect); yield the rest."""
    pending: list[tuple[int, bytes]] = []
    rest = None
    for seq, raw in hot:
        if seq > base:
            rest = (seq, raw)
            break
        pending.append((seq, raw))
        if len(pending) >= BATCH:
            _put_raw(dst, pending)
            pending = []
    _put_raw(dst, pending)
    dst.log.last_seq = base
    if rest is not None:
        yield rest
        yield from hot


def _put_raw(dst: Store, items: list[tuple[int, bytes]]) -> None:
    if not items:
        return

    def job(ctx: AppendContext) -> None:
        for seq, raw in items:
            ctx.txn.put(records.seq_key(seq), raw, db=dst.log.log_db, append=True)

    dst.log.write_batch([job])


T = TypeVar("T")


def _chunks(items: Iterator[T]) -> Iterator[list[T]]:
    while chunk := list(itertools.islice(items, BATCH)):
        yield chunk


def _payload_job(chunk: list[tuple[int, bytes]]) -> Callable[[AppendContext], None]:
    def job(ctx: AppendContext) -> None:
        ctx.put_payloads(chunk)

    return job


def _records_job(chunk: list[tuple[int, bytes]]) -> Callable[[AppendContext], None]:
    def job(ctx: AppendContext) -> None:
        for seq, raw in chunk:
            if seq != ctx.next_seq:
                raise ValueError(
                    f"the log has a gap: expected sequence {ctx.next_seq}, found {seq}"
                )
            ctx.append_raw(raw)

    return job


@dataclass(frozen=True, slots=True)
class Difference:
    database: str
    key: bytes | None
    left: bytes | None
    right: bytes | None

    def describe(self) -> str:
        return (
            f"database {self.database!r} differs at key {self.key.hex() if self.key else None}: "
            f"{_short(self.left)} != {_short(self.right)}"
        )


def _short(value: bytes | None) -> str:
    if value is None:
        return "(absent)"
    return value[:48].hex() + ("..." if len(value) > 48 else "")


def checksums(data_dir: str | Path) -> dict[str, str]:
    """SHA-256 of every database of a data directory, over keys and values in order."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        out = {}
        with store.read() as txn:
            for name in store.log.database_names():
                db = store.log.db(name)
                if name in LATER_DATABASES and (db is None or not txn.stat(db)["entries"]):
                    continue  # a directory that never sealed has the checksums it always had
                h = hashlib.sha256()
                if db is not None:
                    for key, value in txn.cursor(db=db):
                        h.update(
                            len(key).to_bytes(4, "big")
                            + key
                            + len(value).to_bytes(4, "big")
                            + value
                        )
                out[name] = h.hexdigest()
        return out
    finally:
        store.close()


def compare(left_dir: str | Path, right_dir: str | Path) -> list[Difference]:
    """The first differing key of every database that differs between two data directories."""
    a_sums, b_sums = checksums(left_dir), checksums(right_dir)
    differing = [name for name in a_sums if a_sums[name] != b_sums.get(name)]
    if not differing:
        return []
    a = Store.open(left_dir, BrokerConfig(storePathRootDir=str(left_dir)), readonly=True)
    b = Store.open(right_dir, BrokerConfig(storePathRootDir=str(right_dir)), readonly=True)
    try:
        with a.read() as ta, b.read() as tb:
            return [
                _first_difference(name, ta, a.log.db(name), tb, b.log.db(name))
                for name in differing
            ]
    finally:
        a.close()
        b.close()


def _first_difference(
    name: str, ta: lmdb.Transaction[bytes], da: Any, tb: lmdb.Transaction[bytes], db: Any
) -> Difference:
    left = iter(ta.cursor(db=da)) if da is not None else iter(())
    right = iter(tb.cursor(db=db)) if db is not None else iter(())
    for x, y in itertools.zip_longest(left, right):
        if x != y:
            if x is None or (y is not None and y[0] < x[0]):
                return Difference(name, y[0], None, y[1])
            if y is None or x[0] < y[0]:
                return Difference(name, x[0], x[1], None)
            return Difference(name, x[0], x[1], y[1])
    return Difference(name, None, None, None)


def verify(
    data_dir: str | Path, progress: Progress | None = None, *, full: bool = False
) -> list[Difference]:
    """Replay data_dir's log into a temporary directory and compare every database.

    From the latest snapshot and the hot log, or with `full` from the first
    record, the archive's segments first (B-407). A directory in an older
    store format raises OldStoreFormat: a start upgrades it first (B-470).
    """
    if in_use(data_dir) is not None:  # a broker writes it as we read: verify one moment of it
        with consistent_copy(data_dir) as copy:
            return verify(copy, progress, full=full)
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        store.format.check()
    finally:
        store.close()
    with tempfile.TemporaryDirectory(prefix="es-broker-verify-") as tmp:
        replay(data_dir, tmp, progress, full=full)
        return compare(data_dir, tmp)


@contextmanager
def consistent_copy(data_dir: str | Path) -> Iterator[Path]:
    """A copy of a served data directory as it was at one moment (B-490).

    LMDB copies its environment within one read transaction (mdb_env_copy), so
    the log and every projection are of the same commit however the broker
    goes on writing; the directory's other entries (snapshots, the archive,
    the read model) are linked, not copied: verify only reads them.
    """
    src = Path(data_dir)
    with tempfile.TemporaryDirectory(prefix="es-broker-copy-") as tmp:
        root = Path(tmp)
        for entry in src.iterdir():
            if entry.name not in (LMDB_DIR, LOCK_FILE):
                (root / entry.name).symlink_to(entry.resolve())
        (root / LMDB_DIR).mkdir()
        log = RecordLog(src / LMDB_DIR, readonly=True)
        try:
            log.env.copy(str(root / LMDB_DIR))
        finally:
            log.close()
        yield root
