"""RocketMQ's stored-message encoding (docs/protocol.md §8).

One format serves the commit log, the body of a PULL_MESSAGE answer (records
back to back) and the query-by-id answers, so the broker stores exactly the
bytes it will send. Pure functions; no I/O.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from es_broker import compiled
from es_broker.stored_layout import MAGIC_CODE, QUEUE_OFFSET_AT

FIXED_SIZE = 91  # every field but body, topic and properties, IPv4 hosts

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# Message sysFlag bits (docs/protocol.md §8.3).
FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
FLAG_TRANSACTION_PREPARED = 0x4
FLAG_TRANSACTION_COMMIT = 0x8
FLAG_TRANSACTION_ROLLBACK = 0xC
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20

_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP, 48 bytes
_HOST4 = struct.Struct(">4si")
_I16 = struct.Struct(">h")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLENGTH
_OFFSETS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET
_QUEUE_ID = struct.Struct(">i")
_STORE_TS = struct.Struct(">q")  # STORETIMESTAMP at byte 56 (IPv4 born host)
_BATCH_ENTRY = struct.Struct(">iiiii")  # a batch entry: TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLENGTH
_BATCH_ENTRY_SIZE = _BATCH_ENTRY.size

# Byte positions of the fields the store patches or peeks at (docs/protocol.md §8.1, IPv4 hosts; an IPv6
# host is 12 bytes longer). _speedups.pyx compiles the same numbers: LAYOUT is what the two must
# agree on, and tests/test_compiled_identity.py holds them to it.
QUEUE_ID_AT = 12
# QUEUE_OFFSET_AT (20, PHYSICALOFFSET follows) is in es_broker/stored_layout.py, as MAGIC_CODE is
SYS_FLAG_AT = 36
STORE_TIMESTAMP_AT = 56
BODY_LENGTH_AT = 84
LAYOUT = (
    FIXED_SIZE,
    QUEUE_ID_AT,
    QUEUE_OFFSET_AT,
    SYS_FLAG_AT,
    STORE_TIMESTAMP_AT,
    BODY_LENGTH_AT,
    _BATCH_ENTRY_SIZE,
)


def tag_hash(tag: str) -> int:
    """Java's String.hashCode() of a tag, as a signed 32-bit value (docs/protocol.md §8.7)."""
    h = 0
    data = tag.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def encode_properties(props: dict[str, str]) -> bytes:
    """Encode properties the way the Java broker stores them: no trailing separator."""
    if not props:
        return b""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items()
    ).encode("utf-8")


def decode_properties(raw: bytes | str) -> dict[str, str]:
    """Decode properties; accepts the trailing separator ali-ons writes."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes | bytearray) else raw
    props: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        name, sep, value = segment.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            props[name] = value
    return props


@functools.lru_cache(maxsize=4096)
def _host_bytes(host: tuple[str, int]) -> bytes:
    ip, port = host
    packed = ipaddress.ip_address(ip)
    if packed.version != 4:
        mapped = getattr(packed, "ipv4_mapped", None)
        if mapped is None:
            # ali-ons cannot decode IPv6 hosts (docs/protocol.md §8.1); keep every stored host IPv4.
            raise ValueError(f"only IPv4 hosts are stored, got {ip}")
        packed = mapped
    return _HOST4.pack(packed.packed, port)


def offset_msg_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """The broker's message id: hex of store IP, port and physical offset (docs/protocol.md §8.5)."""
    if physical_offset < 0:  # as Java's putLong writes it: two's complement
        return (_host_bytes(store_host) + struct.pack(">q", physical_offset)).hex().upper()
    return _host_hex(store_host) + f"{physical_offset:016X}"


@functools.lru_cache(maxsize=256)
def _host_hex(store_host: tuple[str, int]) -> str:
    """The id's first 16 hex digits; a consumer decodes many messages of the same few brokers."""
    return _host_bytes(store_host).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """Split an offset message id into (store host, physical offset)."""
    if len(msg_id) != 32:
        raise ValueError(f"message id {msg_id!r} is not a 32-character IPv4 offset id")
    raw = bytes.fromhex(msg_id)
    ip, port = _HOST4.unpack_from(raw, 0)
    (phy,) = struct.unpack_from(">q", raw, 8)
    return (str(ipaddress.IPv4Address(ip)), port), phy


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as held in the commit log, with every field the broker decided."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int | None = None

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return self.properties.get("KEYS", "").split()

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.physical_offset)

    def uncompressed_body(self) -> bytes:
        """The body as the producer wrote it (zlib for compression types 0 and 3)."""
        if self.sys_flag & FLAG_COMPRESSED and (self.sys_flag >> 8) & 0x7 in (0, 3):
            return zlib.decompress(self.body)
        return self.body


