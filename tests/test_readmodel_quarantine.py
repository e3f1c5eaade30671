"""A record the read model cannot store is quarantined and skipped; the database's own trouble skips nothing.

The bad record is written into the log directly (the broker itself refuses
such values at its edge): an `offset_queried` whose offset is beyond int64,
which msgpack holds but no BIGINT column does. Runs on SQLite, and on
PostgreSQL too when ES_BROKER_TEST_PG_URL is set.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text, update
from sqlalchemy.exc import OperationalError

from es_broker.config import BrokerConfig
from es_broker.log import make
from es_broker.readmodel import db
from es_broker.readmodel.export import QUARANTINE, export, read_quarantine
from es_broker.readmodel.follower import Follower, follow_log, open_follower
from es_broker.readmodel.models import Checkpoint, FailureRow, OffsetQueryRow, RecordRow
from es_broker.schema.families import Source
from es_broker.store import Store
from tests.conftest import START
from tests.helpers import cli_checked
from tests.process_fixtures import ROOT
from tests.timetravel_histories import fresh_pg  # noqa: F401  (fixture)

BEYOND_INT64 = 2**63 + 5
BAD_SEQ = 3
RECORDS = 7


@pytest.fixture(params=["sqlite", "postgresql"])
def readmodel_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'readmodel.sqlite'}"
    return request.getfixturevalue("fresh_pg")


def queried(i: int, offset: int) -> dict:
    """An `offset_queried` record as it is stored. Built by hand, not with `make`: `make` refuses an offset
    beyond int64 (B-138), but a log written before that rule, or by another tool, can hold one."""
    return {
        "type": "offset_queried",
        "v": 1,
        "ts": START + i,
        "group": "G",
        "topic": "T",
        "queue_id": 0,
        "row": 0,
        "offset": offset,
        "code": 0,
        "min_offset": 0,
        "head_in_memory": True,
        "phy_max": 0,
        "requester": "c1",
    }


def append(data_dir: Path, records: list[dict]) -> None:
    """Append records to a data directory's log as the broker's writer does (one write transaction)."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)))
    try:
        results = store.log.write_batch([lambda ctx, r=r: ctx.append(r) for r in records])
        assert all(ok for ok, _ in results), results
    finally:
        store.close()


@pytest.fixture
def bad_log(tmp_path) -> Path:
    """Records 1..7, all offset queries; record 3's offset is beyond int64."""
    data_dir = tmp_path / "data"
    append(
        data_dir, [queried(i, BEYOND_INT64 if i == BAD_SEQ else i) for i in range(1, RECORDS + 1)]
    )
    return data_dir


def open_log(data_dir: Path) -> Store:
    return Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)


def stored_seqs(follower: Follower) -> list[int]:
    with follower.engine.connect() as conn:
        return list(conn.execute(select(RecordRow.seq).order_by(RecordRow.seq)).scalars())


def test_a_record_with_an_int_beyond_int64_is_quarantined_and_the_follower_goes_on(
    bad_log, readmodel_url
):
    store = open_log(bad_log)
    follower = open_follower(readmodel_url, store.log, Source(), batch=100)
    try:
        assert follower.catch_up() == RECORDS
        assert stored_seqs(follower) == [s for s in range(1, RECORDS + 1) if s != BAD_SEQ]
        (failure,) = follower.quarantined()
        assert (failure.seq, failure.type, failure.attempts) == (BAD_SEQ, "offset_queried", 1)
        assert failure.error and failure.version
        assert follower.checkpoint()[0] == RECORDS
        store.close()  # (one process cannot hold a data directory open read-only and read-write)
        append(bad_log, [queried(RECORDS + 1, 8)])  # the broker goes on; so does the follower
        store = open_log(bad_log)
        follower.log = store.log
        assert follower.catch_up() == 1
        assert stored_seqs(follower)[-1] == RECORDS + 1
    finally:
        follower.engine.dispose()
        store.close()


