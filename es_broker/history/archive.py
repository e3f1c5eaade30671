"""Sealed segments as Parquet: writing one, reading it back, and reading records from it (B-401..B-403).

A segment is a run of the log's records by sequence. Its folder in the archive:

    <archive>/segment-<first seq, 12 digits>-<last seq, 12 digits>/
        records.parquet          every record: the export's `records` columns, `raw` (the
                                 record's bytes as the log stored them), `group` and `topic`
                                 (for predicate pushdown); sorted by seq
        <family>.parquet         the export's families (spark/SCHEMA.md), one file each
        manifest.json            sequence range, time range, record count, SHA-256 of the
                                 raw bytes in order, the files

The archive is a local folder or any pyarrow filesystem URI (s3://, hdfs://,
file://). A folder is written under a temporary name and renamed once whole,
so a reader never meets half a segment; rewriting a segment (a sealing that was
killed before it was recorded) replaces it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

from es_broker.log import Record, records
from es_broker.schema.families import (
    FAMILIES,
    RECORDS,
    RunningTime,
    arrow_schema,
)
from es_broker.schema.rows import record_rows

MANIFEST = "manifest.json"
RECORDS_FILE = "records.parquet"
FORMAT = 1


class ArchiveError(Exception):
    """A segment in the archive is missing, or does not read back as its manifest says."""


def folder_name(first: int, last: int) -> str:
    return f"segment-{first:012d}-{last:012d}"


def filesystem(location: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path inside it) of an archive location: a folder or a URI."""
    from pyarrow import fs

    if "://" in location:
        filesys, path = fs.FileSystem.from_uri(location)
        return filesys, path.rstrip("/")
    return fs.LocalFileSystem(), str(Path(location).resolve())


def join(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}"


@dataclass(frozen=True, slots=True)
class Written:
    """A segment written to the archive and read back whole."""

    location: str  # the segment's folder, as a location (folder or URI)
    manifest: dict[str, Any]
    manifest_sha256: str


def records_schema() -> Any:
    import pyarrow as pa

    base = arrow_schema(RECORDS)
    return (
        base.append(pa.field("raw", pa.binary()))
        .append(pa.field("group", pa.string()))
        .append(pa.field("topic", pa.string()))
    )


def _name(record: Record, field: str) -> str | None:
    value = record.get(field)
    return value if isinstance(value, str) else None