def encode(msg: StoredMessage) -> bytes:
    """Encode one stored message (IPv4 hosts) in the commit-log / pull-body format."""
    return encode_fields(
        msg.topic,
        msg.queue_id,
        msg.body,
        msg.properties,
        msg.flag,
        msg.sys_flag,
        msg.queue_offset,
        msg.physical_offset,
        msg.born_timestamp,
        msg.born_host,
        msg.store_timestamp,
        msg.store_host,
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        msg.body_crc,
    )


def encode_fields(
    topic: str,
    queue_id: int,
    body: bytes,
    properties: dict[str, str],
    flag: int,
    sys_flag: int,
    queue_offset: int,
    physical_offset: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_timestamp: int,
    store_host: tuple[str, int],
    reconsume_times: int,
    prepared_transaction_offset: int,
    body_crc: int | None,
) -> bytes:
    """`encode` of a StoredMessage's fields, in its field order, without building one (the send path)."""
    topic_raw = topic.encode("utf-8")
    if len(topic_raw) > 127:
        raise ValueError(f"topic {topic!r} is longer than 127 bytes")
    props = encode_properties(properties)
    if len(props) > 32767:
        raise ValueError("properties are longer than 32767 bytes")
    total = FIXED_SIZE + len(body) + len(topic_raw) + len(props)
    crc = body_crc if body_crc is not None else zlib.crc32(body) & 0x7FFFFFFF
    sys_flag = sys_flag & ~(FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6)
    return b"".join(
        (
            _HEAD.pack(
                total,
                MAGIC_CODE,
                crc,
                queue_id,
                flag,
                queue_offset,
                physical_offset,
                sys_flag,
                born_timestamp,
            ),
            _host_bytes(born_host),
            struct.pack(">q", store_timestamp),
            _host_bytes(store_host),
            _TAIL.pack(reconsume_times, prepared_transaction_offset, len(body)),
            body,
            struct.pack(">b", len(topic_raw)),
            topic_raw,
            struct.pack(">h", len(props)),
            props,
        )
    )


def stamp(
    raw: bytes, queue_id: int, queue_offset: int, physical_offset: int, store_timestamp: int
) -> bytes:
    """Return raw with the fields decided at append written in: QUEUEID, QUEUEOFFSET,
    PHYSICALOFFSET and STORETIMESTAMP (IPv4 born host)."""
    buf = bytearray(raw)
    _QUEUE_ID.pack_into(buf, QUEUE_ID_AT, queue_id)
    _OFFSETS.pack_into(buf, QUEUE_OFFSET_AT, queue_offset, physical_offset)
    _STORE_TS.pack_into(buf, STORE_TIMESTAMP_AT, store_timestamp)
    return bytes(buf)


