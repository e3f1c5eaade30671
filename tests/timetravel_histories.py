"""Histories for the time-travel and read-model tests, built with the broker core in process.

`ops` mirrors tests/replay_histories.py and adds what time travel must
get right: resets (planned by the broker, applied by commits with cause
`reset`, or server-side), group offsets removed and cloned, and a broker
clock that sometimes steps back.
`reference_table` is the naive answer: replay the records in order up to
time t and keep the last value per queue.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from hypothesis import strategies as st

from es_broker.clock import ManualClock
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.projections.offset_rule import offset_changes
from es_broker.schema.families import RunningTime
from es_broker.store import Store
from tests.replay_histories import play

START = 1_700_000_000_000
TOPICS = st.sampled_from(["T1", "T2"])
GROUPS = st.sampled_from(["G1", "G2"])
QIDS = st.integers(min_value=0, max_value=3)

ops = st.one_of(
    st.tuples(st.just("topic"), TOPICS, st.integers(1, 4)),
    st.tuples(st.just("send"), TOPICS, QIDS, st.integers(1, 4)),
    st.tuples(st.just("pull"), GROUPS, TOPICS, QIDS, st.integers(0, 6)),
    st.tuples(st.just("commit"), GROUPS, TOPICS, QIDS, st.integers(-1, 12)),
    st.tuples(
        st.just("commit_all"), GROUPS, TOPICS, st.integers(0, 12)
    ),  # a consumer's periodic persist
    st.tuples(
        st.just("reset"),
        GROUPS,
        TOPICS,
        st.integers(0, 30_000),
        st.booleans(),
        st.sampled_from(["compat", "server_side"]),
    ),
    st.tuples(st.just("tick"), st.integers(0, 4000)),
    st.tuples(st.just("back"), st.integers(1, 1500)),  # the broker clock steps back (NTP)
    st.tuples(st.just("remove"), GROUPS),  # DELETE_SUBSCRIPTIONGROUP with removeOffset (B-34)
    st.tuples(
        st.just("clone"), GROUPS, GROUPS, st.sampled_from([None, "T1"])
    ),  # CLONE_GROUP_OFFSET (B-35)
)

# every history starts with its topics, so that sends, commits and resets mostly succeed
PRELUDE = [("topic", "T1", 2), ("topic", "T2", 3), ("send", "T1", 0, 2), ("send", "T2", 1, 1)]
histories = st.lists(ops, min_size=3, max_size=30).map(lambda generated: PRELUDE + generated)


async def run_history(
    data_dir: str, history: list[tuple], *, clock: ManualClock | None = None
) -> None:
    clock = clock or ManualClock(START)
    config = BrokerConfig(storePathRootDir=data_dir, total_physical_memory_bytes=1024**3)
    await play(Broker.open(data_dir, config, clock), clock, history, apply)


async def apply(broker: Broker, clock: ManualClock, op: tuple) -> None:
    kind, *args = op
    if kind == "topic":
        topic, n = args
        await broker.update_topic(
            {"topicName": topic, "readQueueNums": n, "writeQueueNums": n, "perm": 6},
            requester="ops",
        )
    elif kind == "send":
        topic, qid, n = args
        await broker.put_messages(
            topic, qid, [MessageIn(b"m%d" % i) for i in range(n)], requester="p"
        )
    elif kind == "pull":
        group, topic, qid, offset = args
        await broker.pull(group, topic, qid, offset, client="c1", commit_offset=offset)
    elif kind == "commit":
        group, topic, qid, offset = args
        await broker.commit_offset(group, topic, qid, offset, requester="c1")
    elif kind == "commit_all":
        group, topic, offset = args
        config = broker.topic_config(topic)
        for qid in range(config.write_queue_nums if config else 0):
            await broker.commit_offset(group, topic, qid, offset, requester="c2")
    elif kind == "reset":
        group, topic, back, force, mode = args
        await reset_by_time(broker, group, topic, clock.now_ms() - back, force, mode=mode)
    elif kind == "remove":
        await broker.delete_group(args[0], requester="ops", remove_offsets=True)
    elif kind == "clone":
        src, dest, topic = args
        if src != dest:
            await broker.clone_group_offset(src, dest, topic, requester="ops")
    elif kind == "tick":
        clock.advance(args[0])
    elif kind == "back":
        clock.advance(-args[0])


async def reset_by_time(
    broker: Broker,
    group: str,
    topic: str,
    timestamp: int,
    force: bool,
    *,
    mode: str = "compat",
    requester: str = "admin@10.0.0.9",
    clients: tuple[str, ...] = ("10.0.0.5@7",),
) -> None:
    """resetOffsetByTime as RocketMQ runs it: the broker plans, the clients commit the targets (B-78)."""
    plan = await broker.plan_reset(
        group, topic, timestamp, force, requester=requester, notified=list(clients), mode=mode
    )
    if mode == "compat":
        for q in plan.queues:
            await broker.commit_offset(
                group, topic, q.queue_id, q.final, cause="reset", requester=clients[0]
            )


def build(data_dir: Path, history: list[tuple]) -> None:
    trio.run(run_history, str(data_dir), history)


def reference_table(data_dir: Path, at: int) -> dict[tuple[str, str, int], tuple[int, int]]:
    """(group, topic, queue) -> (offset, max) at `at`, by replaying every record in order."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        clock = RunningTime()
        table: dict[tuple[str, str, int], int] = {}
        tops: dict[tuple[str, int], int] = {}
        for _, record in store.log.read():
            if clock.advance(record.get("ts")) > at:
                break  # effective time never decreases: the rest is later too
            for c in offset_changes(record):
                if c.removed:
                    table.pop((c.group, c.topic, c.queue_id), None)
                else:
                    table[(c.group, c.topic, c.queue_id)] = c.new
            if record["type"] == "messages_stored":
                tops[(record["topic"], record["queue_id"])] = record["queue_offset"] + len(
                    record["units"]
                )
        return {k: (v, tops.get((k[1], k[2]), 0)) for k, v in table.items()}
    finally:
        store.close()