def test_a_quarantined_record_in_a_batch_of_one_moves_the_checkpoint_with_it(bad_log, tmp_path):
    store = open_log(bad_log)
    follower = open_follower(f"sqlite:///{tmp_path / 'one.sqlite'}", store.log, Source(), batch=1)
    try:
        assert [follower.step() for _ in range(RECORDS + 1)] == [1] * RECORDS + [0]
        assert [f.seq for f in follower.quarantined()] == [BAD_SEQ]
        assert len(stored_seqs(follower)) == RECORDS - 1
    finally:
        follower.engine.dispose()
        store.close()


def _in_a_step() -> bool:
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is Follower._apply_once.__code__:
            return True
        frame = frame.f_back
    return False


def test_the_cyclic_collector_is_as_it_was_after_every_step(bad_log, tmp_path):
    """A step runs without the cyclic collector (its objects hold no cycles) and gives it back as
    it found it: after a batch that a bad record fails, its quarantine, and a step that raises."""
    import gc

    store = open_log(bad_log)
    follower = open_follower(f"sqlite:///{tmp_path / 'gc.sqlite'}", store.log, Source(), batch=100)
    inside: list[str] = []
    gc.callbacks.append(lambda phase, info: inside.append(phase) if _in_a_step() else None)
    try:
        assert gc.isenabled()
        assert follower.step() == RECORDS  # the batch failed, then record by record
        assert [f.seq for f in follower.quarantined()] == [BAD_SEQ]
        assert gc.isenabled()
        gc.disable()
        try:
            assert follower.step() == 0
            assert not gc.isenabled()  # not turned on where the caller had it off
        finally:
            gc.enable()
        follower.engine.dispose()
        follower.engine = create_engine(f"sqlite:///{tmp_path / 'missing' / 'x.sqlite'}")
        with pytest.raises(OperationalError):
            follower.step()
        assert gc.isenabled()
        assert inside == []  # no collection during a step
    finally:
        gc.callbacks.pop()
        follower.engine.dispose()
        store.close()


def test_a_locked_database_is_retried_not_quarantined(bad_log, tmp_path):
    path = tmp_path / "locked.sqlite"
    store = open_log(bad_log)
    db.upgrade(db.open_engine(f"sqlite:///{path}"))
    impatient = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    follower = Follower(impatient, store.log, Source())
    holder = db.open_engine(f"sqlite:///{path}")
    try:
        with holder.connect() as conn:
            conn.exec_driver_sql("BEGIN EXCLUSIVE")
            with pytest.raises(OperationalError, match="locked"):
                follower.step()
            conn.exec_driver_sql("ROLLBACK")
        assert follower.quarantined() == [] and follower.checkpoint()[0] == 0  # nothing skipped
        assert follower.catch_up() == RECORDS
        assert [f.seq for f in follower.quarantined()] == [BAD_SEQ]
    finally:
        impatient.dispose()
        holder.dispose()
        store.close()


def test_status_shows_checkpoint_lag_and_the_quarantined_record(bad_log, tmp_path):
    url = f"sqlite:///{tmp_path / 'status.sqlite'}"
    cli_checked(
        "readmodel", "sync", "--data-dir", str(bad_log), "--readmodel-url", url, "--batch", "2"
    )
    append(bad_log, [queried(RECORDS + 1, 8), queried(RECORDS + 2, 9)])
    status = json.loads(
        cli_checked(
            "readmodel", "status", "--data-dir", str(bad_log), "--readmodel-url", url, "--json"
        ).stdout
    )
    assert (status["checkpoint"], status["log_last_seq"], status["lag"]) == (
        RECORDS,
        RECORDS + 2,
        2,
    )
    (failure,) = status["quarantined"]
    assert (failure["seq"], failure["type"], failure["attempts"]) == (BAD_SEQ, "offset_queried", 1)
    assert "int" in failure["error"]
    shown = cli_checked(
        "readmodel", "status", "--data-dir", str(bad_log), "--readmodel-url", url
    ).stdout
    assert f"checkpoint {RECORDS}, log at {RECORDS + 2}, lag 2 records" in shown
    assert f"seq {BAD_SEQ}  offset_queried  attempts 1" in shown


