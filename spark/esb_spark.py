"""Shared pieces of the es-broker Spark jobs: the session, the inputs, and the computations.

Inputs: an export directory (`es-broker export --out DIR`, Parquet by family
and day) or a live data directory through the `es_broker` Python data source.
Both give the same rows (es_broker/schema/families.py, rows.py), so every job runs
on either. Only DataFrame expressions run on the executors, so a cluster
needs es_broker installed only to read a live log (the data source).

Definitions shared with the broker and the SQL read model: the table at t
is the state after every record whose effective time (`time`) is <= t; a
queue's offset is the `new` of its latest change by seq; a queue's max is
`queue_offset + count` of its latest append by seq; lag = max - offset while
the offset is >= 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from es_broker.schema.families import FAMILIES, spark_ddl
from es_broker.timetravel.query import persist_tick
from es_broker.timetravel.timeparse import parse_time

PERSIST_INTERVAL_MS = 5000  # flushConsumerOffsetInterval (B-32)


def session(app: str, master: str | None = None) -> SparkSession:
    """A session on `local[*]` unless spark-submit (or --master) says otherwise."""
    # the Python workers must see the packages of this interpreter (es_broker, lmdb, msgpack)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app)
    # spark-submit already chose the master
    launched_by_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or not launched_by_submit:
        builder = (
            builder.master(master or os.environ.get("ES_BROKER_SPARK_MASTER", "local[*]"))
            .config("spark.sql.shuffle.partitions", str(max(2 * (os.cpu_count() or 2), 4)))
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", os.environ.get("ES_BROKER_SPARK_DRIVER_MEMORY", "2g"))
        )
    spark = (
        builder.config("spark.sql.session.timeZone", "UTC")
        # `day=2024-05-01` stays a string, as the data source gives it
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(os.environ.get("ES_BROKER_SPARK_LOG_LEVEL", "ERROR"))
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("es_broker")` available (PySpark 4 Python data sources)."""
    from es_broker.readmodel.spark_source import EsBrokerDataSource

    spark.dataSource.register(EsBrokerDataSource)


class Input:
    """Where the rows come from: an export directory or a live data directory."""

    def __init__(
        self, spark: SparkSession, *, export_dir: str | None = None, data_dir: str | None = None
    ) -> None:
        if (export_dir is None) == (data_dir is None):
            raise ValueError(
                "give exactly one of --input (an export directory) or --data-dir (a live log)"
            )
        self.spark, self.export_dir, self.data_dir = spark, export_dir, data_dir

    def family(self, name: str) -> DataFrame:
        family = FAMILIES[name]
        if self.data_dir is not None:
            return self.spark.read.format("es_broker").option("family", name).load(self.data_dir)
        path = f"{self.export_dir.rstrip('/')}/{name}"
        if _local_missing(path):
            return self.spark.createDataFrame([], spark_ddl(family))
        if not self._cluster(path):
            return self.spark.read.schema(spark_ddl(family)).option("basePath", path).parquet(path)
        # a cluster root: broker=<name>/node=<brokerId>/day=... under each family
        ddl = spark_ddl(family, with_day=False) + ", `node` string, `day` string"
        rows = self.spark.read.schema(ddl).option("basePath", path).parquet(path)
        return one_node_per_record(rows).drop("node")

    def _cluster(self, path: str) -> bool:
        """True if the family's folder holds `broker=` partitions (an export of a whole cluster)."""
        jvm = self.spark.sparkContext._jvm
        folder = jvm.org.apache.hadoop.fs.Path(path)
        fs = folder.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        return any(s.getPath().getName().startswith("broker=") for s in fs.listStatus(folder))

    def start_time(self) -> int | None:
        """Effective time of the log's first record: the start of the compat persist schedule (B-133)."""
        if self.data_dir is not None:  # the data source reads just record 1
            first = (
                self.spark.read.format("es_broker")
                .option("to_seq", "1")
                .load(self.data_dir)
                .select("time")
                .first()
            )
            return first[0] if first else None
        times = [self.family(name).where(F.col("seq") == 1).select("time") for name in FAMILIES]
        frame = times[0]
        for other in times[1:]:
            frame = frame.unionByName(other)
        row = frame.agg(F.min("time")).first()
        return row[0] if row else None

    def start_times(self) -> dict[str, int]:
        """Each broker's first effective time (a cluster's brokers each start their own log)."""
        if self.data_dir is not None:  # the data source reads just record 1
            return _first_times(
                self.spark.read.format("es_broker").option("to_seq", "1").load(self.data_dir)
            )
        frames = [self.family(name).where(F.col("seq") == 1) for name in FAMILIES]
        frame = frames[0].select("broker", "time")
        for other in frames[1:]:
            frame = frame.unionByName(other.select("broker", "time"))
        return _first_times(frame)


