"""The orderly push consumer against real broker processes (B-238..B-241).

Each test names the behaviour it pins. The two-process test runs two orderly
consumers of one group, each in its own OS process (tests/orderly_worker.py),
over eight queues; one is killed with SIGKILL and its queues move to the other
once their locks expire at the broker.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import defaultdict
from functools import partial

import trio

from es_broker.client import ConsumeFromWhere, Message, Producer
from es_broker.client.orderly import ConsumeOrderlyStatus, OrderlyPushConsumer
from es_broker.client.selectors import by_hash
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode
from es_broker.store import Store
from tests.helpers import topic_ready
from tests.orderly_worker import CONFIG, ORDERLY
from tests.process_fixtures import ROOT, ProcessRunning, _env, serve

TOPIC, GROUP = "OrderT", "OrderlyG"
KEYS = [f"key-{i}" for i in range(16)]
TIMEOUT = 60.0


class Events:
    """What the worker processes print, and an event set at every new line."""

    def __init__(self) -> None:
        self.lines: list[dict] = []
        self._new = trio.Event()

    def add(self, event: dict) -> None:
        self.lines.append(event)
        self._new.set()
        self._new = trio.Event()

    async def wait_for(self, predicate, what: str) -> None:
        with trio.fail_after(TIMEOUT):
            while not predicate():
                await self._new.wait()

    def consumed(self, name: str | None = None) -> list[dict]:
        return [e for e in self.lines if e["ev"] == "consume" and name in (None, e["name"])]


async def start_worker(nursery, namesrv: str, name: str, events: Events) -> trio.Process:
    args = [sys.executable, "-m", "tests.orderly_worker", namesrv, GROUP, TOPIC, name]
    process = await nursery.start(
        partial(
            trio.run_process, args, stdout=subprocess.PIPE, check=False, env=_env(), cwd=str(ROOT)
        )
    )

    async def read() -> None:
        buffer = b""
        async for chunk in process.stdout:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                events.add(json.loads(line))

    nursery.start_soon(read)
    await events.wait_for(
        lambda: any(e["ev"] == "started" and e["name"] == name for e in events.lines), "start"
    )
    return process


async def produce(producer: Producer, seqs: range) -> None:
    handles = [
        producer.send_async(TOPIC, f"{key}:{seq}".encode(), queue_selector=by_hash(key))
        for seq in seqs
        for key in KEYS
    ]
    for handle in handles:
        await handle.result()


def check_order(events: list[dict]) -> int:
    """Per key: no gap ever, each consumer's own stream strictly increasing; returns the duplicates."""
    duplicates = 0
    by_key: dict[str, list[dict]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e["t0"]):
        by_key[e["key"]].append(e)
    for key, stream in by_key.items():
        seen = -1
        last_of: dict[str, int] = {}
        for e in stream:
            assert e["seq"] <= seen + 1, f"{key}: gap before seq {e['seq']} (had {seen})"
            if e["seq"] <= seen:
                duplicates += 1
            seen = max(seen, e["seq"])
            assert e["seq"] > last_of.get(e["name"], -1), f"{key}: {e['name']} went backwards"
            last_of[e["name"]] = e["seq"]
    return duplicates


def check_one_owner_at_a_time(events: list[dict]) -> dict[int, list[str]]:
    """Per queue, each consumer's tenure (first call start to last call end) overlaps no other's."""
    tenures: dict[int, dict[str, list[float]]] = defaultdict(dict)
    for e in events:
        span = tenures[e["q"]].setdefault(e["name"], [e["t0"], e["t1"]])
        span[0], span[1] = min(span[0], e["t0"]), max(span[1], e["t1"])
    owners = {}
    for q, spans in tenures.items():
        ordered = sorted(spans.items(), key=lambda item: item[1][0])
        for (_, (_, end)), (name, (begin, _)) in zip(ordered, ordered[1:], strict=False):
            assert end <= begin, f"queue {q}: {name} consumed while another still did"
        owners[q] = [name for name, _ in ordered]
    return owners


def lock_records(data) -> list[dict]:
    store = Store.open(data, readonly=True)
    try:
        return [r for _, r in store.log.read() if r["type"] == "queue_locks_changed"]
    finally:
        store.close()


