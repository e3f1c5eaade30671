"""Reading an Apache RocketMQ 4.9.8 store directory, read-only (B-520..B-526).

The layout (4.9.8 DefaultMessageStore and friends):

- `commitlog/`: files named by the 20-digit commit-log offset of their first byte
  (MappedFileQueue), each `mappedFileSizeCommitLog` bytes, preallocated. Messages
  lie back to back in the stored layout (CommitLog#doAppend, MessageDecoder:
  docs/protocol.md §8); a file without room for the next message ends with a
  BLANK record (TOTALSIZE, then MAGICCODE 0xcbd43194) filling it. Bytes after the
  last message of the last file are zeros (TOTALSIZE 0).
- `consumequeue/<topic>/<queueId>/`: files named by the byte offset of their first
  unit, units of 20 bytes (commit-log offset i64, size i32, tags code i64;
  ConsumeQueue). In SCHEDULE_TOPIC_XXXX the tags code is the due time
  (ScheduleMessageService#computeDeliverTimestamp).
- `config/*.json`: ConfigManager's files, written by fastjson, whose integer map
  keys (consumerOffset.json, delayOffset.json) are not quoted.
- `index/` (IndexFile) and `checkpoint` (StoreCheckpoint): es-broker builds its own
  key index from the messages; their bytes are checksummed, not read.

Nothing here writes: files are opened for reading and mapped read-only, so a store
on a read-only file system (or with every write permission removed) is read as is.
Every defect found names its file and byte offset (`StoreCorrupt`); read with
`skip=True` (`--skip-corrupt`, B-527), a defect of the commit log is passed over
instead: the walk yields a `Skipped` span for it and goes on at the next message.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import mmap
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_broker.remoting import message as wire
from es_broker.stored_layout import MAGIC_CODE, PHYSICAL_OFFSET_AT

BLANK_MAGIC = -875286124  # 0xcbd43194: CommitLog.BLANK_MAGIC_CODE
CQ_UNIT = struct.Struct(">qiq")  # ConsumeQueue.CQ_STORE_UNIT_SIZE = 20
_HEAD = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE
_MAGIC = struct.pack(">i", MAGIC_CODE)
_I64 = struct.Struct(">q")
_NAME = re.compile(r"^\d{20}$")
_CONFIGS = (
    "topics.json",
    "subscriptionGroup.json",
    "consumerOffset.json",
    "delayOffset.json",
    "consumerFilter.json",
)
# fastjson writes Map<Integer, Long> keys bare: {0:281,1:361}
_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


class StoreCorrupt(ValueError):
    """The store breaks its layout: the message names the file and the byte offset."""

    def __init__(self, path: Path | str, offset: int | None, what: str) -> None:
        where = f"{path}" if offset is None else f"{path} at byte {offset}"
        super().__init__(f"{where}: {what}")
        self.path = str(path)
        self.offset = offset


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A file of the store as it was read: its path below the store root, size and SHA-256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Stored:
    """A message of the commit log: its offset, its bytes as stored, and their decoding."""

    phy: int
    raw: bytes
    message: wire.StoredMessage
    path: Path | None = None  # its commit-log file, and its byte offset there
    at: int = 0

    def where(self) -> str:
        """Its file and byte offset, as a refusal names them."""
        return f"{self.path} at byte {self.at}" if self.path else f"commit-log offset {self.phy}"


@dataclass(frozen=True, slots=True)
class Skipped:
    """Commit-log bytes that hold no message to carry (B-527): `size` bytes at commit-log offset
    `phy`, byte `at` of `path`, and why (the refusal's words)."""

    path: Path
    at: int
    phy: int
    size: int
    why: str


@dataclass(frozen=True, slots=True)
class Unit:
    """A consume-queue unit, and where it was read (its file and byte offset there)."""

    phy: int
    size: int
    tags: int
    path: Path
    at: int


@dataclass(slots=True)
class Configs:
    """What config/*.json hold."""

    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    offsets: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)  # group/topic/q
    delay_offsets: dict[int, int] = field(default_factory=dict)  # level -> next offset
    filters: int = 0  # consumer filter entries (not carried: heartbeats bring them back)


Queues = dict[tuple[str, int], "ConsumeQueue"]


