"""The Spark jobs in spark/ agree with the broker and the SQL read model (S-1), on the export and the live log.

One SparkSession (local[2]) for the whole module and few examples: Spark is slow to start and to plan.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from functools import reduce
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from es_broker.clock import ManualClock
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.readmodel import queries
from es_broker.readmodel.export import export
from es_broker.readmodel.follower import open_follower
from es_broker.schema.families import Source
from es_broker.store import Store
from es_broker.timetravel.query import TimeTravel
from tests.conftest import START
from tests.timetravel_histories import PRELUDE, build, histories, moments, reset_by_time

pytest.importorskip("pyspark")
if (
    shutil.which("java") is None
    and not Path(str(__import__("os").environ.get("JAVA_HOME", "/nonexistent"))).exists()
):
    pytest.skip("PySpark needs a Java runtime", allow_module_level=True)

SPARK_DIR = Path(__file__).resolve().parents[1] / "spark"
sys.path.insert(0, str(SPARK_DIR))

import audit_report  # noqa: E402
import esb_spark  # noqa: E402
import lag_timeline  # noqa: E402
import offsets_at  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

COLUMNS = (
    "group",
    "topic",
    "queue_id",
    "offset",
    "max_offset",
    "lag",
    "seq",
    "time",
    "cause",
    "requester",
    "durable",
    "durable_lag",
)


@pytest.fixture(scope="module")
def spark():
    session = esb_spark.session("es-broker tests", "local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


def open_log(data_dir: Path) -> Store:
    return Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)


def as_tuples(rows) -> list[tuple]:
    return sorted(
        tuple(getattr(r, c) if not isinstance(r, dict) else r[c] for c in COLUMNS) for r in rows
    )


# ---------------------------------------------------------------------- the three answers


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(histories, st.lists(st.floats(0, 1), min_size=3, max_size=3))
# two picks give the same moment: each moment's rows are compared once, not twice
@example(
    history=PRELUDE + [("topic", "T1", 1), ("topic", "T1", 1), ("pull", "G1", "T1", 0, 0)],
    picks=[0.0, 1.0, 1.0],
)
def test_s001_broker_sql_and_spark_give_the_same_offset_table(spark, history, picks):
    with tempfile.TemporaryDirectory() as tmp:
        data_dir, out = Path(tmp) / "data", Path(tmp) / "export"
        build(data_dir, history)
        at_moments = moments(data_dir, picks)
        store = open_log(data_dir)
        follower = open_follower(f"sqlite:///{tmp}/rm.sqlite", store.log, Source())
        try:
            follower.catch_up()
            export(store.log, out)
            travel = TimeTravel(store)
            source = esb_spark.Input(spark, export_dir=str(out))
            start = source.start_time()
            # every moment in one Spark job: Spark's cost is per job, not per row. Each frame is
            # tagged with its place in the list, not its moment: two picks may give one moment
            frames = [
                esb_spark.offsets_at(source, at, durable=True, start=start).withColumn(
                    "pick", F.lit(i)
                )
                for i, at in enumerate(at_moments)
            ]
            spark_rows = reduce(lambda a, b: a.unionByName(b), frames).collect()
            for i, at in enumerate(at_moments):
                with store.read() as txn, follower.engine.connect() as conn:
                    broker = as_tuples(travel.offsets_at(txn, at, durable=True))
                    sql = as_tuples(queries.offsets_at(conn, "broker-a", at, durable=True))
                assert as_tuples(r.asDict() for r in spark_rows if r["pick"] == i) == broker == sql
        finally:
            follower.engine.dispose()
            store.close()


# ---------------------------------------------------------------------- the reset scenario


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> tuple[Path, Path]:
    """Group G consumes T (4 queues) and keeps up; an operator resets it by time 40 s back; a perm change
    and two dead letters happen the same day. Returns (data dir, export dir)."""
    root = tmp_path_factory.mktemp("scenario")
    data_dir, out = root / "data", root / "export"

    async def run() -> None:
        clock = ManualClock(START)
        broker = Broker.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), clock)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            await broker.update_topic(
                {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
            )
            for second in range(90):
                clock.advance(1000)
                for q in range(4):
                    await broker.put_messages("T", q, [MessageIn(b"m")] * (1 + (second + q) % 3))
                if second % 5 == 4:  # the consumer persists its offsets every 5 s (B-41)
                    for q in range(4):
                        await broker.commit_offset(
                            "G", "T", q, broker.max_offset("T", q) - 1, requester="10.0.0.5@7"
                        )
                if second == 60:
                    await reset_by_time(broker, "G", "T", clock.now_ms() - 40_000, True)
                if second == 70:
                    await broker.update_topic_perm("T", 4, requester="ops@10.0.0.1")
                    await broker.update_topic(
                        {"topicName": "%DLQ%G", "readQueueNums": 1, "writeQueueNums": 1, "perm": 2},
                        requester="broker",
                    )
                    await broker.put_messages(
                        "%DLQ%G", 0, [MessageIn(b"dead")] * 2, requester="10.0.0.5@7"
                    )
            nursery.cancel_scope.cancel()
        broker.close()

    trio.run(run)
    store = open_log(data_dir)
    export(store.log, out)
    store.close()
    return data_dir, out


def test_the_data_source_reads_the_live_log_as_the_export_has_it(spark, scenario):
    data_dir, out = scenario
    store = open_log(data_dir)
    last = store.log.last_seq
    store.close()
    records = spark.read.format("es_broker").option("partitions", "3").load(str(data_dir))
    seqs = records.agg(F.count("*"), F.countDistinct("seq"), F.min("seq"), F.max("seq")).first()
    assert tuple(seqs) == (last, last, 1, last)
    # each read of the data source plans in a Python process of its own: few reads, not many
    live = esb_spark.Input(spark, data_dir=str(data_dir))
    exported = esb_spark.Input(spark, export_dir=str(out))
    at = START + 62_500
    assert esb_spark.offsets_at(live, at).collect() == esb_spark.offsets_at(exported, at).collect()
    resets = (
        live.family("resets")
        .select("requester", F.col("queues")[0]["final"].alias("final"))
        .collect()
    )
    assert [(r.requester, r.final) for r in resets] == [("admin@10.0.0.9", 40)]


def test_offsets_at_script_prints_every_group(spark, scenario, capsys):
    _, out = scenario
    offsets_at.main(["--input", str(out), "--at", str(START + 62_500)], spark=spark)
    text = capsys.readouterr().out.splitlines()
    assert text[0] == f"offset table at {START + 62_500} (4 queues)"
    assert text[2].split()[:6] == ["G", "T", "0", "40", "123", "83"]
    assert text[2].split()[6:8] == ["reset", "10.0.0.5@7"]


def test_lag_timeline_shows_the_jump_of_the_reset(spark, scenario, tmp_path, capsys):
    _, out = scenario
    source = esb_spark.Input(spark, export_dir=str(out))
    series = [r.asDict() for r in esb_spark.lag_series(source, "G", "T").collect()]
    reset_time = START + 61_000
    before = max(p["lag"] for p in series if p["queue_id"] == 0 and p["time"] < reset_time)
    after = max(
        p["lag"]
        for p in series
        if p["queue_id"] == 0 and reset_time <= p["time"] < reset_time + 1000
    )
    assert before <= 10 and after >= 80  # the consumer kept up, then was sent back 40 s of messages
    png = tmp_path / "lag.png"
    lag_timeline.main(
        ["--input", str(out), "--group", "G", "--topic", "T", "--out", str(png)], spark=spark
    )
    printed = capsys.readouterr().out
    assert "4 queues" in printed and "1 resets" in printed
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_audit_report_tells_who_reset_when_from_what_to_what(spark, scenario):
    _, out = scenario
    report = audit_report.collect(esb_spark.Input(spark, export_dir=str(out)))
    (day,) = report.values()
    group = day["groups"]["G"]
    (reset,) = group["resets"]
    assert reset["requester"] == "admin@10.0.0.9" and reset["kind"] == "time"
    assert [(q["queue_id"], q["to"], q["outcome"]) for q in reset["queues"]] == [
        (0, 40, "moved"),
        (1, 40, "moved"),
        (2, 41, "moved"),
        (3, 40, "moved"),
    ] or all(q["to"] < q["from"] for q in reset["queues"])
    assert group["commit_causes"]["reset"] == 4 and group["dead_letters"] == 2
    assert day["perm_changes"] == [
        {
            "broker": "broker-a",
            "time": START + 71_000,
            "topic": "T",
            "old_perm": 6,
            "perm": 4,
            "requester": "ops@10.0.0.1",
        }
    ]
    text = audit_report.markdown(report)
    assert (
        "- **reset** of group `G` on topic `T` at 22:14:21.000 by `admin@10.0.0.9`: to time "
        in text
    )
    assert "- **perm** of topic `T` at 22:14:31.000: RW- (6) -> R-- (4) by `ops@10.0.0.1`" in text


def test_the_data_source_stamps_the_default_source_when_no_broker_is_named(tmp_path):
    from es_broker.readmodel.spark_source import EsBrokerReader
    from es_broker.schema.families import DEFAULT_SOURCE

    assert EsBrokerReader({"path": str(tmp_path)}).source == DEFAULT_SOURCE
    named = EsBrokerReader({"path": str(tmp_path), "broker": "b", "role": "SLAVE"})
    assert named.source == Source("b", "SLAVE")