async def test_b239_two_orderly_consumer_processes_one_owner_per_queue_and_hand_over_after_kill(
    tmp_path,
):
    data = tmp_path / "data"
    conf = [
        "rocketmq.broker.rebalance.lockMaxLiveTime=3000",
        # 4.9.8 keeps a crashed client's locks until they expire (B-145)
        "queueLockReleaseOnClose=false",
    ]
    events = Events()
    with serve(data, conf=conf) as served:
        async with trio.open_nursery() as nursery:
            running = ProcessRunning(served, RemotingClient(nursery))
            await topic_ready(running, TOPIC, 8)
            producer = Producer(served.namesrv, "OrderP", client_ip="127.0.0.1")
            await producer.start(nursery)
            a = await start_worker(nursery, served.namesrv, "A", events)
            await produce(producer, range(0, 20))
            await events.wait_for(lambda: len(events.consumed("A")) >= 16 * 20, "A consumed all")
            b = await start_worker(nursery, served.namesrv, "B", events)
            await produce(producer, range(20, 40))
            # the group rebalanced: A let four queues go, B locked and consumes them
            await events.wait_for(lambda: len(events.consumed("B")) > 0, "B consumes")
            await produce(producer, range(40, 60))
            a_queues = {e["q"] for e in events.consumed("A") if e["seq"] >= 40}
            await events.wait_for(
                lambda: (
                    {e["q"] for e in events.consumed("A") if e["seq"] >= 40} == a_queues
                    and len(events.consumed("A")) > 16 * 20
                ),
                "A consumes",
            )
            a.send_signal(signal.SIGKILL)  # kill -9: no unlock, no offset persisted at exit
            await a.wait()
            a_dead_at = trio.current_time()
            await produce(producer, range(60, 80))
            wanted = {(k, s) for k in KEYS for s in range(80)}
            await events.wait_for(
                lambda: {(e["key"], e["seq"]) for e in events.consumed()} >= wanted,
                "everything consumed",
            )
            assert trio.current_time() >= a_dead_at
            await producer.shutdown()
            b.send_signal(signal.SIGTERM)
            await b.wait()
            nursery.cancel_scope.cancel()
    consumed = events.consumed()
    duplicates = check_order(consumed)
    owners = check_one_owner_at_a_time(consumed)
    print(
        f"\norderly hand-over: {len(consumed)} consumed, {duplicates} duplicates, owners {owners}"
    )
    assert set(owners) == set(range(8))
    # after the kill, every queue ends with B; A's last queues were taken over
    assert all(names[-1] == "B" for names in owners.values())
    assert any(names == ["A", "B"] for names in owners.values())
    # the broker's lock history: at every change each queue had one owner, taken only when free
    client_ids = {e["name"]: e["client_id"] for e in events.lines if e["ev"] == "started"}
    held: dict[tuple[str, int], str] = {}
    causes = []
    for record in lock_records(data):
        for topic, _broker, q, owner, previous, _renewed in record["changes"]:
            assert held.get((topic, q), "") == previous, (record, held)
            held[(topic, q)] = owner
            causes.append((record["cause"], previous, owner))
    # B's shutdown unlocked its queues; before that B held all eight
    assert {held[(TOPIC, q)] for q in range(8)} == {""}
    assert ("unlock", client_ids["B"], "") in causes
    # A's queues went to B by expiry (its connection closing released nothing)
    assert any(
        cause in ("lock", "expired") and previous == client_ids["A"]
        for cause, previous, _ in causes
    )
    assert not any(cause == "channel_closed" for cause, _, _ in causes)


async def test_b240_suspend_offers_the_same_message_again_then_sends_it_back_at_max(
    process_running, nursery
):
    """SUSPEND_CURRENT_QUEUE_A_MOMENT: the same message again, counted; at maxReconsumeTimes it leaves."""
    await topic_ready(process_running, "SusT", 1)
    seen: list[tuple[int, int]] = []
    done = trio.Event()

    async def handler(msgs, context):
        msg = msgs[0]
        seen.append((msg.queue_offset, msg.reconsume_times))
        context.suspend_current_queue_time = 0.05
        if msg.queue_offset == 0:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        done.set()
        return ConsumeOrderlyStatus.SUCCESS

    async with Producer(process_running.namesrv_addr, "P", client_ip="127.0.0.1") as producer:
        for body in (b"first", b"second"):
            await producer.send_to_queue("SusT", 0, Message(body))
    consumer = OrderlyPushConsumer(
        process_running.namesrv_addr,
        "SusG",
        handler,
        subscriptions={"SusT": "*"},
        config=CONFIG,
        orderly=ORDERLY.replace(max_reconsume_times=2),
        client_ip="127.0.0.1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    async with consumer:
        with trio.fail_after(TIMEOUT):
            await done.wait()
        assert consumer.held_locks() >= consumer.assigned_queues("SusT")
    # offset 0 three times (reconsume 0, 1, 2), then sent back; only then offset 1
    assert seen == [(0, 0), (0, 1), (0, 2), (1, 0)]
    # sent back with RECONSUME_TIME 2 = maxReconsumeTimes: the broker dead-lettered it
    dlq = await process_running.call(
        RequestCode.GET_MAX_OFFSET, {"topic": "%DLQ%SusG", "queueId": 0}
    )
    assert dlq.code == 0 and dlq.require_long("offset") == 1
