"""Record encoding: msgpack maps with a type, a schema version and a time.

A record is a fact. Every value decided while handling a request lives in the
record, so applying it again decides nothing. Old schema versions stay
readable forever: an upcaster registered for (type, v) turns an old record
into the current shape on read, because the log is never rewritten.
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Callable
from typing import Any

import msgpack

from es_broker import compiled

Record = dict[str, Any]

_SEQ = struct.Struct(">Q")

_upcasters: dict[tuple[str, int], Callable[[Record], Record]] = {}


def seq_key(seq: int) -> bytes:
    """Key of a record in the `log` database: 8-byte big-endian, so keys sort by seq."""
    return _SEQ.pack(seq)


def key_seq(key: bytes) -> int:
    seq: int = _SEQ.unpack(key)[0]
    return seq


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# The longest text a record may hold (1 MiB): far above any legitimate field (a message's properties
# are at most Short.MAX_VALUE in RocketMQ), and the same bound the request edge puts on free text
# (es_broker.remoting.requests.TEXT_MAX), so one request cannot write megabytes into every consumer.
MAX_TEXT = 1 << 20
_SCALARS = (str, bool, float, type(None), bytes)
# Fields narrower than a long wherever they appear: queue ids are keys of the consume queues and the
# offset table (4 unsigned bytes) and Java ints on the wire.
_QUEUE_ID = (0, (1 << 31) - 1)
FIELD_RANGES: dict[str, tuple[int, int]] = {
    "queue_id": _QUEUE_ID,
    "real_queue_id": _QUEUE_ID,
    "target_queue_id": _QUEUE_ID,
}


class RecordOutOfRange(ValueError):
    """A record holds a value that a projection, the SQL read model, the export or Spark cannot hold.

    Raised by `make`, before anything is appended: a record that cannot be replayed
    everywhere is never written.
    """


def make(type_: str, ts: int, v: int = 1, **fields: Any) -> Record:
    """Build a record; `ts` is the broker time (ms) at which it was decided.

    Every integer must fit a signed 64-bit column (SQL BIGINT, Parquet int64,
    Spark LongType), every float be finite, every text UTF-8 of at most MAX_TEXT
    characters; `RecordOutOfRange` names the first field that does not.
    """
    return check({"type": type_, "v": v, "ts": ts, **fields})


def check(record: Record) -> Record:
    """`record` itself if every value fits (see `make`); else `RecordOutOfRange` names the first misfit."""
    if not _fits(record):
        raise RecordOutOfRange(f"record {record['type']}: {_first_misfit(record, '')}")
    for name, (lo, hi) in FIELD_RANGES.items():
        value = record.get(name)
        if type(value) is int and not lo <= value <= hi:
            raise RecordOutOfRange(
                f"record {record['type']}: {name} = {value} is not in [{lo}, {hi}]"
            )
    return record


def _fits(value: Any) -> bool:
    """True if every value inside fits (the fast path: no paths built, no call per int or text).

    Records are shallow: a map of fields, some holding lists of short tuples
    (a batch's units) or of maps; those two levels are checked in this call's
    own loops, and only deeper values recurse.
    """
    kind = type(value)
    if kind is dict:
        for key in value:
            if type(key) is not str and not _fits(key):
                return False
        items: Any = value.values()
    elif kind is list or kind is tuple:
        items = value
    else:
        return _scalar_fits(value)
    for item in items:
        kind = type(item)
        if kind is int:
            if item > INT64_MAX or item < INT64_MIN:
                return False
        elif kind is str:
            if len(item) > MAX_TEXT or not (item.isascii() or _utf8(item)):
                return False
        elif kind is list or kind is tuple:
            for inner in item:  # two levels down in this loop: a batch's units are 32 lists of ints
                kind = type(inner)
                if kind is int:
                    if inner > INT64_MAX or inner < INT64_MIN:
                        return False
                elif kind is str:
                    if len(inner) > MAX_TEXT or not (inner.isascii() or _utf8(inner)):
                        return False
                elif kind is list or kind is tuple:
                    for leaf in inner:  # a unit's ints, without a call per unit
                        if type(leaf) is int:
                            if leaf > INT64_MAX or leaf < INT64_MIN:
                                return False
                        elif not _fits(leaf):
                            return False
                elif not _fits(inner):
                    return False
        elif not _fits(item):
            return False
    return True


def _scalar_fits(value: Any) -> bool:
    kind = type(value)
    if kind is int or (isinstance(value, int) and kind is not bool):  # IntEnum members too
        fits: bool = INT64_MIN <= value <= INT64_MAX
        return fits
    if kind is str:
        return len(value) <= MAX_TEXT and (value.isascii() or _utf8(value))
    if kind is float:
        return math.isfinite(value)
    return isinstance(value, _SCALARS)


def _utf8(text: str) -> bool:
    """True if `text` can be written as UTF-8 (msgpack's strings, LMDB keys): no lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _first_misfit(value: Any, path: str) -> str:
    """Where the first value that does not fit is, and why (the slow path, for the error)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not (type(key) is str or _fits(key)):
                return f"{path} key {str(key)[:40]} does not fit a signed 64-bit integer"
            if not _fits(item):
                return _first_misfit(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            if not _fits(item):
                return _first_misfit(item, f"{path}[{n}]")
    elif isinstance(value, str):
        if not _utf8(value):
            return f"{path} holds text that is not UTF-8 (a lone surrogate)"
        return f"{path} holds {len(value)} characters, more than {MAX_TEXT}"
    elif isinstance(value, float):
        return f"{path} = {value} is not a finite number"
    elif isinstance(value, int):
        return f"{path} = {str(value)[:40]} does not fit a signed 64-bit integer"
    return f"{path} holds a {type(value).__name__}, which a record cannot carry"


# a packer per thread, reused: msgpack.packb builds one (and its buffer) a call, a third of its cost
_threads = threading.local()


def packb(value: Any) -> bytes:
    """msgpack.packb(value, use_bin_type=True): the same bytes, from this thread's packer."""
    try:
        packer = _threads.packer
    except AttributeError:
        packer = _threads.packer = msgpack.Packer(use_bin_type=True)
    raw: bytes = packer.pack(value)
    return raw


def pack(record: Record) -> bytes:
    """The record's msgpack bytes."""
    return packb(record)


def unpack(raw: bytes | memoryview) -> Record:
    record: Record = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    upcast = _upcasters.get((record["type"], record["v"]))
    while upcast is not None:
        record = upcast(record)
        upcast = _upcasters.get((record["type"], record["v"]))
    return record


def register_upcaster(type_: str, v: int, fn: Callable[[Record], Record]) -> None:
    """Register fn to turn a `type_` record of version v into version v + 1."""
    _upcasters[(type_, v)] = fn


# the pure-Python functions that have a compiled twin (es_broker/log/_speedups.pyx)
REFERENCE: dict[str, Callable[..., Any]] = {"check": check, "packb": packb}

compiled.install(globals(), "es_broker.log._speedups", "check", "packb")
