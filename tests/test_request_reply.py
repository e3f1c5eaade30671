"""Request-reply (RocketMQ 4.6+ RPC over the broker) with the Python client against a broker process.

Every reply is a `messages_stored` record in `<cluster>_REPLY_TOPIC` plus one
`reply_pushed` record with its outcome; messageTrace of the request shows it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from es_broker.client import (
    BrokerRefused,
    ConsumeResult,
    Producer,
    ReceivedMessage,
    RequestTimeout,
    reply,
)
from es_broker.commands import reply as broker_reply
from es_broker.remoting import message as wire
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.connection import Connection
from es_broker.remoting.headers import SendMessageRequestHeader
from tests.helpers import admin_json, cli, consumer, topic_ready
from tests.process_fixtures import serve
from tests.waiting import poll_until

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


class Replier:
    """A push consumer's handler answering each request; a refused reply is kept, not raised."""

    def __init__(self, producer: Producer, before: Any = None) -> None:
        self.producer = producer
        self.before = before
        self.requests: list[ReceivedMessage] = []
        self.refusals: list[BrokerRefused] = []
        self.answered = trio.Event()

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        for msg in msgs:
            self.requests.append(msg)
            if self.before is not None:
                await self.before(msg)
            try:
                await self.producer.send_reply(reply(msg, b"re:" + msg.body))
            except BrokerRefused as exc:
                self.refusals.append(exc)
            self.answered.set()
        return ConsumeResult.SUCCESS


async def _replied(broker: Any, msg_id: str) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        journey = await admin_json(broker, "messageTrace", "--msg-id", msg_id)
        return next((e for e in journey["events"] if e["event"] == "replied"), None)

    return await poll_until(found, 30, "the reply in the request's trace")


