"""`es-broker readmodel follow`: the read-model follower as a process of its own.

It opens the data directory's log read-only, catches up, then polls the
log's last sequence number for new records until SIGTERM or SIGINT. Started
by `es-broker serve` (`supervisor.py`), it also ends when the broker dies,
even by SIGKILL: on Linux the kernel sends it SIGTERM (PR_SET_PDEATHSIG),
and everywhere it notices its parent is gone at the next poll.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import time
from pathlib import Path

from es_broker.log import RecordLog
from es_broker.schema.families import Source

logger = logging.getLogger("es_broker.readmodel")

PR_SET_PDEATHSIG = 1
LMDB_DIR = "lmdb"  # es_broker.store.LMDB_DIR


POSITION_FILE = "readmodel.position"  # the follower's checkpoint, for the broker's runtime info
POSITION_EVERY = 0.5  # seconds between rewrites of the position file while it moves


class PositionFile:
    """The follower's checkpoint, written where the broker reads it (`read_position`).

    Rewritten atomically (a temp file renamed), at most every POSITION_EVERY
    seconds while records flow, so a fast follower does not write a file per batch.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last = -1.0
        self._written: int | None = None

    def write(self, position: int, settled: bool) -> None:
        """Record `position`; while records flow (not `settled`) at most every POSITION_EVERY s."""
        if position == self._written:
            return
        now = time.monotonic()
        if not settled and self._last >= 0 and now - self._last < POSITION_EVERY:
            return
        self._last = now
        self._written = position
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(f"{position}\n")
            os.replace(tmp, self.path)
        except OSError as exc:  # a report only: the follower goes on
            logger.warning("read-model position not written to %s: %s", self.path, exc)


QUARANTINE_FILE = "readmodel.quarantined"  # the follower's count of quarantined records (B-367)


class CountFile:
    """A count the follower reports to the broker, rewritten atomically when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._written: int | None = None

    def write(self, count: int) -> None:
        if count == self._written:
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(f"{count}\n")
            os.replace(tmp, self.path)
            self._written = count
        except OSError as exc:  # a report only: the follower goes on
            logger.warning("read-model count not written to %s: %s", self.path, exc)


def read_quarantined(data_dir: str | Path) -> int | None:
    """The follower's last count of quarantined records, None before it counted."""
    try:
        return int((Path(data_dir) / QUARANTINE_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def read_position(data_dir: str | Path) -> int | None:
    """The last checkpoint the follower reported, or None when it never did."""
    try:
        return int((Path(data_dir) / POSITION_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


class Stop:
    """Becomes true on SIGTERM/SIGINT, or when the parent process is gone."""

    def __init__(self, parent: int | None = None) -> None:
        self.parent = parent
        self.signalled = False

    def __call__(self) -> bool:
        if self.parent is not None and os.getppid() != self.parent:
            if not self.signalled:
                logger.warning(
                    "read-model follower: the broker (pid %d) is gone, stopping", self.parent
                )
            self.signalled = True
        return self.signalled

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signalled = True


def die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGTERM when the parent dies (Linux); the poll loop's getppid check covers the rest."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request was in place
        raise SystemExit(0)


def open_log(data_dir: str | Path, stop: Stop) -> RecordLog | None:
    """The data directory's log, read-only; waits for the broker to create it. None if stopped first."""
    from es_broker.readmodel.follower import POLL, pause  # SQLAlchemy: the follower's process only

    path = Path(data_dir) / LMDB_DIR
    while not stop():
        if (path / "data.mdb").exists():
            log = RecordLog(path, readonly=True)
            if log.log_db is not None:
                with contextlib.suppress(Exception):
                    log.env.reader_check()  # slots of followers killed before
                return log
            log.close()
        pause(POLL, stop)
    return None


def run(
    data_dir: str,
    url: str,
    source: Source,
    *,
    parent: int | None = None,
    batch: int | None = None,
    nice: int = 0,
) -> int:
    """Follow the log of `data_dir` into `url` until stopped; the exit status."""
    from es_broker.readmodel.follower import BATCH, follow_log  # SQLAlchemy: as above

    if nice > 0:
        try:
            os.nice(nice)
        except OSError as exc:  # a priority only: the follower works the same without it
            logger.warning("read-model follower: priority not lowered by %d: %s", nice, exc)
    stop = Stop(parent)
    stop.install()
    if parent is not None:
        die_with_parent(parent)
    log = open_log(data_dir, stop)
    if log is None:
        return 0
    try:
        follow_log(
            url,
            log,
            source,
            stop=stop,
            batch=batch or BATCH,
            on_position=PositionFile(Path(data_dir) / POSITION_FILE).write,
            on_quarantine=CountFile(Path(data_dir) / QUARANTINE_FILE).write,
        )
    finally:
        log.close()
    return 0
