"""The push consumer against a real broker: consume, commit, filter, start positions, retries (B-39..B-48, B-87..B-99)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from es_broker.client import ConsumeFromWhere, ConsumeResult, MessageModel, Producer, PushConsumer
from es_broker.client.offset_store import LocalFileOffsetStore
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.bodies import ConsumerRunningInfo, MessageQueue, TopicRouteData
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.server.main import BrokerServer
from es_broker.server.namesrv import NameServerRole
from tests.helpers import (
    FAST,
    TIMEOUT,
    Collector,
    consumer,
    max_offsets,
    produce,
    stored,
    topic_ready,
    wait_until,
)
from tests.server_fixtures import QUICK_DELAYS, Running, in_process_config
from tests.waiting import poll_until


@pytest.fixture
async def quick_delays(tmp_path, nursery) -> Running:
    """`running` with every delay level 1 s, so a retry (level 3 + rt, B-92) comes back soon."""
    namesrv_port = await nursery.start(NameServerRole().run, "127.0.0.1", 0)
    namesrv = f"127.0.0.1:{namesrv_port}"
    config = in_process_config(tmp_path / "broker", messageDelayLevel=QUICK_DELAYS)
    server = await nursery.start(BrokerServer(config, [namesrv]).run, "127.0.0.1")
    yield Running(server, namesrv, RemotingClient(nursery))
    nursery.cancel_scope.cancel()


@dataclass
class TwoBrokers:
    namesrv_addr: str
    a: BrokerServer
    b: BrokerServer
    client: RemotingClient


@pytest.fixture
async def read_only_a_and_writable_b(tmp_path, nursery) -> TwoBrokers:
    """broker-a with brokerPermission 4 (so it refuses send-backs, B-90 step 2) and a normal broker-b."""
    namesrv_port = await nursery.start(NameServerRole().run, "127.0.0.1", 0)
    namesrv = f"127.0.0.1:{namesrv_port}"
    servers = []
    for name, perm in (("broker-a", 4), ("broker-b", 6)):
        config = in_process_config(
            tmp_path / name, brokerName=name, brokerPermission=perm, messageDelayLevel=QUICK_DELAYS
        )
        servers.append(await nursery.start(BrokerServer(config, [namesrv]).run, "127.0.0.1"))
    yield TwoBrokers(namesrv, servers[0], servers[1], RemotingClient(nursery))
    nursery.cancel_scope.cancel()


async def route_of(running, topic: str) -> TopicRouteData | None:
    response = await running.client.invoke(
        running.namesrv_addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    )
    return TopicRouteData.decode(response.body) if response.code == ResponseCode.SUCCESS else None


# ---------------------------------------------------------------------- consume and commit


async def test_b042_every_message_is_consumed_once_and_offsets_reach_the_broker(running, nursery):
    await topic_ready(running, "T", 4)
    bodies = [f"m{i}".encode() for i in range(40)]
    await produce(running, nursery, "T", bodies)
    collector = Collector()
    c = consumer(running, "G", collector, {"T": "*"}, instance_name="c1")
    await c.start(nursery)
    await collector.wait_count(40)
    assert collector.bodies() == Counter(bodies)
    # the sliding window ends one past the last message of each queue (B-42), persisted every interval (B-41)
    await wait_until(
        "broker state", lambda: stored(running, "G", "T", 4) == max_offsets(running, "T", 4)
    )
    await c.shutdown()
    assert sum(max_offsets(running, "T", 4)) == 40


async def test_b046_a_group_with_committed_offsets_resumes_from_them(running, nursery):
    await topic_ready(running, "T", 2)
    await produce(running, nursery, "T", [b"old1", b"old2", b"old3"])
    first = Collector()
    c = consumer(running, "G", first, {"T": "*"}, instance_name="c1")
    await c.start(nursery)
    await first.wait_count(3)
    await wait_until(
        "broker state", lambda: stored(running, "G", "T", 2) == max_offsets(running, "T", 2)
    )
    await c.shutdown()

    await produce(running, nursery, "T", [b"new1", b"new2"])
    second = Collector()
    c = consumer(
        running,
        "G",
        second,
        {"T": "*"},
        instance_name="c2",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    await c.start(nursery)
    await second.wait_count(2)
    await wait_until(
        "broker state", lambda: stored(running, "G", "T", 2) == max_offsets(running, "T", 2)
    )
    await c.shutdown()
    assert sorted(second.bodies()) == [b"new1", b"new2"]


async def test_b066_tag_filter_delivers_only_subscribed_tags_and_commits_past_the_others(
    running, nursery
):
    await topic_ready(running, "T", 2)
    producer = Producer(running.namesrv_addr, "PG", client_ip="127.0.0.1")
    await producer.start(nursery)
    for i in range(6):
        await producer.send("T", f"a{i}".encode(), tags="TagA")
        await producer.send("T", f"b{i}".encode(), tags="TagB")
        # untagged: the broker lets it pass, Java drops it
        await producer.send("T", f"u{i}".encode())
    await producer.shutdown()
    collector = Collector()
    # offsets move past trailing filtered messages when a long poll comes back empty
    # (correctTagsOffset, B-66): hold pulls briefly
    c = consumer(
        running,
        "G",
        collector,
        {"T": "TagA || TagC"},
        instance_name="c1",
        config=FAST.replace(broker_suspend_max_time_millis=200),
    )
    await c.start(nursery)
    await collector.wait_count(6)
    await wait_until(
        "broker state", lambda: stored(running, "G", "T", 2) == max_offsets(running, "T", 2)
    )
    await c.shutdown()
    assert sorted(collector.bodies()) == [f"a{i}".encode() for i in range(6)]
    assert {m.tags for m in collector.received} == {"TagA"}


# ---------------------------------------------------------------------- where a new group starts


@pytest.mark.parametrize(
    "where",
    [
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
    ],
)
async def test_b040_a_new_group_on_a_young_topic_starts_at_0_whatever_it_asks(
    running, nursery, where
):
    await topic_ready(running, "T", 2)
    bodies = [f"h{i}".encode() for i in range(6)]
    await produce(running, nursery, "T", bodies)
    collector = Collector()
    # TIMESTAMP in the future would mean "nothing yet", were the broker not answering 0 (B-37 row 2)
    c = consumer(
        running,
        "G",
        collector,
        {"T": "*"},
        instance_name="c1",
        consume_from_where=where,
        consume_timestamp="29990101000000",
    )
    await c.start(nursery)
    await collector.wait_count(6)
    await c.shutdown()
    assert collector.bodies() == Counter(bodies)


async def test_b045_broadcasting_with_last_offset_starts_at_max(running, nursery, tmp_path):
    await topic_ready(running, "T", 2)
    await produce(running, nursery, "T", [b"before1", b"before2"])
    collector = Collector()
    c = consumer(
        running,
        "G",
        collector,
        {"T": "*"},
        instance_name="c1",
        message_model=MessageModel.BROADCASTING,
        config=FAST.replace(offset_store_dir=str(tmp_path)),
    )
    await c.start(nursery)
    assert len(c.assigned_queues("T")) == 2  # broadcasting takes every queue (B-55)
    await produce(running, nursery, "T", [b"after"])
    await collector.wait_count(1)
    await c.shutdown()
    assert list(collector.bodies()) == [b"after"]


async def test_b043_broadcasting_keeps_offsets_in_the_local_file_not_on_the_broker(
    running, nursery, tmp_path
):
    await topic_ready(running, "T", 2)
    bodies = [f"b{i}".encode() for i in range(8)]
    await produce(running, nursery, "T", bodies)
    collector = Collector()
    c = consumer(
        running,
        "G",
        collector,
        {"T": "*"},
        instance_name="c1",
        message_model=MessageModel.BROADCASTING,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        config=FAST.replace(offset_store_dir=str(tmp_path)),
    )
    await c.start(nursery)
    await collector.wait_count(8)
    path = tmp_path / "127.0.0.1@c1" / "G" / "offsets.json"
    wanted = {
        MessageQueue("T", "broker-a", q): off for q, off in enumerate(max_offsets(running, "T", 2))
    }
    store = LocalFileOffsetStore(tmp_path, "127.0.0.1@c1", "G")
    await wait_until("broker state", lambda: path.exists() and store._read_file() == wanted)
    await c.shutdown()
    assert stored(running, "G", "T", 2) == [-1, -1]  # no commit flag, no UPDATE (B-43)
    assert "offsetTable" in path.read_text()

    # a restart of the same client reads the file and consumes only what is new
    await produce(running, nursery, "T", [b"later"])
    again = Collector()
    c = consumer(
        running,
        "G",
        again,
        {"T": "*"},
        instance_name="c1",
        message_model=MessageModel.BROADCASTING,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        config=FAST.replace(offset_store_dir=str(tmp_path)),
    )
    await c.start(nursery)
    await again.wait_count(1)
    await c.shutdown()
    assert list(again.bodies()) == [b"later"]


# ---------------------------------------------------------------------- retries


async def test_b099_a_failed_message_comes_back_with_its_topic_and_one_more_reconsume(
    quick_delays, nursery
):
    running = quick_delays
    await topic_ready(running, "T", 2)
    [sent] = await produce(running, nursery, "T", [b"flaky"])
    collector = Collector(
        lambda m: ConsumeResult.RECONSUME_LATER if m.reconsume_times == 0 else ConsumeResult.SUCCESS
    )
    c = consumer(running, "G", collector, {"T": "*"}, instance_name="c1")
    await c.start(nursery)
    await collector.wait_count(2)
    await c.shutdown()
    first, second = collector.received[:2]
    assert (first.topic, first.reconsume_times, first.queue.topic) == ("T", 0, "T")
    assert (second.topic, second.reconsume_times, second.queue.topic) == ("T", 1, "%RETRY%G")
    assert second.msg_id == first.msg_id == sent.msg_id  # UNIQ_KEY travels unchanged (B-93)
    assert second.properties["RETRY_TOPIC"] == "T"
    assert second.properties["ORIGIN_MESSAGE_ID"] in (sent.msg_id, sent.offset_msg_id)
    # the original queue's offset moved past the failed message: it was handed over (B-87)
    q = sent.queue.queue_id
    await wait_until("broker state", lambda: running.server.broker.stored_offset("G", "T", q) == 1)


async def test_b089_when_send_back_and_resend_both_fail_the_message_is_consumed_again_locally(
    running, nursery
):
    await topic_ready(running, "T", 1)
    # %RETRY%G read-only: the broker refuses the send-back (B-90 step 4) and the
    # producer finds no writable queue for the re-send (B-23)
    await topic_ready(running, "%RETRY%G", 1, perm=4)
    await produce(running, nursery, "T", [b"stuck"])
    collector = Collector(
        lambda m: ConsumeResult.RECONSUME_LATER if m.reconsume_times < 2 else ConsumeResult.SUCCESS
    )
    c = consumer(running, "G", collector, {"T": "*"}, instance_name="c1")
    await c.start(nursery)
    await collector.wait_count(3)
    assert [
        (m.topic, m.queue.topic, m.queue_offset, m.reconsume_times) for m in collector.received[:3]
    ] == [("T", "T", 0, 0), ("T", "T", 0, 1), ("T", "T", 0, 2)]
    await wait_until("broker state", lambda: stored(running, "G", "T", 1) == [1])
    await c.shutdown()


async def test_b087_broadcasting_drops_failed_messages(running, nursery, tmp_path):
    await topic_ready(running, "T", 1)
    await produce(running, nursery, "T", [b"once", b"twice"])
    collector = Collector(lambda m: ConsumeResult.RECONSUME_LATER)
    c = consumer(
        running,
        "G",
        collector,
        {"T": "*"},
        instance_name="c1",
        message_model=MessageModel.BROADCASTING,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        config=FAST.replace(offset_store_dir=str(tmp_path)),
    )
    await c.start(nursery)
    await collector.wait_count(2)
    await wait_until(
        "broker state", lambda: c.offset_store.offsets().get(MessageQueue("T", "broker-a", 0)) == 2
    )
    await c.shutdown()
    assert collector.bodies() == Counter({b"once": 1, b"twice": 1})


async def test_b089_a_refused_send_back_is_re_sent_to_the_retry_topic_by_the_client(
    read_only_a_and_writable_b, nursery
):
    env = read_only_a_and_writable_b
    for server, topic in ((env.a, "T"), (env.b, "%RETRY%G")):
        response = await env.client.invoke(
            server.addr,
            request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": topic,
                    "defaultTopic": "TBW102",
                    "readQueueNums": 1,
                    "writeQueueNums": 1,
                    "perm": 6,
                    "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": 0,
                    "order": False,
                },
            ),
        )
        assert response.code == 0, response.remark
    # broker-a takes no sends from producers (its route perm is 4): store T's message in its core
    await env.a.broker.put_message(
        "T", 0, MessageIn(b"refused", {"UNIQ_KEY": "AB" * 16, "TAGS": "x"})
    )

    async def routed() -> bool:
        return bool(await route_of(env, "T")) and bool(await route_of(env, "%RETRY%G"))

    await poll_until(routed, TIMEOUT, "routes of T and %RETRY%G")
    collector = Collector(
        lambda m: ConsumeResult.RECONSUME_LATER if m.reconsume_times == 0 else ConsumeResult.SUCCESS
    )
    c = PushConsumer(
        env.namesrv_addr,
        "G",
        collector,
        subscriptions={"T": "*"},
        instance_name="c1",
        client_ip="127.0.0.1",
        config=FAST,
    )
    await c.start(nursery)
    await collector.wait_count(2)
    await c.shutdown()
    first, second = collector.received[:2]
    assert (first.queue.broker_name, first.queue.topic) == ("broker-a", "T")
    # the copy the client published through its inner producer (B-89), on the writable broker
    assert (second.queue.broker_name, second.queue.topic, second.topic) == (
        "broker-b",
        "%RETRY%G",
        "T",
    )
    assert second.reconsume_times == 1  # RECONSUME_TIME went into header j (B-95)
    # the client-visible id, not the offset id
    assert second.properties["ORIGIN_MESSAGE_ID"] == "AB" * 16
    assert second.properties["RETRY_TOPIC"] == "T"
    assert second.properties["MAX_RECONSUME_TIMES"] == "16"
    assert second.properties["UNIQ_KEY"] == "AB" * 16


@pytest.fixture
async def small_ram(tmp_path, nursery) -> Running:
    """`running` with 2 000 bytes of "RAM": a queue head 800 commit-log bytes back is on disk (B-38)."""
    namesrv_port = await nursery.start(NameServerRole().run, "127.0.0.1", 0)
    namesrv = f"127.0.0.1:{namesrv_port}"
    config = BrokerConfig(
        storePathRootDir=str(tmp_path / "broker"), listenPort=0, total_physical_memory_bytes=2000
    )
    server = await nursery.start(BrokerServer(config, [namesrv]).run, "127.0.0.1")
    yield Running(server, namesrv, RemotingClient(nursery))
    nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, [b"new"]),
        (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, [b"old0", b"old1", b"old2", b"old3", b"new"]),
    ],
)
async def test_b045_once_the_head_is_on_disk_last_offset_starts_at_max(
    small_ram, nursery, where, expected
):
    running = small_ram
    await topic_ready(running, "T", 1)
    await produce(
        running, nursery, "T", [b"old0", b"old1", b"old2", b"old3"], properties={"pad": "x" * 400}
    )
    # no stored offset and the head on disk: QUERY_CONSUMER_OFFSET says QUERY_NOT_FOUND (B-37 row 3)
    response = await running.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 0}
    )
    assert response.code == ResponseCode.QUERY_NOT_FOUND
    collector = Collector()
    c = consumer(running, "G", collector, {"T": "*"}, instance_name="c1", consume_from_where=where)
    await c.start(nursery)
    assert c.assigned_queues("T")
    await produce(running, nursery, "T", [b"new"])
    await collector.wait_for(lambda received: b"new" in {m.body for m in received})
    await c.shutdown()
    assert [m.body for m in sorted(collector.received, key=lambda m: m.queue_offset)] == expected


async def test_b067_an_offset_beyond_max_is_corrected_to_max_and_consumption_goes_on(
    running, nursery
):
    await topic_ready(running, "T", 1)
    await produce(running, nursery, "T", [b"skipped0", b"skipped1"])
    # a stored offset past the queue's end (a wiped queue, a bad manual commit)
    response = await running.call(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "G", "topic": "T", "queueId": 0, "commitOffset": 50},
    )
    assert response.code == ResponseCode.SUCCESS
    collector = Collector()
    c = consumer(running, "G", collector, {"T": "*"}, instance_name="c1")
    await c.start(nursery)
    # pull(50) -> OFFSET_ILLEGAL, next 2 -> after the delay the client commits 2 (B-67, B-60)
    await wait_until("broker state", lambda: stored(running, "G", "T", 1) == [2])
    await produce(running, nursery, "T", [b"after"])
    await collector.wait_count(1)
    await c.shutdown()
    assert list(collector.bodies()) == [b"after"]


async def test_the_client_answers_get_consumer_running_info_relayed_by_the_broker(running, nursery):
    await topic_ready(running, "T", 2)
    c = consumer(running, "G", Collector(), {"T": "TagA"}, instance_name="c1")
    await c.start(nursery)
    response = await running.call(
        RequestCode.GET_CONSUMER_RUNNING_INFO,
        {"consumerGroup": "G", "clientId": "127.0.0.1@c1", "jstackEnable": False},
    )
    assert response.code == ResponseCode.SUCCESS, response.remark
    info = ConsumerRunningInfo.decode(response.body)
    assert set(info.mq_table) == set(c.assigned_queues())
    assert {(s.topic, s.sub_string) for s in info.subscription_set} == {
        ("T", "TagA"),
        ("%RETRY%G", "*"),
    }
    assert info.properties["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"
    await c.shutdown()