def manifest(root: Path) -> list[SourceFile]:
    """Every file the import reads or accounts for, with its size and SHA-256, sorted by path."""
    paths = [root / "checkpoint"] + [
        root / "config" / f"{name}{bak}" for name in _CONFIGS for bak in ("", ".bak")
    ]
    for folder in ("commitlog", "consumequeue", "index"):
        if (root / folder).is_dir():
            paths.extend(p for p in (root / folder).rglob("*") if p.is_file())
    out = []
    for path in sorted(p for p in paths if p.is_file()):
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        out.append(SourceFile(str(path.relative_to(root)), path.stat().st_size, digest.hexdigest()))
    return out


def check_layout(root: Path) -> None:
    """Refuse a directory that is not a RocketMQ store root, saying what is missing."""
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such store directory")
    missing = [
        name for name in ("commitlog", "consumequeue", "config") if not (root / name).is_dir()
    ]
    if missing:
        raise StoreCorrupt(
            root, None, f"not a RocketMQ store root: no {', '.join(missing)} folder in it"
        )
    if (root / "abort").exists():  # DefaultMessageStore#createTempFile, deleted by a clean stop
        raise StoreCorrupt(
            root / "abort",
            None,
            "its broker is running or did not stop cleanly (its consume queues and config may "
            "lag the commit log): stop it cleanly (mqshutdown broker) and import again",
        )


def commit_log_files(root: Path, *, skip: bool = False) -> list[tuple[int, Path]]:
    """(first offset, path) of the commit-log files in order; they must follow each other, each
    as long as the first (with `skip`, a short file or a missing one is left to `messages`)."""
    files = []
    for path in (root / "commitlog").iterdir():
        if not _NAME.match(path.name):
            raise StoreCorrupt(path, None, "a commit-log file is named by its 20-digit offset")
        files.append((int(path.name), path))
    files.sort()
    if not files:
        return files
    size = files[0][1].stat().st_size
    for (start, path), (nxt, _) in zip(files, files[1:], strict=False):
        if start + size > nxt or (start + size != nxt and not skip):
            raise StoreCorrupt(
                path, None, f"the next file should start at {start + size}, not {nxt}"
            )
    for _, path in files[1:] if not skip else ():
        if path.stat().st_size != size:
            raise StoreCorrupt(
                path,
                path.stat().st_size,
                f"truncated: {path.stat().st_size} bytes, not {size} as the first file",
            )
    return files


def messages(root: Path, *, skip: bool = False) -> Iterator[Stored | Skipped]:
    """Every message of the commit log in order (CommitLog#checkMessageAndReturnSize), checked:
    MAGICCODE, TOTALSIZE within the file, the PHYSICALOFFSET field, the body CRC.

    A defect raises `StoreCorrupt`; with `skip` it is yielded as a `Skipped` span instead
    (B-527): a message whose header holds (its CRC, say) is passed over by its TOTALSIZE,
    otherwise the walk goes on at the next offset that starts a message (its MAGICCODE, and
    its PHYSICALOFFSET field that offset), or at the file's end; the bytes a short file lacks,
    and a missing file's, are a span too.
    """
    files = commit_log_files(root, skip=skip)
    size = files[0][1].stat().st_size if files else 0
    for n, (start, path) in enumerate(files):
        length = path.stat().st_size
        if length:
            with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                yield from _file_messages(path, start, data, skip)
        end = files[n + 1][0] if n + 1 < len(files) else start + size
        if skip and start + length < end:
            missing = "no file holds them" if length >= size else f"the file ends at {length}"
            yield Skipped(
                path,
                length,
                start + length,
                end - start - length,
                f"truncated: {end - start - length} bytes missing ({missing}; its files are "
                f"{size} bytes)",
            )


def _file_messages(
    path: Path, start: int, data: mmap.mmap, skip: bool
) -> Iterator[Stored | Skipped]:
    size, pos = len(data), 0
    while pos < size:
        found = _at(path, start, data, pos)
        if found is None:
            return  # the end of the log's data in this file: zeros, or the BLANK filling it
        if isinstance(found, Stored):
            yield found
            pos += len(found.raw)
            continue
        why, whole = found
        if not skip:
            raise StoreCorrupt(path, pos, why)
        nxt = pos + whole if whole else _next_start(start, data, pos + 1)
        yield Skipped(path, pos, start + pos, nxt - pos, why)
        pos = nxt


