"""Outgoing remoting connections: requests by address, responses matched by opaque.

Used by the Python client, the admin CLI, and the broker itself (name-server
registration). Requests the peer sends us on the same connection (a broker's
RESET_CONSUMER_CLIENT_OFFSET, NOTIFY_CONSUMER_IDS_CHANGED, ...) go to
`on_request`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import ssl
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
import sniffio
import trio
from anyio.streams.tls import TLSStream

from es_broker.acl.signing import Credentials
from es_broker.net.channel import AnyioStream, Channel, ChannelClosed, PendingResponse
from es_broker.net.tasks import TaskSpawner
from es_broker.net.tls import TlsClientSettings, open_tls
from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.errors import ProtocolError

log = logging.getLogger(__name__)

RequestHandler = Callable[[Channel, RemotingCommand], Awaitable[RemotingCommand | None]]
DEFAULT_TIMEOUT = 3.0


class RemotingError(Exception):
    """The peer could not be reached or did not answer in time."""


def split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {addr!r} is not HOST:PORT")
    return host, int(port)


class PendingRequest:
    """A request written to a peer whose answer is still to come."""

    __slots__ = ("addr", "code", "_pending")

    def __init__(self, addr: str, code: int, pending: PendingResponse) -> None:
        self.addr = addr
        self.code = code
        self._pending = pending

    async def response(self, timeout: float = DEFAULT_TIMEOUT) -> RemotingCommand:
        """The answer; RemotingError if none comes within `timeout` s or the connection closes."""
        try:
            return await self._pending.response(timeout)
        except TimeoutError:
            raise RemotingError(
                f"no answer from {self.addr} within {timeout} s (code {self.code})"
            ) from None
        except ChannelClosed:
            raise RemotingError(f"connection to {self.addr} closed") from None


class RemotingClient:
    """Requests by address; with `credentials`, every request is signed (RocketMQ's AclClientRPCHook).

    With `tls`, every connection is TLS (RocketMQ's useTLS), verified as the settings say.
    """

    def __init__(
        self,
        nursery: TaskSpawner,
        on_request: RequestHandler | None = None,
        *,
        credentials: Credentials | None = None,
        tls: TlsClientSettings | None = None,
        connect_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._nursery = nursery
        # RocketMQ's connectTimeoutMillis (3 s): a peer that never answers the SYN fails here,
        # not after the kernel's two minutes of retries
        self.connect_timeout = connect_timeout
        self._channels: dict[str, Channel] = {}
        self._connecting: dict[str, anyio.Event] = {}
        self.on_request = on_request
        # told the address of a connection that failed or closed (the client instance refreshes the
        # routes at once, B-388); must not block
        self.on_connection_lost: Callable[[str], None] = lambda addr: None
        self.credentials = credentials
        self.tls = tls
        # TlsSetupError at once, not per connect
        self._tls_context = tls.context() if tls is not None else None
        self._closing = False

    def signed(self, command: RemotingCommand) -> RemotingCommand:
        """The command as it goes out: signed when the client has credentials."""
        if self.credentials is None:
            return command
        return command.signed_with(
            self.credentials.sign_request(command.code, command.signature_fields(), command.body)
        )

    def signing_as(self, credentials: Credentials | None) -> RemotingClient:
        """A client on this one's connections whose requests are signed with `credentials`.

        ACL checks each request's signature, not the connection, so accounts can share
        connections (the dashboard's signed-in operators). Close the original, never the copy.
        """
        other = copy.copy(self)  # the same channel tables: one connection per address
        other.credentials = credentials
        return other

    async def channel(self, addr: str) -> Channel:
        """The open channel to addr, connecting once if needed."""
        while True:
            channel = self._channels.get(addr)
            if channel is not None and not channel.closed:
                return channel
            pending = self._connecting.get(addr)
            if pending is None:
                break
            await pending.wait()
        done = self._connecting[addr] = anyio.Event()
        try:
            host, port = split_addr(addr)
            if not 0 < port < 65536:  # the socket layer would raise OverflowError, not OSError
                raise RemotingError(f"connect to {addr} failed: port {port} out of range")
            tcp = None
            failure: object = f"no answer within {self.connect_timeout:g} s"
            # anyio's connect_tcp turns its cancelled attempt into an OSError: the scope tells
            with anyio.move_on_after(self.connect_timeout) as connecting:
                try:
                    tcp = await anyio.connect_tcp(host, port)
                except OSError as exc:
                    if not connecting.cancel_called:
                        failure = exc
            if tcp is None:
                self.on_connection_lost(addr)
                raise RemotingError(f"connect to {addr} failed: {failure}")
            stream: anyio.abc.ByteStream = tcp
            raw = None
            if self._tls_context is not None:
                stream = await self._handshake(addr, host, tcp)
            else:  # plain TCP: requests are written to the socket directly when nothing else is
                raw = tcp.extra(anyio.abc.SocketAttribute.raw_socket)
            # on trio, responses are read from the socket directly too: anyio's trio stream reads
            # only when asked, where asyncio's transport reads the socket by itself
            native = raw is not None and sniffio.current_async_library() == "trio"
            channel = Channel(
                AnyioStream(stream),
                socket=raw,
                wait_readable=trio.lowlevel.wait_readable if native else None,
            )
            self._channels[addr] = channel
            self._nursery.start_soon(self._read_loop, addr, channel)
            return channel
        finally:
            del self._connecting[addr]
            done.set()

    async def _handshake(self, addr: str, host: str, stream: anyio.abc.SocketStream) -> TLSStream:
        assert self._tls_context is not None and self.tls is not None
        try:
            return await open_tls(stream, host, self._tls_context, self.tls.handshake_timeout)
        except ssl.SSLError as exc:
            raise RemotingError(f"TLS handshake with {addr} failed: {exc}") from None
        except TimeoutError:
            raise RemotingError(
                f"TLS handshake with {addr} failed: no answer within "
                f"{self.tls.handshake_timeout:g} s"
            ) from None

    async def invoke(
        self, addr: str, command: RemotingCommand, timeout: float = DEFAULT_TIMEOUT
    ) -> RemotingCommand:
        channel = await self.channel(addr)
        try:
            return await channel.invoke(self.signed(command), timeout)
        except TimeoutError:
            raise RemotingError(
                f"no answer from {addr} within {timeout} s (code {command.code})"
            ) from None
        except ChannelClosed:
            raise RemotingError(f"connection to {addr} closed") from None

    async def start_request(self, addr: str, command: RemotingCommand) -> PendingRequest:
        """Write a request to addr now; await `.response(timeout)` of the answer later."""
        channel = await self.channel(addr)
        try:
            pending = await channel.start_request(self.signed(command))
        except ChannelClosed:
            raise RemotingError(f"connection to {addr} closed") from None
        return PendingRequest(addr, command.code, pending)

    async def invoke_oneway(self, addr: str, command: RemotingCommand) -> None:
        channel = await self.channel(addr)
        try:
            await channel.invoke_oneway(self.signed(command))
        except ChannelClosed:
            raise RemotingError(f"connection to {addr} closed") from None

    async def _read_loop(self, addr: str, channel: Channel) -> None:
        try:
            async with anyio.create_task_group() as nursery:
                nursery.start_soon(channel.keep_deadlines)
                while True:
                    try:
                        command = await channel.receive()
                    except ProtocolError as exc:
                        log.warning("closing %s: %s", addr, exc)
                        break
                    if command is None:
                        break
                    if command.is_response:
                        channel.deliver_response(command)
                    elif self.on_request is not None:
                        nursery.start_soon(self._serve_request, channel, command)
                nursery.cancel_scope.cancel()
        finally:
            channel.closed = True
            channel.fail_pending()
            if self._channels.get(addr) is channel:
                del self._channels[addr]
            if not self._closing:
                self.on_connection_lost(addr)
            await channel.aclose()

    async def _serve_request(self, channel: Channel, command: RemotingCommand) -> None:
        if self.on_request is None:  # started only when there is one
            return
        response = await self.on_request(channel, command)
        if response is not None and not command.is_oneway:
            with contextlib.suppress(ChannelClosed):
                await channel.send(response)

    async def aclose(self) -> None:
        self._closing = True
        for channel in list(self._channels.values()):
            await channel.aclose()
        self._channels.clear()
