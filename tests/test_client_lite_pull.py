"""The lite pull consumer against a broker process (B-242..B-244)."""

from __future__ import annotations

import time

import pytest
import trio

from es_broker.client import Message, Producer
from es_broker.client.lite_pull import LitePullConsumer, LitePullConsumerConfig
from es_broker.client.producer import ClientError
from es_broker.remoting.bodies import MessageQueue
from es_broker.remoting.codes import RequestCode
from tests.helpers import topic_ready
from tests.waiting import poll_until

FAST = LitePullConsumerConfig(
    rebalance_interval=0.5,
    broker_suspend_max_time_millis=1000,
    consumer_timeout_when_suspend=5.0,
    pull_time_delay_when_exception=0.1,
    pull_time_delay_when_pause=0.05,
)
TIMEOUT = 30.0


def lite(running, group: str, **kw) -> LitePullConsumer:
    kw.setdefault("config", FAST)
    kw.setdefault("client_ip", "127.0.0.1")
    return LitePullConsumer(running.namesrv_addr, group, **kw)


async def poll_n(consumer: LitePullConsumer, n: int) -> list:
    """Poll until n messages came (a deadline, not a timing)."""
    got: list = []
    with trio.fail_after(TIMEOUT):
        while len(got) < n:
            got.extend(await consumer.poll(1.0))
    return got


async def send_to(running, topic: str, queue_id: int, bodies: list[bytes]) -> None:
    async with Producer(running.namesrv_addr, "LiteP", client_ip="127.0.0.1") as producer:
        for body in bodies:
            await producer.send_to_queue(topic, queue_id, Message(body))


async def broker_offset(running, group: str, topic: str, queue_id: int) -> int:
    response = await running.call(
        RequestCode.QUERY_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": queue_id},
    )
    return response.require_long("offset") if response.code == 0 else -1


async def test_b242_assign_seek_poll_and_commit_sync(process_running):
    await topic_ready(process_running, "LiteT", 2)
    await send_to(process_running, "LiteT", 0, [f"m{i}".encode() for i in range(10)])
    q0 = MessageQueue("LiteT", "broker-a", 0)
    async with lite(process_running, "LiteG") as consumer:
        consumer.assign([q0])
        assert consumer.assignment() == {q0}
        await consumer.seek(q0, 3)
        got = await poll_n(consumer, 7)
        assert [m.queue_offset for m in got] == list(range(3, 10))
        assert [m.body for m in got] == [f"m{i}".encode() for i in range(3, 10)]
        await consumer.commit_sync()
        assert await broker_offset(process_running, "LiteG", "LiteT", 0) == 10
        await consumer.seek_to_begin(q0)
        assert [m.queue_offset for m in await poll_n(consumer, 10)] == list(range(10))
        with pytest.raises(ClientError, match="Seek offset illegal"):
            await consumer.seek(q0, 11)
        with pytest.raises(ClientError, match="not in assigned list"):
            await consumer.seek(MessageQueue("LiteT", "broker-a", 1), 0)
        with pytest.raises(ClientError, match="mutually exclusive"):
            consumer.subscribe("LiteT")
        await consumer.seek_to_end(q0)
        await send_to(process_running, "LiteT", 0, [b"after-end"])
        [last] = await poll_n(consumer, 1)
        assert (last.queue_offset, last.body) == (10, b"after-end")
    # shut down with auto-commit: what was polled is committed
    assert await broker_offset(process_running, "LiteG", "LiteT", 0) == 11


async def test_b242_a_new_consumer_starts_from_the_committed_offset(process_running):
    await topic_ready(process_running, "LiteC", 1)
    q0 = MessageQueue("LiteC", "broker-a", 0)
    await send_to(process_running, "LiteC", 0, [f"m{i}".encode() for i in range(6)])
    manual = FAST.replace(auto_commit=False)
    async with lite(process_running, "LiteCG", config=manual) as first:
        first.assign([q0])
        await first.seek(q0, 0)
        await poll_n(first, 4)  # one batch may hold all six
        await first.commit_sync({q0: 4})
    async with lite(process_running, "LiteCG", config=manual) as second:
        second.assign([q0])
        assert await second.committed(q0) == 4
        assert [m.queue_offset for m in await poll_n(second, 2)] == [4, 5]