def _verify(data_dir: Any) -> None:
    done = cli("verify", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    assert "OK: every projection" in done.stdout


async def test_b325_request_gets_the_reply_a_push_consumer_sends(tmp_path, nursery):
    """B-325: a request is answered by the reply the consumer sends; trace and replay show it."""
    with serve(tmp_path / "data") as broker:
        await topic_ready(broker, "RQ", 1)
        replier_producer = Producer(broker.namesrv, "RP", client_ip="127.0.0.1", instance_name="r")
        await replier_producer.start(nursery)
        replier = Replier(replier_producer)
        c = consumer(broker, "RG", replier, {"RQ": "*"}, instance_name="c")
        await c.start(nursery)
        requester = Producer(broker.namesrv, "QP", client_ip="127.0.0.1", instance_name="q")
        await requester.start(nursery)
        answer = await requester.request("RQ", b"ping", timeout=15.0, keys="k1", tags="TA")
        assert answer.body == b"re:ping"
        assert answer.topic == REPLY_TOPIC
        request_msg = replier.requests[0]
        props = answer.properties
        assert props["MSG_TYPE"] == "reply"
        assert props["CORRELATION_ID"] == request_msg.properties["CORRELATION_ID"]
        assert props["REPLY_TO_CLIENT"] == requester.instance.client_id
        assert props["TTL"] == "15000" == request_msg.properties["TTL"]
        assert "PUSH_REPLY_TIME" in props and "ARRIVE_TIME" in props
        assert request_msg.properties["CLUSTER"] == "DefaultCluster"
        assert request_msg.tags == "TA" and request_msg.keys == ["k1"]
        assert answer.born_host[0] == "127.0.0.1" and answer.store_timestamp > 0

        # the async form: a handle, awaited later
        handle = requester.request_async("RQ", b"second", timeout=15.0)
        assert (await handle.result()).body == b"re:second"
        assert len(requester.instance.replies) == 0  # nothing left waiting

        event = await _replied(broker, request_msg.offset_msg_id)
        assert event["outcome"] == "pushed" and event["pushCode"] == 0
        assert event["correlationId"] == request_msg.properties["CORRELATION_ID"]
        assert event["replyTo"] == requester.instance.client_id
        assert event["topic"] == REPLY_TOPIC
        journey = await admin_json(broker, "messageTrace", "--msg-id", request_msg.offset_msg_id)
        assert [h["topic"] for h in journey["hops"]] == ["RQ", REPLY_TOPIC]
        await c.shutdown()
        await requester.shutdown()
        await replier_producer.shutdown()
    _verify(tmp_path / "data")


async def test_b329_reply_to_a_vanished_requester_is_recorded_undeliverable(tmp_path, nursery):
    """B-329: a reply whose requester is gone is stored, recorded undeliverable (client_gone), and
    the replier answered SYSTEM_ERROR as 4.9.8 answers."""
    with serve(tmp_path / "data") as broker:
        await topic_ready(broker, "RQ", 1)
        gone = trio.Event()

        async def after_requester_left(msg: ReceivedMessage) -> None:
            await gone.wait()

        replier_producer = Producer(broker.namesrv, "RP", client_ip="127.0.0.1", instance_name="r")
        await replier_producer.start(nursery)
        replier = Replier(replier_producer, after_requester_left)
        c = consumer(broker, "RG", replier, {"RQ": "*"}, instance_name="c")
        await c.start(nursery)
        requester = Producer(broker.namesrv, "QP", client_ip="127.0.0.1", instance_name="q")
        await requester.start(nursery)
        client_id = requester.instance.client_id
        handle = requester.request_async("RQ", b"hello?", timeout=30.0)
        sent = await handle.sent()
        await requester.shutdown()
        gone.set()
        with trio.fail_after(30):
            await replier.answered.wait()
        (refused,) = replier.refusals
        assert refused.code == 1
        assert refused.remark == f"push reply message fail, channel of <{client_id}> not found."
        event = await _replied(broker, sent.offset_msg_id)
        assert event["outcome"] == "undeliverable" and event["reason"] == "client_gone"
        assert "pushCode" not in event
        await c.shutdown()
        await replier_producer.shutdown()
    _verify(tmp_path / "data")


async def test_b330_reply_after_its_ttl_is_recorded_undeliverable(tmp_path, nursery):
    """B-330: a reply stored after the request's born time + TTL is not pushed: undeliverable, ttl."""
    with serve(tmp_path / "data") as broker:
        await topic_ready(broker, "RQ", 1)
        timed_out = trio.Event()

        async def after_the_ttl(msg: ReceivedMessage) -> None:
            await timed_out.wait()
            deadline = msg.born_timestamp + int(msg.properties["TTL"])
            await poll_until(lambda: time.time() * 1000 > deadline, 30, "the request's TTL")

        replier_producer = Producer(broker.namesrv, "RP", client_ip="127.0.0.1", instance_name="r")
        await replier_producer.start(nursery)
        replier = Replier(replier_producer, after_the_ttl)
        c = consumer(broker, "RG", replier, {"RQ": "*"}, instance_name="c")
        await c.start(nursery)
        requester = Producer(broker.namesrv, "QP", client_ip="127.0.0.1", instance_name="q")
        await requester.start(nursery)
        await requester.find_publish_queues("RQ")
        handle = requester.request_async("RQ", b"late", timeout=0.5)
        sent = await handle.sent()
        with pytest.raises(RequestTimeout, match="wait reply message timeout, 500 ms"):
            await handle.result()
        assert len(requester.instance.replies) == 0  # the timed-out request left the table
        timed_out.set()
        with trio.fail_after(30):
            await replier.answered.wait()
        (refused,) = replier.refusals
        assert refused.code == 1 and "TTL ran out" in (refused.remark or "")
        event = await _replied(broker, sent.offset_msg_id)
        assert event["outcome"] == "undeliverable" and event["reason"] == "ttl"
        assert event["deadline"] == replier.requests[0].born_timestamp + 500
        await c.shutdown()
        await requester.shutdown()
        await replier_producer.shutdown()
    _verify(tmp_path / "data")


def test_b331_push_reply_header_has_the_fields_of_4_9_8s_reply_message_request_header():
    """B-331: PUSH_REPLY_MESSAGE_TO_CLIENT's extFields as ReplyMessageRequestHeader names them."""
    h = SendMessageRequestHeader(
        producer_group="RP",
        topic=REPLY_TOPIC,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        properties="x",
        reconsume_times=0,
        unit_mode=False,
    )
    props = "MSG_TYPE\x01reply\x02CORRELATION_ID\x01c-1\x02PUSH_REPLY_TIME\x011700000000009"
    header = broker_reply.push_header(
        h, props, ("127.0.0.1", 50000), ("10.0.0.1", 10911), 1700000000005
    )
    assert header == {
        "producerGroup": "RP",
        "topic": REPLY_TOPIC,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "properties": props,
        "reconsumeTimes": "0",
        "unitMode": "false",
        "bornHost": "/127.0.0.1:50000",
        "storeHost": "/10.0.0.1:10911",
        "storeTimestamp": "1700000000005",
    }
    sender, receiver = Connection(), Connection()
    receiver.receive_data(
        sender.send(request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, header, b"re:ping"))
    )
    decoded = receiver.next_event()
    assert isinstance(decoded, RemotingCommand)
    assert decoded.code == 326 and decoded.body == b"re:ping"
    assert decoded.ext_fields == header


