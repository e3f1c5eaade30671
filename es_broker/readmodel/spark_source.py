"""A PySpark (4.x) Python data source over a broker's live LMDB log.

    from es_broker.readmodel.spark_source import EsBrokerDataSource
    spark.dataSource.register(EsBrokerDataSource)
    spark.read.format("es_broker").load(DATA_DIR)                          # every record (family `records`)
    spark.read.format("es_broker").option("family", "offsets").load(DATA_DIR)

Rows have the schema of the family (es_broker.schema.families, the same
as the Parquet export's) plus `day`. Options: `family` (default `records`),
`partitions` (default 4), `from_seq` / `to_seq` (a range of the log),
`broker` and `role` (stamped on rows whose record carries none). Each partition is a range of sequence numbers read by a
worker with a read-only LMDB transaction, so a running broker is not
disturbed; the effective time at the start of a range comes from the time
index (tt_seq), so partitions need not read what lies before them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from es_broker.schema.families import (
    DEFAULT_SOURCE,
    FAMILIES,
    RECORDS,
    Family,
    RunningTime,
    Source,
    spark_ddl,
)
from es_broker.schema.rows import record_row, rows_of
from es_broker.timetravel.timeparse import utc_day

if TYPE_CHECKING:  # imported where it runs: on the Spark workers
    import lmdb

_U64 = 8
# the log's databases by name; None: not in this data directory
Databases = dict[str, "lmdb._Database | None"]


def _family(name: str) -> Family:
    if name == RECORDS.name:
        return RECORDS
    if name not in FAMILIES:
        raise ValueError(f"family {name!r} is not one of records, {', '.join(FAMILIES)}")
    return FAMILIES[name]


def _open(data_dir: str) -> tuple[lmdb.Environment, Databases]:
    import lmdb

    path = Path(data_dir) / "lmdb"
    if not (path / "data.mdb").exists():
        raise FileNotFoundError(f"no broker log in {data_dir}")
    env = lmdb.open(str(path), readonly=True, max_dbs=64, readahead=False, max_readers=256)
    with env.begin() as txn:
        present = {bytes(k) for k, _ in txn.cursor()}
    dbs = {
        name: env.open_db(name.encode(), create=False) if name.encode() in present else None
        for name in ("log", "tt_seq", "history_segments")
    }
    return env, dbs


class LogRange(InputPartition):
    """Records first..last; `running` is the effective time before `first`."""

    def __init__(self, first: int, last: int, running: int) -> None:
        super().__init__((first, last))
        self.first, self.last, self.running = first, last, running


class EsBrokerDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "es_broker"

    def schema(self) -> str:
        return spark_ddl(_family(self.options.get("family", "records")))

    def reader(self, schema: Any) -> DataSourceReader:
        return EsBrokerReader(dict(self.options))


class EsBrokerReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        data_dir = options.get("path") or options.get("data_dir")
        if not data_dir:
            raise ValueError("load(DATA_DIR): the broker data directory is required")
        self.data_dir = data_dir
        self.family = _family(options.get("family", "records"))
        self.count = max(int(options.get("partitions", 4)), 1)
        self.source = Source(
            options.get("broker", DEFAULT_SOURCE.broker),
            options.get("role", DEFAULT_SOURCE.role),
            int(options.get("node", DEFAULT_SOURCE.node)),
        )
        self.from_seq = max(int(options.get("from_seq", 1)), 1)
        self.to_seq = int(options["to_seq"]) if options.get("to_seq") else None

    def partitions(self) -> list[InputPartition]:
        env, dbs = _open(self.data_dir)
        try:
            with env.begin() as txn:
                cur = txn.cursor(db=dbs["log"])
                last = int.from_bytes(cur.key(), "big") if cur.last() else 0
                if self.to_seq is not None:
                    last = min(last, self.to_seq)
                if last < self.from_seq:
                    return [LogRange(1, 0, 0)]
                if dbs["tt_seq"] is None:  # no time index: one range, read from the start
                    return [LogRange(1, last, 0)]
                size = -(-(last - self.from_seq + 1) // self.count)
                ranges: list[InputPartition] = []
                for first in range(self.from_seq, last + 1, size):
                    ranges.append(
                        LogRange(
                            first,
                            min(first + size - 1, last),
                            _time_before(txn, dbs["tt_seq"], first),
                        )
                    )
                return ranges
        finally:
            env.close()

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        from es_broker.log import records  # imported where it runs: on the Spark worker

        if not isinstance(partition, LogRange):  # Spark hands back what partitions() gave
            raise TypeError(f"not a partition of the es_broker source: {partition!r}")
        names = [name for name, _ in self.family.all_columns]
        queue_fields = ("queue_id", "current", "target", "final", "outcome")
        env, dbs = _open(self.data_dir)
        try:
            clock = RunningTime(partition.running)
            with env.begin(buffers=False) as txn:
                for seq, raw in _records(txn, dbs, partition.first, partition.last):
                    record = records.unpack(raw)
                    time = clock.advance(record.get("ts"))
                    if self.family.name == RECORDS.name:  # (a copy after pickling: compare names)
                        found = [record_row(seq, record, time, self.source)]
                    else:
                        found = [
                            row
                            for family, row in rows_of(seq, record, time, self.source)
                            if family == self.family.name
                        ]
                    for row in found:
                        if "queues" in row:
                            row["queues"] = [
                                tuple(q[f] for f in queue_fields) for q in row["queues"]
                            ]
                        yield (*(row.get(n) for n in names), utc_day(time))
        finally:
            env.close()


def _records(
    txn: lmdb.Transaction[bytes], dbs: Databases, first: int, last: int
) -> Iterator[tuple[int, bytes]]:
    """(seq, raw) of records first..last: from the archive's sealed segments (B-409), then the hot log."""
    sealed_upto = 0
    if dbs["history_segments"] is not None:
        import msgpack

        from es_broker.history.archive import raw_records  # on the Spark worker, as msgpack

        for _, value in txn.cursor(db=dbs["history_segments"]):
            segment = msgpack.unpackb(value)
            sealed_upto = max(sealed_upto, segment["last_seq"])
            if segment["last_seq"] < first or segment["first_seq"] > last:
                continue
            for seq, raw in raw_records(segment["location"]):
                if first <= seq <= last:
                    yield seq, raw
    cur = txn.cursor(db=dbs["log"])
    if not cur.set_range(max(first, sealed_upto + 1).to_bytes(_U64, "big")):
        return
    for key, raw in cur:
        seq = int.from_bytes(key, "big")
        if seq > last:
            return
        yield seq, raw


def _time_before(txn: lmdb.Transaction[bytes], seq_db: lmdb._Database, first: int) -> int:
    """Effective time after record first - 1 (0 before the first record)."""
    if first <= 1:
        return 0
    cur = txn.cursor(db=seq_db)
    found = cur.prev() if cur.set_range(first.to_bytes(_U64, "big")) else cur.last()
    return int.from_bytes(cur.value(), "big") if found else 0