def _at(path: Path, start: int, data: mmap.mmap, pos: int) -> Stored | tuple[str, int] | None:
    """The message at pos; None at the end of the file's data; or (the defect, the bytes to pass
    over it: its TOTALSIZE where the message's header holds, else 0)."""
    size = len(data)
    if pos + 8 > size:
        return f"truncated: {size - pos} bytes left, too few for a message", 0
    total, magic = _HEAD.unpack_from(data, pos)
    if total == 0 and magic == 0:
        return None  # never written: the end of the log's data in this file
    if magic == BLANK_MAGIC:
        return (
            None if pos + total == size else (f"a BLANK of {total} bytes does not end the file", 0)
        )
    if magic != MAGIC_CODE:
        return f"bad MAGICCODE 0x{magic & 0xFFFFFFFF:08x}", 0
    if total < wire.FIXED_SIZE or pos + total > size:
        return f"truncated message: TOTALSIZE {total}, {size - pos} bytes left in the file", 0
    raw = bytes(data[pos : pos + total])
    try:
        msg = wire.decode_one(raw)[0]
    except wire.MessageDecodeError as exc:
        return f"not a stored message: {exc}", 0
    if msg.physical_offset != start + pos:
        return f"PHYSICALOFFSET {msg.physical_offset}, not {start + pos}", 0
    crc = zlib.crc32(msg.body) & 0x7FFFFFFF  # UtilAll.crc32
    if msg.body_crc != crc:
        return f"body CRC {msg.body_crc} stored, {crc} computed", total
    return Stored(start + pos, raw, msg, path, pos)


def _next_start(start: int, data: mmap.mmap, pos: int) -> int:
    """The first offset from pos that starts a message (its MAGICCODE, its own offset in its
    PHYSICALOFFSET field), else the file's size."""
    size = len(data)
    while (found := data.find(_MAGIC, pos + 4)) >= 0:
        at = found - 4
        if (
            at + PHYSICAL_OFFSET_AT + 8 <= size
            and _I64.unpack_from(data, at + PHYSICAL_OFFSET_AT)[0] == start + at
        ):
            return at
        pos = at + 1
    return size


def consume_queues(root: Path, *, skip: bool = False) -> Queues:
    """(topic, queue id) -> its consume queue, every unit checked (B-526).

    Units below the first commit-log file name messages the broker's retention deleted
    (ConsumeQueue#correctMinOffset): the queue starts past them.
    """
    files = commit_log_files(root, skip=skip)
    phy_min = files[0][0] if files else 0
    out: Queues = {}
    for topic_dir in sorted((root / "consumequeue").iterdir()):
        for queue_dir in sorted(topic_dir.iterdir()):
            if not queue_dir.name.isdigit():
                raise StoreCorrupt(
                    queue_dir, None, "a consume-queue folder is named by its queue id"
                )
            queue = ConsumeQueue(topic_dir.name, int(queue_dir.name))
            queue.load(sorted(queue_dir.iterdir()), phy_min)
            out[(queue.topic, queue.queue_id)] = queue
    return out


