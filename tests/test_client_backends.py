"""The client under asyncio and under trio, against a broker process (B-280..B-285).

Every test runs twice, once per anyio backend (the `anyio_backend` fixture
below); the broker is an `es-broker serve` process of its own (an in-process
broker runs on trio only). Waiting is on events: the handlers' Signal, a
consumer's allocation event; where the broker has nothing to signal (an admin
query of its state) the test polls under a deadline.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from es_broker.client import (
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeResult,
    LitePullConsumer,
    LitePullConsumerConfig,
    Message,
    OrderlyConfig,
    OrderlyPushConsumer,
    Producer,
    PushConsumer,
    PushConsumerConfig,
    ReceivedMessage,
    SendStatus,
    SyncProducer,
    by_hash,
)
from es_broker.client.admin import Admin, AdminError
from es_broker.client.consumer_base import GroupConsumer
from es_broker.net.remoting_client import RemotingClient, RemotingError
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from tests.process_fixtures import ServedBroker, serve
from tests.waiting import poll_until

pytestmark = pytest.mark.anyio

BACKENDS = ["asyncio", "trio"]
TIMEOUT = 30.0  # an upper bound for what must happen, never a measured duration
FAST = PushConsumerConfig(
    rebalance_interval=0.5,
    persist_consumer_offset_interval=0.1,
    persist_consumer_offset_delay=0.1,
    pull_time_delay_when_exception=0.05,
    offset_illegal_delay=0.2,
    reset_offset_wait=0.2,
    consume_later_delay=0.1,
)
QUICK_DELAYS = " ".join(["1s"] * 18)  # every delay level 1 s: a retry comes back soon


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both of anyio's backends (tests/conftest.py's own answers "trio" only)."""
    return str(request.param)


@pytest.fixture
def quick_served(tmp_path: Any) -> Iterator[ServedBroker]:
    """`es-broker serve` with every delay level 1 s (a retry comes back after 1 s, B-92)."""
    with serve(tmp_path / "data", conf=[f"messageDelayLevel={QUICK_DELAYS}"]) as served:
        yield served


# ---------------------------------------------------------------------- helpers


