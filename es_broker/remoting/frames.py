"""Frame layout (docs/protocol.md §1.2).

    i32 length | i32 (serType << 24 | headerLen) | header | body

`length` counts every byte after itself. Pure functions on complete frames;
`connection.Connection` does the buffering.
"""

from __future__ import annotations

import struct

from es_broker import compiled

from .codes import SerializeType
from .command import RemotingCommand
from .errors import (
    EncodeError,
    FrameLengthInvalid,
    FrameTooLarge,
    HeaderLengthInvalid,
    TrailingData,
    TruncatedFrame,
    UnknownSerializeType,
)
from .header import decode_json_header, decode_rocketmq_header, encode_header

#: Java's cap on a whole frame, length prefix included
#: (`com.rocketmq.remoting.frameMaxLength`, default 16 MiB).
DEFAULT_MAX_FRAME_LENGTH = 16 * 1024 * 1024

MAX_HEADER_LENGTH = 0xFFFFFF  # 24 bits
LENGTH_PREFIX_SIZE = 4
_PREFIX = struct.Struct(">iI")  # length, serType|headerLen
_LENGTH = struct.Struct(">i")
_WORD = struct.Struct(">I")


def encode_frame(cmd: RemotingCommand) -> bytes:
    """The complete frame for `cmd`, header in `cmd.serialize_type`."""
    header = encode_header(cmd)
    header_len = len(header)
    if header_len > MAX_HEADER_LENGTH:
        raise EncodeError(f"header of {header_len} bytes exceeds the 24-bit header length field")
    length = 4 + header_len + len(cmd.body)
    if length > 0x7FFFFFFF:
        raise EncodeError(f"frame of {length} bytes does not fit the 32-bit length field")
    return b"".join(
        (_PREFIX.pack(length, (int(cmd.serialize_type) << 24) | header_len), header, cmd.body)
    )


def check_frame_length(length: int, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> int:
    """Validate a length prefix; return the frame's total size on the wire.

    Like Netty's LengthFieldBasedFrameDecoder as Java configures it, the cap
    applies to the whole frame including the 4-byte prefix. Raises
    `FrameLengthInvalid` or `FrameTooLarge`.
    """
    if length < 4:
        raise FrameLengthInvalid(length)
    total = LENGTH_PREFIX_SIZE + length
    if total > max_frame_length:
        raise FrameTooLarge(total, max_frame_length)
    return total


def split_header_word(word: int) -> tuple[int, int]:
    """(serialize type, header length) from the frame's second int."""
    return (word >> 24) & 0xFF, word & MAX_HEADER_LENGTH


def decode_command(serialize_type: int, header: bytes, body: bytes) -> RemotingCommand:
    """Decode a command from its header bytes (in `serialize_type`) and body."""
    if serialize_type == SerializeType.JSON:
        return decode_json_header(header, body)
    if serialize_type == SerializeType.ROCKETMQ:
        return decode_rocketmq_header(header, body)
    raise UnknownSerializeType(serialize_type)


def decode_payload(payload: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode the bytes that follow a length prefix (one frame's `length` bytes)."""
    return _decode_span(payload, 0, len(payload))


def decode_frame(
    frame: bytes | bytearray | memoryview, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH
) -> RemotingCommand:
    """Decode exactly one complete frame, length prefix included."""
    if len(frame) < LENGTH_PREFIX_SIZE:
        raise TruncatedFrame(len(frame), None)
    (length,) = _LENGTH.unpack_from(frame, 0)
    total = check_frame_length(length, max_frame_length)
    if total > len(frame):
        raise TruncatedFrame(len(frame), total)
    if total < len(frame):
        raise TrailingData(len(frame) - total)
    return _decode_span(frame, LENGTH_PREFIX_SIZE, total)


def _decode_span(data: bytes | bytearray | memoryview, start: int, end: int) -> RemotingCommand:
    # data[start:end] is one frame without its length prefix.
    length = end - start
    if length < 4:
        raise FrameLengthInvalid(length)
    serialize_type, header_len = split_header_word(_WORD.unpack_from(data, start)[0])
    if header_len > length - 4:
        raise HeaderLengthInvalid(header_len, length)
    body_start = start + 4 + header_len
    # bytes() of a bytes slice is the slice itself: one copy per part.
    header = bytes(data[start + 4 : body_start])
    body = bytes(data[body_start:end])
    return decode_command(serialize_type, header, body)


# -- the compiled hot path (see command.py) ---------------------------------------
REFERENCE = {"encode_frame": encode_frame}

compiled.install(globals(), "es_broker.remoting._codec", "encode_frame")
