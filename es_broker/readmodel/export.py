"""Export the log as Parquet: one dataset per record family, partitioned by day, incremental.

Layout of DIR (schemas: spark/SCHEMA.md, generated from `families.py`):

    DIR/_export_checkpoint.json             last exported seq, running effective time, start time
    DIR/<family>/day=YYYY-MM-DD/part-<first seq, 12 digits>.parquet
    DIR/_quarantine.jsonl                   records that could not be exported, one JSON line each

A cluster export (`cluster=True`) puts the exports of every broker of a
cluster, masters and slaves, under one root, each partitioned by broker name
and node (brokerId) above the day, with its own checkpoint and quarantine:

    ROOT/<family>/broker=<name>/node=<id>/day=YYYY-MM-DD/part-<first seq>.parquet
    ROOT/_export_checkpoint.<name>.<id>.json
    ROOT/_quarantine.<name>.<id>.jsonl

A slave's log is its master's, record for record, so the readers keep one
node's rows of each (broker, seq): see spark/esb_spark.py.

A root holds one layout, told by its checkpoints: an export in the other
layout into it is refused (LayoutMismatch) before anything is written.

`day` is the UTC day of a row's effective time. Each run exports the records
after the checkpoint in chunks; a chunk's files are named after the chunk's
first seq and written before the checkpoint moves past it (atomically, by
rename). A run killed in between is redone from the same seq with the same
file names, so its files are replaced, never duplicated.

A record whose rows do not fit the schema (an int beyond int64, a value of
the wrong type) is quarantined: written to `_quarantine.jsonl` with its seq,
type and error, and left out of every dataset; the export goes on.
"""

from __future__ import annotations

import itertools
import json
import os
import time as _time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from es_broker.log import Record, RecordLog
from es_broker.readmodel.quarantine import (
    effective_time,
    error_text,
    is_data_error,
    now_ms,
    running_version,
)
from es_broker.schema.families import (
    DEFAULT_SOURCE,
    FAMILIES,
    RunningTime,
    Source,
    arrow_schema,
)
from es_broker.schema.rows import rows_of
from es_broker.timetravel.timeparse import utc_day

if TYPE_CHECKING:  # imported where it runs: export is the only user of pyarrow here
    import pyarrow as pa

CHECKPOINT = "_export_checkpoint.json"
CLUSTER_CHECKPOINTS = "_export_checkpoint.*.*.json"  # a cluster root's: one per node
QUARANTINE = "_quarantine.jsonl"
CHUNK = 200_000  # records per chunk: bounds memory, and a killed run redoes at most one chunk


@dataclass(frozen=True, slots=True)
class ExportResult:
    first_seq: int | None  # None: nothing new
    last_seq: int
    records: int
    rows: dict[str, int]
    files: int
    seconds: float
    quarantined: tuple[
        dict[str, Any], ...
    ] = ()  # the records this run could not export: seq, type, error

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


@dataclass(frozen=True, slots=True)
class Layout:
    """Where one exporter's files go under `out`: alone, or as one node of a cluster export."""

    out: Path
    source: Source | None = None  # the node of a cluster export; None: a broker's export alone

    @classmethod
    def of(cls, out: Path, source: Source, cluster: bool) -> Layout:
        return cls(out, source if cluster else None)

    def _named(self, name: str) -> Path:
        if self.source is None:
            return self.out / name
        stem, ext = name.rsplit(".", 1)
        return self.out / f"{stem}.{self.source.broker}.{self.source.node}.{ext}"

    @property
    def checkpoint(self) -> Path:
        return self._named(CHECKPOINT)

    @property
    def quarantine(self) -> Path:
        return self._named(QUARANTINE)

    def folder(self, family: str, day: str) -> Path:
        if self.source is None:
            return self.out / family / f"day={day}"
        node = f"broker={self.source.broker}/node={self.source.node}"
        return self.out / family / node / f"day={day}"


class LayoutMismatch(ValueError):
    """An export into a root that holds the other layout: the two would mix under one root."""

    def __init__(self, out: Path, cluster: bool) -> None:
        self.out = out
        self.holds_cluster = not cluster  # the layout the root holds: the one not asked for
        held = (
            "a cluster export (_export_checkpoint.<broker>.<id>.json)"
            if self.holds_cluster
            else f"a broker's export alone ({CHECKPOINT})"
        )
        super().__init__(f"{out} holds {held}")


