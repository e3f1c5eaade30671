"""One TCP connection speaking the remoting protocol, in either direction.

The sans-IO `Connection` turns bytes into commands and back; a Channel owns
the socket around it: a send lock (responses of concurrent handlers must not
interleave), the table of requests this side sent (server-initiated
requests to a client, or a client's requests to a broker) matched by opaque,
and, on a server, the bounds of what a peer may make it hold: how long a
frame may stall, and the listener's budget for partial frames.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel
import trio

from es_broker.net.deadlines import Deadlines, ParkedWaiter
from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.connection import CLOSED, NEED_DATA, Connection

_opaques = itertools.count(1)
READ_SIZE = 256 * 1024


def next_opaque() -> int:
    """A fresh opaque for a request (one counter per process, so any thread may take one)."""
    return next(_opaques) & 0x7FFFFFFF


class HasFileno(Protocol):
    """A socket's descriptor: what `Channel.write_now` writes to."""

    def fileno(self) -> int: ...


class ChannelClosed(Exception):
    """The peer went away."""


class ReceiveTimeout(Exception):
    """Nothing arrived in time: no frame began (idle), or a begun frame stalled (mid_frame)."""

    def __init__(self, mid_frame: bool, buffered: int, timeout: float) -> None:
        what = f"a frame stalled after {buffered} bytes" if mid_frame else "no frame"
        super().__init__(f"{what} for {timeout:g} s")
        self.mid_frame = mid_frame


class PartialFramesOverCap(Exception):
    """Buffering the next read would put the listener's partial frames over their cap."""

    def __init__(self, buffered: int, read: int, budget: PartialFrameBudget) -> None:
        super().__init__(
            f"its partial frame of {buffered + read} bytes would put the partial frames of all "
            f"connections ({budget.used} bytes held) over {budget.limit} bytes"
        )


class PartialFrameBudget:
    """The bytes of partial frames that all connections of one listener hold, under a cap.

    A channel takes each read from the budget before buffering it and gives
    bytes back as they are decoded into commands or dropped at close, so
    `used` is exactly what the listener's connections hold.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        """Count `size` more bytes held; False (nothing counted) if that would exceed the cap."""
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give_back(self, size: int) -> None:
        self.used -= size


class ByteStream(Protocol):
    """What a channel reads and writes: a trio stream (the broker's side) or an `AnyioStream`."""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None: ...

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray: ...

    async def aclose(self) -> None: ...


# what a stream raises once the peer is gone or the stream was closed here
STREAM_GONE: tuple[type[Exception], ...] = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
)


class AnyioStream:
    """An anyio byte stream (TCP, or TLS over it) as the `ByteStream` a channel speaks.

    The end of the stream reads as b"", as on a trio stream.
    """

    __slots__ = ("inner",)

    def __init__(self, inner: anyio.abc.ByteStream) -> None:
        self.inner = inner

    @property
    def socket(self) -> Any:
        return self.inner.extra(anyio.abc.SocketAttribute.raw_socket, None)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send(bytes(data) if not isinstance(data, bytes) else data)

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        try:
            return await self.inner.receive(max_bytes or READ_SIZE)
        except anyio.EndOfStream:
            return b""

    async def aclose(self) -> None:
        await self.inner.aclose()


