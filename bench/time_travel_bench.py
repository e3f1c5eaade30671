"""Time-travel benchmark: 1M offset changes; `offsets --at` latency, export rate, SQL catch-up, Spark offsets_at.

Run: python bench/time_travel_bench.py [--changes 1000000] [--skip-sql] [--skip-spark]

The log is written through the real record log and every projection (the
time index included), in transactions of 10 000 records: offset commits by
50 groups on 2 topics of 8 queues, one message append per 10 commits, 1 ms of
broker time per record. Figures printed:

- `offsets --at` in process: median and p99 over 2 000 random moments of
  TimeTravel.offsets_at for one group and topic (8 queues), and for the
  whole table of one group (16 queues); `history` of one group over a minute;
- export: records/s of `es-broker export` (Parquet) over the whole log;
- SQL read model: records/s of the follower catching up on SQLite;
- Spark: SparkSession start, and offsets_at (whole table of every group) on
  the export at a random moment, local[*].
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from es_broker.config import BrokerConfig
from es_broker.log import make
from es_broker.store import Store

START = 1_700_000_000_000
GROUPS = [f"G{i:02d}" for i in range(50)]
TOPICS = ["T1", "T2"]
QUEUES = 8
PER_TXN = 10_000


def build(data_dir: Path, changes: int) -> tuple[int, int]:
    """Write the log; returns (records, seconds)."""
    store = Store.open(
        data_dir, BrokerConfig(storePathRootDir=str(data_dir), initial_map_size=1 << 30)
    )
    rnd = random.Random(7)
    offsets: dict[tuple[str, str, int], int] = {}
    tops = {(t, q): 0 for t in TOPICS for q in range(QUEUES)}
    phy = 0
    ts = START
    written = 0
    began = time.perf_counter()
    while written < changes:
        batch = []
        for _ in range(min(PER_TXN, changes - written)):
            ts += 1
            topic, qid = rnd.choice(TOPICS), rnd.randrange(QUEUES)
            if written % 10 == 0:
                units = [[phy + i * 100, 100, 0] for i in range(5)]
                phy += 500
                batch.append(
                    make(
                        "messages_stored",
                        ts,
                        topic=topic,
                        queue_id=qid,
                        queue_offset=tops[(topic, qid)],
                        units=units,
                        producer_group="P",
                        requester="producer",
                    )
                )
                tops[(topic, qid)] += 5
            group = rnd.choice(GROUPS)
            key = (group, topic, qid)
            old = offsets.get(key, -1)
            new = min(max(old, 0) + rnd.randrange(0, 6), tops[(topic, qid)])
            offsets[key] = new
            batch.append(
                make(
                    "offset_committed",
                    ts,
                    group=group,
                    topic=topic,
                    queue_id=qid,
                    offset=new,
                    old=old,
                    cause="client_commit",
                    requester=f"10.0.0.{rnd.randrange(1, 9)}@1",
                )
            )
            written += 1

        def job(ctx, batch=batch) -> None:
            for record in batch:
                ctx.append(record)

        store.log.write_batch([job])
    store.log.flush()
    records = store.log.last_seq
    store.close()
    return records, time.perf_counter() - began


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(int(len(values) * p), len(values) - 1)]


def bench_local(data_dir: Path) -> dict[str, float]:
    from es_broker.timetravel.query import TimeTravel

    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    travel = TimeTravel(store)
    rnd = random.Random(11)
    with store.read() as txn:
        end = travel.time_of(txn, store.log.last_seq)
    out = {}
    for label, kw in (
        ("offsets --at (1 group, 1 topic, 8 queues)", {"topic": "T1"}),
        ("offsets --at (1 group, 2 topics, 16 queues)", {}),
    ):
        samples = []
        for _ in range(2000):
            at, group = rnd.randint(START, end), rnd.choice(GROUPS)
            began = time.perf_counter()
            with store.read() as txn:
                rows = travel.offsets_at(txn, at, group=group, **kw)
            samples.append((time.perf_counter() - began) * 1000)
            assert len(rows) <= QUEUES * 2
        out[f"{label} median ms"] = statistics.median(samples)
        out[f"{label} p99 ms"] = percentile(samples, 0.99)
    samples = []
    for _ in range(200):
        since, group = rnd.randint(START, max(end - 60_000, START)), rnd.choice(GROUPS)
        began = time.perf_counter()
        with store.read() as txn:
            travel.history(txn, group, topic="T1", since=since, until=since + 60_000)
        samples.append((time.perf_counter() - began) * 1000)
    out["history (1 group, 1 topic, 1 minute) median ms"] = statistics.median(samples)
    store.close()
    return out


def bench_export(data_dir: Path, out_dir: Path) -> dict[str, float]:
    from es_broker.readmodel.export import export

    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    result = export(store.log, out_dir)
    store.close()
    return {
        "export records/s": result.rate,
        "export seconds": result.seconds,
        "export files": result.files,
    }


def bench_sql(data_dir: Path, tmp: Path) -> dict[str, float]:
    from es_broker.readmodel.follower import open_follower
    from es_broker.schema.families import Source

    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    follower = open_follower(f"sqlite:///{tmp / 'bench.sqlite'}", store.log, Source())
    began = time.perf_counter()
    applied = follower.catch_up()
    seconds = time.perf_counter() - began
    follower.engine.dispose()
    store.close()
    return {"SQL follower (SQLite) records/s": applied / seconds, "SQL follower seconds": seconds}


def bench_spark(out_dir: Path, data_dir: Path) -> dict[str, float]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))
    import esb_spark

    from es_broker.timetravel.query import TimeTravel

    began = time.perf_counter()
    spark = esb_spark.session("es-broker bench")
    started = time.perf_counter() - began
    source = esb_spark.Input(spark, export_dir=str(out_dir))
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    with store.read() as txn:
        travel = TimeTravel(store)
        at = random.Random(3).randint(START, travel.time_of(txn, store.log.last_seq))
        expected = len(travel.offsets_at(txn, at))
    store.close()
    times = []
    for _ in range(3):
        began = time.perf_counter()
        rows = esb_spark.offsets_at(source, at).collect()
        times.append(time.perf_counter() - began)
        assert len(rows) == expected, (len(rows), expected)
    spark.stop()
    return {
        "Spark session start s": started,
        "Spark offsets_at (every group) first run s": times[0],
        "Spark offsets_at (every group) median of 3 s": statistics.median(times),
        "Spark offsets_at rows": float(expected),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--skip-sql", action="store_true")
    parser.add_argument("--skip-spark", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        tmp = Path(tmp)
        data_dir = tmp / "data"
        records, seconds = build(data_dir, args.changes)
        figures: dict[str, float] = {
            "offset changes": args.changes,
            "records in the log": records,
            "build records/s (all projections)": records / seconds,
        }
        figures.update(bench_local(data_dir))
        figures.update(bench_export(data_dir, tmp / "export"))
        if not args.skip_sql:
            figures.update(bench_sql(data_dir, tmp))
        if not args.skip_spark:
            figures.update(bench_spark(tmp / "export", data_dir))
    width = max(map(len, figures))
    for name, value in figures.items():
        shown = f"{value:,.3f}" if isinstance(value, float) and value < 100 else f"{value:,.0f}"
        print(f"{name.ljust(width)}  {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