def moments(data_dir: Path, picks: list[float]) -> list[int]:
    """Moments inside (and just around) a history's time span, from fractions in [0, 1]."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        times = [r["ts"] for _, r in store.log.read()]
    finally:
        store.close()
    lo, hi = min(times) - 10, max(times) + 10
    return [int(lo + p * (hi - lo)) for p in picks]


# ---------------------------------------------------------------------- a follower in a child process

FOLLOWER_SCRIPT = """
import sys
from es_broker.store import Store
from es_broker.config import BrokerConfig
from es_broker.schema.families import Source
from es_broker.readmodel.follower import open_follower
data_dir, url, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store.open(data_dir, BrokerConfig(storePathRootDir=data_dir), readonly=True)
follower = open_follower(url, store.log, Source(), batch=batch)
print("ready", flush=True)
while follower.step():
    print(follower.position, flush=True)
print("done", flush=True)
"""


def start_follower(data_dir: Path, url: str, batch: int) -> subprocess.Popen:
    root = Path(__file__).resolve().parents[1]
    return subprocess.Popen(
        [sys.executable, "-c", FOLLOWER_SCRIPT, str(data_dir), url, str(batch)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(root)),
    )


def kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def pg_url() -> str | None:
    """ES_BROKER_TEST_PG_URL; under pytest-xdist, a database of the worker's own beside it (made
    the first time), so that two workers never drop each other's tables."""
    url = os.environ.get("ES_BROKER_TEST_PG_URL") or None
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if url is None or not worker:
        return url
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    shared = make_url(url)
    own = shared.set(database=f"{shared.database}_{worker}")
    engine = create_engine(shared, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            found = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": own.database}
            ).first()
            if found is None:
                conn.execute(text(f'CREATE DATABASE "{own.database}"'))
    finally:
        engine.dispose()
    return own.render_as_string(hide_password=False)


@pytest.fixture
def fresh_pg():
    """PostgreSQL from ES_BROKER_TEST_PG_URL with every read-model table dropped first."""
    url = pg_url()
    if url is None:
        pytest.skip("ES_BROKER_TEST_PG_URL is not set")
    from sqlalchemy import text

    from es_broker.readmodel import db
    from es_broker.readmodel.models import Base

    engine = db.open_engine(url)
    with engine.begin() as conn:
        Base.metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    engine.dispose()
    return url
