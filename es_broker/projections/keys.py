"""Key and value layouts shared by the projections.

Topic and group names never hold a NUL byte (RocketMQ's name rules), so NUL
separates name parts and every key sorts by name, then by number.
"""

from __future__ import annotations

import functools
import struct

U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")
MAX_KEY = 511  # LMDB's longest key (MDB_MAXKEYSIZE)


# A key is immutable bytes and a pure function of its names, so each is built once: the writer
# builds a queue's keys several times a message (its send, a delivery, a commit). Bounded: the
# queues and the (topic, group, queue) rows a broker serves at a time.
@functools.lru_cache(maxsize=8192)
def queue_key(topic: str, queue_id: int) -> bytes:
    return topic.encode() + b"\x00" + U32.pack(queue_id)


@functools.lru_cache(maxsize=8192)
def offset_key(topic: str, group: str, queue_id: int) -> bytes:
    """Key of the offset table entry (`topic@group`, queue id), as RocketMQ names it (B-27)."""
    return f"{topic}@{group}".encode() + b"\x00" + U32.pack(queue_id)


def split_offset_key(key: bytes) -> tuple[str, str, int]:
    """(topic, group, queue id) of an offset-table key."""
    name, _, qid = key.partition(b"\x00")
    topic, _, group = name.decode().rpartition("@")
    return topic, group, U32.unpack(qid[:4])[0]
