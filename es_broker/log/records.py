"""Record encoding: msgpack maps with a type, a schema version and a time.

A record is a fact. Every value decided while handling a request lives in the
record, so applying it again decides nothing. Old schema versions stay
readable forever: an upcaster registered for (type, v) turns an old record
into the current shape on read, because the log is never rewritten.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import msgpack

Record = dict[str, Any]

_SEQ = struct.Struct(">Q")

_upcasters: dict[tuple[str, int], Callable[[Record], Record]] = {}


def seq_key(seq: int) -> bytes:
    """Key of a record in the `log` database: 8-byte big-endian, so keys sort by seq."""
    return _SEQ.pack(seq)


def key_seq(key: bytes) -> int:
    return _SEQ.unpack(key)[0]


def make(type_: str, ts: int, v: int = 1, **fields: Any) -> Record:
    """Build a record; `ts` is the broker time (ms) at which it was decided."""
    return {"type": type_, "v": v, "ts": ts, **fields}


def pack(record: Record) -> bytes:
    return msgpack.packb(record, use_bin_type=True)


def unpack(raw: bytes | memoryview) -> Record:
    record = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    upcast = _upcasters.get((record["type"], record["v"]))
    while upcast is not None:
        record = upcast(record)
        upcast = _upcasters.get((record["type"], record["v"]))
    return record


def register_upcaster(type_: str, v: int, fn: Callable[[Record], Record]) -> None:
    """Register fn to turn a `type_` record of version v into version v + 1."""
    _upcasters[(type_, v)] = fn
