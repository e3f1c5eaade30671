"""A remoting listener: one trio task per connection reads, one writes (`Outbox`).

A request refused at the edge is answered from the read loop; a send is
queued for the writer from the read loop and answered from the writer's
completion, so neither costs a task. Every other request runs as a task of
its own, so they run concurrently (a long-polled pull must not hold up the
heartbeat behind it); responses carry the request's opaque, so their order
does not matter. Errors are answers: a refusal becomes its RocketMQ code and remark,
an unknown code REQUEST_CODE_NOT_SUPPORTED; a frame that cannot be decoded
closes that connection only, as the Java server does.

What a peer can make the listener hold is bounded (`EdgeLimits`): a frame's
length is checked at its prefix, a frame that stalls is dropped after the read
timeout, the partial frames of all connections share one byte budget (the
connection whose read would exceed it is closed), and connections beyond the
limit are closed as they are accepted.

With TLS (`ServerTls`, es_broker/server/edge/tls.py) the first bytes of a
connection pick TLS or plain text as tls.server.mode says; the handshake
runs under the same limits: it counts against max_connections and must be
done within the read timeout.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import trio

from es_broker.commands.errors import BrokerError
from es_broker.config import BrokerConfig
from es_broker.log import hops
from es_broker.log.arrival import ArrivalOrder, Ticket
from es_broker.net.channel import (
    ByteStream,
    Channel,
    ChannelClosed,
    PartialFrameBudget,
    PartialFramesOverCap,
    ReceiveTimeout,
)
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import RemotingCommand, bind_header, response_to
from es_broker.remoting.errors import CommandError, ProtocolError
from es_broker.remoting.requests import Refusal, check_text, decode
from es_broker.server.edge import malloc
from es_broker.server.edge.arrival import ORDERED_CODES
from es_broker.server.edge.outbox import HeldAnswers, Outbox
from es_broker.server.edge.tls import ServerTls

log = logging.getLogger(__name__)


class CannotListen(OSError):
    """A listener could not bind its address (in use, not this host's, a privileged port):
    what `es-broker serve` prints in one line instead of a traceback."""

    @classmethod
    def at(cls, what: str, host: str, port: int, error: OSError) -> CannotListen:
        what = {"namesrv": "the name server", "broker": "the broker"}.get(what, what)
        return cls(error.errno, f"{what} cannot listen on {host}:{port}: {error.strerror}")


Handler = Callable[[Channel, RemotingCommand], Awaitable[RemotingCommand | None]]


class Declined(Enum):
    """What a start returns when it leaves the request to its handler, run as a task of its own."""

    DECLINED = "declined"


DECLINED = Declined.DECLINED

# the first part of a handler, run in the connection's read loop as the checked frame is decoded: it
# must not block. It returns None once it has arranged for its answer to reach the outbox (the
# writer's completion puts it there), or the rest of the handler, which runs as a task of its own,
# or DECLINED before doing anything, for the handler to serve the request as it serves any other.
Start = Callable[
    [Channel, RemotingCommand, Outbox], Awaitable[RemotingCommand | None] | Declined | None
]


class AccessGuard(Protocol):
    """Decides whether a request that has its declared shape may run (es_broker.acl.access.AccessControl)."""

    def check(self, channel: Channel, request: RemotingCommand) -> Refusal | None: ...


# A connection that dropped this many bytes of partial frame at close has the
# C heap trimmed after it, so the memory goes back to the system (see malloc).
TRIM_AFTER_DROPPING = 1024 * 1024
REFUSAL_LOG_INTERVAL = 10.0  # seconds between warnings about connections over the limit


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """What one listener lets its connections hold; the settings are BrokerConfig's."""

    max_frame_length: int  # frameMaxLength
    idle_timeout: float  # serverChannelMaxIdleTimeSeconds
    read_timeout: float  # frame_read_timeout_ms
    partial_frame_bytes_max: int
    max_connections: int

    @classmethod
    def of(cls, config: BrokerConfig) -> EdgeLimits:
        """The limits a broker.conf sets (RocketMQ's defaults otherwise); ValueError if one is not positive."""
        for name in (
            "frameMaxLength",
            "serverChannelMaxIdleTimeSeconds",
            "frame_read_timeout_ms",
            "partial_frame_bytes_max",
            "max_connections",
        ):
            if getattr(config, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(config, name)}")
        return cls(
            max_frame_length=config.frameMaxLength,
            idle_timeout=float(config.serverChannelMaxIdleTimeSeconds),
            read_timeout=config.frame_read_timeout_ms / 1000,
            partial_frame_bytes_max=config.partial_frame_bytes_max,
            max_connections=config.max_connections,
        )


class RemotingServer:
    def __init__(
        self,
        name: str,
        handlers: dict[int, Handler],
        *,
        on_close: Callable[[Channel], None] | None = None,
        limits: EdgeLimits | None = None,
        guard: AccessGuard | None = None,
        starts: dict[int, Start] | None = None,
        before_wait: Callable[[int], None] | None = None,
        held: HeldAnswers | None = None,
    ) -> None:
        self.name = name
        # told of each answered request (code, response code, perf_counter at decode): the metrics'
        # latency histogram (es_broker/server/metrics.py); None: nothing is timed
        self.observe: Callable[[int, int, float], None] | None = None
        # answers held while the writer hands out a commit's outcomes, one write per connection after
        self.held = held
        # called by a read loop that has handled every frame it read, before it reads again, with the
        # number of requests whose start it ran (the broker commits the writes those frames queued
        # then, without waiting for its writer task, when they were several)
        self.before_wait = before_wait
        self.guard = guard  # ACL (es_broker/acl/access.py); None when aclEnable is off
        self.handlers = handlers
        # codes whose handler's first part runs in the read loop (sends: the job is queued in arrival
        # order without a task switch or a ticket); the rest runs as a task, as every other handler
        self.starts = starts or {}
        self.on_close = on_close
        self.limits = limits or EdgeLimits.of(BrokerConfig())
        self.budget = PartialFrameBudget(self.limits.partial_frame_bytes_max)
        self.channels: set[Channel] = set()
        self._refused = 0  # connections over the limit not yet reported
        self._refusal_logged_at = -math.inf

    # connections being opened (first bytes, TLS handshake): they count against max_connections too
    opening: int = 0
    tls: ServerTls | None = None  # None: plain text only, no peek at the first bytes

    @property
    def connections(self) -> int:
        """The connections this listener holds: open channels and those still being opened."""
        return len(self.channels) + self.opening

    async def serve(
        self,
        host: str,
        port: int,
        *,
        tls: ServerTls | None = None,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on host:port (0 picks a free port, reported through task_status); `tls`: its TLS mode."""
        self.tls = tls
        try:
            listeners = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            raise CannotListen.at(self.name, host, port, exc) from exc
        bound = listeners[0].socket.getsockname()[1]
        log.info("%s listening on %s:%d", self.name, host, bound)
        task_status.started(bound)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        if self.connections >= self.limits.max_connections:
            await self._refuse(stream)
            return
        opened = await self._open(stream)
        if opened is None:
            return
        served = hops.stamped(opened[0])
        channel = Channel(
            served,
            max_frame=self.limits.max_frame_length,
            budget=self.budget,
            head=opened[1],
            socket=opened[0].socket if isinstance(opened[0], trio.SocketStream) else None,
            wait_readable=trio.lowlevel.wait_readable,
            clock=hops.RECEIVE_CLOCK,
        )
        await self._serve(channel)

    async def serve_relayed(self, stream: ByteStream) -> None:
        """Serve a connection an edge process accepted and relays (es_broker/server/edge/relayed.py)
        as one of this listener's own: the same limits, checks, order and answers."""
        if self.connections >= self.limits.max_connections:
            await self._refuse(stream)
            return
        await self._serve(
            Channel(stream, max_frame=self.limits.max_frame_length, budget=self.budget)
        )

    async def _serve(self, channel: Channel) -> None:
        self.channels.add(channel)
        try:
            async with trio.open_nursery() as nursery:
                try:
                    await self._read_loop(channel, nursery)
                finally:
                    nursery.cancel_scope.cancel()
        except Exception:  # a bug met by one connection closes that connection, not the listener
            log.exception("%s: closing %s", self.name, channel.remote_addr)
        finally:
            self.channels.discard(channel)
            channel.fail_pending()
            if self.on_close is not None:
                self.on_close(channel)
            if await channel.aclose() >= TRIM_AFTER_DROPPING:
                malloc.trim()

    async def _open(self, stream: trio.SocketStream) -> tuple[trio.abc.Stream, bytes] | None:
        """The stream the channel reads (plain or TLS as the mode says) and the bytes already read
        from it; None: closed here."""
        if self.tls is None:
            return stream, b""
        self.opening += 1
        opened: tuple[trio.abc.Stream, bytes] | None = None
        try:
            opened = await self.tls.open(
                stream,
                name=self.name,
                peer=_peer(stream),
                idle_timeout=self.limits.idle_timeout,
                read_timeout=self.limits.read_timeout,
            )
        except Exception:  # a bug met while opening one connection closes that connection only
            log.exception("%s: closing %s", self.name, _peer(stream))
        finally:
            self.opening -= 1
            if opened is None:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(stream)
        return opened

    async def _refuse(self, stream: ByteStream) -> None:
        """Close a connection over the limit at once; warn at most every REFUSAL_LOG_INTERVAL."""
        self._refused += 1
        now = trio.current_time()
        if now - self._refusal_logged_at >= REFUSAL_LOG_INTERVAL:
            log.warning(
                "%s: closed %d new connection(s): %d open, the limit (max_connections)",
                self.name,
                self._refused,
                self.limits.max_connections,
            )
            self._refused = 0
            self._refusal_logged_at = now
        with trio.CancelScope(shield=True):
            await stream.aclose()

    async def _read_loop(self, channel: Channel, nursery: trio.Nursery) -> None:
        limits = self.limits
        starts = self.starts
        outbox = Outbox(channel, self._failed, self.held, self.observe)
        timed = self.observe is not None
        nursery.start_soon(outbox.run)
        # requests that append messages are stored in the order read (B-140)
        arrivals = ArrivalOrder()
        started = 0  # requests whose start ran in this read pass
        hook = self.before_wait

        def before_wait() -> None:
            nonlocal started
            if hook is not None:
                hook(started)
            started = 0

        try:
            while True:
                try:
                    command = await channel.receive(
                        idle_timeout=limits.idle_timeout,
                        read_timeout=limits.read_timeout,
                        before_wait=before_wait,
                    )
                except (ProtocolError, PartialFramesOverCap) as exc:
                    log.warning("%s: closing %s: %s", self.name, channel.remote_addr, exc)
                    return
                except ReceiveTimeout as exc:
                    if exc.mid_frame:
                        log.warning("%s: closing %s: %s", self.name, channel.remote_addr, exc)
                    else:
                        log.info("%s: closing idle connection %s", self.name, channel.remote_addr)
                    return
                if command is None:
                    return
                if command.is_response:
                    channel.deliver_response(command)
                    continue
                if timed:
                    outbox.started[command.opaque] = time.perf_counter()
                trace = hops.begin(command.code, channel) if hops.ON else None  # traced hops only
                # refused at the edge: answered here, no task (an unserved code, a malformed request)
                refusal = self._refusal(channel, command)
                if refusal is not None:
                    outbox.answer(command, refusal, trace)
                    continue
                if trace is not None:
                    trace.mark(hops.CHECKED)
                start = starts.get(command.code)
                # no earlier ordered request of this connection is still to be queued: queue this one
                # now; its answer comes from the writer's completion, or from a task it returns
                if (
                    start is not None
                    and arrivals.settled()
                    and self._start(channel, command, start, outbox, nursery, trace)
                ):
                    started += 1
                else:
                    ticket = arrivals.ticket() if command.code in ORDERED_CODES else None
                    nursery.start_soon(
                        self._handle_and_answer, channel, command, outbox, ticket, trace
                    )
        finally:
            outbox.closed = True  # answers completed after this are dropped, not kept

    def _start(
        self,
        channel: Channel,
        request: RemotingCommand,
        start: Start,
        outbox: Outbox,
        nursery: trio.Nursery,
        trace: hops.Trace | None,
    ) -> bool:
        """Run a checked request's `start` in the read loop; a rest it returns runs as a task. False:
        the start declined, nothing was done."""
        try:
            rest = start(channel, request, outbox)
        except Exception as exc:
            outbox.fail(request, exc, trace)
            return True
        if rest is DECLINED:
            return False
        if rest is not None:
            nursery.start_soon(self._finish, request, rest, outbox, trace)
        return True

    async def _finish(
        self,
        request: RemotingCommand,
        rest: Awaitable[RemotingCommand | None],
        outbox: Outbox,
        trace: hops.Trace | None,
    ) -> None:
        try:
            response = await rest
        except Exception as exc:
            outbox.fail(request, exc, trace)
            return
        if trace is not None:
            trace.mark(hops.ANSWERED)
        outbox.answer(request, response, trace)

    async def _handle_and_answer(
        self,
        channel: Channel,
        request: RemotingCommand,
        outbox: Outbox,
        ticket: Ticket | None,
        trace: hops.Trace | None,
    ) -> None:
        """A request already checked at the edge, run by its handler as a task of its own."""
        if ticket is None:
            response = await self._handle(channel, request)
        else:
            ticket.bind()  # this task's writer job keeps its place in the connection's arrival order
            try:
                response = await self._handle(channel, request)
            finally:
                ticket.release()  # refused before writing: the next request need not wait for this one
        outbox.answer(request, response, trace)

    async def answer(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        """The response to one request, with every refusal turned into its code and remark."""
        refusal = self._refusal(channel, request)
        if refusal is not None:
            return refusal
        hops.mark(hops.CHECKED)
        return await self._handle(channel, request)

    async def _handle(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        """The handler's response to a request that passed the edge checks (a refusal if it raised)."""
        try:
            response = await self.handlers[request.code](channel, request)
        except Exception as exc:
            return self._failed(request, exc)
        hops.mark(hops.ANSWERED)
        return response

    def _refusal(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        """The answer to a request no handler may see: an unserved code, a malformed request, or one the
        ACL refuses; None if it may run."""
        if request.code not in self.handlers:
            return response_to(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {request.code} not supported",
            )
        # the declared shape first, then text it could not store (B-335): no processor sees either.
        # Decoding the typed header is the shape check; the handler reads the header decoded here.
        header = decode(request)
        if type(header) is Refusal:
            return response_to(request, header.code, header.remark)
        refusal = check_text(request)
        if refusal is not None:
            return response_to(request, refusal.code, refusal.remark)
        bind_header(request, header)
        # then access (B-160): a refused request runs no handler and records nothing
        if self.guard is not None and (refusal := self.guard.check(channel, request)) is not None:
            return response_to(request, refusal.code, refusal.remark)
        return None

    def _failed(self, request: RemotingCommand, exc: Exception) -> RemotingCommand | None:
        """The answer to a handler that raised: a refusal's code and remark; None if the peer is gone."""
        if isinstance(exc, BrokerError):
            return response_to(request, int(exc.code), exc.remark)
        if isinstance(exc, CommandError):
            return response_to(request, ResponseCode.SYSTEM_ERROR, str(exc))
        if isinstance(exc, ChannelClosed):
            return None
        # a handler bug must not take the connection or broker down; the peer learns an id that finds
        # the log line and its traceback, never the exception's text (B-337)
        error_id = secrets.token_hex(8)
        log.error("%s: request %d failed, id %s", self.name, request.code, error_id, exc_info=exc)
        return response_to(request, ResponseCode.SYSTEM_ERROR, f"internal error, id {error_id}")


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"
