"""RESET_CONSUMER_CLIENT_OFFSET handled by the push consumer (B-72..B-79)."""

from __future__ import annotations

from collections import Counter

import trio

from es_broker.client.admin import Admin
from es_broker.remoting.bodies import MessageQueue, ResetOffsetBody
from es_broker.remoting.codes import RequestCode, ResponseCode
from tests.helpers import (
    FAST,
    Collector,
    consumer,
    max_offsets,
    produce,
    stored,
    topic_ready,
    wait_until,
)

# Step 5 oneway races with step 6's QUERY_CONSUMER_OFFSET (B-85): wait for the broker's answer.
RESET_CONFIG = FAST.replace(reset_persist_oneway=False)


async def consumed_all_and_committed(
    running, nursery, n: int, queues: int
) -> tuple[Collector, object]:
    await topic_ready(running, "T", queues)
    await produce(running, nursery, "T", [f"m{i}".encode() for i in range(n)])
    collector = Collector()
    c = consumer(running, "G", collector, {"T": "*"}, instance_name="c1", config=RESET_CONFIG)
    await c.start(nursery)
    await collector.wait_count(n)
    # the broker path needs an offset for every write queue (B-74)
    await wait_until(
        "broker state",
        lambda: stored(running, "G", "T", queues) == max_offsets(running, "T", queues),
    )
    return collector, c


async def test_b078_reset_by_time_makes_the_consumer_consume_again_from_the_reset_offsets(
    running, nursery
):
    collector, c = await consumed_all_and_committed(running, nursery, 20, 2)
    result = await Admin(running.client, running.namesrv_addr).reset_offset_by_time(
        "G", "T", 0, True
    )
    assert result["path"] == "broker"  # the group is online: the broker notified the client (B-76)
    assert [q["offset"] for q in result["queues"]] == [0, 0]
    await collector.wait_count(40)
    assert set(collector.bodies().values()) == {2}  # everything once more, from offset 0
    await wait_until(
        "broker state", lambda: stored(running, "G", "T", 2) == max_offsets(running, "T", 2)
    )
    await c.shutdown()


async def test_b078_invoke_broker_to_reset_offset_moves_only_the_queues_in_the_table(
    running, nursery
):
    collector, c = await consumed_all_and_committed(running, nursery, 20, 2)
    before = stored(running, "G", "T", 2)
    # no force, timestamp of the start of time: targets 0, applied because they are lower (B-75)
    response = await running.call(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": "T", "group": "G", "timestamp": 0, "isForce": False},
    )
    assert response.code == ResponseCode.SUCCESS
    table = ResetOffsetBody.decode(response.body).offset_table
    assert table == {MessageQueue("T", "broker-a", 0): 0, MessageQueue("T", "broker-a", 1): 0}
    await collector.wait_count(40)
    assert Counter(m.queue.queue_id for m in collector.received) == Counter(
        {0: before[0] * 2, 1: before[1] * 2}
    )
    # the retry topic is not part of the reset (B-84)
    assert {m.queue.topic for m in collector.received} == {"T"}
    await c.shutdown()


async def test_b078_consumption_pauses_for_the_reset_wait_before_the_new_offsets_apply(
    running, nursery
):
    await topic_ready(running, "T", 1)
    await produce(running, nursery, "T", [b"m0", b"m1"])
    collector = Collector()
    c = consumer(
        running,
        "G",
        collector,
        {"T": "*"},
        instance_name="c1",
        config=RESET_CONFIG.replace(reset_offset_wait=0.5),
    )
    await c.start(nursery)
    await collector.wait_count(2)
    await wait_until("broker state", lambda: stored(running, "G", "T", 1) == [2])
    await Admin(running.client, running.namesrv_addr).reset_offset_by_time("G", "T", 0, True)
    asked = trio.current_time()
    await collector.wait_count(3)
    # steps 2-4: paused and sleeping; only then the offsets are set and consumption restarts at 0
    assert trio.current_time() - asked >= 0.4
    await collector.wait_count(4)
    await c.shutdown()
    assert collector.bodies() == Counter({b"m0": 2, b"m1": 2})
