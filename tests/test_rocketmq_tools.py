"""RocketMQ's own tools as they come: what a fresh broker holds, the benchmark topic, client message trace.

B-481: a fresh master holds the topics 4.9.8's TopicConfigManager makes at start, with
the same configs, and registers them (BenchmarkTest routes before anything is sent).
B-482: it holds SubscriptionGroupManager's default groups.
B-483: with traceTopicEnable the trace topic exists; a client's trace contexts
(enable_msg_trace) are stored like any message, and messageTrace shows them beside the
broker's records. B-484: queryMsgTraceById answers from the trace topic.
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
import time
from pathlib import Path

import trio

from es_broker.client import Producer
from es_broker.client.orderly import ConsumeOrderlyStatus, OrderlyPushConsumer
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from tests.helpers import FAST, Collector, admin_json, consumer, topic_ready
from tests.process_fixtures import serve
from tests.waiting import poll_until

# The store of a real RocketMQ 4.9.8 broker (tests/data, as the store import's tests read it)
ARCHIVE = Path(__file__).resolve().parent / "data" / "rocketmq-4.9.8-store.tar.gz"

# The fixture broker's own topics and groups (its test traffic), not what 4.9.8 makes at start.
# RMQ_SYS_TRANS_HALF_TOPIC is made by 4.9.8 at the first half message (the fixture sent some),
# %RETRY%G at a group's first pull or send-back.
FIXTURE_OWN_TOPIC_PREFIXES = ("MIG_", "%RETRY%", "%DLQ%", "RMQ_SYS_TRANS_HALF_TOPIC")
FIXTURE_OWN_GROUP_PREFIXES = ("GID_MIG_",)


def fixture_system_entries(name: str, table: str, own: tuple[str, ...]) -> dict[str, dict]:
    with tarfile.open(ARCHIVE) as tar:
        member = tar.extractfile(f"./config/{name}")
        assert member is not None, name
        entries = json.loads(member.read())[table]
    return {k: v for k, v in entries.items() if not k.startswith(own)}


async def broker_table(client: RemotingClient, addr: str, code: int, table: str) -> dict:
    response = await client.invoke(addr, request(code, {}))
    assert response.code == 0, response.remark
    return json.loads(response.body)[table]


async def test_b481_b482_fresh_broker_holds_what_a_fresh_4_9_8_broker_holds(tmp_path, nursery):
    client = RemotingClient(nursery)
    with serve(tmp_path / "data") as broker:
        topics = await broker_table(
            client, broker.addr, RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable"
        )
        groups = await broker_table(
            client,
            broker.addr,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            "subscriptionGroupTable",
        )
        # registered as 4.9.8 registers every topic of its table: BenchmarkTest routes at once
        route = await admin_json(broker, "topicRoute", "-t", "BenchmarkTest")
    assert topics == fixture_system_entries(
        "topics.json", "topicConfigTable", FIXTURE_OWN_TOPIC_PREFIXES
    )
    assert groups == fixture_system_entries(
        "subscriptionGroup.json", "subscriptionGroupTable", FIXTURE_OWN_GROUP_PREFIXES
    )
    assert [(q["readQueueNums"], q["writeQueueNums"]) for q in route["queueDatas"]] == [
        (1024, 1024)
    ]


async def test_b482_a_deleted_default_group_is_back_at_the_next_start_and_nothing_else_is_recorded(
    tmp_path, nursery
):
    """4.9.8 puts its defaults in the table at each start before reading the stored table over
    them: a deleted default group comes back; the others are not recorded again (replay)."""
    client = RemotingClient(nursery)
    with serve(tmp_path / "data") as broker:
        await admin_json(broker, "deleteSubGroup", "-b", broker.addr, "-g", "TOOLS_CONSUMER")
        response = await client.invoke(
            broker.addr, request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
        )
        before = json.loads(response.body)
        assert "TOOLS_CONSUMER" not in before["subscriptionGroupTable"]
        topics_before = json.loads(
            (await client.invoke(broker.addr, request(RequestCode.GET_ALL_TOPIC_CONFIG, {}))).body
        )
    with serve(tmp_path / "data") as broker:
        after = json.loads(
            (
                await client.invoke(
                    broker.addr, request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
                )
            ).body
        )
        topics_after = json.loads(
            (await client.invoke(broker.addr, request(RequestCode.GET_ALL_TOPIC_CONFIG, {}))).body
        )
    assert after["subscriptionGroupTable"]["TOOLS_CONSUMER"]["retryMaxTimes"] == 16
    assert after["subscriptionGroupTable"].keys() == before["subscriptionGroupTable"].keys() | {
        "TOOLS_CONSUMER"
    }
    # the one record of the group, and no topic recorded again
    assert after["dataVersion"]["counter"] == before["dataVersion"]["counter"] + 2  # + the delete
    assert topics_after == topics_before


async def test_b481_benchmark_consumer_started_first_receives_the_first_message(tmp_path, nursery):
    """The benchmark tools' order: Consumer of BenchmarkTest first, then Producer. The route is
    there before the first send, so the consumer holds the queues and receives the first message
    without waiting for its 30 s route poll (before B-481 it had no route until then)."""
    with serve(tmp_path / "data") as broker:
        received = Collector()
        c = consumer(broker, "benchmark_consumer", received, {"BenchmarkTest": "*"})
        await c.start(nursery)
        async with Producer(
            broker.namesrv_addr, "benchmark_producer", client_ip="127.0.0.1"
        ) as producer:
            sent_at = time.monotonic()
            result = await producer.send("BenchmarkTest", b"x" * 128)
            await received.wait_count(1, timeout=15)
            latency = time.monotonic() - sent_at
        held = len(c.assigned_queues("BenchmarkTest"))
        await c.shutdown()
    assert received.received[0].msg_id == result.msg_id
    assert held == 1024
    print(f"BenchmarkTest: first message received {latency * 1000:.0f} ms after its send")


TRACE_CONF = ("traceTopicEnable=true",)


async def test_b483_b484_client_trace_round_trip_through_a_broker_process(tmp_path, nursery):
    with serve(tmp_path / "data", conf=TRACE_CONF) as broker:
        client = RemotingClient(nursery)
        topics = await broker_table(
            client, broker.addr, RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable"
        )
        assert topics["RMQ_SYS_TRACE_TOPIC"] == {
            "order": False,
            "perm": 6,
            "readQueueNums": 1,
            "topicFilterType": "SINGLE_TAG",
            "topicName": "RMQ_SYS_TRACE_TOPIC",
            "topicSysFlag": 0,
            "writeQueueNums": 1,
        }
        await topic_ready(broker, "ORDERS", 2)
        received = Collector()
        c = consumer(broker, "G_TRACED", received, {"ORDERS": "*"}, enable_msg_trace=True)
        await c.start(nursery)
        in_order = trio.Event()

        async def orderly_handler(msgs, context):
            in_order.set()
            return ConsumeOrderlyStatus.SUCCESS

        orderly = OrderlyPushConsumer(
            broker.namesrv_addr,
            "G_ORDERLY",
            orderly_handler,
            subscriptions={"ORDERS": "*"},
            config=FAST,
            client_ip="127.0.0.1",
            enable_msg_trace=True,
        )
        await orderly.start(nursery)
        async with Producer(
            broker.namesrv_addr, "P_TRACED", client_ip="127.0.0.1", enable_msg_trace=True
        ) as producer:
            sent = await producer.send("ORDERS", b"order-1", tags="TagA", keys="order-1")
            await received.wait_count(1)
            with trio.fail_after(30):
                await in_order.wait()

            async def both_sides() -> dict | None:
                j = await admin_json(broker, "messageTrace", "--msg-id", sent.offset_msg_id)
                seen = {(c["type"], c["group"]) for c in j.get("clientTrace", [])}
                wanted = {("Pub", "P_TRACED")} | {
                    (kind, group)
                    for kind in ("SubBefore", "SubAfter")
                    for group in ("G_TRACED", "G_ORDERLY")
                }
                return j if wanted <= seen else None

            journey = await poll_until(both_sides, 30, "the client trace contexts")
        await c.shutdown()
        await orderly.shutdown()
        by_id = await admin_json(broker, "queryMsgTraceById", "-i", sent.msg_id)

    # the broker's own records of the message
    assert {e["event"] for e in journey["events"]} >= {"sent", "delivered"}
    clients = {ctx["type"]: ctx for ctx in journey["clientTrace"] if ctx["group"] != "G_ORDERLY"}
    (in_order_after,) = [
        ctx
        for ctx in journey["clientTrace"]
        if (ctx["type"], ctx["group"]) == ("SubAfter", "G_ORDERLY")
    ]
    assert (in_order_after["status"], in_order_after["consumeReturnType"]) == ("success", "SUCCESS")
    pub, before, after = clients["Pub"], clients["SubBefore"], clients["SubAfter"]
    assert (pub["group"], pub["topic"], pub["msgId"]) == ("P_TRACED", "ORDERS", sent.msg_id)
    assert (pub["tags"], pub["keys"], pub["status"]) == ("TagA", "order-1", "success")
    assert pub["msgType"] == "Normal_Msg"
    assert pub["offsetMsgId"] == sent.offset_msg_id and pub["storeHost"] == broker.addr
    assert pub["costTime"] >= 0 and pub["clientHost"].startswith("127.0.0.1:")
    assert (before["group"], before["retryTimes"]) == ("G_TRACED", 0)
    assert (after["group"], after["status"], after["consumeReturnType"]) == (
        "G_TRACED",
        "success",
        "SUCCESS",
    )
    assert after["requestId"] == before["requestId"] and after["costTime"] >= 0
    assert after["clientHost"].startswith("127.0.0.1:")
    # mqadmin's verb: the Pub and the consumers' contexts of the message, from the trace topic
    assert sorted((v["type"], v["group"]) for v in by_id) == [
        ("Pub", "P_TRACED"),
        ("SubAfter", "G_ORDERLY"),
        ("SubAfter", "G_TRACED"),
        ("SubBefore", "G_ORDERLY"),
        ("SubBefore", "G_TRACED"),
    ]


def test_b483_trace_contexts_in_4_9_8_format_and_bad_ones_skipped():
    """The exact text TraceDataEncoder writes (char 1 between fields, char 2 after each context),
    read back; an older SubAfter (6 fields) is read too; what does not parse is skipped."""
    from es_broker.remoting import trace_data
    from es_broker.remoting.trace_data import TraceContext, TraceType

    pub = TraceContext(
        TraceType.PUB, "UNIQ1", 1700000000000, "DefaultRegion", "PG", topic="T", tags="TagA",
        keys="k1", store_host="10.0.0.1:10911", body_length=5, cost_time=3, msg_type=0,
        offset_msg_id="0A00000100002A9F0000000000000000", success=True,
    )  # fmt: skip
    after = TraceContext(
        TraceType.SUB_AFTER, "UNIQ1", 1700000000009, group="CG", request_id="R1", cost_time=2,
        success=False, keys="k1", context_code=4,
    )  # fmt: skip
    body = trace_data.encode([pub, after])
    assert body == (
        b"Pub\x011700000000000\x01DefaultRegion\x01PG\x01T\x01UNIQ1\x01TagA\x01k1\x01"
        b"10.0.0.1:10911\x015\x013\x010\x010A00000100002A9F0000000000000000\x01true\x02"
        b"SubAfter\x01R1\x01UNIQ1\x012\x01false\x01k1\x014\x011700000000009\x01CG\x02"
    )
    assert trace_data.decode(body, "1.2.3.4:5") == [
        dataclasses.replace(pub, client_host="1.2.3.4:5"),
        dataclasses.replace(after, client_host="1.2.3.4:5"),
    ]
    old_sub_after = b"SubAfter\x01R2\x01UNIQ2\x017\x01true\x01null\x02"
    (ctx,) = trace_data.decode(old_sub_after)
    assert (ctx.msg_id, ctx.cost_time, ctx.success, ctx.keys, ctx.group) == (
        "UNIQ2",
        7,
        True,
        "",
        "",
    )
    bad_number = b"Pub\x01yesterday" + b"\x01x" * 12 + b"\x02"  # 14 fields, the time not a number
    junk = bad_number + b"Nope\x01x\x02\x02SubBefore\x01" + bytes([0xFF]) + b"\x02"
    assert trace_data.decode(junk) == []
    assert trace_data.trace_keys([pub, after]) == ["UNIQ1", "k1"]
