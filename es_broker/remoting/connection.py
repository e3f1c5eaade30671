"""A sans-IO RocketMQ remoting connection, in the manner of h11.

Feed it the bytes you read (`receive_data`), take decoded commands out
(`next_event`), and turn commands into bytes to write (`send`). It never
touches a socket, so the same object serves a trio server, a test, or a fuzzer.

Both directions carry requests and responses (docs/protocol.md §1.1): the connection
does not pair them; look at `RemotingCommand.is_response` and the opaque.

Errors (docs/protocol.md §1.2: Java closes the connection on any decode error):

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

import itertools
import struct
from collections import deque
from enum import Enum
from typing import Literal, NoReturn

from .command import RemotingCommand
from .errors import HeaderLengthInvalid, ProtocolError, TruncatedFrame
from .frames import (
    DEFAULT_MAX_FRAME_LENGTH,
    LENGTH_PREFIX_SIZE,
    MAX_HEADER_LENGTH,
    check_frame_length,
    decode_command,
    encode_frame,
    split_header_word,
)

_PREFIX = struct.Struct(">iI")
_LENGTH = struct.Struct(">i")
# Received bytes are held as a queue of chunks, never one buffer that grows to
# the frame's size: a partial frame costs what arrived, nothing is reallocated
# or moved as it grows, and each chunk is freed as soon as it is consumed.
# Reads shorter than _SMALL are copied into the last chunk (up to _CHUNK
# bytes), so a peer trickling tiny reads cannot multiply its cost by the
# per-object overhead; longer reads are kept as they came, without a copy.
_SMALL = 16 * 1024
_CHUNK = 256 * 1024


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
        self._chunks: deque[bytes | bytearray] = deque()
        self._offset = 0  # consumed bytes of _chunks[0]
        self._buffered = 0
        self._eof = False
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as commands (what this connection holds)."""
        return self._buffered

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
        size = len(data)
        chunks = self._chunks
        if size < _SMALL:
            tail = chunks[-1] if chunks else None
            if type(tail) is bytearray and len(tail) + size <= _CHUNK:
                tail += data
            else:
                chunks.append(bytearray(data))
        else:
            chunks.append(bytes(data))  # no copy for bytes
        self._buffered += size

    def next_event(self) -> RemotingCommand | Sentinel:
        """Return the next decoded command, `NEED_DATA`, or `CLOSED`.

        Raises `ProtocolError` for a frame that cannot be decoded; see the
        module docstring for which errors leave the connection usable.
        """
        if self._error is not None:
            raise self._error
        chunks = self._chunks
        if chunks:
            # the common case, in one pass: a valid frame whole in the first chunk
            head = chunks[0]
            start = self._offset
            left = len(head) - start
            if left >= 8:
                length, word = _PREFIX.unpack_from(head, start)
                total = length + LENGTH_PREFIX_SIZE
                header_len = word & MAX_HEADER_LENGTH
                if length >= 4 and total <= self.max_frame_length and total <= left:
                    if 8 + header_len > total:
                        self._skip(total)
                        raise HeaderLengthInvalid(header_len, length)
                    body_start = start + 8 + header_len
                    end = start + total
                    with memoryview(head) as view:
                        header = bytes(view[start + 8 : body_start])
                        body = bytes(view[body_start:end])
                    self._buffered -= total
                    if end == len(head):
                        chunks.popleft()
                        self._offset = 0
                    else:
                        self._offset = end
                    return decode_command(word >> 24, header, body)
        available = self._buffered
        if available < LENGTH_PREFIX_SIZE:
            if not self._eof:
                return NEED_DATA
            if available == 0:
                return CLOSED
            self._fail(TruncatedFrame(available, None))
        (length,) = _LENGTH.unpack(self._peek(LENGTH_PREFIX_SIZE))
        try:
            total = check_frame_length(length, self.max_frame_length)
        except ProtocolError as exc:
            self._fail(exc)
        if available < total:
            if self._eof:
                self._fail(TruncatedFrame(available, total))
            return NEED_DATA

        head = self._chunks[0]
        start = self._offset
        if len(head) - start >= total:  # the whole frame in one chunk: the common case
            (_, word) = _PREFIX.unpack_from(head, start)
            serialize_type, header_len = split_header_word(word)
            body_start = start + 8 + header_len
            end = start + total
            if body_start > end:
                self._skip(total)
                raise HeaderLengthInvalid(header_len, length)
            with memoryview(head) as view:
                header = bytes(view[start + 8 : body_start])
                body = bytes(view[body_start:end])
            self._skip(total)
        else:
            (_, word) = _PREFIX.unpack(self._take(8))
            serialize_type, header_len = split_header_word(word)
            if 8 + header_len > total:
                self._skip(total - 8)
                raise HeaderLengthInvalid(header_len, length)
            header = self._take(header_len)
            body = self._take(total - 8 - header_len)
        # Consumed before decoding: a bad header must not leave the frame behind.
        return decode_command(serialize_type, header, body)

    def discard_buffered(self) -> int:
        """Drop every byte received and not yet decoded; return how many.

        For closing: the memory goes back at once, whoever still holds this
        object (a fatal error's traceback refers to it until the cycle
        collector runs).
        """
        dropped = self._buffered
        self._chunks.clear()
        self._offset = 0
        self._buffered = 0
        return dropped

    def send(self, command: RemotingCommand) -> bytes:
        """The bytes to write for `command` (raises `EncodeError` if it cannot be encoded)."""
        return encode_frame(command)

    def _peek(self, size: int) -> bytes:
        """The next `size` unconsumed bytes, left in place (size <= what is buffered)."""
        head = self._chunks[0]
        start = self._offset
        if len(head) - start >= size:
            return bytes(head[start : start + size])
        out = bytearray(head[start:])
        for chunk in itertools.islice(self._chunks, 1, None):
            out += chunk[: size - len(out)]
            if len(out) == size:
                break
        return bytes(out)

    def _take(self, size: int) -> bytes:
        """Consume the next `size` bytes as one bytes object (one copy at most)."""
        if size == 0:  # an empty body at the end of what arrived
            return b""
        chunks = self._chunks
        head = chunks[0]
        if self._offset == 0 and len(head) == size and type(head) is bytes:
            chunks.popleft()
            self._buffered -= size
            return head
        views: list[memoryview] = []
        need = size
        try:
            while need:
                head = chunks[0]
                start = self._offset
                part = min(need, len(head) - start)
                views.append(memoryview(head)[start : start + part])
                need -= part
                self._advance(part)
            return b"".join(views)
        finally:
            for view in views:  # a live view would pin a bytearray chunk's size
                view.release()

    def _skip(self, size: int) -> None:
        while size:
            part = min(size, len(self._chunks[0]) - self._offset)
            self._advance(part)
            size -= part

    def _advance(self, size: int) -> None:
        # size never exceeds what is left of the first chunk
        self._buffered -= size
        self._offset += size
        if self._offset == len(self._chunks[0]):
            self._chunks.popleft()
            self._offset = 0

    def _fail(self, error: ProtocolError) -> NoReturn:
        self._error = error
        raise error