def one_node_per_record(rows: DataFrame) -> DataFrame:
    """Each (broker, seq)'s rows from one node only: a slave's log is its master's, record for record.

    The node with the lowest brokerId that exported the record wins (the
    master, when its export has it), so a master and its slaves exported
    under one root are counted once, and a record only a slave's export
    holds (the master's export lagging behind) is still counted.
    """
    numbered = rows.withColumn("_node", F.col("node").cast("int"))
    first = numbered.groupBy("broker", "seq").agg(F.min("_node").alias("_first"))
    return (
        numbered.join(first, ["broker", "seq"])
        .where(F.col("_node") == F.col("_first"))
        .select(*rows.columns)
    )


def _first_times(frame: DataFrame) -> dict[str, int]:
    return {
        r["broker"]: r["start"]
        for r in frame.groupBy("broker").agg(F.min("time").alias("start")).collect()
        if r["start"] is not None
    }


def _local_missing(path: str) -> bool:
    """True for a local path that does not exist (a family never exported); remote paths are tried."""
    if "://" in path and not path.startswith("file://"):
        return False
    return not Path(path.removeprefix("file://")).exists()


def add_input_args(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="an export directory (es-broker export --out DIR)")
    source.add_argument(
        "--data-dir", help="a broker data directory, read live through the es_broker data source"
    )
    parser.add_argument(
        "--master", help="Spark master (default local[*]; spark-submit's own when submitted)"
    )


def open_input(
    args: argparse.Namespace, app: str, spark: SparkSession | None = None
) -> tuple[SparkSession, Input, bool]:
    """The session (a given one, e.g. a test's, or a new one) and the input; True if the job owns the session."""
    owned = spark is None
    spark = spark or session(app, args.master)
    register(spark)
    return spark, Input(spark, export_dir=args.input, data_dir=args.data_dir), owned


def parse_at(text: str) -> int:
    return parse_time(text)


# ---------------------------------------------------------------------- offsets at T


def _latest(frame: DataFrame, keys: list[str], value: Column, name: str) -> DataFrame:
    return frame.groupBy(*keys).agg(F.max_by(value, F.col("seq")).alias(name))


def queue_max_at(source: Input, at: int) -> DataFrame:
    """(broker, topic, queue_id, max_offset) of every queue that had messages at `at`."""
    messages = source.family("messages").where(F.col("time") <= at)
    return _latest(
        messages,
        ["broker", "topic", "queue_id"],
        F.col("queue_offset") + F.col("count"),
        "max_offset",
    )


def table_at(source: Input, at: int, group: str | None = None) -> DataFrame:
    """(broker, group, topic, queue_id, offset, seq, time, cause, requester) at `at`."""
    offsets = source.family("offsets").where(F.col("time") <= at)
    if group is not None:
        offsets = offsets.where(F.col("group") == group)
    last = _latest(
        offsets,
        ["broker", "group", "topic", "queue_id"],
        F.struct("new", "seq", "time", "cause", "requester", "removed"),
        "last",
    )
    # a queue whose latest change removed it is not in the table (B-34)
    return last.where(~F.coalesce(F.col("last.removed"), F.lit(False))).select(
        "broker",
        "group",
        "topic",
        "queue_id",
        F.col("last.new").alias("offset"),
        F.col("last.seq").alias("seq"),
        F.col("last.time").alias("time"),
        F.col("last.cause").alias("cause"),
        F.col("last.requester").alias("requester"),
    )


