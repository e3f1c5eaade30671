"""A sans-IO RocketMQ remoting connection, in the manner of h11.

Feed it the bytes you read (`receive_data`), take decoded commands out
(`next_event`), and turn commands into bytes to write (`send`). It never
touches a socket, so the same object serves a trio server, a test, or a fuzzer.

Both directions carry requests and responses (section 1.1): the connection
does not pair them; look at `RemotingCommand.is_response` and the opaque.

Errors (section 1.2: Java closes the connection on any decode error):

* fatal `ProtocolError`s (`FrameLengthInvalid`, `FrameTooLarge`,
  `TruncatedFrame`): the frame boundary is lost; every later `next_event`
  raises the same error. Close the connection.
* resumable ones (`HeaderLengthInvalid`, `HeaderDecodeError` and its subclass
  `UnknownSerializeType`): the frame's length was valid, so its bytes have been
  consumed and `next_event` can go on with the next frame. A Java-faithful
  server still closes; `HeaderDecodeError.opaque`/`flag` are there for a
  lenient one that prefers to answer SYSTEM_ERROR.
"""

from __future__ import annotations

import struct
from enum import Enum
from typing import Literal, NoReturn

from .command import RemotingCommand
from .errors import HeaderLengthInvalid, ProtocolError, TruncatedFrame
from .frames import (
    DEFAULT_MAX_FRAME_LENGTH,
    LENGTH_PREFIX_SIZE,
    check_frame_length,
    decode_command,
    encode_frame,
    split_header_word,
)

_PREFIX = struct.Struct(">iI")
_LENGTH = struct.Struct(">i")
# Drop consumed bytes from the front of the buffer once this many accumulate and
# they are more than half of it: amortised O(1) per byte, no per-frame memmove.
_COMPACT_AT = 64 * 1024
_OPAQUE_LIMIT = 1 << 31


class Sentinel(Enum):
    """Non-command results of `Connection.next_event`."""

    NEED_DATA = "NEED_DATA"
    CLOSED = "CLOSED"

    def __repr__(self) -> str:
        return self.value


#: `next_event` needs more bytes before it can return a command.
NEED_DATA: Literal[Sentinel.NEED_DATA] = Sentinel.NEED_DATA
#: The peer closed the connection cleanly, between two frames.
CLOSED: Literal[Sentinel.CLOSED] = Sentinel.CLOSED


class Connection:
    """Frame decoder and encoder for one RocketMQ remoting TCP connection."""

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        """`max_frame_length` caps a whole incoming frame, length prefix included."""
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        self._start = 0  # first unconsumed byte of _buffer
        self._eof = False
        self._error: ProtocolError | None = None
        self._next_opaque = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as commands."""
        return len(self._buffer) - self._start

    @property
    def closed_by_peer(self) -> bool:
        """True once `receive_data(b"")` has reported end of stream."""
        return self._eof

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes read from the socket; `b""` means the peer closed (EOF)."""
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RuntimeError("received data after end of stream")
        self._buffer += data

    def next_event(self) -> RemotingCommand | Sentinel:
        """Return the next decoded command, `NEED_DATA`, or `CLOSED`.

        Raises `ProtocolError` for a frame that cannot be decoded; see the
        module docstring for which errors leave the connection usable.
        """
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        start = self._start
        available = len(buffer) - start
        if available < LENGTH_PREFIX_SIZE:
            if not self._eof:
                return NEED_DATA
            if available == 0:
                return CLOSED
            self._fail(TruncatedFrame(available, None))
        (length,) = _LENGTH.unpack_from(buffer, start)
        try:
            total = check_frame_length(length, self.max_frame_length)
        except ProtocolError as exc:
            self._fail(exc)
        if available < total:
            if self._eof:
                self._fail(TruncatedFrame(available, total))
            return NEED_DATA

        end = start + total
        (_, word) = _PREFIX.unpack_from(buffer, start)
        serialize_type, header_len = split_header_word(word)
        body_start = start + 8 + header_len
        if body_start > end:
            self._consume(end)
            raise HeaderLengthInvalid(header_len, length)
        with memoryview(buffer) as view:
            header = bytes(view[start + 8 : body_start])
            body = bytes(view[body_start:end])
        # Consume before decoding: a bad header must not leave the frame behind.
        self._consume(end)
        return decode_command(serialize_type, header, body)

    def send(self, command: RemotingCommand) -> bytes:
        """The bytes to write for `command` (raises `EncodeError` if it cannot be encoded)."""
        return encode_frame(command)

    def next_opaque(self) -> int:
        """A fresh opaque for a request we originate (0, 1, 2, ... like Java's counter).

        The two directions of a connection have separate opaque spaces
        (section 5), so this never collides with the peer's requests.
        """
        opaque = self._next_opaque
        self._next_opaque = (opaque + 1) % _OPAQUE_LIMIT
        return opaque

    def _consume(self, end: int) -> None:
        if end == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        elif end > _COMPACT_AT and end * 2 > len(self._buffer):
            del self._buffer[:end]
            self._start = 0
        else:
            self._start = end

    def _fail(self, error: ProtocolError) -> NoReturn:
        self._error = error
        raise error