class Signal:
    """Wakes waiters whenever something they watch may have changed."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(TIMEOUT):
            while True:
                event = self._event  # taken before the check, so no change is missed
                if predicate():
                    return
                await event.wait()


class Collector:
    """A push handler recording every delivery; `decide` answers per message."""

    def __init__(self, decide: Callable[[ReceivedMessage], ConsumeResult] | None = None) -> None:
        self.received: list[ReceivedMessage] = []
        self.decide = decide or (lambda msg: ConsumeResult.SUCCESS)
        self.signal = Signal()

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.received.extend(msgs)
        self.signal.fire()
        results = {self.decide(m) for m in msgs}
        if ConsumeResult.RECONSUME_LATER in results:
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    def bodies(self) -> Counter[bytes]:
        return Counter(m.body for m in self.received)

    async def wait_count(self, n: int) -> None:
        await self.signal.wait_for(lambda: len(self.received) >= n)


async def topic_ready(served: ServedBroker, topic: str, queues: int = 4) -> None:
    """Create the topic (admin API) and wait until the name server routes it as created."""
    async with Admin.open(served.namesrv) as admin:
        await admin.update_topic(served.addr, topic, queues, queues)

        async def routed() -> bool:
            try:
                route = await admin.route(topic)
            except AdminError:  # not registered yet
                return False
            return [q.write_queue_nums for q in route.queue_datas] == [queues]

        await poll_until(routed, TIMEOUT, f"route of {topic}")


async def produce(served: ServedBroker, topic: str, bodies: list[bytes], **kw: Any) -> None:
    async with Producer(served.namesrv, "PG", client_ip="127.0.0.1") as producer:
        for body in bodies:
            result = await producer.send(topic, body, **kw)
            assert result.status == SendStatus.SEND_OK


async def until_allocated(
    consumers: list[GroupConsumer], held: Callable[[GroupConsumer], frozenset[Any]], n: int
) -> None:
    """Wait until the members hold `n` queues between them, none held twice (a rebalance done)."""
    shares: list[frozenset[Any]] = []
    try:
        with anyio.fail_after(TIMEOUT):
            while True:
                events = [c.allocation_event for c in consumers]  # taken before the check
                shares = [held(c) for c in consumers]
                together = frozenset().union(*shares)
                if all(shares) and len(together) == n == sum(map(len, shares)):
                    return
                await _any(events)
    except TimeoutError:
        raise AssertionError(f"held after {TIMEOUT} s: {shares}") from None


async def _any(events: list[anyio.Event]) -> None:
    """Return when any of the events is set."""
    async with anyio.create_task_group() as group:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            group.cancel_scope.cancel()

        for event in events:
            group.start_soon(wait, event)


# ---------------------------------------------------------------------- producing


async def test_b280_producer_sends_sync_batch_and_async_under_the_backend(
    quick_served: ServedBroker,
) -> None:
    await topic_ready(quick_served, "T")
    async with Producer(quick_served.namesrv, "PG", client_ip="127.0.0.1") as producer:
        one = await producer.send("T", b"one", tags="A", keys="k1")
        assert one.status == SendStatus.SEND_OK
        batch = await producer.send_batch("T", [Message(f"b{i}".encode()) for i in range(5)])
        assert batch.status == SendStatus.SEND_OK
        assert len(batch.msg_id.split(",")) == 5
        handles = [producer.send_async("T", f"a{i}".encode()) for i in range(20)]
        results = [await handle.result() for handle in handles]
        assert {r.status for r in results} == {SendStatus.SEND_OK}
    async with Admin.open(quick_served.namesrv) as admin:
        status = await admin.topic_status("T")
    assert sum(q["maxOffset"] - q["minOffset"] for q in status) == 26


def test_b280_sync_producer_runs_its_loop_on_either_backend(
    quick_served: ServedBroker, anyio_backend: str
) -> None:
    with SyncProducer(
        quick_served.namesrv, "PG", client_ip="127.0.0.1", backend=anyio_backend
    ) as p:
        # the topic is created by the broker's auto-create (TBW102): the first lookup runs
        # in the background loop
        result = p.send("SyncT", b"blocking")
        assert result.status == SendStatus.SEND_OK


# ---------------------------------------------------------------------- push consuming


async def test_b281_concurrent_push_consumers_of_one_group_rebalance_and_share_the_topic(
    quick_served: ServedBroker,
) -> None:
    await topic_ready(quick_served, "T")
    first, second = Collector(), Collector()
    kw: dict[str, Any] = {
        "subscriptions": {"T": "*"},
        "config": FAST,
        "client_ip": "127.0.0.1",
        "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    }

    def held(c: Any) -> frozenset[Any]:
        return c.assigned_queues("T")

    async with PushConsumer(quick_served.namesrv, "G", first, instance_name="c1", **kw) as c1:
        await until_allocated([c1], held, 4)
        async with PushConsumer(quick_served.namesrv, "G", second, instance_name="c2", **kw) as c2:
            # the second member's arrival splits the queues between the two (B-281)
            await until_allocated([c1, c2], held, 4)
            assert len(c1.assigned_queues("T")) == len(c2.assigned_queues("T")) == 2
            bodies = [f"m{i}".encode() for i in range(40)]
            await produce(quick_served, "T", bodies)
            both = Signal()
            first.signal, second.signal = both, both
            await both.wait_for(lambda: set(first.bodies() + second.bodies()) == set(bodies))
            # each member consumed from its own queues only
            mine = {1: c1.assigned_queues("T"), 2: c2.assigned_queues("T")}
            assert {m.queue for m in first.received} <= mine[1]
            assert {m.queue for m in second.received} <= mine[2]


async def test_b281_orderly_push_consumers_lock_their_share_and_keep_key_order(
    quick_served: ServedBroker,
) -> None:
    await topic_ready(quick_served, "T")
    seen: dict[str, list[int]] = {}
    signal = Signal()

    async def handle(msgs: list[ReceivedMessage], context: Any) -> ConsumeOrderlyStatus:
        for msg in msgs:
            key, step = msg.body.decode().split(":")
            seen.setdefault(key, []).append(int(step))
        signal.fire()
        return ConsumeOrderlyStatus.SUCCESS

    kw: dict[str, Any] = {
        "subscriptions": {"T": "*"},
        "config": FAST,
        "orderly": OrderlyConfig(lock_interval=0.5),
        "client_ip": "127.0.0.1",
        "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    }

    def held(c: Any) -> frozenset[Any]:
        return frozenset(q for q in c.held_locks() if q.topic == "T")

    async with OrderlyPushConsumer(
        quick_served.namesrv, "OG", handle, instance_name="o1", **kw
    ) as o1:
        await until_allocated([o1], held, 4)
        async with OrderlyPushConsumer(
            quick_served.namesrv, "OG", handle, instance_name="o2", **kw
        ) as o2:
            # the broker moved two queue locks to the newcomer once the first let them go
            await until_allocated([o1, o2], held, 4)
            keys = [f"key{k}" for k in range(8)]
            async with Producer(quick_served.namesrv, "PG", client_ip="127.0.0.1") as producer:
                for step in range(5):
                    for key in keys:
                        await producer.send(
                            "T", f"{key}:{step}".encode(), queue_selector=by_hash(key)
                        )
            await signal.wait_for(lambda: sum(map(len, seen.values())) >= 40)
    assert seen == {key: list(range(5)) for key in keys}


async def test_b282_a_running_consumer_applies_a_reset_by_time_the_broker_pushes(
    quick_served: ServedBroker,
) -> None:
    await topic_ready(quick_served, "T")
    await produce(quick_served, "T", [f"m{i}".encode() for i in range(6)])
    collector = Collector()
    async with PushConsumer(
        quick_served.namesrv,
        "RG",
        collector,
        subscriptions={"T": "*"},
        # the new offsets stored with a oneway race the rebalance's QUERY_CONSUMER_OFFSET (B-85)
        config=FAST.replace(reset_persist_oneway=False),
        client_ip="127.0.0.1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    ):
        await collector.wait_count(6)
        async with Admin.open(quick_served.namesrv) as admin:

            async def committed() -> bool:
                progress = await admin.consumer_progress("RG")
                rows = [q for q in progress if q.topic == "T"]
                return len(rows) == 4 and all(q.diff == 0 for q in rows)

            # the broker resets a group only once it has the group's offsets of every queue
            await poll_until(committed, TIMEOUT, "offsets committed")
            result = await admin.reset_offset_by_time("RG", "T", 0, force=True)
        assert result["path"] == "broker"  # online: RESET_CONSUMER_CLIENT_OFFSET to the client
        await collector.wait_count(12)
    assert collector.bodies() == Counter({f"m{i}".encode(): 2 for i in range(6)})


async def test_b283_reconsume_later_brings_the_message_back_from_the_retry_topic(
    quick_served: ServedBroker,
) -> None:
    await topic_ready(quick_served, "T", 2)
    await produce(quick_served, "T", [b"flaky"])
    collector = Collector(
        lambda m: ConsumeResult.RECONSUME_LATER if m.reconsume_times == 0 else ConsumeResult.SUCCESS
    )
    async with PushConsumer(
        quick_served.namesrv,
        "XG",
        collector,
        subscriptions={"T": "*"},
        config=FAST,
        client_ip="127.0.0.1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    ):
        await collector.wait_count(2)
    first, second = collector.received[:2]
    assert (first.topic, first.reconsume_times, first.queue.topic) == ("T", 0, "T")
    assert (second.topic, second.reconsume_times, second.queue.topic) == ("T", 1, "%RETRY%XG")
    assert second.msg_id == first.msg_id


# ---------------------------------------------------------------------- lite pull, admin


async def test_b284_lite_pull_assign_seek_poll_and_commit(quick_served: ServedBroker) -> None:
    await topic_ready(quick_served, "T", 2)
    async with Producer(quick_served.namesrv, "PG", client_ip="127.0.0.1") as producer:
        for i in range(10):
            await producer.send_to_queue("T", 0, Message(f"r{i}".encode()))
    async with LitePullConsumer(
        quick_served.namesrv,
        "LG",
        config=LitePullConsumerConfig(auto_commit=False),
        client_ip="127.0.0.1",
    ) as consumer:
        queues = sorted(await consumer.fetch_message_queues("T"))
        consumer.assign(queues[:1])
        await consumer.seek_to_begin(queues[0])
        got: list[ReceivedMessage] = []
        with anyio.fail_after(TIMEOUT):
            while len(got) < 10:
                got += await consumer.poll(timeout=1.0)
        assert [m.body for m in got] == [f"r{i}".encode() for i in range(10)]
        await consumer.commit_sync()
    async with Admin.open(quick_served.namesrv) as admin:
        progress = await admin.consumer_progress("LG")
    assert [q.consumer_offset for q in progress if q.topic == "T" and q.queue_id == 0] == [10]


async def test_b285_admin_api_creates_topics_and_reports_progress(
    quick_served: ServedBroker,
) -> None:
    async with Admin.open(quick_served.namesrv) as admin:
        await admin.update_topic(quick_served.addr, "AdminT", 3, 3)
        assert "AdminT" in await admin.topic_configs(quick_served.addr)

        async def listed() -> bool:
            return "AdminT" in await admin.topic_list()

        await poll_until(listed, TIMEOUT, "topic listed")
        assert await admin.topic_brokers("AdminT")
    await produce(quick_served, "AdminT", [b"x", b"y"], queue_selector=by_hash("one key"))
    collector = Collector()
    async with PushConsumer(
        quick_served.namesrv,
        "AG",
        collector,
        subscriptions={"AdminT": "*"},
        config=FAST,
        client_ip="127.0.0.1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    ):
        await collector.wait_count(2)
        async with Admin.open(quick_served.namesrv) as admin:

            async def caught_up() -> bool:
                rows = [q for q in await admin.consumer_progress("AG") if q.topic == "AdminT"]
                return len(rows) == 3 and sum(q.consumer_offset for q in rows) == 2

            await poll_until(caught_up, TIMEOUT, "progress")
            rows = [q for q in await admin.consumer_progress("AG") if q.topic == "AdminT"]
    assert sum(q.broker_offset for q in rows) == 2
    assert all(q.diff == 0 for q in rows)


async def test_b540_a_request_left_unanswered_is_a_remoting_error_on_either_backend() -> None:
    """A timed-out answer is RemotingError on trio too (its deadline raised trio.TooSlowError, which
    nothing caught: a send to a stopped broker escaped the producer's retries)."""
    with socket.socket() as silent:  # accepts (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        addr = f"127.0.0.1:{silent.getsockname()[1]}"
        async with anyio.create_task_group() as tasks:
            client = RemotingClient(tasks)
            with pytest.raises(RemotingError, match="no answer from .* within 0.2 s"):
                await client.invoke(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), 0.2)
            pending = await client.start_request(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO))
            with pytest.raises(RemotingError, match="no answer from .* within 0.2 s"):
                await pending.response(0.2)
            await client.aclose()
            tasks.cancel_scope.cancel()