def write_segment(location: str, raws: list[tuple[int, bytes]], start_time: int) -> Written:
    """Write the records (seq, raw bytes) of one segment under `location`; `start_time` is the
    effective time before its first record (the running time the export carries)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    first, last = raws[0][0], raws[-1][0]
    clock = RunningTime(start_time)
    digest = hashlib.sha256()
    rows: list[dict[str, Any]] = []
    families: dict[str, list[dict[str, Any]]] = defaultdict(list)
    expected = first
    for seq, raw in raws:
        if seq != expected:
            raise ArchiveError(f"the segment has a gap: expected record {expected}, found {seq}")
        expected += 1
        digest.update(raw)
        record = records.unpack(raw)
        time = clock.advance(record.get("ts"))
        row, family_rows = record_rows(seq, record, time)
        row.update(raw=bytes(raw), group=_name(record, "group"), topic=_name(record, "topic"))
        rows.append(row)
        for family, frow in family_rows:
            families[family].append(frow)
    fs, base = filesystem(location)
    name = folder_name(first, last)
    final, tmp = join(base, name), join(base, f".{name}.tmp")
    fs.create_dir(base, recursive=True)
    _remove(fs, tmp)
    fs.create_dir(tmp, recursive=True)
    files = [RECORDS_FILE]
    pq.write_table(
        pa.Table.from_pylist(rows, schema=records_schema()),
        join(tmp, RECORDS_FILE),
        filesystem=fs,
        row_group_size=8192,
    )
    skipped = []
    for family in sorted(families):
        try:
            table = pa.Table.from_pylist(families[family], schema=arrow_schema(FAMILIES[family]))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            skipped.append(family)  # the records file keeps every record whole
            continue
        pq.write_table(table, join(tmp, f"{family}.parquet"), filesystem=fs)
        files.append(f"{family}.parquet")
    manifest = {
        "format": FORMAT,
        "first_seq": first,
        "last_seq": last,
        "first_time": rows[0]["time"],
        "last_time": rows[-1]["time"],
        "start_time": start_time,
        "records": len(rows),
        "raw_sha256": digest.hexdigest(),
        "files": files,
        "families_not_written": skipped,
    }
    body = json.dumps(manifest, sort_keys=True).encode()
    with fs.open_output_stream(join(tmp, MANIFEST)) as out:
        out.write(body)
    _remove(fs, final)  # a segment written before by a sealing killed before it was recorded
    fs.move(tmp, final)
    target = join(location, name) if "://" in location else final
    return Written(target, manifest, hashlib.sha256(body).hexdigest())


def _remove(fs: Any, path: str) -> None:
    from pyarrow import fs as pafs

    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)


def read_back(written: Written) -> None:
    """Read the segment back and check it against its manifest; ArchiveError when it does not match.

    A local archive's files are forced to disk first, so the check is of what
    a power cut would leave.
    """
    fs, folder = filesystem(written.location)
    if "://" not in written.location:
        for name in written.manifest["files"] + [MANIFEST]:
            _fsync(os.path.join(folder, name))
        _fsync(folder)
        _fsync(str(Path(folder).parent))
    manifest, digest = read_manifest(written.location)
    if digest != written.manifest_sha256 or manifest != written.manifest:
        raise ArchiveError(f"{written.location}: the manifest does not read back as written")
    table = _records_table(written.location, ["seq", "raw"])
    seqs = table.column("seq").to_pylist()
    if seqs != list(range(manifest["first_seq"], manifest["last_seq"] + 1)):
        raise ArchiveError(f"{written.location}: the records do not read back in sequence")
    h = hashlib.sha256()
    for raw in table.column("raw").to_pylist():
        h.update(raw)
    if h.hexdigest() != manifest["raw_sha256"]:
        raise ArchiveError(f"{written.location}: the records' SHA-256 does not match the manifest")


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(location: str) -> tuple[dict[str, Any], str]:
    """A segment's manifest and the SHA-256 of its bytes."""
    fs, folder = filesystem(location)
    try:
        with fs.open_input_stream(join(folder, MANIFEST)) as f:
            body = f.read()
    except (FileNotFoundError, OSError) as exc:
        raise ArchiveError(f"{location}: no manifest ({exc})") from exc
    manifest: dict[str, Any] = json.loads(body)
    return manifest, hashlib.sha256(body).hexdigest()


def _records_table(location: str, columns: list[str], filter: Any = None) -> Any:
    import pyarrow.dataset as ds

    fs, folder = filesystem(location)
    try:
        dataset = ds.dataset(join(folder, RECORDS_FILE), filesystem=fs, format="parquet")
        return dataset.to_table(columns=columns, filter=filter)
    except (FileNotFoundError, OSError) as exc:
        raise ArchiveError(f"{location}: the segment cannot be read ({exc})") from exc


def raw_records(location: str) -> Iterator[tuple[int, bytes]]:
    """Every (seq, raw bytes) of a segment, in order."""
    table = _records_table(location, ["seq", "raw"])
    yield from zip(table.column("seq").to_pylist(), table.column("raw").to_pylist(), strict=True)


@overload
def scan(
    segments: Iterable[dict[str, Any]],
    *,
    group: str | None = None,
    topic: str | None = None,
    types: Iterable[str] | None = None,
    seqs: Iterable[int] | None = None,
    with_time: Literal[False] = False,
) -> Iterator[tuple[int, Record]]: ...


