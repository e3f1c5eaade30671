"""SQL92 subscriptions against `es-broker serve` processes (B-214..B-219)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from es_broker.client import ConsumeFromWhere, MessageSelector, Producer, PushConsumer
from es_broker.client.send_tries import BrokerRefused
from es_broker.core.replay import verify
from es_broker.log.store import RecordLog
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting import message as wire
from es_broker.remoting.bodies import (
    CheckClientRequestBody,
    ConsumerData,
    HeartbeatData,
    SubscriptionData,
)
from es_broker.remoting.codes import RequestCode, ResponseCode
from tests.process_fixtures import ProcessRunning, serve
from tests.test_client_consumer import FAST, Collector, topic_ready
from tests.waiting import poll_until

PROPERTY_FILTER_ON = ["enablePropertyFilter=true"]

# (body, tags, user properties) of the messages every test stores on one queue of T
MESSAGES = [
    (b"m0", "A", {"a": "1", "region": "eu"}),
    (b"m1", "B", {"a": "5", "region": "us"}),
    (b"m2", "A", {"a": "10", "region": "eu", "vip": "true"}),
    (b"m3", None, {"region": "apac"}),
    (b"m4", "C", {"a": "x", "region": "eu"}),
    (b"m5", "B", {"a": "7.5"}),
]

# expression -> bodies RocketMQ 4.9.8 delivers of MESSAGES
DELIVERIES = [
    ("a > 4", {b"m1", b"m2"}),  # "x" and "7.5" against an Integer: no match
    ("a > 4.0E0", {b"m1", b"m2", b"m5"}),
    ("a BETWEEN 1 AND 5", {b"m0", b"m1"}),
    ("a NOT BETWEEN 1 AND 5", {b"m2"}),
    ("region = 'eu'", {b"m0", b"m2", b"m4"}),
    ("region <> 'eu'", {b"m1", b"m3"}),  # m5 has no region: unknown
    ("region IN ('us', 'apac')", {b"m1", b"m3"}),
    ("region NOT IN ('us', 'apac')", {b"m0", b"m2", b"m4"}),
    ("a IS NULL", {b"m3"}),
    ("a IS NOT NULL AND region IS NULL", {b"m5"}),
    ("TAGS = 'A'", {b"m0", b"m2"}),
    ("TAGS IN ('A', 'C') AND region = 'eu'", {b"m0", b"m2", b"m4"}),
    ("vip = TRUE", {b"m2"}),
    ("NOT (region = 'eu') OR a = 10", {b"m1", b"m2", b"m3"}),
    ("TRUE", {b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"}),
    ("nothere = 1", set()),
]


async def _store_messages(running: ProcessRunning, nursery: trio.Nursery) -> None:
    await topic_ready(running, "T", 1)
    producer = Producer(running.namesrv_addr, "PG", client_ip="127.0.0.1")
    await producer.start(nursery)
    for body, tags, props in MESSAGES:
        await producer.send("T", body, tags=tags, properties=props)
    await producer.shutdown()


@asynccontextmanager
async def _broker(tmp_path, nursery, conf: list[str]) -> AsyncIterator[ProcessRunning]:
    with serve(tmp_path / "data", conf=conf) as served:
        running = ProcessRunning(served, RemotingClient(nursery))
        await _store_messages(running, nursery)
        yield running
        nursery.cancel_scope.cancel()


@pytest.fixture
async def filtering(tmp_path, nursery) -> AsyncIterator[ProcessRunning]:
    """A broker process with enablePropertyFilter=true, MESSAGES stored on T's one queue."""
    async with _broker(tmp_path, nursery, PROPERTY_FILTER_ON) as running:
        yield running


@pytest.fixture
async def not_filtering(tmp_path, nursery) -> AsyncIterator[ProcessRunning]:
    """A broker process with the default enablePropertyFilter=false, MESSAGES stored."""
    async with _broker(tmp_path, nursery, []) as running:
        yield running


async def _pull(running: ProcessRunning, group: str, expression: str | None, **fields):
    """PULL_MESSAGE of T queue 0 from offset 0; with `expression` it rides in the request."""
    header = {
        "consumerGroup": group,
        "topic": "T",
        "queueId": 0,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": 0x4 if expression is not None else 0,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subVersion": 0,
        **fields,
    }
    if expression is not None:
        header = {"subscription": expression, "expressionType": "SQL92"} | header
    return await running.call(RequestCode.PULL_MESSAGE, header)


