"""What a client sends and receives: outgoing messages, send results, received messages.

Pure values and encoders, no I/O: the UNIQ_KEY generator (docs/protocol.md §8.6),
and the decoding of a pull body into
`ReceivedMessage`s (client-side tag filter and MIN/MAX_OFFSET, B-66, B-106).
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from es_broker import compiled
from es_broker.remoting.bodies import MessageQueue
from es_broker.remoting.message import (
    MessageDecodeError,
    StoredMessage,
    decode_all,
    decode_one,
    offset_msg_id,
)

# Property names (MessageConst).
TAGS = "TAGS"
KEYS = "KEYS"
UNIQ_KEY = "UNIQ_KEY"
WAIT = "WAIT"
DELAY = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
MIN_OFFSET = "MIN_OFFSET"
MAX_OFFSET = "MAX_OFFSET"
CONSUME_START_TIME = "CONSUME_START_TIME"
TRAN_MSG = "TRAN_MSG"

RETRY_PREFIX = "%RETRY%"


def retry_topic(group: str) -> str:
    """`%RETRY%<group>`, the group's retry topic (MixAll#getRetryTopic)."""
    return RETRY_PREFIX + group


@dataclass(frozen=True, slots=True)
class Message:
    """A message to send; `keys` are space-joined into KEYS as Java does."""

    body: bytes
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0

    def wire_properties(self) -> dict[str, str]:
        """The properties as sent: user ones, then TAGS, KEYS, DELAY and WAIT=true."""
        props = dict(self.properties)
        if self.tags:
            props[TAGS] = self.tags
        if self.keys:
            props[KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level > 0:
            props[DELAY] = str(self.delay_level)
        props.setdefault(WAIT, "true")  # Message's constructor sets waitStoreMsgOK
        return props


class SendStatus(Enum):
    """How the broker stored a message: every status means stored (docs/protocol.md §7.2.1)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    """Java's SendResult: msg_id is the UNIQ_KEY, offset_msg_id the broker's id."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    region_id: str | None = None


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A consumed message (Java MessageExt) as the handler sees it.

    `topic` is the original topic for retries (B-99); `queue` is the queue it
    was pulled from, so for a retry it is a `%RETRY%` queue.
    """

    topic: str
    body: bytes
    properties: Mapping[str, str]
    queue: MessageQueue
    queue_offset: int
    commit_log_offset: int
    offset_msg_id: str
    reconsume_times: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    born_host: tuple[str, int] = ("0.0.0.0", 0)
    store_host: tuple[str, int] = ("0.0.0.0", 0)

    @property
    def msg_id(self) -> str:
        """UNIQ_KEY when the producer set one, else the offset message id (B-12)."""
        return self.properties.get(UNIQ_KEY) or self.offset_msg_id

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return self.properties.get(KEYS, "").split()

    @classmethod
    def from_stored(cls, stored: StoredMessage, queue: MessageQueue) -> ReceivedMessage:
        """Decompressed body, fields as stored."""
        return cls(
            topic=stored.topic,
            body=stored.uncompressed_body(),
            properties=dict(stored.properties),
            queue=queue,
            queue_offset=stored.queue_offset,
            commit_log_offset=stored.physical_offset,
            offset_msg_id=stored.msg_id,
            reconsume_times=stored.reconsume_times,
            flag=stored.flag,
            sys_flag=stored.sys_flag,
            born_timestamp=stored.born_timestamp,
            store_timestamp=stored.store_timestamp,
            born_host=stored.born_host,
            store_host=stored.store_host,
        )


def decode_pull_body(
    body: bytes, queue: MessageQueue, tags_set: frozenset[str], min_offset: int, max_offset: int
) -> list[ReceivedMessage]:
    """The messages of a FOUND pull, re-filtered by tag string and marked with the queue bounds.

    The broker filters by tag hash only, so a hash collision can let a foreign
    tag through; Java re-checks the tag string and drops untagged messages
    when specific tags are subscribed (docs/protocol.md §12).
    """
    try:
        records = decode_all(body)
    except MessageDecodeError:
        records = _decode_until_bad(body)
    bounds = {MIN_OFFSET: str(min_offset), MAX_OFFSET: str(max_offset)}
    out = []
    for stored in records:
        props = stored.properties
        if tags_set and props.get(TAGS) not in tags_set:
            continue
        out.append(
            ReceivedMessage(
                stored.topic,
                stored.uncompressed_body(),
                {**props, **bounds},
                queue,
                stored.queue_offset,
                stored.physical_offset,
                offset_msg_id(stored.store_host, stored.physical_offset),
                stored.reconsume_times,
                stored.flag,
                stored.sys_flag,
                stored.born_timestamp,
                stored.store_timestamp,
                stored.born_host,
                stored.store_host,
            )
        )
    return out


def _decode_until_bad(body: bytes) -> list[StoredMessage]:
    """Records up to the first one that does not decode; Java drops the rest silently (docs/protocol.md §8.2)."""
    out, pos = [], 0
    while pos < len(body):
        try:
            stored, pos = decode_one(body, pos)
        except MessageDecodeError:
            break
        out.append(stored)
    return out


# the pure-Python function that has a compiled twin (in es_broker/remoting/_speedups.pyx)
REFERENCE = {"decode_pull_body": decode_pull_body}
compiled.install(globals(), "es_broker.remoting._speedups", "decode_pull_body")


class UniqIdGenerator:
    """Java's MessageClientIDSetter: 32 hex characters, unique per client (docs/protocol.md §8.6).

    IP (4 bytes) + pid low 16 bits (2) + a per-process random int standing for
    the class-loader hash (4) + ms since the start of the month (4) + counter (2).
    """

    def __init__(self, ip: str) -> None:
        try:
            packed_ip = socket.inet_aton(ip)
        except OSError:
            packed_ip = bytes(4)
        fix = (
            packed_ip
            + struct.pack(">H", os.getpid() & 0xFFFF)
            + random.getrandbits(32).to_bytes(4, "big")
        )
        self._fix = fix.hex().upper()
        self._counter = itertools.count(random.randrange(1 << 16))
        self._lock = threading.Lock()  # the sync wrapper may call from another thread
        self._month_start_ms, self._next_month_ms = _month_bounds(time.time())

    def next_id(self) -> str:
        now_ms = int(time.time() * 1000)
        with self._lock:
            if now_ms >= self._next_month_ms:
                self._month_start_ms, self._next_month_ms = _month_bounds(now_ms / 1000)
            elapsed = (now_ms - self._month_start_ms) & 0xFFFFFFFF
            count = next(self._counter) & 0xFFFF
        return self._fix + struct.pack(">IH", elapsed, count).hex().upper()


def _month_bounds(now: float) -> tuple[int, int]:
    local = datetime.datetime.fromtimestamp(now).replace(
        day=1, hour=0, minute=0, second=0, microsecond=0
    )
    following = (local + datetime.timedelta(days=32)).replace(day=1)
    return int(local.timestamp() * 1000), int(following.timestamp() * 1000)