def offsets_at(
    source: Input,
    at: int,
    *,
    group: str | None = None,
    durable: bool = False,
    persist_interval: int = PERSIST_INTERVAL_MS,
    start: int | None = None,
) -> DataFrame:
    """The whole offset table of every group (or one) at `at`, with max and lag; durable on request.

    `start` (the log's first effective time) may be given to spare a scan when asking many times.
    """
    table = table_at(source, at, group)
    tops = queue_max_at(source, at)
    out = (
        table.join(tops, ["broker", "topic", "queue_id"], "left")
        .withColumn("max_offset", F.coalesce(F.col("max_offset"), F.lit(0)))
        .withColumn("lag", F.when(F.col("offset") >= 0, F.col("max_offset") - F.col("offset")))
    )
    if durable:
        # each broker's persist schedule starts with its own log (B-133)
        starts = source.start_times() if start is None else None
        kept = table.limit(0).select(
            "broker", "group", "topic", "queue_id", F.col("offset").alias("durable")
        )
        for broker in sorted(starts) if starts is not None else [None]:
            first = start if starts is None else starts[broker]
            tick = persist_tick(first, at, persist_interval)
            if tick is None:
                continue
            ticked = table_at(source, tick, group)
            if broker is not None:
                ticked = ticked.where(F.col("broker") == broker)
            kept = kept.unionByName(
                ticked.select(
                    "broker", "group", "topic", "queue_id", F.col("offset").alias("durable")
                )
            )
        out = (
            out.join(kept, ["broker", "group", "topic", "queue_id"], "left")
            .withColumn("durable", F.coalesce(F.col("durable"), F.lit(-1)))
            .withColumn(
                "durable_lag", F.when(F.col("durable") >= 0, F.col("max_offset") - F.col("durable"))
            )
        )
    columns = [
        "broker",
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
    ]
    if durable:
        columns += ["durable", "durable_lag"]
    return out.select(*columns).orderBy("broker", "group", "topic", "queue_id")


# ---------------------------------------------------------------------- lag over time


def lag_series(
    source: Input,
    group: str,
    topic: str,
    *,
    since: int | None = None,
    until: int | None = None,
    points: int = 1500,
) -> DataFrame:
    """(broker, queue_id, time, offset, max_offset, lag, peak) per queue over time, at most `points` buckets each.

    Every offset change and every append is an event; per queue the offset
    and the max are carried forward in log order, so lag is known after each
    event. Events are bucketed by time: a bucket keeps its last state and its
    highest lag (`peak`), so a spike survives the downsampling.
    """
    offsets = (
        source.family("offsets")
        .where((F.col("group") == group) & (F.col("topic") == topic))
        .select(
            "broker",
            "queue_id",
            "seq",
            "time",
            F.col("new").alias("offset"),
            F.lit(None).cast("bigint").alias("max_offset"),
        )
    )
    appends = (
        source.family("messages")
        .where(F.col("topic") == topic)
        .select(
            "broker",
            "queue_id",
            "seq",
            "time",
            F.lit(None).cast("bigint").alias("offset"),
            (F.col("queue_offset") + F.col("count")).alias("max_offset"),
        )
    )
    events = offsets.unionByName(appends)
    w = (
        Window.partitionBy("broker", "queue_id")
        .orderBy("seq")
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    state = (
        events.withColumn("offset", F.last("offset", ignorenulls=True).over(w))
        .withColumn("max_offset", F.last("max_offset", ignorenulls=True).over(w))
        .withColumn("max_offset", F.coalesce("max_offset", F.lit(0)))
        .where(F.col("offset").isNotNull())
        .withColumn("lag", F.when(F.col("offset") >= 0, F.col("max_offset") - F.col("offset")))
    )
    if since is not None:
        state = state.where(F.col("time") >= since)
    if until is not None:
        state = state.where(F.col("time") <= until)
    bounds = state.agg(F.min("time"), F.max("time")).first()
    if bounds is None or bounds[0] is None:
        return state.select(
            "broker", "queue_id", "time", "offset", "max_offset", "lag", F.col("lag").alias("peak")
        )
    width = max((bounds[1] - bounds[0]) // points, 1)
    bucketed = state.withColumn(
        "bucket", F.floor((F.col("time") - F.lit(bounds[0])) / F.lit(width))
    )
    return (
        bucketed.groupBy("broker", "queue_id", "bucket")
        .agg(
            F.max_by(F.struct("time", "offset", "max_offset", "lag"), F.col("seq")).alias("last"),
            F.max("lag").alias("peak"),
        )
        .select(
            "broker",
            "queue_id",
            "last.time",
            "last.offset",
            "last.max_offset",
            "last.lag",
            "peak",
        )
        .orderBy("broker", "queue_id", "time")
    )


# ---------------------------------------------------------------------- printing


def print_table(rows: list[dict], columns: list[str], out=None) -> None:
    out = out or sys.stdout
    cells = [columns] + [
        ["-" if r.get(c) is None else str(r.get(c)) for c in columns] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out
        )
