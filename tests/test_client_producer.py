"""The producer against a real broker: results, queue choice, retries, batches, delay, auto-create (docs/protocol.md §7.2)."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest

from es_broker.client import (
    BrokerRefused,
    Message,
    Producer,
    ProducerConfig,
    SendStatus,
    SyncProducer,
)
from es_broker.client.admin import Admin
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.message import FLAG_COMPRESSED
from tests.helpers import topic_ready, wait_until
from tests.waiting import poll_until


def producer(running, **kw) -> Producer:
    kw.setdefault("client_ip", "127.0.0.1")
    return Producer(running.namesrv_addr, "PG", **kw)


async def test_send_result_names_the_stored_message_by_uniq_key_and_offset_id(running):
    await topic_ready(running, "T", 4)
    async with producer(running) as p:
        result = await p.send(
            "T", b"hello", tags="TagA", keys=["k1", "k2"], properties={"color": "red"}
        )
    assert result.status == SendStatus.SEND_OK
    # UNIQ_KEY: client IP 127.0.0.1, pid, a process constant, time in month, counter (docs/protocol.md §8.6)
    assert re.fullmatch(r"7F000001[0-9A-F]{24}", result.msg_id)
    stored = await Admin(running.client, running.namesrv_addr).view_message(result.offset_msg_id)
    assert (stored.topic, stored.queue_id, stored.queue_offset) == (
        "T",
        result.queue.queue_id,
        result.queue_offset,
    )
    assert (stored.body, stored.tags, stored.keys) == (b"hello", "TagA", ["k1", "k2"])
    assert stored.properties["UNIQ_KEY"] == result.msg_id
    assert stored.properties["color"] == "red"
    assert (result.queue.topic, result.queue.broker_name) == ("T", "broker-a")


async def test_uniq_keys_differ_per_message(running):
    await topic_ready(running, "T", 4)
    async with producer(running) as p:
        ids = [(await p.send("T", b"x")).msg_id for _ in range(50)]
    assert len(set(ids)) == 50


async def test_sends_go_round_robin_over_the_writable_queues(running):
    await topic_ready(running, "T", 4)
    async with producer(running) as p:
        queues = [(await p.send("T", b"x")).queue.queue_id for _ in range(8)]
    assert Counter(queues) == Counter({0: 2, 1: 2, 2: 2, 3: 2})
    assert all((b - a) % 4 == 1 for a, b in zip(queues, queues[1:], strict=False))


async def test_a_queue_selector_picks_the_queue(running):
    await topic_ready(running, "T", 4)
    async with producer(running) as p:
        result = await p.send("T", b"x", queue_selector=lambda queues: queues[-1])
    assert result.queue.queue_id == 3


async def test_a_refused_send_is_retried_on_the_next_queue(running):
    await topic_ready(running, "T", 8)
    async with producer(running) as p:
        # now it holds the 8-queue route
        await p.send("T", b"warm up", queue_selector=lambda queues: queues[0])
        await running.create_topic("T", 7)  # queue 7 is gone: a send to it is SYSTEM_ERROR (code 1)
        results = [await p.send("T", f"m{i}".encode()) for i in range(16)]
    # a send aimed at 7 is retried on the next queue, 0; round robin goes on from there
    queues = Counter(r.queue.queue_id for r in results)
    assert set(queues) == set(range(7))
    assert set(queues.values()) <= {2, 3}
    assert sum(running.server.broker.max_offset("T", q) for q in range(7)) == 17


async def test_a_refusal_java_does_not_retry_is_raised(running):
    await topic_ready(running, "T", 1)
    big = os.urandom(5 * 1024 * 1024)  # incompressible, above the broker's maxMessageSize
    async with producer(running, config=ProducerConfig(max_message_size=8 * 1024 * 1024)) as p:
        with pytest.raises(BrokerRefused) as refused:
            await p.send("T", big)
    assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert running.server.broker.max_offset("T", 0) == 0


async def test_a_topic_unknown_to_the_name_server_is_created_through_tbw102(running):
    async with producer(running) as p:
        result = await p.send("NewTopic", b"first")
    assert result.status == SendStatus.SEND_OK
    config = running.server.broker.topic_config("NewTopic")
    # defaultTopicQueueNums 4 (docs/protocol.md §7.2.1 step 3)
    assert (config.write_queue_nums, config.perm) == (
        4,
        6,
    )


async def test_send_batch_stores_every_message_in_one_queue_with_its_own_uniq_key(running):
    await topic_ready(running, "T", 4)
    batch = [
        Message(b"b0", tags="A"),
        Message(b"b1", keys="k"),
        Message(b"b2", properties={"p": "v"}),
    ]
    async with producer(running) as p:
        result = await p.send_batch("T", batch)
    uniq_keys = result.msg_id.split(",")
    offset_ids = result.offset_msg_id.split(",")
    assert len(set(uniq_keys)) == 3 and len(offset_ids) == 3
    admin = Admin(running.client, running.namesrv_addr)
    stored = [await admin.view_message(i) for i in offset_ids]
    assert [m.body for m in stored] == [b"b0", b"b1", b"b2"]
    assert [m.queue_offset for m in stored] == [result.queue_offset + i for i in range(3)]
    assert {m.queue_id for m in stored} == {result.queue.queue_id}
    assert [m.properties["UNIQ_KEY"] for m in stored] == uniq_keys
    assert (stored[0].tags, stored[1].keys, stored[2].properties["p"]) == ("A", ["k"], "v")


async def test_delay_level_is_sent_as_property_delay(running):
    await topic_ready(running, "T", 1)
    async with producer(running) as p:
        result = await p.send("T", b"later", delay_level=2)
    stored = await Admin(running.client, running.namesrv_addr).view_message(result.offset_msg_id)
    assert stored.properties["DELAY"] == "2"
    # parked for later (B-96) or stored
    assert stored.properties.get("REAL_TOPIC", stored.topic) == "T"


async def test_a_large_body_is_compressed_and_flagged(running):
    await topic_ready(running, "T", 1)
    body = b"abc" * 5000
    async with producer(running) as p:
        result = await p.send("T", body)
    stored = await Admin(running.client, running.namesrv_addr).view_message(result.offset_msg_id)
    assert stored.sys_flag & FLAG_COMPRESSED and len(stored.body) < len(body)
    assert stored.uncompressed_body() == body


async def test_send_oneway_stores_without_an_answer(running):
    await topic_ready(running, "T", 2)
    async with producer(running) as p:
        await p.send_oneway("T", b"fire and forget")
        await wait_until(
            "broker state",
            lambda: sum(running.server.broker.max_offset("T", q) for q in range(2)) == 1,
        )


async def test_the_producer_group_is_announced_by_heartbeat_and_unregistered_at_shutdown(
    running, nursery
):
    await topic_ready(running, "T", 1)
    p = producer(running, instance_name="p1")
    await p.start(nursery)
    await p.send("T", b"x")  # the route names the broker: the heartbeat follows at once

    async def connections():
        return await running.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"})

    async def registered():
        response = await connections()
        return response if response.code == ResponseCode.SUCCESS else None

    response = await poll_until(registered, 10, "producer registration")
    assert b"127.0.0.1@p1" in response.body
    await p.shutdown()
    assert (await connections()).code == ResponseCode.SYSTEM_ERROR


def test_sync_producer_sends_from_plain_code(served):
    served.admin("updateTopic", "-b", served.broker, "-t", "Orders", "-r", "2", "-w", "2")
    with SyncProducer(served.namesrv, "PG", client_ip="127.0.0.1") as p:
        results = [p.send("Orders", f"m{i}".encode(), tags="TagA") for i in range(4)]
        batch = p.send_batch("Orders", [Message(b"b0"), Message(b"b1")])
    assert [r.status for r in results] == [SendStatus.SEND_OK] * 4
    by_id = served.admin_json("queryMsgById", "-i", results[0].offset_msg_id)
    assert (by_id["body"], by_id["tags"]) == ("m0", "TagA")
    status = served.admin_json("topicStatus", "-t", "Orders")
    assert sum(row["maxOffset"] for row in status) == 6
    assert batch.msg_id.count(",") == 1