def _bodies(response) -> set[bytes]:
    return {m.body for m in wire.decode_all(response.body)} if response.body else set()


async def _heartbeat(running: ProcessRunning, group: str, expression: str) -> None:
    data = HeartbeatData(
        client_id="127.0.0.1@sql",
        consumer_data_set=(
            ConsumerData(
                group_name=group,
                subscription_data_set=(
                    SubscriptionData(
                        topic="T", sub_string=expression, sub_version=1, expression_type="SQL92"
                    ),
                ),
            ),
        ),
    )
    response = await running.call(RequestCode.HEART_BEAT, body=data.encode())
    assert response.code == ResponseCode.SUCCESS  # 4.9.8 never refuses a heartbeat (B-215)


async def _check(running: ProcessRunning, expression: str, kind: str = "SQL92"):
    sub = SubscriptionData(topic="T", sub_string=expression, expression_type=kind)
    body = CheckClientRequestBody(client_id="c", group="G", subscription_data=sub).encode()
    return await running.call(RequestCode.CHECK_CLIENT_CONFIG, body=body)


async def test_b216_a_pull_delivers_the_messages_rocketmq_delivers(filtering):
    for expression, expected in DELIVERIES:
        response = await _pull(filtering, "G", expression)
        if expected:
            assert response.code == ResponseCode.SUCCESS, (expression, response.remark)
        else:  # nothing matched: PULL_RETRY_IMMEDIATELY (NO_MATCHED_MESSAGE), as a tag miss
            assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY, expression
        assert _bodies(response) == expected, expression
        # the filtered messages are passed over: the next pull starts after the last one scanned
        assert response.ext_fields["nextBeginOffset"] == str(len(MESSAGES)), expression


async def test_b216_the_heartbeat_subscription_filters_a_pull_without_one(filtering):
    await _heartbeat(filtering, "GH", "region = 'eu' AND a > 1")
    response = await _pull(filtering, "GH", None)
    assert response.code == ResponseCode.SUCCESS
    assert _bodies(response) == {b"m2"}


async def test_b216_a_batch_stops_at_max_msg_nums_and_resumes_after_it(filtering):
    first = await _pull(filtering, "G", "region = 'eu'", maxMsgNums=2)
    assert [m.body for m in wire.decode_all(first.body)] == [b"m0", b"m2"]
    assert first.ext_fields["nextBeginOffset"] == "3"  # m1 was passed over, m3 not yet read
    rest = await _pull(filtering, "G", "region = 'eu'", queueOffset=3)
    assert _bodies(rest) == {b"m4"}


async def test_b215_a_bad_expression_is_refused_by_check_client_config(filtering):
    response = await _check(filtering, "a > 1 AND b != 2")
    assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "a > 1 AND b != 2" in response.remark and "column 13" in response.remark
    assert (await _check(filtering, "a > 1 AND b <> 2")).code == ResponseCode.SUCCESS
    assert (await _check(filtering, "a > 1", "TAG")).code == ResponseCode.SUCCESS


async def test_b215_a_bad_expression_in_a_pull_is_refused(filtering):
    response = await _pull(filtering, "G", "a >")
    assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "end of the expression" in response.remark


async def test_b215_a_bad_heartbeat_expression_leaves_no_filter_data(filtering):
    await _heartbeat(filtering, "GB", "a = = 1")
    response = await _pull(filtering, "GB", None)
    assert response.code == ResponseCode.FILTER_DATA_NOT_EXIST
    assert response.remark.startswith("The broker's consumer filter data is not exist")


async def test_b214_with_property_filter_off_sql92_is_refused_as_rocketmq_does(not_filtering):
    check = await _check(not_filtering, "a > 1")
    assert check.code == ResponseCode.SYSTEM_ERROR
    assert check.remark == "The broker does not support consumer to filter message by SQL92"
    pull = await _pull(not_filtering, "G", "a > 1")
    assert (pull.code, pull.remark) == (check.code, check.remark)
    await _heartbeat(not_filtering, "GH", "a > 1")
    assert (await _pull(not_filtering, "GH", None)).code == ResponseCode.SYSTEM_ERROR
    # an unparsable expression is still a parse failure; other types keep their refusal
    assert (await _pull(not_filtering, "G", "a >")).code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert (await _check(not_filtering, "x", "TAG")).code == ResponseCode.SUCCESS
    assert (await _check(not_filtering, "x", "FOO")).code == ResponseCode.SYSTEM_ERROR
    other = await _pull(not_filtering, "G", "x", expressionType="FOO")
    assert other.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert other.remark == "The broker does not support consumer to filter message by FOO"


