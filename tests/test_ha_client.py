"""Master/slave acceptance with our Python client (issue 6): Producer and PushConsumer against real processes.

A name server, a master and a slave run as processes on loopback
(`tests/ha_fixtures.py`); the client runs here, with RocketMQ's client timers
shortened. Where a test needs to know which broker served a pull it reads the
brokers' `pullMessagesServed` counter (GET_BROKER_RUNTIME_INFO).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import trio

from es_broker.client import ConsumeFromWhere, ConsumeResult, Producer, PushConsumer, SendStatus
from es_broker.client.config import ClientConfig
from es_broker.client.messages import ReceivedMessage
from es_broker.client.producer import ClientError
from es_broker.net.remoting_client import RemotingClient, RemotingError
from tests.ha_fixtures import (
    SLOW_MACHINE_MS,
    Cluster,
    Wire,
    caught_up,
    start_cluster,
    verify_identical,
)
from tests.helpers import FAST, Collector, Signal, wait_until

TOPIC = "HaTopic"
GROUP = "HaGroup"
# route poll and heartbeat shortened from 30 s, so the client sees the name server drop a dead master at once (B-112)
QUICK_ROUTES = ClientConfig(poll_name_server_interval=0.2, heartbeat_broker_interval=0.5)
# small pulls and a low threshold: a consumer whose handler holds 8 messages of a queue stops pulling it (B-42)
GATED = FAST.replace(pull_batch_size=8, pull_threshold_for_queue=4)


@dataclass
class Run:
    """A cluster with TOPIC on its master, a started producer, and the consumers a test starts."""

    cluster: Cluster
    w: Wire
    producer: Producer
    nursery: trio.Nursery
    consumers: list[PushConsumer] = field(default_factory=list)

    @property
    def m(self) -> str:
        return self.cluster.master.addr

    @property
    def s(self) -> str:
        return self.cluster.slave.addr

    async def consumer(self, group: str, handler, name: str, **kw) -> PushConsumer:
        """Start a PushConsumer of TOPIC from the first offset; it is shut down with the run."""
        kw.setdefault("config", FAST)
        consumer = PushConsumer(
            self.cluster.namesrv.addr,
            group,
            handler,
            subscriptions={TOPIC: "*"},
            instance_name=name,
            client_ip="127.0.0.1",
            client_config=QUICK_ROUTES,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            **kw,
        )
        self.consumers.append(consumer)
        await consumer.start(self.nursery)
        return consumer


@contextlib.asynccontextmanager
async def ha_run(
    tmp_path,
    nursery,
    queues: int,
    master: dict[str, object],
    slave: dict[str, object] | None = None,
) -> AsyncIterator[Run]:
    """Name server, master and slave processes, the slave caught up, TOPIC created, a producer started."""
    cluster = await start_cluster(tmp_path, master=master, slave=slave or {})
    producer = Producer(
        cluster.namesrv.addr,
        "HaProducer",
        instance_name="p",
        client_ip="127.0.0.1",
        client_config=QUICK_ROUTES,
    )
    run = Run(cluster, Wire(RemotingClient(nursery)), producer, nursery)
    try:
        await wait_until("the slave caught up", lambda: caught_up(run.w, run.m, run.s))
        await run.w.create_topic(run.m, TOPIC, queues)
        await producer.start(nursery)
        yield run
    finally:
        for client in (*run.consumers, producer):
            await client.shutdown()
        cluster.stop_all()


async def served(w: Wire, addr: str) -> int:
    return int((await w.runtime(addr))["pullMessagesServed"])


async def stored_offsets(w: Wire, addr: str, queues: int, group: str = GROUP) -> dict[int, int]:
    return {q: await w.query(addr, group, TOPIC, q) for q in range(queues)}


def progress(cluster: Cluster) -> dict[int, int]:
    """`es-broker admin consumerProgress` through the name server."""
    rows = cluster.admin_json("consumerProgress", "-g", GROUP)["queues"]
    return {r["queueId"]: r["consumerOffset"] for r in rows if r["topic"] == TOPIC}


async def test_b111_sync_master_killed_mid_produce_every_send_ok_is_consumed_from_the_slave(
    tmp_path, nursery
):
    async with ha_run(tmp_path, nursery, 4, {"brokerRole": "SYNC_MASTER"}) as run:
        cluster, producer = run.cluster, run.producer
        acked: list[bytes] = []
        not_ok: Counter[SendStatus] = Counter()
        failed = 0

        async def produce(n: int) -> None:
            nonlocal failed
            for i in range(10_000):
                try:
                    result = await producer.send(TOPIC, f"p{n}-{i}".encode())
                except (ClientError, RemotingError):
                    failed += 1  # the master died with this send unanswered, or is gone
                    return
                if result.status == SendStatus.SEND_OK:
                    acked.append(f"p{n}-{i}".encode())
                else:
                    not_ok[result.status] += 1
                if len(acked) >= 150 and cluster.master.process.poll() is None:
                    cluster.master.kill9()  # the other producers have sends in flight

        async with trio.open_nursery() as producers:
            for n in range(4):
                producers.start_soon(produce, n)
        await producer.shutdown()
        assert len(acked) >= 150 and failed == 4
        assert set(not_ok) <= {SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}, (
            not_ok
        )

        # a new group starts on the slave alone: its first offsets come from the slave (B-113) as "none" (B-45)
        got = Collector()
        consumer = await run.consumer("AfterTheKill", got, "c")
        await got.wait_for(lambda received: set(acked) <= {m.body for m in received}, timeout=60)
        await consumer.shutdown()
        assert await served(run.w, run.s) >= len(acked)


class HoldFrom:
    """A handler that holds every message at or past queue offset `hold_from` until `release` is set."""

    def __init__(self, hold_from: int) -> None:
        self.hold_from = hold_from
        self.release = trio.Event()
        self.received: list[ReceivedMessage] = []
        self.held = 0
        self.signal = Signal()

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        if any(m.queue_offset >= self.hold_from for m in msgs) and not self.release.is_set():
            self.held += len(msgs)
            self.signal.fire()
            await self.release.wait()
        self.received.extend(msgs)
        self.signal.fire()
        return ConsumeResult.SUCCESS


async def _consume_through_a_master_outage(tmp_path, nursery, policy: str) -> None:
    master = {
        "brokerRole": "SYNC_MASTER",
        "slaveTimeout": SLOW_MACHINE_MS,
        "slave_offset_merge": policy,
    }
    async with ha_run(tmp_path, nursery, 2, master, {"slave_offset_merge": policy}) as run:
        cluster, producer, w, m, s = run.cluster, run.producer, run.w, run.m, run.s
        for i in range(120):
            sent = await producer.send(TOPIC, f"m{i}".encode())
            assert sent.status == SendStatus.SEND_OK

        # consumer A reads 0..23 of each queue from the master and commits there; it holds 24..31 in its
        # handler (in flight) and, over the pull threshold, stops pulling
        hold = HoldFrom(24)
        a = await run.consumer(GROUP, hold, "a", config=GATED)
        await hold.signal.wait_for(lambda: hold.held == 16 and len(hold.received) == 48, timeout=30)
        await wait_until(
            "A's commits on the master", lambda: _equals(stored_offsets(w, m, 2), {0: 24, 1: 24})
        )
        master_had = {0: 24, 1: 24}
        served_by_slave = await served(w, s)
        cluster.master.kill9()

        # the master is down: A finishes what it held, pulls the rest from the slave, commits there (B-113)
        hold.release.set()
        await hold.signal.wait_for(lambda: len(hold.received) == 120, timeout=60)
        last_committed = {0: 60, 1: 60}
        await wait_until(
            "A's commits on the slave", lambda: _equals(stored_offsets(w, s, 2), last_committed)
        )
        # 32..59 of both queues came from the slave
        assert await served(w, s) - served_by_slave == 120 - 64
        assert progress(cluster) == last_committed  # the name server lists only the slave now
        in_flight = 16
        assert not _twice(hold.received)
        await a.shutdown()  # A goes away during the outage: its offsets exist only on the slave

        await cluster.restart_master()

        async def merged() -> bool:
            status = await w.runtime(s)
            return (
                status["haPendingOffsetCommits"] == status["haPendingDeliveries"] == "0"
                and status["haLastMergeSeq"] != "0"
            )

        await wait_until("the slave's commits merged on the master", merged, timeout=60)
        after_merge = progress(cluster)
        # the audit trail has no hole: a message A pulled from the slave shows that delivery on the master
        from_slave = next(msg for msg in hold.received if msg.queue_offset >= 32)
        journey = cluster.admin_json("messageTrace", "--msg-id", from_slave.offset_msg_id)
        (delivered,) = [e for e in journey["events"] if e["event"] == "delivered"]
        assert delivered["servedBy"]["brokerId"] == 1 and delivered["servedBy"]["addr"] == s

        # consumer B of the same group starts after the merge; one more message per queue marks the end
        got = Collector()
        b = await run.consumer(GROUP, got, "b")
        for q in (0, 1):
            sent = await producer.send(
                TOPIC, f"end{q}".encode(), queue_selector=lambda mqs, q=q: mqs[q]
            )
            assert sent.status == SendStatus.SEND_OK
        await got.wait_for(
            lambda received: {b"end0", b"end1"} <= {m.body for m in received}, timeout=60
        )
        await b.shutdown()
        await producer.shutdown()
        again = [m.body for m in got.received if not m.body.startswith(b"end")]

        if policy == "latest_wins":
            # S-5: the slave's commits won the merge; nothing is consumed twice, in flight or not
            assert after_merge == last_committed
            assert len(again) <= in_flight and again == []
        else:
            # B-123, B-127: the master's table overwrote the slave's; B re-consumes 24..59 of both queues
            assert after_merge == master_had
            assert sorted(again) == sorted(f"m{i}".encode() for i in range(48, 120))
            assert len(again) > in_flight
        await wait_until("B's commits", lambda: _equals(stored_offsets(w, m, 2), {0: 61, 1: 61}))
        await verify_identical(cluster, w)


async def _equals(values, expected) -> bool:
    return await values == expected


def _twice(received: list[ReceivedMessage]) -> list[bytes]:
    return [body for body, n in Counter(m.body for m in received).items() if n > 1]


async def test_s005_push_consumer_fails_over_to_the_slave_and_nothing_is_consumed_twice(
    tmp_path, nursery
):
    await _consume_through_a_master_outage(tmp_path, nursery, "latest_wins")


async def test_b123_compat_overwrite_makes_the_next_push_consumer_reconsume_like_rocketmq(
    tmp_path, nursery
):
    await _consume_through_a_master_outage(tmp_path, nursery, "compat_overwrite")


async def test_b114_a_lagging_push_consumer_reads_from_the_slave_then_returns_to_the_master(
    tmp_path, nursery
):
    # RAM 20 000 bytes: a pull is "slow" beyond 8 000 bytes of commit log behind the head (B-38, B-115)
    settings = {"slaveReadEnable": True, "total_physical_memory_bytes": 20_000}
    master = {"brokerRole": "SYNC_MASTER", "slaveTimeout": SLOW_MACHINE_MS, **settings}
    async with ha_run(tmp_path, nursery, 1, master, settings) as run:
        producer, w, m, s = run.producer, run.w, run.m, run.s
        for i in range(100):  # 100 x ~400 bytes: a consumer at 0 is far behind
            assert (
                await producer.send(TOPIC, b"x" * 300 + b"%03d" % i)
            ).status == SendStatus.SEND_OK

        got = Collector()
        await run.consumer(GROUP, got, "c", config=FAST.replace(pull_batch_size=8))
        await got.wait_count(100, timeout=60)
        from_slave = await served(w, s)
        # moved to the slave while behind, back on the master near the head
        assert 0 < from_slave < 100

        # at the head: the suggestion keeps it on the master (the group's brokerId, 0)
        for i in range(10):
            assert (await producer.send(TOPIC, b"head%d" % i)).status == SendStatus.SEND_OK
        await got.wait_count(110, timeout=60)
        assert await served(w, s) == from_slave
        assert await served(w, m) == 110 - from_slave
        assert not _twice(got.received)


async def test_b114_update_sub_group_with_broker_id_1_keeps_a_push_consumer_on_the_slave(
    tmp_path, nursery
):
    settings = {"slaveReadEnable": True}
    master = {"brokerRole": "SYNC_MASTER", "slaveTimeout": SLOW_MACHINE_MS, **settings}
    async with ha_run(tmp_path, nursery, 1, master, settings) as run:
        producer, w, m, s = run.producer, run.w, run.m, run.s
        run.cluster.admin("updateSubGroup", "-b", m, "-g", GROUP, "-i", "1", "-w", "1")
        for i in range(10):
            assert (await producer.send(TOPIC, b"first%d" % i)).status == SendStatus.SEND_OK

        got = Collector()
        await run.consumer(GROUP, got, "c")
        # the first pull goes to the master (no suggestion yet, B-117) and finds all 10
        await got.wait_count(10)
        assert await served(w, m) == 10
        # not lagging, yet the group's brokerId sends every later pull to the slave (B-114)
        for i in range(10):
            assert (await producer.send(TOPIC, b"later%d" % i)).status == SendStatus.SEND_OK
        await got.wait_count(20)
        assert await served(w, m) == 10 and await served(w, s) == 10