def place_batch(
    encoded: tuple[bytes, ...] | list[bytes],
    tags_codes: tuple[int, ...] | list[int],
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    file_size: int,
    id_prefix: str,
) -> tuple[list[tuple[int, bytes]], list[list[int]], list[str], int]:
    """Lay encoded messages out from physical_offset on, as the commit log holds them.

    No message straddles two commit-log files of `file_size` bytes (B-08): one
    that would starts the next file. Returns the stamped bytes by physical
    offset, the consume-queue units [physical offset, size, tags code], the
    message ids (`id_prefix`, the store host's hex, then the offset, B-12) and
    the offset after the last message.
    """
    payloads, units, ids = [], [], []
    phy = physical_offset
    for i, (raw, code) in enumerate(zip(encoded, tags_codes, strict=True)):
        size = len(raw)
        if phy // file_size != (phy + size - 1) // file_size:
            phy = (phy // file_size + 1) * file_size
        payloads.append((phy, stamp(raw, queue_id, queue_offset + i, phy, store_timestamp)))
        units.append([phy, size, code])
        ids.append(f"{id_prefix}{phy:016X}")
        phy += size
    return payloads, units, ids, phy


KEYS_NAME = b"KEYS\x01"  # property names as they precede a value
UNIQ_KEY_NAME = b"UNIQ_KEY\x01"
_I32_AT = struct.Struct(">i").unpack_from
_U16_AT = struct.Struct(">H").unpack_from
_I64_AT = struct.Struct(">q").unpack_from


def last_property(raw: bytes, start: int, end: int, needle: bytes) -> bytes | None:
    """A property's value in raw[start:end]: the last of its name, as decode_properties keeps."""
    i = raw.rfind(needle, start, end)
    while i >= 0:
        if i == start or raw[i - 1] == 2:  # a name starts the text or follows a separator
            value_at = i + len(needle)
            stop = raw.find(b"\x02", value_at, end)
            return raw[value_at : stop if stop >= 0 else end]
        i = raw.rfind(needle, start, i + len(needle) - 1)
    return None


def property_span(raw: bytes) -> tuple[int, int, int, int]:
    """(sysFlag, start of the topic, start and end of the properties) of stored message bytes.

    Raises IndexError, struct.error or ValueError on bytes too short for what they declare.
    """
    sys_flag = _I32_AT(raw, SYS_FLAG_AT)[0]
    at = BODY_LENGTH_AT
    if sys_flag & FLAG_BORNHOST_V6:
        at += 12
    if sys_flag & FLAG_STOREHOST_V6:
        at += 12
    body_len = _I32_AT(raw, at)[0]
    if body_len < 0:
        raise ValueError("negative body length")
    topic_at = at + 5 + body_len
    props_at = topic_at + raw[topic_at - 1]
    props_end = props_at + 2 + _U16_AT(raw, props_at)[0]
    if props_end > len(raw):
        raise ValueError("properties past the end")
    return sys_flag, topic_at, props_at + 2, props_end


def placement_of(raw: bytes) -> tuple[str, int, int]:
    """(topic, queue id, queue offset) of stored message bytes: the consume-queue unit they name.

    Raises IndexError, struct.error or ValueError (UnicodeDecodeError too) on bytes too short
    for what they declare, as `property_span` does.
    """
    _, topic_at, props_at, _ = property_span(raw)
    topic = raw[topic_at : props_at - 2].decode()
    return topic, _I32_AT(raw, QUEUE_ID_AT)[0], _I64_AT(raw, QUEUE_OFFSET_AT)[0]


def message_keys(raw: bytes) -> tuple[bytes | None, bytes | None, int]:
    """(KEYS, UNIQ_KEY, sysFlag) of stored message bytes, for the key index.

    Reads the properties section only (`property_span`); the last property of
    a name counts, as in decode_properties. Malformed bytes give (None, None, 0).
    """
    try:
        sys_flag, _, start, end = property_span(raw)
    except (IndexError, ValueError, struct.error):
        return None, None, 0
    return (
        last_property(raw, start, end, KEYS_NAME),
        last_property(raw, start, end, UNIQ_KEY_NAME),
        sys_flag,
    )


class MessageDecodeError(ValueError):
    """The bytes are not a valid stored message."""


def _host_at(buf: memoryview, pos: int, v6: bool) -> tuple[tuple[str, int], int]:
    if v6:
        ip = str(ipaddress.IPv6Address(bytes(buf[pos : pos + 16])))
        (port,) = struct.unpack_from(">i", buf, pos + 16)
        return (ip, port), pos + 20
    ip4, port = _HOST4.unpack_from(buf, pos)
    return (socket.inet_ntoa(ip4), port), pos + 8


def decode_one(data: bytes | memoryview, pos: int = 0) -> tuple[StoredMessage, int]:
    """Decode the message at pos; return it and the position after it."""
    buf = memoryview(data)
    try:
        (
            total,
            magic,
            crc,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
            born_ts,
        ) = _HEAD.unpack_from(buf, pos)
        if magic != MAGIC_CODE:
            raise MessageDecodeError(f"bad magic code {magic} at {pos}")
        if total < FIXED_SIZE or pos + total > len(buf):
            raise MessageDecodeError(f"bad total size {total} at {pos}")
        p = pos + _HEAD.size
        born_host, p = _host_at(buf, p, bool(sys_flag & FLAG_BORNHOST_V6))
        (store_ts,) = struct.unpack_from(">q", buf, p)
        store_host, p = _host_at(buf, p + 8, bool(sys_flag & FLAG_STOREHOST_V6))
        reconsume, prepared, body_len = _TAIL.unpack_from(buf, p)
        p += _TAIL.size
        body = bytes(buf[p : p + body_len])
        p += body_len
        (topic_len,) = struct.unpack_from(">b", buf, p)
        topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode("utf-8")
        p += 1 + topic_len
        (props_len,) = struct.unpack_from(">h", buf, p)
        props = decode_properties(bytes(buf[p + 2 : p + 2 + props_len]))
        p += 2 + props_len
    except struct.error as exc:
        raise MessageDecodeError(f"truncated message at {pos}: {exc}") from None
    if p - pos != total:
        raise MessageDecodeError(f"message at {pos} declares {total} bytes but holds {p - pos}")
    msg = StoredMessage(
        topic=topic,
        queue_id=queue_id,
        body=body,
        properties=props,
        flag=flag,
        sys_flag=sys_flag,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body_crc=crc,
    )
    return msg, p


def decode_all(data: bytes | memoryview) -> list[StoredMessage]:
    """Decode messages stored back to back (a pull body)."""
    out: list[StoredMessage] = []
    pos = 0
    while pos < len(data):
        msg, pos = decode_one(data, pos)
        out.append(msg)
    return out


class BatchDecodeError(ValueError):
    """A SEND_BATCH_MESSAGE body that is not a sequence of well-formed entries."""


def encode_batch(messages: Sequence[tuple[int, bytes, dict[str, str]]]) -> bytes:
    """A SEND_BATCH_MESSAGE body: per (flag, body, properties) one entry (docs/protocol.md §7.2.2)."""
    parts = []
    for flag, body, props in messages:
        raw_props = encode_properties(props)
        total = _BATCH_ENTRY.size + len(body) + 2 + len(raw_props)
        parts.append(_BATCH_ENTRY.pack(total, 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(_I16.pack(len(raw_props)))
        parts.append(raw_props)
    return b"".join(parts)


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """A SEND_BATCH_MESSAGE body: (flag, body, properties) per entry (docs/protocol.md §7.2.2).

    Each entry's TOTALSIZE must be exactly its 22 fixed bytes, body and properties.
    """
    out = []
    pos, end = 0, len(body)
    view = memoryview(body)
    while pos < end:
        if pos + _BATCH_ENTRY.size > end:
            raise BatchDecodeError(f"batch body is truncated at byte {pos}")
        total, _, _, flag, body_len = _BATCH_ENTRY.unpack_from(view, pos)
        start = pos + _BATCH_ENTRY.size
        if body_len < 0 or start + body_len + 2 > end:
            raise BatchDecodeError(f"batch body is truncated at byte {pos}")
        (props_len,) = _I16.unpack_from(view, start + body_len)
        props_at = start + body_len + 2
        if props_len < 0 or props_at + props_len > end:
            raise BatchDecodeError(f"batch body is truncated at byte {pos}")
        if total != _BATCH_ENTRY.size + body_len + 2 + props_len:
            raise BatchDecodeError(f"batch entry at byte {pos} declares a wrong size")
        out.append(
            (
                flag,
                bytes(view[start : start + body_len]),
                decode_properties(bytes(view[props_at : props_at + props_len])),
            )
        )
        pos += total
    return out


# ---------------------------------------------------------------------- the compiled hot path
# The functions above are the reference. Their compiled twins (_speedups.pyx, built by
# `pip install .`) replace them here unless ES_BROKER_PURE_PYTHON is set (es_broker.compiled);
# they give byte-identical results and hand anything unusual back to REFERENCE.
REFERENCE = {
    "tag_hash": tag_hash,
    "encode_properties": encode_properties,
    "decode_properties": decode_properties,
    "encode_fields": encode_fields,
    "stamp": stamp,
    "place_batch": place_batch,
    "message_keys": message_keys,
    "decode_one": decode_one,
    "decode_all": decode_all,
    "decode_batch": decode_batch,
}

compiled.install(globals(), "es_broker.remoting._speedups", *REFERENCE)
