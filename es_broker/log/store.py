"""The append-only record log in LMDB.

One LMDB environment per data directory. Database `log` holds the records,
keyed by dense sequence numbers from 1. Database `commitlog_chunks` holds the
message bytes (the commit log's byte stream in page-filling chunks,
es_broker/log/chunks.py): the payload that send records point at, written in
the same transaction as the record. Projections register their own databases
and an `apply(txn, seq, record)` that runs inside the writing transaction, so
the log and every projection always agree. A projection that says which
record types it keeps something of (`applier`) is only called for those, but
for the first record (seq 1), which goes through every projection's `apply`.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, Protocol, TypeVar

import lmdb

from es_broker.log import chunks, records
from es_broker.log.records import Record

MAX_DBS = 64
# the map doubles when it is full; written in place (`write_map`), by less when the disk has not
# the room, but never by less than this (`RecordLog.grow`)
GROW_STEP_MIN = 1 << 20
# filesystems that allocate a file's blocks once and then write them in place: on these, a map
# whose blocks are all allocated beforehand (`posix_fallocate`) never faults on a full disk, so
# LMDB may write its pages straight into the map (B-673). On a copy-on-write filesystem (btrfs,
# zfs, bcachefs) an overwrite needs new blocks, and a write into the map on a full disk would be
# a SIGBUS where LMDB's own writes return ENOSPC. tmpfs would allow it too, but there the map
# allocated beforehand is memory taken.
PREALLOCATING_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs"})


P = ParamSpec("P")
T = TypeVar("T")


class MapGate:
    """Reads in other threads against the remap of a growing map (`RecordLog.grow`).

    Growing the map unmaps it and maps it again: py-lmdb then invalidates every
    transaction and cursor open in the process, and fails any call that races the
    remap. The broker's own thread never keeps a read open across a write, so only
    work in other threads is held here: a flush, a metrics scrape, `explain`, a
    sealing. Such work reads inside `reading()`; `remapping()` waits until none
    runs, and new readers wait for the remap. A thread already reading may read
    again (nested) without waiting.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self.remap_pending = False
        self._depth = threading.local()

    @contextmanager
    def reading(self) -> Iterator[None]:
        depth = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._cond:
                self._cond.wait_for(lambda: not self.remap_pending)
                self._readers += 1
        self._depth.n = depth + 1
        try:
            yield
        finally:
            self._depth.n = depth
            if depth == 0:
                with self._cond:
                    self._readers -= 1
                    self._cond.notify_all()

    @contextmanager
    def remapping(self, wait: bool = True) -> Iterator[bool]:
        """Hold off every reader while the block remaps; yields True. With `wait` False, yields
        False at once (and holds nothing) if a reader is under way."""
        if getattr(self._depth, "n", 0):
            raise RuntimeError("the map cannot be remapped by a thread that reads it")
        with self._cond:
            if not wait and self.busy:
                free = False
            else:
                self._cond.wait_for(lambda: not self.remap_pending)
                self.remap_pending = free = True
                self._cond.notify_all()  # to whoever waits to see a remap asked for
                self._cond.wait_for(lambda: self._readers == 0)
        try:
            yield free
        finally:
            if free:
                with self._cond:
                    self.remap_pending = False
                    self._cond.notify_all()

    @property
    def busy(self) -> bool:
        """A read or a remap is under way (a glance, without waiting: it may change at once)."""
        return bool(self._readers or self.remap_pending)

    def wait_for_remap_pending(self, timeout: float | None = None) -> bool:
        """Block until a remap waits for the readers (for tests that sequence one); False when
        `timeout` seconds passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self.remap_pending, timeout)


class Projection(Protocol):
    """State derived from records, kept in the projection's own databases.

    A projection may also name `dupsort`: those of its databases that hold
    sorted, fixed-size duplicates (DUPSORT + DUPFIXED).
    """

    name: str

    @property
    def databases(self) -> tuple[str, ...]:
        """The names of the LMDB databases it keeps."""
        ...

    def bind(self, log: RecordLog) -> None: ...

    # A projection may also have `settle(txn)`: it may keep what its records change in memory
    # while a write transaction applies them, and writes it in `settle`, which the log calls
    # before every commit of a transaction that applied records (`RecordLog.settle`).

    def apply(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None: ...


# what applies one record type in a projection: (txn, seq, record); lmdb's Transaction is
# generic to the type checker only
Applier = Callable[["lmdb.Transaction[bytes]", int, Record], None]


class StoreFullError(Exception):
    """The disk is full: the write was refused and nothing of it was kept.

    `reason` names what the operating system said (ENOSPC, EIO, EDQUOT), for
    the broker's status and its refusals.
    """

    def __init__(self, message: str, reason: str = "ENOSPC") -> None:
        super().__init__(message)
        self.reason = reason


class LogCorruptError(Exception):
    """The log breaks one of its invariants (for example a gap in sequence numbers)."""


@dataclass(slots=True)
class AppendContext:
    """What a job sees while it runs inside the group-commit transaction."""

    txn: lmdb.Transaction[bytes]
    log: RecordLog
    next_seq: int
    # the records and message bytes jobs put so far: a job that raises after putting any spoils
    # the batch (`write_batch`), since the transaction holds them
    written: int = 0

    def append(self, record: Record) -> int:
        """Append a record, apply it to every projection, and return its sequence number."""
        seq, log, txn = self.next_seq, self.log, self.txn
        # put(key, value, dupdata, overwrite, append, db) by position: py-lmdb parses keyword
        # arguments at ~1.8k instructions a call, a record pays it on every append
        if not txn.put(records.seq_key(seq), records.pack(record), True, True, True, log.log_db):
            raise LogCorruptError(f"sequence {seq} already present")
        # counted once it is in the transaction: a projection that fails to apply it spoils the
        # batch, rather than leave the record half applied under a seq the next append reuses
        self.written += 1
        log.apply(txn, seq, record)
        self.next_seq = seq + 1
        return seq

    def append_raw(self, raw: bytes) -> int:
        """Append an already encoded record as it is (replay, log shipping)."""
        seq = self.next_seq
        if not self.txn.put(records.seq_key(seq), raw, db=self.log.log_db, append=True):
            raise LogCorruptError(f"sequence {seq} already present")
        self.written += 1  # as in `append`
        self.log.apply(self.txn, seq, records.unpack(raw))
        self.next_seq = seq + 1
        return seq

    def put_payload(self, physical_offset: int, data: bytes) -> None:
        """Store message bytes at a physical offset of the commit log (past its end: the bytes
        between are zeros; see chunks.write)."""
        self.put_payloads([(physical_offset, data)])

    def put_payloads(self, payloads: list[tuple[int, bytes]]) -> None:
        """Store several messages' bytes at ascending physical offsets past the commit log's end,
        in one call: the tail chunk is read once, the rest appended in whole chunks."""
        log, txn = self.log, self.txn
        self.written += 1  # bytes past the commit log's end a failed job would leave behind
        known = log.chunk_tail
        tail = chunks.write(
            txn, log.commitlog_db, payloads, known[1] if known and known[0] is txn else None
        )
        log.chunk_tail = None if tail is None else (txn, tail)


class RecordLog:
    """An LMDB environment holding the record log, the commit log and projections."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        projections: Sequence[Projection] | None = None,
        *,
        sync: bool = False,
        map_size: int = 64 * 1024 * 1024,
        readonly: bool = False,
        write_map: bool = True,
    ) -> None:
        self.path = Path(path)
        if not readonly:  # a reader creates nothing: LMDB refuses a missing directory
            self.path.mkdir(parents=True, exist_ok=True)
        self.sync_on_commit = sync
        # the map is remapped (`grow`) only while no other thread reads it
        self.map_gate = MapGate()
        self.write_map = False
        # not with a sync on every commit (SYNC_FLUSH): each sync write-protects the pages it
        # flushed, and the next commit's first write to each of them faults, which costs more
        # than LMDB's own write of the page (bench/README.md, "SYNC_FLUSH writes its pages itself")
        in_place = write_map and not sync and not readonly
        if in_place and filesystem_type(self.path) in PREALLOCATING_FILESYSTEMS:
            self.env = self._open(map_size, sync, readonly, writemap=True)
            try:
                self._preallocate(self.env.info()["map_size"])
                self.write_map = True
            except OSError:  # no room for the map, or no fallocate: LMDB's own writes, as before
                self.env.close()
        if not self.write_map:
            self.env = self._open(map_size, sync, readonly, writemap=False)
        self.projections: list[Projection] = list(projections or [])
        # the commit log's last chunk (offset, bytes) as put_payloads left it in its transaction,
        # so that the next send's bytes do not read it back; any other write to the chunks
        # (`expire_payloads`) forgets it
        self.chunk_tail: tuple[lmdb.Transaction[bytes], tuple[int, bytes]] | None = None
        # the last write transaction `write_batch` committed, and the id LMDB gave the commit
        # (`follows`)
        self.committed: tuple[lmdb.Transaction[bytes] | None, int] = (None, -1)
        self._appliers: dict[str, tuple[Applier, ...]] = {}  # by record type, as first applied
        self._dbs: dict[str, Any] = {}
        create = not readonly
        names = ["log", chunks.DATABASE] + [d for p in self.projections for d in p.databases]
        fixed = {d for p in self.projections for d in getattr(p, "dupsort", ())}
        if len(set(names)) != len(names):
            raise ValueError(f"database names collide: {names}")
        # named databases are keys of the main database; a read-only view opens only those present
        with self.env.begin() as txn:
            present = {bytes(k) for k, _ in txn.cursor()}
        for name in names:
            if create or name.encode() in present:
                # without a txn argument py-lmdb opens the handle in a transaction of its own,
                # which is the one way that works on a read-only environment too
                dups = name in fixed
                self._dbs[name] = self.env.open_db(
                    name.encode(), create=create, dupsort=dups, dupfixed=dups
                )
            else:
                self._dbs[name] = None
        self.log_db = self._dbs["log"]
        self.commitlog_db = self._dbs[chunks.DATABASE]
        for projection in self.projections:
            projection.bind(self)
        # the projections that keep part of a transaction's changes until its commit
        self._settlers: tuple[Callable[[lmdb.Transaction[bytes]], None], ...] = tuple(
            settle for p in self.projections if (settle := getattr(p, "settle", None)) is not None
        )
        self.last_seq = self._read_last_seq()
        self.page_size: int = self.env.stat()["psize"]
        self._no_room_at = 0  # the map's size when the disk had no room to grow it ahead

    def _open(
        self, map_size: int, sync: bool, readonly: bool, *, writemap: bool
    ) -> lmdb.Environment:
        return lmdb.open(
            str(self.path),
            map_size=map_size,
            max_dbs=MAX_DBS,
            sync=sync,
            metasync=sync,
            readonly=readonly,
            readahead=False,
            max_readers=256,
            writemap=writemap,
        )

    def _preallocate(self, size: int) -> None:
        """Allocate the data file's blocks up to `size` bytes (raises OSError when it cannot)."""
        fd = os.open(self.path / "data.mdb", os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)

    def grow(self, *, wait: bool = True) -> bool:
        """Make the map larger: twice its size. True if it grew.

        With the map written in place (`write_map`), the new part's blocks are allocated first, by
        halved steps when the disk has no room for the whole: raises StoreFullError when not even
        GROW_STEP_MIN fits, and the map is left as it was. The remap waits for the reads of other
        threads (MapGate); with `wait` False it does not grow while one is under way (False).
        """
        size = self.env.info()["map_size"]
        step = size
        if self.write_map:
            while True:
                try:
                    self._preallocate(size + step)
                    break
                except OSError as exc:
                    reason = disk_full_reason(exc)
                    if reason is None:
                        raise
                    if step <= GROW_STEP_MIN:
                        raise StoreFullError(
                            f"disk full while growing the map of {self.path} to {size + step} "
                            f"bytes ({reason}: {exc}): the write was refused, every earlier "
                            "acknowledged record is intact",
                            reason,
                        ) from exc
                    step //= 2
        with self.map_gate.remapping(wait) as free:
            if free:
                self.env.set_mapsize(size + step)
        return free

    def grow_ahead(self) -> bool:
        """Grow the map before it is full, once three quarters of it hold pages, if no other thread
        reads it meanwhile (True if it grew). The writer asks after each commit, so that the map
        seldom fills: a full map makes a commit grow it, and wait for those reads, then."""
        if self.map_gate.busy:  # at the next commit: no blocks allocated for a remap put off
            return False
        info = self.env.info()
        size = info["map_size"]
        if (info["last_pgno"] + 1) * self.page_size * 4 < size * 3 or size == self._no_room_at:
            return False
        try:
            return self.grow(wait=False)
        except StoreFullError:  # not now: the commit that fills the map refuses its write
            self._no_room_at = size
            return False

    def off_the_loop(self, fn: Callable[P, T]) -> Callable[P, T]:
        """`fn` as work for another thread that reads the store: never under a remap (MapGate)."""

        def held(*args: P.args, **kwargs: P.kwargs) -> T:
            with self.map_gate.reading():
                return fn(*args, **kwargs)

        return held

    # ------------------------------------------------------------------ basics
    def db(self, name: str) -> Any:
        return self._dbs[name]

    def database_names(self) -> list[str]:
        return list(self._dbs)

    def close(self) -> None:
        self.env.close()

    def _read_last_seq(self) -> int:
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.log_db)
            return records.key_seq(cur.key()) if cur.last() else 0

    def apply(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        if seq == 1:
            # the first record goes through every projection's own `apply`, whatever its type:
            # some mark the log as theirs at seq 1 (the stats, history and audit marks), which
            # their `applier`s leave out
            for projection in self.projections:
                projection.apply(txn, seq, record)
            return
        calls = self._appliers.get(record["type"])
        if calls is None:
            calls = self._appliers_of(record["type"])
        for call in calls:
            call(txn, seq, record)

    def _appliers_of(self, kind: str) -> tuple[Applier, ...]:
        """The calls applying a record of type `kind`, in the projections' order: a projection's
        own for that type when it names them (`applier`, es_broker/projections/dispatch.py),
        else its `apply`; none for a projection that keeps nothing of such records."""
        calls = []
        for projection in self.projections:
            applier = getattr(projection, "applier", None)
            call = projection.apply if applier is None else applier(kind)
            if call is not None:
                calls.append(call)
        found = self._appliers[kind] = tuple(calls)
        return found

    # ------------------------------------------------------------------ writing
    def write_batch(
        self,
        jobs: list[Callable[[AppendContext], Any]],
        grow_with: Callable[[Callable[[], bool]], object] | None = None,
    ) -> list[tuple[bool, Any]]:
        """Run jobs in one write transaction and commit it (the group commit).

        Returns (ok, result-or-exception) per job. A job that raises before it
        put anything (a record, message bytes) fails alone; one that raises after
        spoils the transaction, so the batch is aborted and every job is re-run in a
        transaction of its own. The map grows when it is full; a full disk
        raises StoreFullError and nothing of the batch is kept. A remap must not
        happen under another thread's read transaction: a caller in a worker
        thread passes `grow_with`, which runs `grow` where no read is open (the
        writer: on the trio thread, whose reads never span an await).
        """
        try:
            return self._grow_and_retry(jobs, grow_with)
        except _SpoiledBatch:
            # isolate the job that spoiled the transaction; the others still land
            return [self._write_alone(job, grow_with) for job in jobs]

    def _grow_and_retry(
        self,
        jobs: list[Callable[[AppendContext], Any]],
        grow_with: Callable[[Callable[[], bool]], object] | None,
    ) -> list[tuple[bool, Any]]:
        while True:
            try:
                return self._write_batch_once(jobs)
            except lmdb.MapFullError:
                if grow_with is None:
                    self.grow()
                else:
                    grow_with(self.grow)

    def _write_alone(
        self,
        job: Callable[[AppendContext], Any],
        grow_with: Callable[[Callable[[], bool]], object] | None,
    ) -> tuple[bool, Any]:
        try:
            return self._grow_and_retry([job], grow_with)[0]
        except _SpoiledBatch as spoiled:
            return (False, spoiled.cause)

    def _write_batch_once(
        self, jobs: list[Callable[[AppendContext], Any]]
    ) -> list[tuple[bool, Any]]:
        results: list[tuple[bool, Any]] = []
        txn = self.env.begin(write=True)
        ctx = AppendContext(txn, self, self.last_seq + 1)
        try:
            for job in jobs:
                before = ctx.written
                try:
                    results.append((True, job(ctx)))
                except (lmdb.MapFullError, lmdb.DiskError, _SpoiledBatch):
                    raise
                except Exception as exc:  # a job's refusal is a value for its caller
                    if disk_full_reason(exc) is not None:
                        raise  # a put that spilled pages to a full disk: the whole batch is refused
                    if ctx.written != before or isinstance(exc, lmdb.Error):
                        raise _SpoiledBatch(exc) from exc
                    results.append((False, exc))
            self.settle(txn)
            # the number LMDB gives this commit (`follows`): the write transaction's own id, read
            # before the commit (env.info() after it builds a dict of six, ~14k instructions)
            txn_id = txn.id()
            txn.commit()
            self.committed = (txn, txn_id)
        except BaseException as exc:
            txn.abort()
            reason = disk_full_reason(exc)
            if reason is not None:
                raise StoreFullError(
                    f"disk full while writing to {self.path} ({reason}: {exc}): the write was refused, "
                    "every earlier acknowledged record is intact",
                    reason,
                ) from exc
            raise
        self.last_seq = ctx.next_seq - 1
        return results

    def settle(self, txn: lmdb.Transaction[bytes]) -> None:
        """Write what the projections kept in memory of the records `txn` applied; called before
        it commits (a transaction that applies records outside `write_batch` calls it too)."""
        for settle in self._settlers:
            settle(txn)

    def follows(self, kept: lmdb.Transaction[bytes] | None, txn: lmdb.Transaction[bytes]) -> bool:
        """Whether the write transaction `txn` is the first after `kept`, which `write_batch`
        committed: then what a projection kept in memory of what `kept` wrote or read is still
        what is stored. False after an aborted transaction, and when any other write
        transaction committed between (LMDB numbers each commit that changed something)."""
        last, last_id = self.committed
        return kept is last and kept is not None and txn.id() == last_id + 1

    def expire_payloads(self, txn: lmdb.Transaction[bytes], phy_min: int) -> None:
        """Retention: the commit log's bytes below phy_min go (chunks.expire)."""
        self.chunk_tail = None
        chunks.expire(txn, self.commitlog_db, phy_min)

    def flush(self) -> None:
        """Force everything committed so far to disk (the ASYNC_FLUSH flush tick)."""
        try:
            with self.map_gate.reading():
                self.env.sync(True)
        except lmdb.Error as exc:
            reason = disk_full_reason(exc)
            if reason is None:
                raise
            raise StoreFullError(
                f"disk full while flushing {self.path} ({reason}: {exc})", reason
            ) from exc

    # ------------------------------------------------------------------ reading
    def read_txn(self) -> lmdb.Transaction[bytes]:
        return self.env.begin(buffers=False)

    def read(
        self, from_seq: int = 1, to_seq: int | None = None
    ) -> Generator[tuple[int, Record], None, None]:
        """Yield (seq, record) from from_seq on, in order, up to to_seq inclusive."""
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.log_db)
            if not cur.set_range(records.seq_key(max(from_seq, 1))):
                return
            for key, value in cur:
                seq = records.key_seq(key)
                if to_seq is not None and seq > to_seq:
                    return
                yield seq, records.unpack(value)

    def read_raw(self, from_seq: int = 1) -> Iterator[tuple[int, bytes]]:
        """Yield (seq, encoded record) from from_seq on, as stored."""
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.log_db)
            if not cur.set_range(records.seq_key(max(from_seq, 1))):
                return
            for key, value in cur:
                yield records.key_seq(key), value

    def payloads(self, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """Every (physical offset, message bytes) of the commit log from `start` on, in order
        (in a read transaction of its own)."""
        if self.commitlog_db is None:  # a read-only view of a directory before format 7
            return
        with self.env.begin() as txn:
            yield from chunks.messages(txn, self.commitlog_db, start)

    def payloads_in(
        self, txn: lmdb.Transaction[bytes], start: int = 0
    ) -> Iterator[tuple[int, bytes]]:
        """The same within a transaction of the caller's."""
        if self.commitlog_db is None:
            return iter(())
        return chunks.messages(txn, self.commitlog_db, start)

    def payload(self, txn: lmdb.Transaction[bytes], physical_offset: int) -> bytes | None:
        """The message bytes at a physical offset, None where there are none (expired, never
        received, or no message starts there), read from the chunk(s) holding them."""
        if self.commitlog_db is None:
            return None
        raw = chunks.read(txn, self.commitlog_db, physical_offset)
        if raw is None or not chunks.stored_at(raw, physical_offset):
            return None
        return raw

    def payload_reader(self, txn: lmdb.Transaction[bytes]) -> chunks.Read:
        """`payload` for a loop over nearby messages in one transaction: it reads each chunk once
        (no write to the commit log may happen while it is used)."""
        if self.commitlog_db is None:
            return lambda phy: None
        return chunks.reader(txn, self.commitlog_db)


class _SpoiledBatch(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


# what a failed write of a full filesystem looks like: ENOSPC from write(2), EDQUOT when a
# quota is the limit, and EIO from LMDB itself when a write came back short (mdb_page_flush)
_FULL_ERRNOS = {errno.ENOSPC: "ENOSPC", errno.EIO: "EIO", errno.EDQUOT: "EDQUOT"}
_FULL_MESSAGES = {os.strerror(code): name for code, name in _FULL_ERRNOS.items()}


def disk_full_reason(exc: BaseException) -> str | None:
    """ENOSPC, EIO or EDQUOT when exc is a write refused by a full disk, else None.

    LMDB reports these as lmdb.DiskError (ENOSPC) or as a plain lmdb.Error whose
    `code` (C extension and cffi alike) or message carries the errno; an
    OSError carries it in `errno`.
    """
    if isinstance(exc, StoreFullError):
        return exc.reason
    if isinstance(exc, lmdb.DiskError):
        return "ENOSPC"
    if isinstance(exc, OSError):
        return _FULL_ERRNOS.get(exc.errno or 0)
    if not isinstance(exc, lmdb.Error):
        return None
    code = getattr(exc, "code", None)
    if isinstance(code, int) and code in _FULL_ERRNOS:
        return _FULL_ERRNOS[code]
    text = str(exc)
    return next((name for message, name in _FULL_MESSAGES.items() if message in text), None)


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem `path` is on, from the mount table (None when unknown)."""
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return None
    return mount_type(os.path.realpath(path), mounts)


def mount_type(path: str, mounts: str) -> str | None:
    """The filesystem type of the mount in `mounts` (/proc/self/mounts' text) holding `path`: the
    last mounted of those whose mount point is the longest prefix of it."""
    best, found = -1, None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        # spaces, tabs, newlines and backslashes in a mount point are octal escapes
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:
            best, found = len(point), fields[2]
    return found
