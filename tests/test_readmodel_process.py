"""`es-broker serve` runs the read-model follower as a child process: the two never share a fate.

The child is restarted when it dies, stopped when the broker stops, ends by
itself when the broker is killed, and a read model that cannot be written
never stops the broker from serving.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from es_broker.readmodel import db
from es_broker.readmodel.models import RecordRow
from tests.process_fixtures import serve
from tests.waiting import poll_until_sync

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="finds child processes in /proc"
)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def topic_records(url: str) -> int:
    """How many topic_updated rows the read model holds (0 before the follower made its schema)."""
    engine = db.open_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(
                select(func.count()).select_from(RecordRow).where(RecordRow.type == "topic_updated")
            ).scalar()
    except OperationalError:
        return 0
    finally:
        engine.dispose()


def test_serve_restarts_a_follower_child_that_dies(tmp_path):
    data_dir = tmp_path / "data"
    url = db.default_url(data_dir)
    with serve(data_dir) as served:
        (first,) = poll_until_sync(lambda: children(served.process.pid), 30, "the follower child")
        served.admin("updateTopic", "-b", served.broker, "-t", "A", "-r", "1", "-w", "1")
        before = poll_until_sync(
            lambda: topic_records(url), 30, "the first topic in the read model"
        )
        os.kill(first, signal.SIGKILL)
        poll_until_sync(lambda: not alive(first), 30, "the killed child gone")
        (second,) = poll_until_sync(
            lambda: [p for p in children(served.process.pid) if p != first],
            30,
            "a new follower child",
        )
        served.admin("updateTopic", "-b", served.broker, "-t", "B", "-r", "1", "-w", "1")
        poll_until_sync(
            lambda: topic_records(url) > before, 30, "the second topic in the read model"
        )
        assert alive(second)
    assert served.process.returncode == 0


def test_the_follower_child_yields_the_cpu_to_the_broker(tmp_path):
    """B-311: the read-model child runs at a lower priority than the broker that started it."""
    with serve(tmp_path / "data") as served:
        (child,) = poll_until_sync(lambda: children(served.process.pid), 30, "the follower child")
        broker_nice = os.getpriority(os.PRIO_PROCESS, served.process.pid)
        if broker_nice >= 19:
            pytest.skip("the broker already runs at the lowest priority")
        # the child lowers its own priority as its first step: wait until it has
        poll_until_sync(
            lambda: os.getpriority(os.PRIO_PROCESS, child) != broker_nice,
            30,
            "the follower child's priority lowered",
        )
        assert os.getpriority(os.PRIO_PROCESS, child) == min(19, broker_nice + 10)


def test_stopping_serve_stops_its_follower_child(tmp_path):
    with serve(tmp_path / "data") as served:
        (child,) = poll_until_sync(lambda: children(served.process.pid), 30, "the follower child")
    assert served.process.returncode == 0
    assert not alive(child)


def test_the_follower_child_ends_when_its_broker_is_killed(tmp_path):
    with serve(tmp_path / "data") as served:
        (child,) = poll_until_sync(lambda: children(served.process.pid), 30, "the follower child")
        served.process.kill()
        served.process.wait()
        poll_until_sync(lambda: not alive(child), 30, "the orphaned follower child ending")


def test_serve_with_readmodel_url_none_runs_no_follower(tmp_path):
    with serve(tmp_path / "data", "--readmodel-url", "none") as served:
        served.admin("updateTopic", "-b", served.broker, "-t", "A", "-r", "1", "-w", "1")
        assert children(served.process.pid) == []
        assert not (tmp_path / "data" / db.SQLITE_NAME).exists()


def test_the_broker_serves_when_the_read_model_cannot_be_written(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the database's directory should be")
    with serve(
        tmp_path / "data", "--readmodel-url", f"sqlite:///{blocker / 'rm.sqlite'}"
    ) as served:
        served.admin("updateTopic", "-b", served.broker, "-t", "Orders", "-r", "2", "-w", "2")
        sent = served.admin_json("sendMessage", "-t", "Orders", "-p", "hello", "-k", "k1")
        assert served.admin_json("queryMsgById", "-i", sent["msgId"])
        assert served.process.poll() is None
    assert served.process.returncode == 0
