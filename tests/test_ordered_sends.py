"""Sends pipelined on one connection are stored in the order they arrived (B-140, B-141)."""

from __future__ import annotations

import dataclasses
import struct

import trio

from es_broker.log.arrival import ArrivalOrder, current_ticket
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from es_broker.remoting.connection import NEED_DATA, Connection
from es_broker.remoting.message import decode_all, encode_properties
from tests.conftest import make_topic
from tests.process_fixtures import serve

TOPIC = "Ordered"
PROPS = encode_properties({"TAGS": "A"})


def _single(n: int) -> tuple[int, dict, bytes]:
    return (
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "P",
            "b": TOPIC,
            "c": "TBW102",
            "d": 4,
            "e": 0,
            "f": 0,
            "g": 0,
            "h": 0,
            "i": PROPS.decode(),
        },
        b"%08d" % n,
    )


def _batch(first: int, count: int) -> tuple[int, dict, bytes]:
    body = b""
    for n in range(first, first + count):
        payload = b"%08d" % n
        body += (
            struct.pack(">iiiii", 20 + len(payload) + 2 + len(PROPS), 0, 0, 0, len(payload))
            + payload
        )
        body += struct.pack(">h", len(PROPS)) + PROPS
    return (
        RequestCode.SEND_BATCH_MESSAGE,
        {"a": "P", "b": TOPIC, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0, "m": True},
        body,
    )


def _pull(queue_id: int, offset: int, suspend_ms: int) -> tuple[int, dict, bytes]:
    return (
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": TOPIC,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": 32,
            "sysFlag": 6 if suspend_ms else 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": "*",
            "subVersion": 0,
        },
        b"",
    )


def create_topic_frame() -> tuple[int, dict, bytes]:
    return (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": TOPIC,
            "defaultTopic": "TBW102",
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        },
        b"",
    )


class RawConnection:
    """A socket written with many frames at once; answers read back by opaque."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = Connection()
        self.answers: dict[int, object] = {}

    async def write_all(self, frames: list[tuple[int, dict, bytes]], first_opaque: int) -> None:
        data = b"".join(
            self.conn.send(
                dataclasses.replace(request(code, fields, body), opaque=first_opaque + i)
            )
            for i, (code, fields, body) in enumerate(frames)
        )
        await self.stream.send_all(data)  # one write: the broker reads the frames back to back

    async def read_until(self, opaques: set[int]) -> None:
        while not opaques <= self.answers.keys():
            event = self.conn.next_event()
            if event is NEED_DATA:
                data = await self.stream.receive_some(1 << 16)
                assert data, "the broker closed the connection"
                self.conn.receive_data(data)
                continue
            self.answers[event.opaque] = event


async def test_b140_ten_thousand_pipelined_sends_are_stored_in_arrival_order_and_a_long_poll_is_not_held(
    tmp_path,
):
    """10,000 sends (singles and batches of 4) to one queue, one connection, one socket write; a pull
    long-polled on the same connection before them is answered by the send that follows them."""
    frames: list[tuple[int, dict, bytes]] = []
    n = 0
    for i in range(10_000):
        if i % 4 == 3:
            frames.append(_batch(n, 4))
            n += 4
        else:
            frames.append(_single(n))
            n += 1
    with serve(tmp_path / "data") as served:
        host, port = served.broker.rsplit(":", 1)
        create = create_topic_frame()
        stream = await trio.open_tcp_stream(host, int(port))
        raw = RawConnection(stream)
        await raw.write_all([create], 1)
        await raw.read_until({1})
        assert raw.answers[1].code == 0, raw.answers[1].remark
        # a long-poll of queue 1 (empty), then every send to queue 0, then one send to queue 1
        held = _pull(1, 0, 60_000)
        wake = (RequestCode.SEND_MESSAGE_V2, {**_single(0)[1], "e": 1}, b"wake")
        await raw.write_all([held, *frames, wake], 100)
        sends = set(range(101, 101 + len(frames)))
        await raw.read_until(sends)
        assert all(raw.answers[o].code == 0 for o in sends)
        assert 100 not in raw.answers or raw.answers[100].code == 0  # not refused, held
        await raw.read_until({100, 101 + len(frames)})
        pulled = decode_all(raw.answers[100].body)
        assert [m.body for m in pulled] == [b"wake"]  # the long-poll was answered by the last frame
        # every message back, in the order the frames were written
        bodies: list[bytes] = []
        opaque = 20_000
        while len(bodies) < n:
            await raw.write_all([_pull(0, len(bodies), 0)], opaque)
            await raw.read_until({opaque})
            answer = raw.answers.pop(opaque)
            assert answer.code == 0, answer.remark
            bodies += [m.body for m in decode_all(answer.body)]
            opaque += 1
        await stream.aclose()
    assert bodies == [b"%08d" % i for i in range(n)]


async def test_b140_tickets_released_out_of_order_let_jobs_in_by_arrival():
    order = ArrivalOrder()
    tickets = [order.ticket() for _ in range(5)]
    entered: list[int] = []

    async def submit(t) -> None:
        await t.wait_turn()
        entered.append(t.number)
        t.release()

    async with trio.open_nursery() as nursery:
        for t in reversed(tickets):  # started last-first, as trio may run them
            if t.number == 2:
                continue
            nursery.start_soon(submit, t)
        await trio.testing.wait_all_tasks_blocked()
        assert entered == [0, 1]  # 3 and 4 wait for 2
        tickets[2].release()  # refused before writing: gives its turn up
    assert entered == [0, 1, 3, 4]


async def test_b140_jobs_of_one_connection_enter_the_writer_in_ticket_order_in_one_group_commit(
    broker,
):
    """The writer takes ticketed jobs in ticket order whatever order their tasks start in; they share a commit."""
    await make_topic(broker, TOPIC, 1)
    order = ArrivalOrder()
    tickets = [order.ticket() for _ in range(50)]
    batches_before = broker.writer.batches

    async def send(t) -> None:
        t.bind()
        assert current_ticket() is t
        from es_broker.commands.placement import MessageIn

        await broker.put_message(
            TOPIC, 0, MessageIn(b"%d" % t.number, {}, 0, 0, 0, ("127.0.0.1", 1), 0)
        )

    async with trio.open_nursery() as nursery:
        for t in reversed(tickets):
            nursery.start_soon(send, t)
    result = broker.get_message(TOPIC, 0, 0, 32)
    got = [m.body for m in decode_all(result.body)]
    assert got == [b"%d" % i for i in range(32)]
    assert broker.writer.batches - batches_before < len(tickets)  # group commit kept