def check_layout(out: str | Path, cluster: bool) -> None:
    """Raise LayoutMismatch when `out` holds an export in the other layout than `cluster` asks,
    told by the checkpoints each export keeps there; a new root, or one of the same layout, passes."""
    out = Path(out)
    if (out / CHECKPOINT).exists() if cluster else any(out.glob(CLUSTER_CHECKPOINTS)):
        raise LayoutMismatch(out, cluster)


def read_checkpoint(out: Path, layout: Layout | None = None) -> dict[str, Any]:
    path = (layout or Layout(out)).checkpoint
    if path.exists():
        state: dict[str, Any] = json.loads(path.read_text())
        return state
    return {"version": 1, "last_seq": 0, "max_ts": 0, "start_time": None}


def _write_checkpoint(layout: Layout, state: dict[str, Any]) -> None:
    tmp = layout.checkpoint.with_name(layout.checkpoint.name + ".tmp")
    tmp.write_text(json.dumps(state, sort_keys=True))
    os.replace(tmp, layout.checkpoint)


def export(
    log: RecordLog,
    out: str | Path,
    source: Source = DEFAULT_SOURCE,
    *,
    chunk: int = CHUNK,
    cluster: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ExportResult:
    """Write every record after the last export to Parquet under `out` (as `source`'s node of a cluster root if `cluster`).

    Raises LayoutMismatch, writing nothing, when `out` holds the other layout."""
    began = _time.perf_counter()
    out = Path(out)
    check_layout(out, cluster)  # before anything is written
    out.mkdir(parents=True, exist_ok=True)
    layout = Layout.of(out, source, cluster)
    state = read_checkpoint(out, layout)
    first = state["last_seq"] + 1
    clock = RunningTime(state["max_ts"])
    totals: dict[str, int] = defaultdict(int)
    files = records = 0
    quarantined: list[dict[str, Any]] = []
    expected = first
    total = log.last_seq
    reader = log.read(first)
    try:
        while batch := list(itertools.islice(reader, chunk)):
            chunk_first = batch[0][0]
            by_record: list[tuple[int, str, list[tuple[str, str, dict[str, Any]]]]] = []
            bad: dict[int, dict[str, Any]] = {}
            for seq, record in batch:
                if seq != expected:
                    raise ValueError(f"the log has a gap: expected record {expected}, found {seq}")
                expected += 1
                records += 1
                try:
                    time = effective_time(clock, record)
                    day = utc_day(time)
                    rows = [
                        (family, day, row) for family, row in rows_of(seq, record, time, source)
                    ]
                except Exception as exc:
                    if not is_data_error(exc):
                        raise
                    bad[seq] = _failure(seq, record, exc)
                    continue
                if seq == 1:
                    state["start_time"] = time
                by_record.append((seq, str(record.get("type")), rows))
            tables = _tables(by_record, bad)
            if bad:
                quarantined.extend(_quarantine(layout.quarantine, [bad[s] for s in sorted(bad)]))
            files += _write_tables(tables, layout, chunk_first, totals)
            state.update(last_seq=batch[-1][0], max_ts=clock.value)
            _write_checkpoint(layout, state)
            if progress is not None:
                progress(batch[-1][0], total)
    finally:
        reader.close()
    return ExportResult(
        first if records else None,
        state["last_seq"],
        records,
        dict(totals),
        files,
        _time.perf_counter() - began,
        tuple(quarantined),
    )


def export_records(
    batch: list[tuple[int, Record]],
    out: str | Path,
    source: Source = DEFAULT_SOURCE,
    *,
    columns: dict[str, str] | None = None,
) -> ExportResult:
    """Write these records (a slice of a log) to Parquet under `out` as `export` lays them out, with
    no checkpoint; each table gets `columns` as constant text columns (a rejoining node's set-aside
    records with the reason, B-380). Records that do not convert go to `out`'s quarantine."""
    began = _time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    layout = Layout(out)
    clock = RunningTime()
    by_record: list[tuple[int, str, list[tuple[str, str, dict[str, Any]]]]] = []
    bad: dict[int, dict[str, Any]] = {}
    for seq, record in batch:
        try:
            time = effective_time(clock, record)
            day = utc_day(time)
            rows = [(family, day, row) for family, row in rows_of(seq, record, time, source)]
        except Exception as exc:
            if not is_data_error(exc):
                raise
            bad[seq] = _failure(seq, record, exc)
            continue
        by_record.append((seq, str(record.get("type")), rows))
    tables = _tables(by_record, bad)
    quarantined = _quarantine(layout.quarantine, [bad[s] for s in sorted(bad)]) if bad else []
    if columns:
        tables = {key: _with_columns(table, columns) for key, table in tables.items()}
    totals: dict[str, int] = defaultdict(int)
    files = _write_tables(tables, layout, batch[0][0] if batch else 0, totals)
    return ExportResult(
        batch[0][0] if batch else None,
        batch[-1][0] if batch else 0,
        len(batch),
        dict(totals),
        files,
        _time.perf_counter() - began,
        tuple(quarantined),
    )


def _with_columns(table: Any, columns: dict[str, str]) -> Any:
    import pyarrow as pa

    for name, value in columns.items():
        table = table.append_column(name, pa.array([value] * table.num_rows, pa.string()))
    return table


def _write_tables(
    tables: dict[tuple[str, str], pa.Table],
    layout: Layout,
    chunk_first: int,
    totals: dict[str, int],
) -> int:
    """Write each (family, day) table as its chunk's part file, atomically; returns the files written."""
    import pyarrow.parquet as pq

    for (family, day), table in tables.items():
        folder = layout.folder(family, day)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"part-{chunk_first:012d}.parquet"
        tmp = folder / f".{target.name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, target)
        totals[family] += table.num_rows
    return len(tables)


def _tables(
    by_record: list[tuple[int, str, list[tuple[str, str, dict[str, Any]]]]],
    bad: dict[int, dict[str, Any]],
) -> dict[tuple[str, str], pa.Table]:
    """Arrow tables by (family, day); a record with a row that does not convert goes to `bad`, all its rows out."""
    import pyarrow as pa

    while True:
        groups: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for seq, _type, rows in by_record:
            if seq not in bad:
                for family, day, row in rows:
                    groups[(family, day)].append((seq, row))
        tables: dict[tuple[str, str], pa.Table] = {}
        refused = False
        for (family, day), grouped in groups.items():
            schema = arrow_schema(FAMILIES[family])
            try:
                tables[(family, day)] = pa.Table.from_pylist([r for _, r in grouped], schema=schema)
            except Exception:
                # rare: find the records whose rows do not convert, one row at a time
                found = len(bad)
                for seq, row in grouped:
                    try:
                        pa.Table.from_pylist([row], schema=schema)
                    except Exception as exc:
                        if not (is_data_error(exc) or isinstance(exc, pa.ArrowException)):
                            raise
                        kind = next(t for s, t, _ in by_record if s == seq)
                        bad.setdefault(seq, _failure(seq, {"type": kind}, exc))
                if len(bad) == found:
                    raise
                refused = True
        if not refused:
            return tables


def _failure(seq: int, record: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": str(record.get("type")),
        "error": error_text(exc),
        "version": running_version(),
        "failed_at": now_ms(),
    }


def _quarantine(path: Path, failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Append the failures not in the quarantine file yet (a redone chunk finds its own there)."""
    known = (
        {json.loads(line)["seq"] for line in path.read_text().splitlines() if line}
        if path.exists()
        else set()
    )
    new = [f for f in failures if f["seq"] not in known]
    if new:
        with path.open("a") as f:
            f.writelines(json.dumps(x, sort_keys=True) + "\n" for x in new)
    return failures


def read_quarantine(out: str | Path) -> list[dict[str, Any]]:
    """Every record an export into `out` quarantined, by seq."""
    path = Path(out) / QUARANTINE
    if not path.exists():
        return []
    return sorted(
        (json.loads(line) for line in path.read_text().splitlines() if line), key=lambda f: f["seq"]
    )