@overload
def scan(
    segments: Iterable[dict[str, Any]],
    *,
    group: str | None = None,
    topic: str | None = None,
    types: Iterable[str] | None = None,
    seqs: Iterable[int] | None = None,
    with_time: Literal[True],
) -> Iterator[tuple[int, Record, int]]: ...


def scan(
    segments: Iterable[dict[str, Any]],
    *,
    group: str | None = None,
    topic: str | None = None,
    types: Iterable[str] | None = None,
    seqs: Iterable[int] | None = None,
    with_time: bool = False,
) -> Iterator[tuple[int, Record] | tuple[int, Record, int]]:
    """(seq, record) of the sealed segments' records that may match, oldest first.

    The conditions are pushed down to the Parquet reader (row groups whose
    statistics rule them out are not read): `group` and `topic` keep the
    records that name that group or topic, or none at all; `types` the records
    of those types; `seqs` those sequence numbers. A caller still applies its
    own test to each record: the pushdown only leaves records out. With
    `with_time`, (seq, record, effective time) from the `time` column.
    """
    import pyarrow.dataset as ds

    condition = None

    def both(expr: Any) -> None:
        nonlocal condition
        condition = expr if condition is None else condition & expr

    if group is not None:
        both(ds.field("group").is_null() | (ds.field("group") == group))
    if topic is not None:
        both(ds.field("topic").is_null() | (ds.field("topic") == topic))
    if types is not None:
        both(ds.field("type").isin(sorted(types)))
    wanted = sorted(set(seqs)) if seqs is not None else None
    columns = ["seq", "raw", "time"] if with_time else ["seq", "raw"]
    for segment in segments:
        where = condition
        if wanted is not None:
            inside = [s for s in wanted if segment["first_seq"] <= s <= segment["last_seq"]]
            if not inside:
                continue
            where = _and(condition, ds.field("seq").isin(inside))
        table = _records_table(segment["location"], columns, where)
        seq_col, raw_col = table.column("seq").to_pylist(), table.column("raw").to_pylist()
        if with_time:
            for seq, raw, time in zip(
                seq_col, raw_col, table.column("time").to_pylist(), strict=True
            ):
                yield seq, records.unpack(raw), time
        else:
            for seq, raw in zip(seq_col, raw_col, strict=True):
                yield seq, records.unpack(raw)


def _and(a: Any, b: Any) -> Any:
    return b if a is None else a & b


# ---------------------------------------------------------------------- snapshots in the archive

SNAPSHOTS = "snapshots"


def put_snapshot(location: str, path: Path) -> None:
    """Copy a snapshot file to `<archive>/snapshots/` (temporary name, then renamed): a slave's
    replay, whose directory has no snapshot of its own, reads it there (B-413)."""
    fs, base = filesystem(location)
    folder = join(base, SNAPSHOTS)
    fs.create_dir(folder, recursive=True)
    final, tmp = join(folder, path.name), join(folder, f".{path.name}.tmp")
    with path.open("rb") as src, fs.open_output_stream(tmp) as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
    if "://" not in location:
        _fsync(tmp)
    fs.move(tmp, final)
    if "://" not in location:
        _fsync(folder)


def get_snapshot(segment_location: str, name: str, dest: Path) -> Path:
    """Copy the snapshot `name` from the archive holding the segment at `segment_location` to dest."""
    archive = segment_location.rstrip("/").rsplit("/", 1)[0]
    fs, base = filesystem(archive)
    try:
        with fs.open_input_stream(join(join(base, SNAPSHOTS), name)) as src, dest.open("wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
    except (FileNotFoundError, OSError) as exc:
        raise ArchiveError(f"{archive}: no snapshot {name} ({exc})") from exc
    return dest


def raw_at(location: str, seq: int) -> bytes | None:
    """The raw bytes of record seq from its segment, or None when the segment does not hold it."""
    import pyarrow.dataset as ds

    table = _records_table(location, ["seq", "raw"], ds.field("seq") == seq)
    raws = table.column("raw").to_pylist()
    return bytes(raws[0]) if raws else None
