"""A remoting listener: one trio task per connection, one per request.

Requests run concurrently (a long-polled pull must not hold up the heartbeat
behind it); responses carry the request's opaque, so their order does not
matter. Errors are answers: a refusal becomes its RocketMQ code and remark,
an unknown code REQUEST_CODE_NOT_SUPPORTED; a frame that cannot be decoded
closes that connection only, as the Java server does.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import trio

from es_broker.client.channel import Channel, ChannelClosed
from es_broker.commands.errors import BrokerError
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.errors import CommandError, ProtocolError
from es_broker.remoting.requests import check

log = logging.getLogger(__name__)

Handler = Callable[[Channel, RemotingCommand], Awaitable[RemotingCommand | None]]

IDLE_TIMEOUT = 120.0  # serverChannelMaxIdleTimeSeconds


class RemotingServer:
    def __init__(
        self,
        name: str,
        handlers: dict[int, Handler],
        *,
        on_close: Callable[[Channel], None] | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.name = name
        self.handlers = handlers
        self.on_close = on_close
        self.idle_timeout = idle_timeout
        self.channels: set[Channel] = set()

    async def serve(self, host: str, port: int, *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on host:port (0 picks a free port, reported through task_status)."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()[1]
        log.info("%s listening on %s:%d", self.name, host, bound)
        task_status.started(bound)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        channel = Channel(stream)
        self.channels.add(channel)
        try:
            async with trio.open_nursery() as nursery:
                try:
                    await self._read_loop(channel, nursery)
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self.channels.discard(channel)
            channel.fail_pending()
            if self.on_close is not None:
                self.on_close(channel)
            await channel.aclose()

    async def _read_loop(self, channel: Channel, nursery: trio.Nursery) -> None:
        while True:
            with trio.move_on_after(self.idle_timeout) as idle:
                try:
                    command = await channel.receive()
                except ProtocolError as exc:
                    log.warning("%s: closing %s: %s", self.name, channel.remote_addr, exc)
                    return
            if idle.cancelled_caught:
                log.info("%s: closing idle connection %s", self.name, channel.remote_addr)
                return
            if command is None:
                return
            if command.is_response:
                channel.deliver_response(command)
            else:
                nursery.start_soon(self._dispatch, channel, command)

    async def _dispatch(self, channel: Channel, request: RemotingCommand) -> None:
        response = await self.answer(channel, request)
        if response is not None and not request.is_oneway:
            with contextlib.suppress(ChannelClosed):
                await channel.send(response)

    async def answer(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        """The response to one request, with every refusal turned into its code and remark."""
        handler = self.handlers.get(request.code)
        if handler is None:
            return response_to(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                               f" request type {request.code} not supported")
        refusal = check(request)  # the declared shape first: no processor sees a malformed request
        if refusal is not None:
            return response_to(request, refusal.code, refusal.remark)
        try:
            return await handler(channel, request)
        except BrokerError as exc:
            return response_to(request, int(exc.code), exc.remark)
        except CommandError as exc:
            return response_to(request, ResponseCode.SYSTEM_ERROR, str(exc))
        except ChannelClosed:
            return None
        except Exception as exc:  # a handler bug must not take the connection or broker down
            log.exception("%s: request %d failed", self.name, request.code)
            return response_to(request, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