async def test_b214_with_property_filter_on_other_types_are_still_refused(filtering):
    assert (await _check(filtering, "x", "FOO")).code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    other = await _pull(filtering, "G", "x", expressionType="FOO")
    assert other.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


async def test_b219_a_push_consumer_subscribes_by_sql(filtering, nursery):
    collector = Collector()
    consumer = PushConsumer(
        filtering.namesrv_addr,
        "GS",
        collector,
        subscriptions={"T": MessageSelector.by_sql("region = 'eu' AND a BETWEEN 1 AND 10")},
        config=FAST,
        client_ip="127.0.0.1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    await consumer.start(nursery)
    await collector.signal.wait_for(lambda: {m.body for m in collector.received} >= {b"m0", b"m2"})
    assert {m.body for m in collector.received} == {b"m0", b"m2"}
    await consumer.shutdown()


async def test_b219_a_push_consumer_with_a_bad_expression_fails_to_start(filtering, nursery):
    consumer = PushConsumer(
        filtering.namesrv_addr,
        "GX",
        Collector(),
        subscriptions={"T": MessageSelector.by_sql("a >")},
        config=FAST,
        client_ip="127.0.0.1",
    )
    with pytest.raises(BrokerRefused) as refused:
        await consumer.start(nursery)
    assert refused.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


async def _retry_deliveries(tmp_path, nursery, conf: list[str]) -> tuple[set[bytes], str]:
    """m0 (region eu) and m1 (region us) sent back by group G, which subscribes T by SQL92
    `region = 'eu'`; what a pull of %RETRY%G with TAG `*` then delivers, and its nextBeginOffset."""
    async with _broker(tmp_path, nursery, [*PROPERTY_FILTER_ON, *conf]) as running:
        await _heartbeat(running, "G", "region = 'eu'")
        stored = wire.decode_all((await _pull(running, "G", "TRUE")).body)
        for message in stored[:2]:
            answer = await running.call(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {
                    "offset": message.physical_offset,
                    "group": "G",
                    "delayLevel": 0,
                    "originMsgId": message.msg_id,
                    "originTopic": "T",
                    "unitMode": False,
                    "maxReconsumeTimes": 16,
                },
            )
            assert answer.code == ResponseCode.SUCCESS, answer.remark

        async def both_retried() -> bool:
            answer = await running.call(
                RequestCode.GET_MAX_OFFSET, {"topic": "%RETRY%G", "queueId": 0}
            )
            return answer.code == ResponseCode.SUCCESS and answer.ext_fields["offset"] == "2"

        await poll_until(
            both_retried, 30, "the two retry messages"
        )  # no event tells of a delay's end
        answer = await _pull(
            running,
            "G",
            None,
            topic="%RETRY%G",
            sysFlag=0x4,
            subscription="*",
            expressionType="TAG",
        )
        return _bodies(answer), answer.ext_fields["nextBeginOffset"]


async def test_b217_retry_messages_are_not_filtered_by_default(tmp_path, nursery):
    bodies, next_offset = await _retry_deliveries(tmp_path, nursery, ["messageDelayLevel=1s 1s 1s"])
    assert (bodies, next_offset) == ({b"m0", b"m1"}, "2")


async def test_b217_filter_support_retry_applies_the_groups_sql92_filter(tmp_path, nursery):
    bodies, next_offset = await _retry_deliveries(
        tmp_path, nursery, ["messageDelayLevel=1s 1s 1s", "filterSupportRetry=true"]
    )
    assert (bodies, next_offset) == ({b"m0"}, "2")


def _records(data_dir) -> list[dict]:
    log = RecordLog(data_dir / "lmdb", readonly=True)
    try:
        return [record for _, record in log.read()]
    finally:
        log.close()


async def test_b218_a_filtered_pull_records_what_it_delivered_and_replays_identically(
    tmp_path, nursery
):
    async with _broker(tmp_path, nursery, PROPERTY_FILTER_ON) as running:
        answer = await _pull(running, "G", "region = 'eu'", sysFlag=0x4 | 0x1, commitOffset=0)
        assert _bodies(answer) == {b"m0", b"m2", b"m4"}
        data_dir = running.served.data_dir
    delivered = [r for r in _records(data_dir) if r["type"] == "messages_delivered"]
    assert [(r["offsets"], r["next_offset"]) for r in delivered] == [([0, 2, 4], 6)]
    assert verify(data_dir) == []
