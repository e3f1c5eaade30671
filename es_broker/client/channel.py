"""One TCP connection speaking the remoting protocol, in either direction.

The sans-IO `Connection` turns bytes into commands and back; a Channel owns
the socket around it: a send lock (responses of concurrent handlers must not
interleave), and the table of requests this side sent (server-initiated
requests to a client, or a client's requests to a broker) matched by opaque.
"""

from __future__ import annotations

import itertools
from typing import Any

import trio

from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.connection import CLOSED, NEED_DATA, Connection

_opaques = itertools.count(1)
READ_SIZE = 256 * 1024


class ChannelClosed(Exception):
    """The peer went away."""


class Channel:
    def __init__(self, stream: trio.SocketStream, *, max_frame: int | None = None) -> None:
        self.stream = stream
        self.conn = Connection() if max_frame is None else Connection(max_frame_length=max_frame)
        self._send_lock = trio.Lock()
        self._pending: dict[int, trio.MemorySendChannel[RemotingCommand]] = {}
        self.closed = False
        self.remote = _address(stream, "getpeername")
        self.local = _address(stream, "getsockname")
        self.attributes: dict[str, Any] = {}

    @property
    def remote_addr(self) -> str:
        return f"{self.remote[0]}:{self.remote[1]}"

    async def send(self, command: RemotingCommand) -> None:
        data = self.conn.send(command)
        async with self._send_lock:
            if self.closed:
                raise ChannelClosed(self.remote_addr)
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.closed = True
                raise ChannelClosed(self.remote_addr) from exc

    async def receive(self) -> RemotingCommand | None:
        """The next command from the peer; None at a clean end of stream."""
        while True:
            event = self.conn.next_event()
            if event is CLOSED:
                return None
            if event is not NEED_DATA:
                return event
            try:
                data = await self.stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self.conn.receive_data(b"")  # the next round raises if the peer left mid-frame
                continue
            self.conn.receive_data(data)

    async def invoke(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response (matched by opaque)."""
        opaque = next(_opaques) & 0x7FFFFFFF
        command = _with_opaque(command, opaque)
        send, recv = trio.open_memory_channel[RemotingCommand](1)
        self._pending[opaque] = send
        try:
            await self.send(command)
            with trio.fail_after(timeout):
                try:
                    return await recv.receive()
                except trio.EndOfChannel:
                    raise ChannelClosed(self.remote_addr) from None
        finally:
            self._pending.pop(opaque, None)

    async def invoke_oneway(self, command: RemotingCommand) -> None:
        await self.send(_with_opaque(command, next(_opaques) & 0x7FFFFFFF))

    def deliver_response(self, response: RemotingCommand) -> bool:
        """Hand a response to whoever waits for it; False if nobody does (dropped)."""
        waiter = self._pending.pop(response.opaque, None)
        if waiter is None:
            return False
        waiter.send_nowait(response)
        return True

    def fail_pending(self) -> None:
        """Wake every caller still waiting for a response: the connection is gone."""
        for waiter in self._pending.values():
            waiter.close()
        self._pending.clear()

    async def aclose(self) -> None:
        self.closed = True
        with trio.CancelScope(shield=True):
            await self.stream.aclose()


def _with_opaque(command: RemotingCommand, opaque: int) -> RemotingCommand:
    import dataclasses

    return dataclasses.replace(command, opaque=opaque)


def _address(stream: trio.SocketStream, which: str) -> tuple[str, int]:
    try:
        addr = getattr(stream.socket, which)()
        return (addr[0], addr[1])
    except (OSError, AttributeError):
        return ("0.0.0.0", 0)