def test_the_retry_verb_tries_the_quarantined_records_again(bad_log, tmp_path):
    url = f"sqlite:///{tmp_path / 'retry.sqlite'}"
    cli_checked("readmodel", "sync", "--data-dir", str(bad_log), "--readmodel-url", url)
    done = json.loads(
        cli_checked(
            "readmodel", "retry", "--data-dir", str(bad_log), "--readmodel-url", url, "--json"
        ).stdout
    )
    assert done == {"stored": [], "failed": [BAD_SEQ]}
    status = json.loads(
        cli_checked(
            "readmodel", "status", "--data-dir", str(bad_log), "--readmodel-url", url, "--json"
        ).stdout
    )
    assert [f["attempts"] for f in status["quarantined"]] == [2]


def test_after_an_upgrade_the_follower_stores_a_quarantined_record_that_stores_fine_now(
    tmp_path, readmodel_url
):
    data_dir = tmp_path / "data"
    append(data_dir, [queried(i, i) for i in range(1, RECORDS + 1)])
    store = open_log(data_dir)
    follower = open_follower(readmodel_url, store.log, Source())
    try:
        follower.catch_up()
        with follower.engine.connect() as conn:
            expected = [
                tuple(r) for r in conn.execute(select(OffsetQueryRow).order_by(OffsetQueryRow.seq))
            ]
        # the state an older es-broker left: record 2 quarantined, its rows missing, the checkpoint past it
        with follower.engine.begin() as conn:
            for table in (RecordRow, OffsetQueryRow):
                conn.execute(table.__table__.delete().where(table.seq == 2))
            conn.execute(
                FailureRow.__table__.insert().values(
                    source="broker-a",
                    seq=2,
                    type="offset_queried",
                    time=START + 2,
                    error="ValueError: old bug",
                    version="0.0.1",
                    first_failed_at=START,
                    last_failed_at=START,
                    attempts=1,
                )
            )
        # stops once the quarantine is empty: on start, the follower retried what 0.0.1 failed on
        follow_log(
            readmodel_url, store.log, Source(), stop=lambda: follower.quarantined() == [], poll=0.01
        )
        with follower.engine.connect() as conn:
            assert [
                tuple(r) for r in conn.execute(select(OffsetQueryRow).order_by(OffsetQueryRow.seq))
            ] == expected
            assert conn.execute(select(func.count()).select_from(RecordRow)).scalar() == RECORDS
    finally:
        follower.engine.dispose()
        store.close()


def test_after_an_upgrade_a_record_that_still_fails_stays_quarantined_with_the_new_version(
    bad_log, readmodel_url
):
    store = open_log(bad_log)
    follower = open_follower(readmodel_url, store.log, Source())
    try:
        follower.catch_up()
        with follower.engine.begin() as conn:
            conn.execute(update(FailureRow).values(version="0.0.1"))
        assert follower.retry_quarantined(other_versions_only=True).failed == [BAD_SEQ]
        (failure,) = follower.quarantined()
        assert (failure.attempts, failure.version) == (2, follower.version)
        # same version: left alone
        assert follower.retry_quarantined(other_versions_only=True).failed == []
    finally:
        follower.engine.dispose()
        store.close()


def test_a_follower_process_follows_new_records_and_stops_on_sigterm(bad_log, tmp_path):
    from tests.waiting import poll_until_sync

    url = f"sqlite:///{tmp_path / 'proc.sqlite'}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "readmodel",
            "follow",
            "--data-dir",
            str(bad_log),
            "--readmodel-url",
            url,
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    engine = db.open_engine(url)

    def checkpoint() -> int:
        try:
            with engine.connect() as conn:
                return conn.execute(select(Checkpoint.last_seq)).scalar() or 0
        except OperationalError:  # the schema is not there yet
            return 0

    try:
        poll_until_sync(lambda: checkpoint() == RECORDS, 60, "the follower process catching up")
        append(bad_log, [queried(RECORDS + 1, 8)])
        poll_until_sync(lambda: checkpoint() == RECORDS + 1, 60, "the follower process following")
        process.terminate()
        assert process.wait(timeout=30) == 0
        assert f"record {BAD_SEQ} (offset_queried) quarantined" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        engine.dispose()


