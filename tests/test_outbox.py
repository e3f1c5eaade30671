"""A connection's answers: written at once when nothing else is, held while a commit hands out outcomes."""

from __future__ import annotations

import socket

import trio
import trio.testing

from es_broker.log import GroupCommitWriter, RecordLog, make
from es_broker.net.channel import Channel
from es_broker.remoting.command import RemotingCommand, request, response_to
from es_broker.remoting.connection import Connection
from es_broker.server.edge.outbox import HeldAnswers, Outbox


def _failed(_request: RemotingCommand, _exc: Exception) -> None:
    return None


def _tcp_pair() -> tuple[Channel, socket.socket]:
    """A channel on the server end of a loopback TCP connection, and the client end (non-blocking)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        peer = socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    peer.setblocking(False)
    server_side = trio.socket.from_stdlib_socket(ours)
    return Channel(trio.SocketStream(server_side), socket=server_side), peer


def _pending(peer: socket.socket) -> bytes:
    """What the peer can read now, without waiting."""
    try:
        return peer.recv(1 << 20)
    except BlockingIOError:
        return b""


def _answers(data: bytes) -> list[int]:
    conn = Connection()
    conn.receive_data(data)
    opaques = []
    while isinstance(command := conn.next_event(), RemotingCommand):
        opaques.append(command.opaque)
    return opaques


async def test_the_answers_of_one_commit_are_held_until_its_outcomes_are_handed_out_then_written_together(
    tmp_path,
):
    channel, peer = _tcp_pair()
    held = HeldAnswers()
    outbox = Outbox(channel, _failed, held)
    writer = GroupCommitWriter(RecordLog(tmp_path))
    writer.completing = held.holding
    seen_meanwhile: list[bytes] = []

    def answer(opaque: int):
        def then(_queued) -> None:
            ask = request(310, opaque=opaque)
            outbox.answer(ask, response_to(ask, 0))
            seen_meanwhile.append(_pending(peer))

        return then

    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.run)
        await trio.testing.wait_all_tasks_blocked()  # the sender waits for answers
        for opaque in (7, 8, 9):
            writer.enqueue(lambda ctx: ctx.append(make("probe", 0)), then=answer(opaque))
        writer.commit_waiting()  # as a read loop does: commit, then hand out the outcomes
        written = _pending(peer)  # no task ran since: the pass wrote them itself
        nursery.cancel_scope.cancel()
    assert seen_meanwhile == [b"", b"", b""]
    assert _answers(written) == [7, 8, 9]
    peer.close()


async def test_an_answer_outside_a_commit_is_written_at_once():
    channel, peer = _tcp_pair()
    outbox = Outbox(channel, _failed, HeldAnswers())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.run)
        await trio.testing.wait_all_tasks_blocked()
        ask = request(310, opaque=5)
        outbox.answer(ask, response_to(ask, 0))
        written = _pending(peer)
        nursery.cancel_scope.cancel()
    assert _answers(written) == [5]
    peer.close()