def test_b326_reply_built_as_message_util_create_reply_message():
    """B-326: reply() copies CORRELATION_ID, REPLY_TO_CLIENT and TTL, sets MSG_TYPE=reply, and goes to
    the request's cluster's reply topic; without CLUSTER it is refused as Java refuses."""
    request_msg = ReceivedMessage(
        topic="RQ",
        body=b"q",
        properties={
            "CORRELATION_ID": "c-1",
            "REPLY_TO_CLIENT": "127.0.0.1@q",
            "TTL": "3000",
            "CLUSTER": "C1",
            "KEYS": "not-copied",
        },
        queue=None,  # type: ignore[arg-type]
        queue_offset=0,
        commit_log_offset=0,
        offset_msg_id="",
    )
    built = reply(request_msg, b"a")
    assert built.topic == "C1_REPLY_TOPIC"
    assert dict(built.properties) == {
        "MSG_TYPE": "reply",
        "CORRELATION_ID": "c-1",
        "REPLY_TO_CLIENT": "127.0.0.1@q",
        "TTL": "3000",
    }
    assert wire.encode_properties(dict(built.properties)) == (
        b"MSG_TYPE\x01reply\x02CORRELATION_ID\x01c-1\x02REPLY_TO_CLIENT\x01127.0.0.1@q\x02TTL\x013000"
    )
    no_cluster = ReceivedMessage(**{**_fields(request_msg), "properties": {"CORRELATION_ID": "c"}})
    with pytest.raises(ValueError, match=r"property\[CLUSTER\] is null"):
        reply(no_cluster, b"a")


def _fields(msg: ReceivedMessage) -> dict[str, Any]:
    return {name: getattr(msg, name) for name in msg.__dataclass_fields__}


def test_b328_a_reply_is_judged_by_recorded_times_only():
    """B-328: the deadline is born + TTL; a reply stored after it is `ttl`, one without REPLY_TO_CLIENT
    `no_reply_to`; a reply without TTL has no deadline."""
    assert broker_reply.judge("c", 1000, 5000, 6000) == (6000, None)
    assert broker_reply.judge("c", 1000, 5000, 6001) == (6000, "ttl")
    assert broker_reply.judge("", 1000, 5000, 5001) == (6000, "no_reply_to")
    assert broker_reply.judge("c", None, 5000, 10**13) == (None, None)
    assert broker_reply.parse_ttl("x") is None and broker_reply.parse_ttl("-1") is None


def test_b327_reply_pushed_record_leaves_out_what_did_not_happen_and_parses_back():
    """B-327: a `reply_pushed` record without a known request or a push holds no such keys."""
    from es_broker.log import types

    record = types.ReplyPushed(
        correlation_id="c-1",
        reply_to="127.0.0.1@q",
        reply_topic=REPLY_TOPIC,
        reply_queue_id=0,
        reply_phy=100,
        reply_msg_id="7F00000100002A9F0000000000000064",
        reply_stored_at=6001,
        ttl_ms=1000,
        deadline=6000,
        outcome="undeliverable",
        reason="ttl",
        producer_group="RP",
        requester="127.0.0.1@r",
    )
    raw = record.to_record(6002)
    assert not {"request_phy", "request_msg_id", "push_code", "push_remark", "pushed_at"} & set(raw)
    assert types.parse(raw) == record