def test_the_export_quarantines_a_record_it_cannot_write_and_goes_on(bad_log, tmp_path):
    import pyarrow.dataset as ds

    out = tmp_path / "export"
    store = open_log(bad_log)
    try:
        result = export(store.log, out, chunk=4)
        assert [(f["seq"], f["type"]) for f in result.quarantined] == [(BAD_SEQ, "offset_queried")]
        assert result.last_seq == RECORDS
        export(store.log, out)  # nothing new: nothing quarantined twice
    finally:
        store.close()
    assert [f["seq"] for f in read_quarantine(out)] == [BAD_SEQ]
    seqs = sorted(
        ds.dataset(out / "queries", format="parquet", partitioning="hive")
        .to_table()["seq"]
        .to_pylist()
    )
    assert seqs == [s for s in range(1, RECORDS + 1) if s != BAD_SEQ]


def test_the_export_command_shows_what_it_quarantined(bad_log, tmp_path):
    out = tmp_path / "export"
    shown = cli_checked("export", "--data-dir", str(bad_log), "--out", str(out)).stdout
    assert f"quarantined 1 records that could not be exported (kept in {out / QUARANTINE})" in shown
    assert f"seq {BAD_SEQ}  offset_queried: " in shown


def test_a_bad_ts_neither_stops_nor_poisons_the_running_time(tmp_path):
    data_dir = tmp_path / "data"
    bad = make("offset_queried", START, group="G", topic="T", queue_id=0, offset=1)
    bad["ts"] = BEYOND_INT64
    append(data_dir, [queried(1, 1), bad, queried(3, 3)])
    store = open_log(data_dir)
    follower = open_follower(f"sqlite:///{tmp_path / 'ts.sqlite'}", store.log, Source())
    try:
        assert follower.catch_up() == 3
        assert [f.seq for f in follower.quarantined()] == [2]
        with follower.engine.connect() as conn:
            times = list(conn.execute(select(RecordRow.time).order_by(RecordRow.seq)).scalars())
        assert times == [START + 1, START + 3]
    finally:
        follower.engine.dispose()
        store.close()


def test_a_follower_on_a_thread_is_stopped_by_its_stop_condition(bad_log, tmp_path):
    """follow_log ends when asked, between steps (what SIGTERM does in the process)."""
    url = f"sqlite:///{tmp_path / 'stop.sqlite'}"
    store = open_log(bad_log)
    stop = threading.Event()
    thread = threading.Thread(
        target=follow_log,
        args=(url, store.log, Source()),
        kwargs={"stop": stop.is_set, "poll": 0.01},
    )
    thread.start()
    engine = db.open_engine(url)
    try:
        from tests.waiting import poll_until_sync

        def caught_up() -> bool:
            try:
                with engine.connect() as conn:
                    return (
                        conn.execute(text("SELECT last_seq FROM readmodel_checkpoints")).scalar()
                        == RECORDS
                    )
            except OperationalError:
                return False

        poll_until_sync(caught_up, 60, "the follower catching up")
    finally:
        stop.set()
        thread.join(timeout=60)
        engine.dispose()
        store.close()
    assert not thread.is_alive()


def test_the_export_quarantines_only_the_record_whose_row_arrow_cannot_convert():
    """Rows that pass the families' mapping but not Arrow's schema: the one record goes, its chunk stays."""
    from es_broker.readmodel.export import _tables
    from es_broker.schema.families import DEFAULT_SOURCE
    from es_broker.schema.rows import rows_of
    from es_broker.timetravel.timeparse import utc_day

    by_record = []
    for seq in (1, 2, 3):
        record = make("offset_queried", START + seq, group="G", topic="T", queue_id=0, offset=5)
        rows = rows_of(seq, record, record["ts"], DEFAULT_SOURCE)
        by_record.append((seq, "offset_queried", [(f, utc_day(record["ts"]), r) for f, r in rows]))
    by_record[1][2][0][2]["offset"] = "not a number"  # what no BIGINT column takes
    bad: dict[int, dict] = {}
    tables = _tables(by_record, bad)
    assert list(bad) == [2]
    assert bad[2]["type"] == "offset_queried"
    assert [t["seq"].to_pylist() for t in tables.values()] == [[1, 3]]
