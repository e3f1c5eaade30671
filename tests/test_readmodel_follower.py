"""The SQL read model's follower: exactly once, resumable, equal to the broker's own answers (S-1).

Runs on SQLite, and on PostgreSQL too when ES_BROKER_TEST_PG_URL is set.
"""

from __future__ import annotations

import json
import tempfile
import threading
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from es_broker.clock import ManualClock
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.readmodel import db, queries
from es_broker.readmodel.follower import Follower, FollowerConflict, open_follower
from es_broker.readmodel.models import Base, Checkpoint, OffsetChangeRow, RecordRow, ResetQueueRow
from es_broker.schema.families import Source
from es_broker.store import Store
from es_broker.timetravel.query import TimeTravel
from tests.conftest import START
from tests.helpers import cli_checked
from tests.timetravel_histories import (
    build,
    fresh_pg,  # noqa: F401  (fixture)
    histories,
    kill,
    moments,
    pg_url,
    reset_by_time,
    start_follower,
)
from tests.waiting import poll_until_sync


@pytest.fixture(params=["sqlite", "postgresql"])
def readmodel_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'readmodel.sqlite'}"
    return request.getfixturevalue("fresh_pg")


@pytest.fixture(scope="module")
def busy_log(tmp_path_factory) -> Path:
    """A log of about 2000 records: sends, deliveries, commits, a reset, a perm change."""
    data_dir = tmp_path_factory.mktemp("busy")

    async def scenario() -> None:
        clock = ManualClock(START)
        broker = Broker.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), clock)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            await broker.update_topic(
                {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
            )
            for i in range(300):
                clock.advance(250)
                await broker.put_message("T", i % 4, MessageIn(b"m%d" % i), requester="p1")
                await broker.pull("G", "T", i % 4, i // 4, client="c1", commit_offset=i // 4)
                if i % 10 == 0:
                    await broker.commit_offset("G2", "T", i % 4, i // 4, requester="c2")
            for q in range(4):
                await broker.commit_offset("G2", "T", q, 60, requester="c2")
            await reset_by_time(broker, "G", "T", START + 20_000, True)
            await broker.update_topic_perm("T", 4, requester="ops")
            nursery.cancel_scope.cancel()
        broker.close()

    trio.run(scenario)
    return data_dir


def open_log(data_dir: Path) -> Store:
    return Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)


def dump(url: str) -> dict[str, list[tuple]]:
    """Every row of every read-model table, in key order."""
    engine = db.open_engine(url)
    try:
        with engine.connect() as conn:
            out = {}
            for table in Base.metadata.sorted_tables:
                keys = list(table.primary_key.columns)
                out[table.name] = [tuple(r) for r in conn.execute(select(table).order_by(*keys))]
            return out
    finally:
        engine.dispose()


def reference(data_dir: Path) -> dict[str, list[tuple]]:
    """The rows of an uninterrupted run in one go, on SQLite."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/reference.sqlite"
        store = open_log(data_dir)
        follower = open_follower(url, store.log, Source(), batch=100_000)
        follower.catch_up()
        follower.engine.dispose()
        store.close()
        return dump(url)


def test_follower_applies_every_record_once_with_its_checkpoint(busy_log, readmodel_url):
    store = open_log(busy_log)
    follower = open_follower(readmodel_url, store.log, Source(), batch=500)
    try:
        assert follower.catch_up() == store.log.last_seq
        assert follower.catch_up() == 0  # nothing new: nothing applied twice
        with follower.engine.connect() as conn:
            assert (
                conn.execute(select(func.count()).select_from(RecordRow)).scalar()
                == store.log.last_seq
            )
            assert conn.execute(select(Checkpoint.last_seq)).scalar() == store.log.last_seq
            changes = conn.execute(select(func.count()).select_from(OffsetChangeRow)).scalar()
            resets = conn.execute(
                select(ResetQueueRow.queue_id, ResetQueueRow.current, ResetQueueRow.final).order_by(
                    ResetQueueRow.queue_id
                )
            ).all()
        with store.read() as txn:
            history = sum(1 for _ in txn.cursor(db=store.offsets.history))
        assert changes == history
        (reset,) = [r for _, r in store.log.read() if r["type"] == "reset_requested"]
        assert [tuple(r) for r in resets] == [(q[0], q[1], q[3]) for q in reset["queues"]]
    finally:
        follower.engine.dispose()
        store.close()


def test_killed_follower_resumes_with_exactly_the_rows_of_an_uninterrupted_run(
    busy_log, readmodel_url
):
    expected = reference(busy_log)
    process = start_follower(busy_log, readmodel_url, batch=40)
    try:
        assert process.stdout.readline().strip() == "ready"
        for _ in range(8):  # let it apply a few batches, then kill it in the middle of the catch-up
            process.stdout.readline()
    finally:
        kill(process)
    store = open_log(busy_log)
    try:
        follower = open_follower(readmodel_url, store.log, Source(), batch=40)
        killed_at = follower.position
        assert 0 < killed_at < store.log.last_seq
        follower.catch_up()
        follower.engine.dispose()
    finally:
        store.close()
    assert dump(readmodel_url) == expected


def test_two_followers_on_one_database_never_apply_a_batch_twice(busy_log, readmodel_url):
    from sqlalchemy.exc import DBAPIError

    store = open_log(busy_log)
    errors: list[Exception] = []

    def run(follower: Follower) -> None:
        while True:
            try:
                if follower.step() == 0:
                    return
            except (FollowerConflict, DBAPIError):
                continue  # the other follower got there first: its transaction won, ours rolled back
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    try:
        followers = [open_follower(readmodel_url, store.log, Source(), batch=50) for _ in range(2)]
        threads = [threading.Thread(target=run, args=(f,)) for f in followers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        for f in followers:
            f.engine.dispose()
    finally:
        store.close()
    assert errors == []
    assert dump(readmodel_url) == reference(busy_log)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sql_offsets_at_equal_the_brokers_answer(busy_log, backend, tmp_path, request):
    url = (
        f"sqlite:///{tmp_path / 'rm.sqlite'}"
        if backend == "sqlite"
        else request.getfixturevalue("fresh_pg")
    )
    at_moments = moments(busy_log, [0.0, 0.2, 0.5, 0.9, 1.0])
    store = open_log(busy_log)
    follower = open_follower(url, store.log, Source())
    follower.catch_up()
    try:
        travel = TimeTravel(store)
        for at in at_moments:
            with store.read() as txn, follower.engine.connect() as conn:
                broker_rows = sorted(travel.offsets_at(txn, at, durable=True), key=_key)
                sql_rows = sorted(queries.offsets_at(conn, "broker-a", at, durable=True), key=_key)
            assert sql_rows == broker_rows
    finally:
        follower.engine.dispose()
        store.close()


def _key(row) -> tuple:
    return (row.group, row.topic, row.queue_id)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories, st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_s001_generated_histories_give_the_same_table_from_the_broker_and_from_sql(history, picks):
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        build(data_dir, history)
        at_moments = moments(data_dir, picks)
        store = open_log(data_dir)
        follower = open_follower(f"sqlite:///{tmp}/rm.sqlite", store.log, Source(), batch=7)
        try:
            follower.catch_up()
            travel = TimeTravel(store)
            for at in at_moments:
                with store.read() as txn, follower.engine.connect() as conn:
                    assert sorted(
                        queries.offsets_at(conn, "broker-a", at, durable=True), key=_key
                    ) == sorted(travel.offsets_at(txn, at, durable=True), key=_key)
        finally:
            follower.engine.dispose()
            store.close()


def test_readmodel_sync_command_catches_up_and_answers(busy_log, tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    done = cli_checked("readmodel", "sync", "--data-dir", str(busy_log), "--readmodel-url", url)
    assert done.stdout.startswith("read model: applied ")
    at = str(START + 30_000)
    sql = json.loads(
        cli_checked(
            "readmodel",
            "offsets",
            "--data-dir",
            str(busy_log),
            "--readmodel-url",
            url,
            "--group",
            "G",
            "--at",
            at,
            "--json",
        ).stdout
    )
    local = json.loads(
        cli_checked(
            "offsets", "--data-dir", str(busy_log), "--group", "G", "--at", at, "--json"
        ).stdout
    )
    assert sql["queues"] == local["queues"] and len(local["queues"]) == 4


def test_serve_runs_the_follower_into_sqlite_in_the_data_directory(tmp_path):
    from tests.process_fixtures import serve

    data_dir = tmp_path / "data"
    with serve(data_dir) as served:
        served.admin("updateTopic", "-b", served.broker, "-t", "RM", "-r", "2", "-w", "2")
        engine = db.open_engine(db.default_url(data_dir))

        def applied() -> bool:
            try:
                with engine.connect() as conn:
                    topics = conn.execute(
                        select(RecordRow.body).where(RecordRow.type == "topic_updated")
                    ).all()
            except OperationalError:  # the follower process has not created its schema yet
                return False
            return any('"topic":"RM"' in body for (body,) in topics)

        try:
            poll_until_sync(applied, 30, "the follower applying the topic record")
        finally:
            engine.dispose()


def test_pg_is_tested_when_configured():
    """A marker in the test output: PostgreSQL runs only with ES_BROKER_TEST_PG_URL (set by .ci/run);
    when set, it is a PostgreSQL server that answers, so the PostgreSQL runs above ran on one."""
    url = pg_url()
    if url is None:
        pytest.skip("ES_BROKER_TEST_PG_URL is not set: the read model ran on SQLite only")
    engine = db.open_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.dialect.name == "postgresql"
            assert conn.execute(select(1)).scalar() == 1
    finally:
        engine.dispose()
