"""A client's waits for responses on trio, timed out by its channel's deadlines task.

A request's wait parks its task without a cancel scope of its own (es_broker/net/deadlines.py);
these pin what the cancel scope gave: the wait with the nearer deadline times out first whatever
the order the requests were written in, an answer wakes exactly its own request, a wait cancelled
from outside leaves nothing pending, and a closed connection wakes every wait.
"""

from __future__ import annotations

import functools

import pytest
import trio

from es_broker.net.remoting_client import RemotingClient, RemotingError
from es_broker.remoting.command import RemotingCommand, request, response_to
from es_broker.remoting.connection import CLOSED, NEED_DATA, Connection

CODE = 38  # any request code: the peer below answers only when told


class HeldRequests:
    """A peer that reads requests and keeps them; the test answers or hangs up when it likes."""

    def __init__(self) -> None:
        self.received: list[RemotingCommand] = []
        self.arrived = trio.Event()
        self.streams: list[trio.SocketStream] = []
        self.conn = Connection()

    async def serve(self, stream: trio.SocketStream) -> None:
        self.streams.append(stream)
        try:
            async for data in stream:
                self.conn.receive_data(data)
                while (event := self.conn.next_event()) not in (NEED_DATA, CLOSED):
                    assert isinstance(event, RemotingCommand)
                    self.received.append(event)
                    self.arrived.set()
                    self.arrived = trio.Event()
        except trio.ClosedResourceError:  # the test hung up
            return

    async def wait_for(self, count: int) -> list[RemotingCommand]:
        while len(self.received) < count:
            await self.arrived.wait()
        return self.received

    async def answer(self, command: RemotingCommand) -> None:
        await self.streams[0].send_all(self.conn.send(response_to(command, 0, remark="yes")))


async def _peer(nursery: trio.Nursery) -> tuple[HeldRequests, str]:
    peer = HeldRequests()
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, host="127.0.0.1"), peer.serve, 0
    )
    return peer, f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def _deadlines_running(client: RemotingClient, addr: str) -> None:
    """The channel's deadlines task has started (requests begun before it keep a scope each)."""
    channel = await client.channel(addr)
    while channel._deadlines is None or not channel._deadlines.running:
        await trio.lowlevel.checkpoint()  # the reader's task group starts it when scheduled


async def test_the_nearer_deadline_times_out_first_and_an_answer_wakes_its_own_request():
    async with trio.open_nursery() as nursery:
        peer, addr = await _peer(nursery)
        client = RemotingClient(nursery)
        await _deadlines_running(client, addr)
        outcomes: dict[str, object] = {}
        ended = {"long": trio.Event(), "short": trio.Event()}

        async def ask(name: str, timeout: float) -> None:
            try:
                outcomes[name] = (await client.invoke(addr, request(CODE), timeout)).remark
            except RemotingError as exc:
                outcomes[name] = str(exc)
            ended[name].set()

        async with trio.open_nursery() as asking:
            asking.start_soon(ask, "long", 60.0)
            long_request = (await peer.wait_for(1))[0]
            asking.start_soon(ask, "short", 0.2)  # written second, due first
            await peer.wait_for(2)
            await ended["short"].wait()
            assert "long" not in outcomes  # still waiting
            await peer.answer(long_request)
        assert outcomes["long"] == "yes"
        assert "no answer from" in str(outcomes["short"])
        assert client._channels[addr]._pending == {}
        await client.aclose()
        nursery.cancel_scope.cancel()


async def test_a_wait_cancelled_from_outside_leaves_nothing_pending_and_its_answer_is_dropped():
    async with trio.open_nursery() as nursery:
        peer, addr = await _peer(nursery)
        client = RemotingClient(nursery)
        await _deadlines_running(client, addr)
        channel = client._channels[addr]
        with trio.move_on_after(0.1) as cancelled:
            await client.invoke(addr, request(CODE), 60.0)
        assert cancelled.cancelled_caught
        assert channel._pending == {}
        [held] = await peer.wait_for(1)
        await peer.answer(held)
        # the late answer is read and dropped; the channel still serves the next request
        follow_up = trio.Event()

        async def ask_again() -> None:
            answered = await client.invoke(addr, request(CODE), 60.0)
            assert answered.remark == "yes"
            follow_up.set()

        nursery.start_soon(ask_again)
        await peer.wait_for(2)
        await peer.answer(peer.received[1])
        await follow_up.wait()
        assert channel._pending == {}
        await client.aclose()
        nursery.cancel_scope.cancel()


async def test_a_closed_connection_wakes_every_parked_wait():
    async with trio.open_nursery() as nursery:
        peer, addr = await _peer(nursery)
        client = RemotingClient(nursery)
        await _deadlines_running(client, addr)
        errors: list[str] = []

        async def ask() -> None:
            with pytest.raises(RemotingError) as raised:
                await client.invoke(addr, request(CODE), 60.0)
            errors.append(str(raised.value))

        async with trio.open_nursery() as asking:
            for _ in range(3):
                asking.start_soon(ask)
            await peer.wait_for(3)
            await peer.streams[0].aclose()
        assert len(errors) == 3
        assert all("closed" in error for error in errors)
        await client.aclose()
        nursery.cancel_scope.cancel()
