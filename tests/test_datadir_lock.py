"""One process writes a data directory at a time (B-490), through `es-broker` processes.

A broker holds `<data dir>/lock` (flock) while it runs: a second `serve` or an
offline writer (`archive --data-dir`, `replay --into`) on that directory exits
at once, non-zero, with one line naming the directory and the holder's PID, and
changes nothing; the first broker goes on. The lock dies with its process
(kill -9 included). Read-only verbs read a served directory.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from es_broker.client import SendStatus, SyncProducer
from es_broker.log.dirlock import DataDirInUse, DataDirLock, holding, in_use
from tests.helpers import cli
from tests.process_fixtures import serve

FREE_PORTS = ("--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0")
NO_READMODEL = ("--readmodel-url", "none")


def _send(namesrv: str, *bodies: bytes) -> None:
    with SyncProducer(namesrv, "LockPG", client_ip="127.0.0.1") as producer:
        for body in bodies:
            assert producer.send("LockT", body).status == SendStatus.SEND_OK


def _refused_naming_the_holder(done: subprocess.CompletedProcess[str], data_dir: Path, pid: int):
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(data_dir) in lines[0]
    assert f"process {pid}" in lines[0]
    assert "Traceback" not in done.stdout + done.stderr


def _files(data_dir: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under the directory but the lock file and LMDB's reader table."""
    return {
        str(p.relative_to(data_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(data_dir.rglob("*"))
        if p.is_file() and p.name not in ("lock", "lock.mdb")
    }


def test_b490_a_second_serve_on_a_served_directory_exits_at_once_and_the_first_goes_on(tmp_path):
    data_dir = tmp_path / "data"
    with serve(data_dir, *NO_READMODEL) as first:
        _send(first.namesrv, b"before")
        files = _files(data_dir)
        second = cli("serve", "--data-dir", str(data_dir), *FREE_PORTS, timeout=60)
        _refused_naming_the_holder(second, data_dir, first.process.pid)
        assert _files(data_dir) == files  # the refused one changed nothing
        _send(first.namesrv, b"after")  # the first broker's log is still its own
    verified = cli("verify", "--data-dir", str(data_dir))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_b490_offline_writers_are_refused_on_a_served_directory(tmp_path):
    data_dir = tmp_path / "data"
    with serve(data_dir, *NO_READMODEL) as served:
        _send(served.namesrv, b"one", b"two")
        files = _files(data_dir)
        archived = cli("archive", "--data-dir", str(data_dir), "--before", "now")
        _refused_naming_the_holder(archived, data_dir, served.process.pid)
        assert _files(data_dir) == files
        # replay writes its --into: a served directory is not one it may write
        into = cli("replay", "--data-dir", str(data_dir), "--into", str(data_dir))
        _refused_naming_the_holder(into, data_dir, served.process.pid)
        assert _files(data_dir) == files
    verified = cli("verify", "--data-dir", str(data_dir))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_b490_the_lock_dies_with_a_killed_broker(tmp_path):
    data_dir = tmp_path / "data"
    with serve(data_dir, *NO_READMODEL) as first:
        _send(first.namesrv, b"before the kill")
        first.process.kill()  # SIGKILL: nothing of its own runs
        first.process.wait()
    with serve(data_dir, *NO_READMODEL) as again:  # starts: nothing left to clean up
        _send(again.namesrv, b"after the restart")
        assert (data_dir / "lock").read_text().strip() == str(again.process.pid)


def test_b490_read_only_verbs_read_a_served_directory(tmp_path):
    data_dir = tmp_path / "data"
    with serve(data_dir, *NO_READMODEL) as served:
        _send(served.namesrv, *(b"m%d" % i for i in range(20)))
        d = ("--data-dir", str(data_dir))
        for verb in (
            ("verify", *d),
            ("explain", *d, "-g", "LockG", "-t", "LockT"),
            ("offsets", *d, "--group", "LockG", "--at", "now"),
            ("history", *d, "--group", "LockG"),
        ):
            done = cli(*verb)
            assert done.returncode == 0, (verb, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr
        _send(served.namesrv, b"still served")


def test_b490_the_lock_names_its_holder_and_a_probe_leaves_it_free(tmp_path):
    assert in_use(tmp_path) is None  # no lock file yet
    with holding(tmp_path):
        assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"
        assert in_use(tmp_path) == os.getpid()
        with pytest.raises(DataDirInUse, match=f"in use by process {os.getpid()}"):
            DataDirLock.acquire(tmp_path)  # a second open file: refused as another process is
    assert in_use(tmp_path) is None
    assert (tmp_path / "lock").read_text() == ""  # no PID left that names a holder gone
    with holding(tmp_path):
        assert in_use(tmp_path) == os.getpid()