class Channel:
    def __init__(
        self,
        stream: ByteStream,
        *,
        max_frame: int | None = None,
        budget: PartialFrameBudget | None = None,
        head: bytes = b"",
        socket: HasFileno | None = None,
        wait_readable: Callable[[HasFileno], Awaitable[None]] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """`head`: bytes already read from `stream` (a listener's peek), received before the stream's own;
        `socket`: the plain TCP socket `stream` writes to (not TLS), which `write_now` may write to
        directly; `wait_readable` (the event loop's, for `socket`): reads go to the socket directly
        too, and `clock`, if given, stamps `received_at` when one returns."""
        self.stream = stream
        self._socket = socket
        self._wait_readable = wait_readable if socket is not None else None
        # a stream that can take bytes without waiting (es_broker/server/edge/relayed.py): `write_now`'s
        # target when there is no socket, and its bytes already received, taken without waiting
        self._sink: Callable[[bytes], None] | None = None
        self._take: Callable[[], bytes | None] | None = None
        if socket is None:
            self._sink = getattr(stream, "write_nowait", None)
            self._take = getattr(stream, "take", None)
        # a channel read through the event loop's own wait, or relayed by an edge process, is on trio
        # (the broker's, or the client's on trio): its response waits use trio's event and deadline,
        # without anyio's dispatch
        self._native = self._wait_readable is not None or self._take is not None
        self._clock = clock
        self.received_at = 0
        self._unsent = b""  # the rest of a frame `write_now` began: the next write sends it first
        self._head = head
        self.conn = Connection() if max_frame is None else Connection(max_frame_length=max_frame)
        self.budget = budget
        self._held = 0  # bytes of self.conn.buffered taken from the budget
        # uncontended, the lock is taken without a scheduler pass; the write itself checks for
        # cancellation first and yields after it
        self._send_lock = anyio.Lock(fast_acquire=True)
        self._pending: dict[int, _ResponseWaiter | ParkedWaiter] = {}
        # on trio, a task of the channel's reader may keep its waits' deadlines (`keep_deadlines`)
        self._deadlines = Deadlines() if self._native else None
        self.closed = False
        self.remote = _address(stream, "getpeername")
        self.local = _address(stream, "getsockname")
        self.attributes: dict[str, Any] = {}

    @property
    def remote_addr(self) -> str:
        return f"{self.remote[0]}:{self.remote[1]}"

    async def send(self, command: RemotingCommand) -> None:
        data = self.conn.send(command)
        # a plain socket nobody is writing to takes the frame at once, without the stream layers
        if not self.write_now(data):
            await self.write(data)
        elif self._unsent:  # the socket took part of it: the rest now, before anything else
            await self.write(b"")

    def write_now(self, data: bytes) -> bool:
        """Write encoded frames without waiting, if no write is under way: True if the channel took them
        (written, or the rest the socket did not take kept to go first in the next `write`); False if
        nothing was done (a write is under way, or the stream is neither a plain socket nor one that
        queues without waiting): `write` them."""
        sock = self._socket
        if self._unsent or self.closed or self._send_lock.locked():
            return False
        if sock is None:
            if self._sink is None:
                return False
            try:  # a stream that queues without waiting (a relayed connection's)
                self._sink(data)
            except STREAM_GONE as exc:
                self.closed = True
                raise ChannelClosed(self.remote_addr) from exc
            return True
        try:
            sent = os.write(sock.fileno(), data)
        except BlockingIOError:
            return False
        except OSError as exc:  # the peer is gone (or the socket closed): as send_all would say
            self.closed = True
            raise ChannelClosed(self.remote_addr) from exc
        if sent < len(data):
            self._unsent = data[sent:]
        return True

    @property
    def unsent(self) -> bool:
        """Bytes `write_now` took are still to be written (by the next `write`)."""
        return bool(self._unsent)

    async def write(self, data: bytes) -> None:
        """Write encoded frames whole (under the send lock, so writers never interleave); b"" writes
        only what `write_now` left."""
        lock = self._send_lock
        await lock.acquire()
        try:
            if self.closed:
                raise ChannelClosed(self.remote_addr)
            if self._unsent:
                data, self._unsent = self._unsent + data, b""
            try:
                await self.stream.send_all(data)
            except STREAM_GONE as exc:
                self.closed = True
                raise ChannelClosed(self.remote_addr) from exc
        finally:
            lock.release()

    async def receive(
        self,
        *,
        idle_timeout: float = math.inf,
        read_timeout: float = math.inf,
        before_wait: Callable[[], None] | None = None,
    ) -> RemotingCommand | None:
        """The next command from the peer; None at a clean end of stream.

        Waits at most `idle_timeout` seconds for a frame to begin and, once
        part of one is buffered, `read_timeout` seconds for each further read
        (`ReceiveTimeout`). With a budget, a read that does not fit in it is
        not buffered (`PartialFramesOverCap`). `before_wait` is called each
        time every buffered frame is decoded and the stream is to be read.
        """
        while True:
            try:
                event = self.conn.next_event()
            finally:
                self._settle()
            if event is CLOSED:
                return None
            if event is not NEED_DATA:
                return event
            buffered = self.conn.buffered
            # idle until a frame begins, then each further read; the clock is read only when a
            # read is to wait (a busy connection's bytes are mostly there already)
            timeout = read_timeout if buffered else idle_timeout
            data: bytes | bytearray | None = None
            if self._head:
                data, self._head = self._head, b""
            else:
                if before_wait is not None:
                    before_wait()
                if self._wait_readable is not None:  # a cancel scope only if the read waits
                    data = await self._read_socket(timeout)
                elif self._take is not None and (data := self._take()) is not None:
                    # bytes a relayed connection already has: no scope, one checkpoint (trio's:
                    # anyio's asks which loop runs, each call)
                    await trio.lowlevel.cancel_shielded_checkpoint()
                elif timeout == math.inf:  # no timeout: no scope to enter and leave per read
                    data = await self._read()
                else:
                    # the loop's clock: trio's own when native (anyio's asks which loop runs)
                    now = trio.current_time if self._native else anyio.current_time
                    with anyio.CancelScope(deadline=now() + timeout):
                        data = await self._read()
            if data is None:
                raise ReceiveTimeout(
                    bool(buffered), buffered, read_timeout if buffered else idle_timeout
                )
            if not data:
                self.conn.receive_data(b"")  # the next round raises if the peer left mid-frame
                continue
            if self.budget is not None:
                if not self.budget.take(len(data)):
                    raise PartialFramesOverCap(buffered, len(data), self.budget)
                self._held += len(data)
            self.conn.receive_data(data)

    async def _read(self) -> bytes | bytearray:
        """What the stream has next; b"" once it is gone (a plain socket is read by `_read_socket`)."""
        try:
            return await self.stream.receive_some(READ_SIZE)
        except STREAM_GONE:
            return b""

    async def _read_socket(self, timeout: float) -> bytes | None:
        """What the plain socket has next, read with one scheduler pass: the wait for it to be
        readable, or, when bytes were there already, a checkpoint after the read (so a peer that
        keeps the socket full cannot keep its read loop from yielding). None: nothing came within
        `timeout` seconds of the first wait, whose deadline is read off the clock and whose cancel
        scope is entered only when the read has to wait (a busy connection's bytes are mostly
        there already, and a scope costs microseconds). Only a channel on trio reads so: the clock,
        the scope and the checkpoint are trio's, without anyio's look-up of the running loop at
        each call."""
        sock = self._socket
        assert sock is not None and self._wait_readable is not None
        waited = False
        deadline: float | None = None  # read off the clock at the first wait
        while True:
            try:
                data = os.read(sock.fileno(), READ_SIZE)
            except BlockingIOError:
                try:
                    if timeout == math.inf:
                        await self._wait_readable(sock)
                    else:
                        if deadline is None:
                            deadline = trio.current_time() + timeout
                        with trio.CancelScope(deadline=deadline) as scope:
                            await self._wait_readable(sock)
                        if scope.cancelled_caught:
                            return None
                except STREAM_GONE:  # closed by another task meanwhile
                    return b""
                waited = True
                continue
            except OSError:  # reset by the peer, or the socket closed under the read
                return b""
            if self._clock is not None:
                self.received_at = self._clock()
            if not waited:
                await trio.lowlevel.cancel_shielded_checkpoint()  # the bytes are read: never lost
            return data

    def _settle(self) -> None:
        # give back what the connection no longer holds (decoded or dropped)
        budget = self.budget
        if budget is not None:
            buffered = self.conn.buffered
            if self._held != buffered:
                budget.give_back(self._held - buffered)
                self._held = buffered

    async def invoke(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response (matched by opaque)."""
        pending = await self.start_request(command)
        return await pending.response(timeout)

    async def start_request(self, command: RemotingCommand) -> PendingResponse:
        """Send a request and return at once what waits for its response.

        Requests started one after the other are written in that order, so a
        caller pipelines without a task per request.
        """
        opaque = next_opaque()
        deadlines = self._deadlines
        waiter: _ResponseWaiter | ParkedWaiter
        if deadlines is not None and deadlines.running:
            waiter = ParkedWaiter()
        else:
            waiter = _ResponseWaiter(self._native)
        self._pending[opaque] = waiter
        try:
            await self.send(command.with_opaque(opaque))
        except BaseException:
            self._pending.pop(opaque, None)
            raise
        return PendingResponse(self, opaque, waiter)

    async def invoke_oneway(self, command: RemotingCommand) -> None:
        await self.send(command.with_opaque(next_opaque()))

    async def keep_deadlines(self) -> None:
        """Time out the waits for responses, as a task beside the channel's reader, until cancelled
        (the requests started meanwhile wait without a cancel scope each; on trio only)."""
        if self._deadlines is not None:
            await self._deadlines.run()

    def deliver_response(self, response: RemotingCommand) -> bool:
        """Hand a response to whoever waits for it; False if nobody does (dropped)."""
        waiter = self._pending.pop(response.opaque, None)
        if waiter is None:
            return False
        waiter.set(response)
        return True

    def fail_pending(self) -> None:
        """Wake every caller still waiting for a response: the connection is gone."""
        for waiter in self._pending.values():
            waiter.set(None)
        self._pending.clear()

    async def aclose(self) -> int:
        """Close the socket and drop the bytes of any partial frame; return how many were dropped."""
        self.closed = True
        dropped = self.conn.discard_buffered()
        self._settle()
        with anyio.CancelScope(shield=True):
            await self.stream.aclose()
        return dropped


class PendingResponse:
    """The response of a request already written; `response` waits for it (once)."""

    __slots__ = ("_channel", "_opaque", "_waiter")

    def __init__(
        self, channel: Channel, opaque: int, waiter: _ResponseWaiter | ParkedWaiter
    ) -> None:
        self._channel = channel
        self._opaque = opaque
        self._waiter = waiter

    async def response(self, timeout: float) -> RemotingCommand:
        """The response; TimeoutError after `timeout` s, ChannelClosed if the peer left."""
        channel, waiter = self._channel, self._waiter
        try:
            if type(waiter) is ParkedWaiter:  # the channel's deadlines task times it out
                if not waiter.done:
                    assert channel._deadlines is not None
                    channel._deadlines.add(trio.current_time() + timeout, waiter)
                response = await waiter.wait()
            else:
                assert type(waiter) is _ResponseWaiter
                with trio.fail_after(timeout) if channel._native else anyio.fail_after(timeout):
                    response = await waiter.wait()
        except trio.TooSlowError:  # trio's deadline: not a TimeoutError
            raise TimeoutError from None
        finally:
            channel._pending.pop(self._opaque, None)
        if response is None:
            raise ChannelClosed(self._channel.remote_addr)
        return response


class _ResponseWaiter:
    """Where one request's response (None: the connection closed) meets the task waiting for it."""

    __slots__ = ("_event", "_response")

    def __init__(self, native: bool = False) -> None:
        self._event: trio.Event | anyio.Event = trio.Event() if native else anyio.Event()
        self._response: RemotingCommand | None = None

    def set(self, response: RemotingCommand | None) -> None:
        if self._event.is_set():
            return
        self._response = response
        self._event.set()

    async def wait(self) -> RemotingCommand | None:
        await self._event.wait()  # a checkpoint even when answered while the request was written
        return self._response


def _address(stream: ByteStream, which: str) -> tuple[str, int]:
    inner: Any = stream
    while not hasattr(inner, "socket") and hasattr(inner, "transport_stream"):
        inner = inner.transport_stream  # TLS (and the server's replay wrapper) over the socket
    try:
        addr = getattr(inner.socket, which)()
        return (addr[0], addr[1])
    except (OSError, AttributeError):
        return ("0.0.0.0", 0)
