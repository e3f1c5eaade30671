"""The writer's side of an edge process's link: each relayed connection as a stream of its own.

`EdgeLink.run` reads the link (es_broker/server/edge/link.py) and serves every
connection the edge opens on it with `RemotingServer.serve_relayed`, over a
`RelayedStream`: what the client sent is read from it, in order, as from a
socket; what the writer writes to it goes back on the link. The writes of all
of an edge's connections that are ready when the link's sender runs go out
in one write (a group commit's answers to several connections cost one
syscall). When the link ends (the edge process exited or was killed) every
connection it relayed ends as a closed socket would: the channel's waiters
are failed and the listener's `on_close` runs (the client registry forgets it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import trio

from es_broker.net.channel import READ_SIZE
from es_broker.server.edge.link import (
    CLOSE,
    DATA,
    OPEN,
    READY,
    LinkBroken,
    LinkReader,
    Outgoing,
    message,
    parse_addresses,
    read_socket,
)

log = logging.getLogger(__name__)

# bytes waiting to go to an edge beyond which a writing task waits for the link to take them
LINK_HIGH_WATER = 8 * 1024 * 1024


class Serves(Protocol):
    """The listener that serves relayed connections (RemotingServer)."""

    async def serve_relayed(self, stream: RelayedStream) -> None: ...


class _Addresses:
    """What `Channel` asks a stream's socket for: the client's address and the edge's."""

    __slots__ = ("peer", "local")

    def __init__(self, peer: tuple[str, int], local: tuple[str, int]) -> None:
        self.peer = peer
        self.local = local

    def getpeername(self) -> tuple[str, int]:
        return self.peer

    def getsockname(self) -> tuple[str, int]:
        return self.local


class RelayedStream:
    """One connection an edge relays, as the byte stream a `Channel` reads and writes."""

    __slots__ = ("link", "conn", "socket", "_chunks", "_arrived", "ended", "closed")

    def __init__(
        self, link: EdgeLink, conn: int, peer: tuple[str, int], local: tuple[str, int]
    ) -> None:
        self.link = link
        self.conn = conn
        self.socket = _Addresses(peer, local)
        self._chunks: list[bytes] = []
        self._arrived: trio.Event | None = None
        self.ended = False  # the client went away (or the link did): reads return b"" once drained
        self.closed = False  # closed here: writes fail

    def feed(self, data: bytes) -> None:
        """Bytes the client sent (the link's reader)."""
        self._chunks.append(data)
        if self._arrived is not None:
            self._arrived.set()

    def end(self) -> None:
        """The client went away: what was fed is still read, then the end of the stream."""
        self.ended = True
        if self._arrived is not None:
            self._arrived.set()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while (data := self.take(max_bytes or READ_SIZE)) is None:
            self._arrived = trio.Event()
            try:
                await self._arrived.wait()
            finally:
                self._arrived = None
        await trio.lowlevel.checkpoint()
        return data

    def take(self, limit: int = READ_SIZE) -> bytes | None:
        """What the client sent that is here already (at most `limit` bytes, as a socket read); b""
        at the end of the stream, None if nothing is here yet (`receive_some` waits for it)."""
        chunks = self._chunks
        if not chunks:
            return b"" if self.ended or self.closed else None
        if len(chunks) == 1 and len(chunks[0]) <= limit:
            data = chunks.pop()
        else:  # a socket read returns at most `limit` bytes: so does this
            data = b"".join(chunks)
            chunks.clear()
            if len(data) > limit:
                chunks.append(data[limit:])
                data = data[:limit]
        return data

    def write_nowait(self, data: bytes) -> None:
        """Queue `data` for the client (the link's sender writes it); trio.BrokenResourceError if gone."""
        if self.closed or self.ended:
            raise trio.BrokenResourceError(
                f"connection {self.conn} of edge {self.link.pid} is gone"
            )
        self.link.put(message(DATA, self.conn, data))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.write_nowait(bytes(data))
        await self.link.room()

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            if not self.ended:  # the edge closes the client's socket
                self.link.put(message(CLOSE, self.conn))
            self.link.forget(self.conn)
        await trio.lowlevel.checkpoint()


class EdgeLink:
    """The writer's end of one edge process's link."""

    def __init__(
        self,
        stream: trio.SocketStream,
        server: Serves,
        pid: int,
        on_ready: Callable[[], None],
    ) -> None:
        self.stream = stream
        self.server = server
        self.pid = pid
        self.on_ready = on_ready  # called when the edge says it accepts (READY)
        self.streams: dict[int, RelayedStream] = {}
        # to the edge: a message put while nothing is being written goes to the socket at once
        self.out = Outgoing(stream, LINK_HIGH_WATER, fd=stream.socket.fileno())
        self.put = self.out.put  # queue one link message for the edge
        self.room = self.out.room  # wait while more than LINK_HIGH_WATER bytes are queued

    @property
    def connections(self) -> int:
        return len(self.streams)

    def forget(self, conn: int) -> None:
        self.streams.pop(conn, None)

    async def run(self) -> None:
        """Serve the link until the edge goes away; every connection it relayed then ends."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.out.run)
                try:
                    await self._read_loop(nursery)
                finally:
                    self.out.end()  # the sender stops; the connections end as at their end of stream
                    for stream in list(self.streams.values()):
                        stream.end()
                    self.streams.clear()
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        reader = LinkReader()
        sock = self.stream.socket
        while True:
            data = await read_socket(sock)  # one scheduler pass a read, as a channel's socket
            if not data:
                return
            try:
                messages = reader.feed(data)
            except LinkBroken as exc:
                log.error("edge process %d: %s; dropping its link", self.pid, exc)
                return
            for kind, conn, payload in messages:
                if kind == DATA:
                    stream = self.streams.get(conn)
                    if stream is not None:
                        stream.feed(payload)
                elif kind == OPEN:
                    try:
                        peer, local = parse_addresses(payload)
                    except LinkBroken as exc:
                        log.error("edge process %d: %s; dropping its link", self.pid, exc)
                        return
                    stream = RelayedStream(self, conn, peer, local)
                    self.streams[conn] = stream
                    nursery.start_soon(self.server.serve_relayed, stream)
                elif kind == READY:
                    self.on_ready()
                else:  # CLOSE: the client went away
                    stream = self.streams.pop(conn, None)
                    if stream is not None:
                        stream.end()
