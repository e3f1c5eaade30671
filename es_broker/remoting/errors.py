"""Errors raised by the remoting codec.

Two families, because a server reacts to them differently:

* `ProtocolError`: the peer's byte stream broke the framing or header rules
  (docs/protocol.md §1-§4). The Java server closes the connection on every one of
  them, since a frame stream cannot be resynchronised (docs/protocol.md §1.2). `resumable` says whether the bad frame's bytes were
  consumed whole, so that a more lenient server *could* go on with the next frame.
* `CommandError`: the frame decoded fine but a request's content is unusable
  (a required extField is missing or malformed, a JSON body is garbage). Java
  answers those with SYSTEM_ERROR and a remark and keeps the connection;
  `remark` holds the text to send.

`EncodeError` is a local mistake: we were asked to send something the wire
format cannot carry.
"""

from __future__ import annotations


class RemotingError(Exception):
    """Base class of every error raised by `es_broker.remoting`."""


# --------------------------------------------------------------------------
# Byte-stream errors


class ProtocolError(RemotingError):
    """The peer sent bytes that are not a valid RocketMQ remoting frame.

    `resumable` is True when the whole bad frame has been consumed and the
    decoder is positioned on the next frame boundary; False when the stream
    cannot be decoded any further.
    """

    resumable: bool = False


class FrameLengthInvalid(ProtocolError):
    """The 4-byte length prefix is negative or too small to hold a header length."""

    def __init__(self, length: int) -> None:
        super().__init__(
            f"invalid frame length {length}: it must be at least 4 "
            "(the serialize-type/header-length int)"
        )
        self.length = length


class FrameTooLarge(ProtocolError):
    """The frame (length prefix included) exceeds the decoder's maximum."""

    def __init__(self, frame_length: int, max_frame_length: int) -> None:
        super().__init__(
            f"frame of {frame_length} bytes exceeds the maximum frame length "
            f"{max_frame_length} (com.rocketmq.remoting.frameMaxLength)"
        )
        self.frame_length = frame_length
        self.max_frame_length = max_frame_length


class TruncatedFrame(ProtocolError):
    """The peer closed the connection in the middle of a frame."""

    def __init__(self, received: int, expected: int | None) -> None:
        if expected is None:
            text = f"connection closed after {received} of the 4 bytes of a frame length prefix"
        else:
            text = f"connection closed after {received} of the {expected} bytes of a frame"
        super().__init__(text)
        self.received = received
        self.expected = expected


class TrailingData(ProtocolError):
    """Bytes follow the end of a frame that was expected to stand alone."""

    def __init__(self, extra: int) -> None:
        super().__init__(f"{extra} bytes follow the end of the frame")
        self.extra = extra


class HeaderLengthInvalid(ProtocolError):
    """The header length (low 24 bits of the second int) overruns the frame."""

    resumable = True

    def __init__(self, header_length: int, frame_length: int) -> None:
        super().__init__(
            f"header length {header_length} overruns the frame, which has only "
            f"{frame_length - 4} bytes after the header-length int"
        )
        self.header_length = header_length
        self.frame_length = frame_length


class HeaderDecodeError(ProtocolError):
    """The header bytes are not a valid JSON or ROCKETMQ header.

    `opaque` and `flag` are filled in when they could be read before the
    error (binary headers, or JSON headers that parsed but hold a bad field), so
    a lenient server can still address an error response.
    """

    resumable = True

    def __init__(self, message: str, *, opaque: int | None = None, flag: int | None = None) -> None:
        super().__init__(message)
        self.opaque = opaque
        self.flag = flag


class UnknownSerializeType(HeaderDecodeError):
    """The serialize-type byte (high 8 bits of the second int) is neither 0 nor 1."""

    def __init__(self, serialize_type: int) -> None:
        super().__init__(f"unknown header serialize type {serialize_type} (0 = JSON, 1 = ROCKETMQ)")
        self.serialize_type = serialize_type


# --------------------------------------------------------------------------
# Content errors: answer with SYSTEM_ERROR, keep the connection


class CommandError(RemotingError):
    """A well-framed command whose content cannot be used; `remark` is the reply text."""

    @property
    def remark(self) -> str:
        """Text suitable for the `remark` of a SYSTEM_ERROR response."""
        return str(self)


class MissingField(CommandError):
    """A required extField is absent."""

    def __init__(self, field: str) -> None:
        super().__init__(f"missing required header field {field!r}")
        self.field = field


class BadField(CommandError):
    """An extField is present but does not parse as the expected type."""

    def __init__(self, field: str, value: str, expected: str) -> None:
        super().__init__(f"header field {field!r} is not a valid {expected}: {value!r}")
        self.field = field
        self.value = value
        self.expected = expected


class BodyDecodeError(CommandError):
    """A command body (fastjson text or binary) cannot be decoded."""


# --------------------------------------------------------------------------
# Local errors


class EncodeError(RemotingError, ValueError):
    """A command cannot be put on the wire (a value does not fit its field)."""
