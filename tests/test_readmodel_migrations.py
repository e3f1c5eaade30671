"""The read model's schema is owned by Alembic: every revision upgrades to head, and head equals the models."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import trio
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, select

from es_broker.clock import ManualClock
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.readmodel import db
from es_broker.readmodel.follower import open_follower
from es_broker.readmodel.models import FAMILY_TABLES, Base
from es_broker.schema.families import FAMILIES, Source
from es_broker.store import Store
from tests.conftest import START
from tests.process_fixtures import ROOT
from tests.timetravel_histories import fresh_pg, reset_by_time  # noqa: F401  (fixture)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rm.sqlite'}"
    return request.getfixturevalue("fresh_pg")


def schema_differences(engine) -> list:
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), Base.metadata)


def test_migrations_upgrade_an_empty_database_to_the_models(url):
    engine = db.open_engine(url)
    try:
        db.upgrade(engine)
        assert db.current_revision(engine) == db.revisions()[-1]
        assert schema_differences(engine) == []
    finally:
        engine.dispose()


@pytest.mark.parametrize("revision", db.revisions()[:-1])
def test_migrations_upgrade_a_database_at_every_earlier_revision(url, revision):
    engine = db.open_engine(url)
    try:
        db.upgrade(engine, revision)
        assert db.current_revision(engine) == revision
        db.upgrade(engine)
        assert schema_differences(engine) == []
    finally:
        engine.dispose()


def test_an_upgrade_fills_new_tables_from_the_records_already_applied(url, tmp_path):
    data_dir = tmp_path / "data"

    async def scenario() -> None:
        clock = ManualClock(START)
        broker = Broker.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), clock)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            await broker.update_topic(
                {"topicName": "T", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
            )
            for q in (0, 1):
                await broker.put_message("T", q, MessageIn(b"m"))
                await broker.pull("G", "T", q, 0, client="c1", commit_offset=1)
            clock.advance(1000)
            await reset_by_time(broker, "G", "T", START, True)
            await broker.update_topic_perm("T", 4, requester="ops")
            nursery.cancel_scope.cancel()
        broker.close()

    trio.run(scenario)
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    follower = open_follower(url, store.log, Source())
    try:
        follower.catch_up()
        before = dump_all(follower.engine)
        db.downgrade(follower.engine, db.revisions()[0])  # a database left at the first revision...
        db.upgrade(follower.engine)  # ...is brought to head, its new tables filled from `records`
        assert dump_all(follower.engine) == before
        assert before["resets"] and before["reset_queues"] and before["topic_changes"]
    finally:
        follower.engine.dispose()
        store.close()


def dump_all(engine) -> dict[str, list[tuple]]:
    with engine.connect() as conn:
        return {
            t.name: [tuple(r) for r in conn.execute(select(t).order_by(*t.primary_key.columns))]
            for t in Base.metadata.sorted_tables
        }


def test_every_family_table_has_the_family_columns():
    for family, model in FAMILY_TABLES.items():
        columns = set(model.__table__.c.keys())
        wanted = {name for name, kind in FAMILIES[family].all_columns if kind != "reset_queues"}
        assert wanted <= columns, (family, wanted - columns)


def test_alembic_command_line_upgrades_head(tmp_path):
    target = tmp_path / "cli.sqlite"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"url=sqlite:///{target}", "upgrade", "head"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    engine = db.open_engine(f"sqlite:///{target}")
    try:
        assert "offset_changes" in inspect(engine).get_table_names()
        assert db.current_revision(engine) == db.revisions()[-1]
    finally:
        engine.dispose()
