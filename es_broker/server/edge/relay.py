"""An edge process: accepts the broker's connections and relays their bytes to the writer process.

Started by the writer (es_broker/server/edge/processes.py) with the broker's
listening socket and one end of its link (es_broker/server/edge/link.py)
inherited as file descriptors:

    python -m es_broker.server.edge.relay --listen-fd N [--listen-fd M] --link-fd L

Every edge process accepts on the same listening socket, so the kernel hands
each new connection to one of them. An edge owns its connections' sockets:
it reads them (TLS as tls.server.mode says, the handshake done here), relays
what each client sent to the writer in order, and writes back what the writer
answers. When the link ends (the writer stopped or was killed) the edge
closes its connections and exits; the writer starts new edges when it starts.
The writer's settings for TLS come in the ES_BROKER_EDGE_TLS environment
variable (JSON of broker.conf's tls* settings), as its key's password must
not be on a command line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence

import trio

from es_broker.config import BrokerConfig
from es_broker.net.channel import READ_SIZE
from es_broker.server.edge.link import (
    CLOSE,
    DATA,
    OPEN,
    READY,
    LinkBroken,
    LinkReader,
    Outgoing,
    addresses,
    message,
    read_socket,
)
from es_broker.server.edge.tls import ServerTls

log = logging.getLogger("es_broker.edge")

TLS_ENV = "ES_BROKER_EDGE_TLS"
# bytes waiting to go to the writer beyond which the edge stops reading its clients until they go
LINK_HIGH_WATER = 8 * 1024 * 1024
# bytes waiting to be written to one client beyond which it is closed (it does not read its answers)
CLIENT_OUT_MAX = 256 * 1024 * 1024


class _Client:
    """One accepted connection: its socket, and what the writer wrote to it not yet written."""

    __slots__ = ("out", "closing", "scope")

    def __init__(self, stream: trio.abc.Stream, fd: int | None) -> None:
        # a plain socket (`fd`) takes its answers at once when nothing is being written; TLS's
        # stream is written by the task
        self.out = Outgoing(stream, CLIENT_OUT_MAX, fd=fd)
        self.closing = False  # the writer closed it: write what is queued, then close
        self.scope: trio.CancelScope | None = None

    def queue(self, data: bytes) -> None:
        self.out.put(data)
        if self.out.pending > CLIENT_OUT_MAX:
            log.warning("closing a client that does not read: %d bytes to write", self.out.pending)
            self.out.end()
            if self.scope is not None:
                self.scope.cancel()

    def close_soon(self) -> None:
        self.closing = True
        self.out.end()

    async def write_loop(self) -> None:
        """Write what the writer sends, in order, until it closes the connection (or the client goes)."""
        await self.out.run()
        if self.scope is not None:
            self.scope.cancel()


class Edge:
    """An edge process's connections and its link to the writer."""

    def __init__(self, link: trio.SocketStream, tls: ServerTls | None, limits: argparse.Namespace):
        self.link = link
        self.tls = tls
        self.limits = limits
        self.clients: dict[int, _Client] = {}
        self.opening = 0  # connections accepted whose TLS handshake is under way
        self._next = 0
        # to the writer: a message put while nothing is being written goes to the link at once
        self.out = Outgoing(link, LINK_HIGH_WATER, fd=link.socket.fileno())
        self._put = self.out.put

    async def run(self, listeners: list[trio.SocketListener]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.out.run)  # ends when the writer is gone: so does the reader
            await nursery.start(trio.serve_listeners, self._connection, listeners)
            self._put(message(READY, 0))  # accepting: the writer may say it listens
            await self._read_loop()
            nursery.cancel_scope.cancel()  # the writer is gone: so are this edge's connections

    async def _read_loop(self) -> None:
        reader = LinkReader()
        while True:
            data = await read_socket(self.link.socket)
            if not data:
                return
            try:
                messages = reader.feed(data)
            except LinkBroken as exc:
                log.error("the writer's link: %s", exc)
                return
            for kind, conn, payload in messages:
                client = self.clients.get(conn)
                if client is None:
                    continue  # gone already; the writer learns it from the CLOSE sent then
                if kind == DATA:
                    client.queue(payload)
                elif kind == CLOSE:
                    client.close_soon()

    async def _connection(self, accepted: trio.SocketStream) -> None:
        # this edge's connections, those being opened (TLS) included, under max_connections: over it
        # a connection is closed as it is accepted, as the writer's own listener does (B-184)
        if len(self.clients) + self.opening >= self.limits.max_connections:
            log.warning(
                "closed a new connection: %d open, the limit (max_connections)",
                self.limits.max_connections,
            )
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(accepted)
            return
        self.opening += 1
        try:
            opened = await self._open(accepted)
        finally:
            self.opening -= 1
        if opened is None:
            return
        stream, head = opened
        self._next += 1
        conn = self._next
        sock = accepted.socket
        plain = stream is accepted  # no TLS: the socket is read and written directly
        client = _Client(stream, sock.fileno() if plain else None)
        self.clients[conn] = client
        out = self.out
        try:
            self._put(message(OPEN, conn, addresses(_name(sock, True), _name(sock, False))))
            if head:
                self._put(message(DATA, conn, head))
            async with trio.open_nursery() as nursery:
                client.scope = nursery.cancel_scope
                nursery.start_soon(client.write_loop)
                while True:
                    if plain:
                        data = await read_socket(sock)
                    else:
                        try:
                            data = bytes(await stream.receive_some(READ_SIZE))
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            data = b""
                    if not data:
                        break
                    self._put(message(DATA, conn, data))
                    if out.pending > LINK_HIGH_WATER:  # the read checkpointed already
                        await out.room()
                if not client.closing:
                    nursery.cancel_scope.cancel()
        finally:
            del self.clients[conn]
            if not client.closing:
                self._put(message(CLOSE, conn))
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    async def _open(self, stream: trio.SocketStream) -> tuple[trio.abc.Stream, bytes] | None:
        if self.tls is None:
            return stream, b""
        try:
            opened = await self.tls.open(
                stream,
                name="broker",
                peer="{}:{}".format(*_name(stream.socket, True)),
                idle_timeout=self.limits.idle_timeout,
                read_timeout=self.limits.read_timeout,
            )
        except Exception:  # a bug met while opening one connection closes that connection only
            log.exception("closing a connection being opened")
            opened = None
        if opened is None:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
        return opened


