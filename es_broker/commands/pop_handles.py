"""Receipt handles of popped messages: made by the broker, unforgeable, one group's only (B-586).

A handle (`remoting.pop_headers.ReceiptHandle`, the POP_CK property and the
`extraInfo` of ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME) carries RocketMQ 5's
fields and a MAC: the first 32 hex digits of HMAC-SHA256 over the group, topic,
queue id, queue offset and pop time, keyed with the data directory's pop key.
Anyone can read a handle; nobody without the key can make one, nor turn one
group's handle into another's (the group is in the MAC, never in the handle).

The key is 32 random bytes made once per data directory (`pop_handles.key`,
0600), kept out of the log on purpose: the log is exported to Parquet, SQL and
Spark, and a key there would let their readers ack any group's messages. No
record depends on it: handles are checked before anything is recorded, and a
record names a handle by its pop time, which a replay reads, never re-decides.
A broker promoted from another data directory has another key: the handles
out are refused there, and their messages come back after their invisible time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from es_broker.commands.errors import BrokerError
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.pop_headers import ORDER_REVIVE_QID, ReceiptHandle

KEY_FILE = "pop_handles.key"
MAC_DIGITS = 32


class InvalidHandle(BrokerError):
    """A handle the broker did not make for this group, topic, queue and offset."""

    code = ResponseCode.INVALID_PARAMETER


def load_key(data_dir: str | Path) -> bytes:
    """The data directory's pop key, made (32 random bytes, 0600) on first use."""
    path = Path(data_dir) / KEY_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # made meanwhile by another opener of the directory
        return path.read_bytes()
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def mac(key: bytes, group: str, topic: str, queue_id: int, offset: int, pop_time: int) -> str:
    """The handle's MAC over what names the message and its pop, for one group."""
    text = f"{group}\x00{topic}\x00{queue_id}\x00{offset}\x00{pop_time}".encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()[:MAC_DIGITS]


def make(
    key: bytes,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    ck_offset: int,
    pop_time: int,
    invisible_time: int,
    order: bool,
    broker_name: str,
    physical_offset: int,
) -> ReceiptHandle:
    """The handle of one message popped by `group` at `pop_time`."""
    return ReceiptHandle(
        ck_offset,
        pop_time,
        invisible_time,
        ORDER_REVIVE_QID if order else 0,
        broker_name,
        queue_id,
        offset,
        physical_offset,
        mac(key, group, topic, queue_id, offset, pop_time),
    )


def verify(
    key: bytes, group: str, topic: str, queue_id: int, offset: int, extra_info: str
) -> ReceiptHandle:
    """The handle `extra_info` holds, when the broker made it for exactly this group, topic,
    queue and offset; else `InvalidHandle` says why (nothing is recorded for a refused one)."""
    try:
        handle = ReceiptHandle.decode(extra_info)
    except ValueError as exc:
        raise InvalidHandle(f"invalid receipt handle: {exc}") from None
    if handle.queue_id != queue_id or handle.queue_offset != offset:
        raise InvalidHandle(
            f"invalid receipt handle: it names queue {handle.queue_id} offset "
            f"{handle.queue_offset}, the request queue {queue_id} offset {offset}"
        )
    expected = mac(key, group, topic, queue_id, offset, handle.pop_time)
    if not hmac.compare_digest(expected, handle.mac):
        raise InvalidHandle(
            f"invalid receipt handle: not one this broker gave group {group} for topic {topic}"
        )
    return handle