async def test_b242_pause_stops_pulling_and_resume_restarts_it(process_running):
    await topic_ready(process_running, "LiteP1", 1)
    q0 = MessageQueue("LiteP1", "broker-a", 0)
    consumer = lite(process_running, "LitePG")
    consumer.assign([q0])
    consumer.pause([q0])  # before any pull
    async with consumer:
        await send_to(process_running, "LiteP1", 0, [b"held"])
        assert await consumer.poll(0.3) == []  # nothing is pulled while paused
        assert consumer.is_paused(q0)
        await consumer.seek(q0, 0)
        consumer.resume([q0])
        [msg] = await poll_n(consumer, 1)
        assert msg.body == b"held"


async def test_b243_seek_to_a_time_starts_at_the_first_message_stored_then(process_running):
    await topic_ready(process_running, "LiteTime", 1)
    q0 = MessageQueue("LiteTime", "broker-a", 0)
    async with Producer(process_running.namesrv_addr, "LiteP", client_ip="127.0.0.1") as producer:
        for i in range(3):
            await producer.send_to_queue("LiteTime", 0, Message(f"early{i}".encode()))
        stamp = int(time.time() * 1000)
        # the store clock is the wall clock: wait until it passed the early sends' millisecond
        await poll_until(lambda: int(time.time() * 1000) > stamp + 1, 5, "next millisecond")
        await producer.send_to_queue("LiteTime", 0, Message(b"late0"))
        # late0 alone in its millisecond: compat search returns any unit of the asked time (B-68)
        late_stamp = int(time.time() * 1000)
        await poll_until(lambda: int(time.time() * 1000) > late_stamp, 5, "next millisecond")
        for i in range(1, 3):
            await producer.send_to_queue("LiteTime", 0, Message(f"late{i}".encode()))
    async with lite(process_running, "LiteTimeG") as consumer:
        consumer.assign([q0])
        await consumer.seek_to_begin(q0)
        stored = await poll_n(consumer, 6)
        late0 = next(m for m in stored if m.body == b"late0")
        assert all(m.store_timestamp < late0.store_timestamp for m in stored[:3])
        await consumer.seek_to_time(q0, late0.store_timestamp)
        got = await poll_n(consumer, 3)
        assert [m.body for m in got] == [b"late0", b"late1", b"late2"]


async def test_b242_subscribe_rebalances_the_queues_over_two_instances(process_running):
    await topic_ready(process_running, "LiteSub", 4)
    a = lite(process_running, "LiteSubG", instance_name="a")
    b = lite(process_running, "LiteSubG", instance_name="b")
    a.subscribe("LiteSub")
    b.subscribe("LiteSub")
    everything = {MessageQueue("LiteSub", "broker-a", q) for q in range(4)}
    async with a, b:

        def split() -> bool:
            return (
                a.assignment() | b.assignment() == everything
                and not a.assignment() & b.assignment()
                and len(a.assignment()) == 2
            )

        await poll_until(split, TIMEOUT, "two queues each")
        with pytest.raises(ClientError, match="mutually exclusive"):
            a.assign(everything)
        async with Producer(process_running.namesrv_addr, "LiteP", client_ip="127.0.0.1") as p:
            for q in range(4):
                for i in range(5):
                    await p.send_to_queue("LiteSub", q, Message(f"{q}:{i}".encode()))
        got_a, got_b = await poll_n(a, 10), await poll_n(b, 10)
        assert {m.queue for m in got_a} == a.assignment()
        assert {m.queue for m in got_b} == b.assignment()
        assert sorted(m.body for m in got_a + got_b) == sorted(
            f"{q}:{i}".encode() for q in range(4) for i in range(5)
        )
        await b.shutdown()  # b leaves the group: a takes all four
        await poll_until(lambda: a.assignment() == everything, TIMEOUT, "a holds all")


async def test_b244_an_operators_reset_seeks_the_assigned_queues(process_running):
    from es_broker.client.admin import Admin

    await topic_ready(process_running, "LiteReset", 1)
    q0 = MessageQueue("LiteReset", "broker-a", 0)
    await send_to(process_running, "LiteReset", 0, [b"r0", b"r1", b"r2"])
    async with lite(process_running, "LiteResetG") as consumer:
        consumer.assign([q0])
        await consumer.seek(q0, 0)
        assert [m.body for m in await poll_n(consumer, 3)] == [b"r0", b"r1", b"r2"]
        await consumer.commit_sync()
        async with Admin.open(process_running.namesrv_addr) as admin:
            answer = await admin.reset_offset_by_time("LiteResetG", "LiteReset", 0, force=True)
        assert answer["path"] == "broker"
        assert [m.body for m in await poll_n(consumer, 3)] == [b"r0", b"r1", b"r2"]