def _name(sock: trio.socket.SocketType, peer: bool) -> tuple[str, int]:
    try:
        addr = sock.getpeername() if peer else sock.getsockname()
        return (str(addr[0]), int(addr[1]))
    except OSError:
        return ("0.0.0.0", 0)


def _tls_from_env() -> ServerTls | None:
    settings = os.environ.get(TLS_ENV)
    if not settings:
        return None
    return ServerTls.of(BrokerConfig().replace(**json.loads(settings)))


async def _main(args: argparse.Namespace) -> None:
    listeners = [
        trio.SocketListener(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)))
        for fd in args.listen_fd
    ]
    link = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=args.link_fd)))
    await Edge(link, _tls_from_env(), args).run(listeners)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m es_broker.server.edge.relay")
    parser.add_argument("--listen-fd", type=int, action="append", required=True)
    parser.add_argument("--link-fd", type=int, required=True)
    parser.add_argument("--idle-timeout", type=float, default=120.0)
    parser.add_argument("--read-timeout", type=float, default=30.0)
    parser.add_argument("--max-connections", type=int, default=10_000)
    parser.add_argument("--log-level", type=int, default=logging.WARNING)
    args = parser.parse_args(argv)
    logging.basicConfig(  # as the writer's (es_broker/cli/serve.py), at its level
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # the writer stops its edges (SIGTERM, or the link)
    try:
        trio.run(_main, args)
    except KeyboardInterrupt:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