class ConsumeQueue:
    """One queue's files: the units from `lo` to `hi` (one past the last), read from the files
    when asked (a few kept in memory), so a store of any size costs its queues' file lists."""

    CACHED = 64  # files kept read

    def __init__(self, topic: str, queue_id: int) -> None:
        self.topic, self.queue_id = topic, queue_id
        self.files: list[tuple[int, Path]] = []  # (first queue offset, path)
        self.lo = self.hi = 0
        self.cursor = 0  # the next unit a message of the commit log is to match
        self._read: dict[int, bytes] = {}

    def load(self, paths: list[Path], phy_min: int) -> None:
        """Check every unit of the files; find where the queue starts and ends."""
        started = False
        for path in paths:
            if not _NAME.match(path.name):
                raise StoreCorrupt(
                    path, None, "a consume-queue file is named by its 20-digit offset"
                )
            first = int(path.name)
            if first % CQ_UNIT.size:
                raise StoreCorrupt(
                    path, None, f"its name {first} is not a multiple of {CQ_UNIT.size}"
                )
            self.files.append((first // CQ_UNIT.size, path))
            data = path.read_bytes()
            for n, (phy, size, _) in enumerate(
                CQ_UNIT.iter_unpack(data[: len(data) - len(data) % 20])
            ):
                if size == 0 and phy == 0:
                    self.hi = first // CQ_UNIT.size + n  # never written: the queue ends here
                    break
                if phy < 0 or size < 0:
                    raise StoreCorrupt(
                        path,
                        n * CQ_UNIT.size,
                        f"a unit with commit-log offset {phy} and size {size}",
                    )
                if not started and phy >= phy_min:
                    started, self.lo = True, first // CQ_UNIT.size + n
            else:
                self.hi = first // CQ_UNIT.size + len(data) // CQ_UNIT.size
                continue
            break
        if not started:
            self.lo = self.hi
        self.cursor = self.lo

    def __len__(self) -> int:
        return self.hi - self.lo

    def unit(self, offset: int) -> Unit | None:
        """The unit at a queue offset, None outside [lo, hi)."""
        if not self.lo <= offset < self.hi:
            return None
        i = bisect.bisect_right(self.files, offset, key=lambda f: f[0]) - 1
        first, path = self.files[i]
        data = self._read.get(i)
        if data is None:
            if len(self._read) >= self.CACHED:
                self._read.pop(next(iter(self._read)))
            data = self._read[i] = path.read_bytes()
        at = (offset - first) * CQ_UNIT.size
        phy, size, tags = CQ_UNIT.unpack_from(data, at)
        return Unit(phy, size, tags, path, at)

    def units(self) -> Iterator[tuple[int, Unit]]:
        for offset in range(self.lo, self.hi):
            unit = self.unit(offset)
            assert unit is not None
            yield offset, unit


def read_message(root: Path, unit: Unit, *, skip: bool = False) -> Stored:
    """The message a consume-queue unit names, read from its commit-log file and checked."""
    for start, path in commit_log_files(root, skip=skip):
        size = path.stat().st_size
        if start <= unit.phy < start + size:
            if unit.phy + unit.size > start + size:
                break
            with path.open("rb") as f:
                f.seek(unit.phy - start)
                data = f.read(unit.size)
            try:
                msg = wire.decode_one(data)[0]
            except wire.MessageDecodeError:
                break
            if msg.physical_offset == unit.phy:
                return Stored(unit.phy, data, msg, path, unit.phy - start)
            break
    raise StoreCorrupt(
        unit.path,
        unit.at,
        f"the unit points at commit-log offset {unit.phy} ({unit.size} bytes), where no message is",
    )


def read_configs(root: Path) -> Configs:
    """config/*.json as ConfigManager wrote them (the .bak copies are checksummed, not read)."""
    cfg = Configs()
    topics = _json(root, "topics.json")
    for name, topic in (topics.get("topicConfigTable") or {}).items():
        cfg.topics[name] = topic
    groups = _json(root, "subscriptionGroup.json")
    for name, group in (groups.get("subscriptionGroupTable") or {}).items():
        cfg.groups[name] = group
    offsets = _json(root, "consumerOffset.json")
    for key, table in (offsets.get("offsetTable") or {}).items():
        topic, sep, group = key.rpartition("@")
        if not sep or not isinstance(table, dict):
            raise StoreCorrupt(root / "config" / "consumerOffset.json", None, f"bad entry {key!r}")
        cfg.offsets.setdefault(group, {})[topic] = {int(q): int(o) for q, o in table.items()}
    delays = _json(root, "delayOffset.json")
    cfg.delay_offsets = {int(k): int(v) for k, v in (delays.get("offsetTable") or {}).items()}
    filters = _json(root, "consumerFilter.json")
    cfg.filters = sum(len(v or {}) for v in (filters.get("filterDataByTopic") or {}).values())
    return cfg


def _json(root: Path, name: str) -> dict[str, Any]:
    """A config file as a map ({} when absent, as a broker starting without it)."""
    path = root / "config" / name
    if not path.exists():
        return {}
    text = path.read_text("utf-8")
    if not text.strip():
        return {}
    try:
        value = json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))
    except json.JSONDecodeError as exc:
        raise StoreCorrupt(path, exc.pos, f"malformed JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise StoreCorrupt(path, 0, "malformed JSON: not an object")
    return value


def read_checkpoint(root: Path) -> list[int]:
    """StoreCheckpoint: physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp ([] if absent)."""
    path = root / "checkpoint"
    if not path.exists():
        return []
    data = path.read_bytes()
    if len(data) < 24:
        raise StoreCorrupt(path, len(data), "truncated: a checkpoint holds three 8-byte times")
    return list(struct.unpack_from(">qqq", data))
