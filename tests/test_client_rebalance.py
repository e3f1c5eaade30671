"""Rebalance of push consumers against a broker in a real process (B-50..B-55)."""

from __future__ import annotations

from collections import Counter

import trio

from es_broker.client import Producer, PushConsumer, PushConsumerConfig
from tests.helpers import TIMEOUT, Collector, Signal, consumer, topic_ready


def held(c: PushConsumer, topic: str = "T") -> set[int]:
    return {mq.queue_id for mq in c.assigned_queues(topic)}


async def settle(
    consumers: list[PushConsumer], expected: list[set[int]], timeout: float = TIMEOUT
) -> None:
    """Wait until every consumer holds exactly its expected queues of T."""

    async def first_change(event: trio.Event, scope: trio.CancelScope) -> None:
        await event.wait()
        scope.cancel()

    with trio.fail_after(timeout):
        while True:
            # taken before the check: no change is missed
            events = [c.allocation_event for c in consumers]
            if [held(c) for c in consumers] == expected:
                return
            async with trio.open_nursery() as nursery:
                for event in events:
                    nursery.start_soon(first_change, event, nursery.cancel_scope)


async def send_round(producer: Producer, prefix: str, n: int) -> list[tuple[bytes, int]]:
    """n messages round robin; (body, queue id) of each."""
    out = []
    for i in range(n):
        body = f"{prefix}{i}".encode()
        result = await producer.send("T", body)
        out.append((body, result.queue.queue_id))
    return out


async def test_b051_three_consumers_split_eight_queues_averagely(process_running, nursery):
    await topic_ready(process_running, "T", 8)
    consumers = [
        consumer(process_running, "G", Collector(), {"T": "*"}, instance_name=f"c{i}")
        for i in (1, 2, 3)
    ]
    for c in consumers:
        await c.start(nursery)
    # client ids 127.0.0.1@c1 < @c2 < @c3: 8 queues over 3 clients -> 3, 3, 2 (B-51)
    await settle(consumers, [{0, 1, 2}, {3, 4, 5}, {6, 7}])
    # the automatic %RETRY%G subscription is rebalanced too: its one queue goes to the first client (B-55)
    assert [len(c.assigned_queues("%RETRY%G")) for c in consumers] == [1, 0, 0]
    for c in consumers:
        await c.shutdown()


async def test_b053_when_a_consumer_stops_its_queues_move_and_every_message_is_consumed(
    process_running, nursery
):
    await topic_ready(process_running, "T", 8)
    signal = Signal()  # any delivery to any of the three wakes the waiter
    collectors = [Collector(signal=signal) for _ in range(3)]
    consumers = [
        consumer(process_running, "G", h, {"T": "*"}, instance_name=f"c{i}")
        for i, h in enumerate(collectors, 1)
    ]
    for c in consumers:
        await c.start(nursery)
    await settle(consumers, [{0, 1, 2}, {3, 4, 5}, {6, 7}])

    producer = Producer(process_running.namesrv_addr, "PG", client_ip="127.0.0.1")
    await producer.start(nursery)
    first = await send_round(producer, "a", 80)

    def seen() -> set[bytes]:
        return {m.body for collector in collectors for m in collector.received}

    await signal.wait_for(lambda: {body for body, _ in first} <= seen())
    # consumer 2 leaves: it persists its offsets and unregisters, the broker tells the others (B-53)
    await consumers[1].shutdown()
    stayed = [consumers[0], consumers[2]]
    await settle(stayed, [{0, 1, 2, 3}, {4, 5, 6, 7}])

    second = await send_round(producer, "b", 80)
    await producer.shutdown()
    wanted = {body for body, _ in first + second}
    await signal.wait_for(lambda: wanted <= seen())
    # at least once: every message arrived; hand-overs may deliver some twice
    counts = Counter(m.body for collector in collectors for m in collector.received)
    assert set(counts) == wanted
    duplicates = sum(n - 1 for n in counts.values())
    assert duplicates < len(wanted)
    # the queues consumer 2 held were taken over: their new messages went to consumers 1 and 3
    moved = {body for body, q in second if q in (3, 4, 5)}
    assert moved and moved <= {m.body for c in (collectors[0], collectors[2]) for m in c.received}
    assert not moved & {m.body for m in collectors[1].received}
    for c in stayed:
        await c.shutdown()


async def test_b053_a_new_member_makes_the_others_rebalance_at_once(process_running, nursery):
    await topic_ready(process_running, "T", 4)
    # RocketMQ's 20 s rebalance period: only NOTIFY_CONSUMER_IDS_CHANGED can make it this quick
    default_period = PushConsumerConfig()
    first = consumer(
        process_running, "G", Collector(), {"T": "*"}, instance_name="c1", config=default_period
    )
    await first.start(nursery)
    assert held(first) == {0, 1, 2, 3}  # start rebalances at once
    second = consumer(
        process_running, "G", Collector(), {"T": "*"}, instance_name="c2", config=default_period
    )
    with trio.fail_after(5):  # far below the 20 s rebalance period
        await second.start(nursery)
        await settle([first, second], [{0, 1}, {2, 3}])
    await second.shutdown()
    await first.shutdown()
