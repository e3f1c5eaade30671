"""The lock on a data directory: one process writes it at a time (B-490).

RocketMQ's broker holds an exclusive file lock on `lock` in its store root for
as long as it runs (DefaultMessageStore#start), and refuses to start when it
cannot take it. Here every process that writes a data directory (serve,
archive, replay into, import, an offline upgrade) takes `<data dir>/lock` the
same way: `flock(LOCK_EX | LOCK_NB)` on an open descriptor, so the kernel
drops the lock with the process, `kill -9` included, and nothing is left to
clean up. The holder's PID is written into the file for the message a second
one gets. The lock is taken before LMDB is opened for write or anything else
is created, so a refused process changes nothing.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = "lock"
PROBE_WAIT = 0.25  # seconds: longer than any reader's probe of the lock (`in_use`) holds it


class DataDirInUse(Exception):
    """Another process holds the data directory's lock."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        self.data_dir = data_dir
        self.pid = pid
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"{data_dir} is in use by {holder} (it holds {data_dir / LOCK_FILE}); stop it first"
        )


def holder_pid(data_dir: str | os.PathLike[str]) -> int | None:
    """The PID written in the lock file, if one can be read (the holder may be writing it)."""
    try:
        text = (Path(data_dir) / LOCK_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class DataDirLock:
    """The held lock of one data directory; `release` (or the process's end) drops it."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        self.data_dir = data_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: str | os.PathLike[str]) -> DataDirLock:
        """Take the lock at once or raise DataDirInUse; creates the directory if it is missing."""
        path = Path(data_dir)
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            _lock_now(fd)
        except BlockingIOError:
            os.close(fd)
            raise DataDirInUse(path, holder_pid(path)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # no PID left behind that names a process gone
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _lock_now(fd: int) -> None:
    """flock(LOCK_EX) without waiting for a holder, only for a reader's probe (`in_use`), which
    holds the lock for a moment: tried again within PROBE_WAIT, then BlockingIOError."""
    deadline = time.monotonic() + PROBE_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(PROBE_WAIT / 10)


@contextmanager
def holding(data_dir: str | os.PathLike[str]) -> Iterator[DataDirLock]:
    """The data directory's lock for the body of a `with`: every writer verb runs inside one."""
    lock = DataDirLock.acquire(data_dir)
    try:
        yield lock
    finally:
        lock.release()


def in_use(data_dir: str | os.PathLike[str]) -> int | None:
    """The PID of the process writing the directory now (0 if unknown), or None if none is.

    Probes the lock without keeping it: a reader uses it to choose how to read.
    """
    path = Path(data_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return holder_pid(data_dir) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
