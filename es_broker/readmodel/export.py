"""Export the log as Parquet: one dataset per record family, partitioned by day, incremental.

Layout of DIR (schemas: spark/SCHEMA.md, generated from `families.py`):

    DIR/_export_checkpoint.json             last exported seq, running effective time, start time
    DIR/<family>/day=YYYY-MM-DD/part-<first seq, 12 digits>.parquet

`day` is the UTC day of a row's effective time. Each run exports the records
after the checkpoint in chunks; a chunk's files are named after the chunk's
first seq and written before the checkpoint moves past it (atomically, by
rename). A run killed in between is redone from the same seq with the same
file names, so its files are replaced, never duplicated.
"""

from __future__ import annotations

import itertools
import json
import os
import time as _time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from es_broker.log import RecordLog
from es_broker.readmodel.families import (
    DEFAULT_SOURCE,
    FAMILIES,
    RunningTime,
    Source,
    arrow_schema,
    rows_of,
)
from es_broker.timetravel.timeparse import utc_day

CHECKPOINT = "_export_checkpoint.json"
CHUNK = 200_000  # records per chunk: bounds memory, and a killed run redoes at most one chunk


@dataclass(frozen=True, slots=True)
class ExportResult:
    first_seq: int | None  # None: nothing new
    last_seq: int
    records: int
    rows: dict[str, int]
    files: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def read_checkpoint(out: Path) -> dict:
    path = out / CHECKPOINT
    if path.exists():
        return json.loads(path.read_text())
    return {"version": 1, "last_seq": 0, "max_ts": 0, "start_time": None}


def _write_checkpoint(out: Path, state: dict) -> None:
    tmp = out / (CHECKPOINT + ".tmp")
    tmp.write_text(json.dumps(state, sort_keys=True))
    os.replace(tmp, out / CHECKPOINT)


def export(log: RecordLog, out: str | Path, source: Source = DEFAULT_SOURCE, *, chunk: int = CHUNK) -> ExportResult:
    """Write every record after the last export to Parquet under `out`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    began = _time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = read_checkpoint(out)
    first = state["last_seq"] + 1
    clock = RunningTime(state["max_ts"])
    totals: dict[str, int] = defaultdict(int)
    files = records = 0
    expected = first
    reader = log.read(first)
    try:
        while batch := list(itertools.islice(reader, chunk)):
            chunk_first = batch[0][0]
            groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
            for seq, record in batch:
                if seq != expected:
                    raise ValueError(f"the log has a gap: expected record {expected}, found {seq}")
                expected += 1
                time = clock.advance(record.get("ts"))
                if seq == 1:
                    state["start_time"] = time
                day = utc_day(time)
                for family, row in rows_of(seq, record, time, source):
                    groups[(family, day)].append(row)
                records += 1
            for (family, day), rows in groups.items():
                folder = out / family / f"day={day}"
                folder.mkdir(parents=True, exist_ok=True)
                table = pa.Table.from_pylist(rows, schema=arrow_schema(FAMILIES[family]))
                target = folder / f"part-{chunk_first:012d}.parquet"
                tmp = folder / f".{target.name}.tmp"
                pq.write_table(table, tmp)
                os.replace(tmp, target)
                totals[family] += len(rows)
                files += 1
            state.update(last_seq=batch[-1][0], max_ts=clock.value)
            _write_checkpoint(out, state)
    finally:
        reader.close()
    return ExportResult(first if records else None, state["last_seq"], records, dict(totals), files,
                        _time.perf_counter() - began)
