"""5.x SimpleConsumers through the gRPC proxy, over the brokers' pop consumption (B-615..B-622).

The official Python client (PyPI) against a broker process behind `es-broker proxy`;
waits are polls with deadlines, never sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer, SimpleConsumer
from rocketmq import Message as V5Message
from rocketmq import Producer as V5Producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from es_broker.client import Producer
from es_broker.proxy.renewal import SLICE_MS, Renewals
from tests.proxy_fixtures import Proxied, config, proxied, raw
from tests.waiting import poll_until, poll_until_sync

INVISIBLE = 10  # s: RocketMQ 5's shortest invisible duration for a receive


@pytest.fixture(scope="module")
def px(tmp_path_factory) -> Iterator[Proxied]:
    tmp: Path = tmp_path_factory.mktemp("proxyrecv")
    with proxied(tmp) as p:
        yield p


def send5(px: Proxied, topic: str, bodies: list[bytes], **fields) -> list[str]:
    producer = V5Producer(config(px.endpoint), topics=(topic,))
    producer.startup()
    try:
        ids = []
        for body in bodies:
            m = V5Message()
            m.topic, m.body = topic, body
            for name, value in fields.items():
                setattr(m, name, value(body) if callable(value) else value)
            ids.append(producer.send(m).message_id)
        return ids
    finally:
        producer.shutdown()


def consumer(px: Proxied, group: str, topic: str, tag: str = "*") -> SimpleConsumer:
    c = SimpleConsumer(config(px.endpoint), group, {topic: FilterExpression(tag)}, await_duration=2)
    c.startup()
    return c


def receive_until(
    c: SimpleConsumer, want: int, timeout: float = 60, invisible: int = INVISIBLE, ack: bool = True
):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want:
        assert time.monotonic() < deadline, f"received {len(got)} of {want}"
        for m in c.receive(16, invisible):
            got.append(m)
            if ack:
                c.ack(m)
    return got


def test_b615_a_simple_consumer_receives_and_acks_every_message(px):
    topic = px.topic("R615")
    ids = send5(
        px, topic, [f"m{i}".encode() for i in range(20)], tag="TagA", keys=lambda b: b.decode()
    )
    c = consumer(px, "G615", topic, "TagA")
    try:
        got = receive_until(c, 20)
        assert sorted(m.message_id for m in got) == sorted(ids)
        assert all(m.tag == "TagA" and m.delivery_attempt == 1 for m in got)
        assert {next(iter(m.keys)) for m in got} == {f"m{i}" for i in range(20)}
        assert c.receive(16, INVISIBLE) == []  # every one acked: nothing comes back
    finally:
        c.shutdown()


def test_b616_an_unacked_message_comes_back_after_its_invisible_duration(px):
    topic = px.topic("R616")
    [msg_id] = send5(px, topic, [b"not acked"])
    c = consumer(px, "G616", topic)
    try:
        [first] = receive_until(c, 1, ack=False)
        assert first.message_id == msg_id and first.delivery_attempt == 1
        popped = time.monotonic()
        [again] = receive_until(c, 1, timeout=90)
        assert again.message_id == msg_id and again.delivery_attempt == 2
        assert time.monotonic() - popped >= INVISIBLE - 1  # not before its invisible time
    finally:
        c.shutdown()


def test_b617_fifo_message_groups_arrive_in_order(px):
    topic = px.topic("R617", "-a", "+message.type=FIFO")
    bodies = [f"g{i % 3}-{i // 3}".encode() for i in range(18)]
    send5(px, topic, bodies, message_group=lambda b: b.decode().split("-")[0])
    c = consumer(px, "G617", topic)
    try:
        got = receive_until(c, 18)
        for group in ("g0", "g1", "g2"):
            seen = [m.body.decode() for m in got if m.message_group == group]
            assert seen == [f"{group}-{n}" for n in range(6)]
    finally:
        c.shutdown()


def test_b618_a_delayed_message_is_not_received_before_its_timestamp(px):
    topic = px.topic("R618", "-a", "+message.type=DELAY")
    c = consumer(px, "G618", topic)
    try:
        assert c.receive(16, INVISIBLE) == []  # the group starts before the send
        at = int(time.time()) + 3  # the Python client's delivery_timestamp is in seconds
        send5(px, topic, [b"later"], delivery_timestamp=at)
        [m] = receive_until(c, 1)
        received = time.time()
    finally:
        c.shutdown()
    assert received >= at  # not handed out before its time (one clock: this machine's)
    assert m.body == b"later" and m.delivery_timestamp == at * 1000
    assert m.message_type == pb.MessageType.DELAY


async def test_b619_a_4x_send_is_received_by_a_5x_simple_consumer(px, nursery):
    topic = px.topic("R619")
    async with Producer(px.broker.namesrv, "P619", client_ip="127.0.0.1") as producer:
        sent = [
            await producer.send(
                topic, f"v4-{i}".encode(), tags="T", keys=f"k{i}", properties={"p": "v"}
            )
            for i in range(5)
        ]

    def receive():
        c = consumer(px, "G619", topic)
        try:
            return receive_until(c, 5)
        finally:
            c.shutdown()

    got = await trio.to_thread.run_sync(receive)
    assert sorted(m.message_id for m in got) == sorted(r.msg_id for r in sent)
    assert all(m.tag == "T" and m.properties == {"p": "v"} for m in got)


def test_b620_a_receipt_handle_of_another_group_or_forged_is_refused(px):
    topic = px.topic("R620")
    send5(px, topic, [b"mine"])
    c = consumer(px, "G620", topic)
    try:
        [m] = receive_until(c, 1, ack=False)
        forged = m.receipt_handle[:-4] + (
            "0000" if not m.receipt_handle.endswith("0000") else "1111"
        )
        for group, handle in [("OtherGroup", m.receipt_handle), ("G620", forged)]:
            answer = raw(
                px,
                "AckMessage",
                spb.AckMessageRequest(
                    group=pb.Resource(name=group),
                    topic=pb.Resource(name=topic),
                    entries=[spb.AckMessageEntry(message_id=m.message_id, receipt_handle=handle)],
                ),
                spb.AckMessageResponse,
            )
            assert answer.entries[0].status.code == pb.Code.INVALID_RECEIPT_HANDLE, answer
        c.ack(m)  # its own group's handle still works
    finally:
        c.shutdown()


def test_b621_change_invisible_duration_gives_a_new_handle_that_acks(px):
    topic = px.topic("R621")
    send5(px, topic, [b"longer"])
    c = consumer(px, "G621", topic)
    try:
        [m] = receive_until(c, 1, ack=False)
        old = m.receipt_handle
        c.change_invisible_duration(m, 60)
        assert m.receipt_handle and m.receipt_handle != old
        c.ack(m)
    finally:
        c.shutdown()


def test_b622_forward_to_dead_letter_queue(px):
    topic = px.topic("R622")
    [msg_id] = send5(px, topic, [b"poison"])
    c = consumer(px, "G622", topic)
    try:
        [m] = receive_until(c, 1, ack=False)
        answer = raw(
            px,
            "ForwardMessageToDeadLetterQueue",
            spb.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name="G622"),
                topic=pb.Resource(name=topic),
                receipt_handle=m.receipt_handle,
                message_id=m.message_id,
                delivery_attempt=1,
                max_delivery_attempts=16,
            ),
            spb.ForwardMessageToDeadLetterQueueResponse,
        )
        assert answer.status.code == pb.Code.OK, answer.status.message
    finally:
        c.shutdown()
    rows = px.broker.admin_json("topicStatus", "-t", "%DLQ%G622")
    assert sum(int(r["maxOffset"]) for r in rows) == 1


# ------------------------------------------------------------------ push consumers (auto_renew)
class Listener(MessageListener):
    def __init__(self, fail_first: bytes) -> None:
        self.fail_first = fail_first
        self.seen: list[tuple[bytes, int]] = []
        self.lock = threading.Lock()

    def consume(self, message) -> ConsumeResult:
        with self.lock:
            self.seen.append((message.body, message.delivery_attempt))
        if message.body == self.fail_first and message.delivery_attempt == 1:
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS


def test_b624_a_5x_push_consumer_consumes_and_a_failure_comes_back(px):
    topic = px.topic("R624")
    listener = Listener(b"p3")
    c = PushConsumer(config(px.endpoint), "G624", listener, {topic: FilterExpression()})
    c.startup()
    try:
        send5(px, topic, [f"p{i}".encode() for i in range(6)])
        poll_until_sync(
            lambda: (b"p3", 2) in listener.seen and len(listener.seen) >= 7,
            timeout=90,
            what="every message consumed, the failed one again",
        )
    finally:
        c.shutdown()
    bodies = sorted(b for b, _ in listener.seen)
    assert bodies == sorted([f"p{i}".encode() for i in range(6)] + [b"p3"])  # acked ones once


async def test_b625_a_held_handle_is_renewed_and_the_newest_one_answers_an_ack():
    renewed: list[tuple[str, int]] = []

    async def renew(group: str, topic: str, handle: str, invisible_ms: int) -> str:
        renewed.append((handle, invisible_ms))
        return handle + "+"

    renewals = Renewals()
    renewals.hold(renew, "client", "G", "T", "h")
    renewals._held[("G", "h")].due = 0  # due now
    async with trio.open_nursery() as nursery:
        nursery.start_soon(renewals.run)
        await poll_until(lambda: renewed, 30, "the handle renewed")
        nursery.cancel_scope.cancel()
    assert renewed == [("h", SLICE_MS)]
    assert await renewals.take("G", "h") == "h+"  # the client's handle names the newest one
    assert len(renewals) == 0 and await renewals.take("G", "h") == "h"


def test_b626_message_trace_names_the_5x_client_that_held_and_acked(px):
    topic = px.topic("R626")
    [msg_id] = send5(px, topic, [b"traced"])
    c = consumer(px, "G626", topic)
    try:
        [m] = receive_until(c, 1)
        client = c.client_id
    finally:
        c.shutdown()
    events = px.broker.admin_json("messageTrace", "-i", msg_id)["events"]
    held = {e["event"]: e for e in events if e["event"] in ("popped", "acked")}
    assert held["popped"]["forClient"] == client and held["popped"]["group"] == "G626"
    assert held["acked"]["forClient"] == client


def test_b641_a_consumer_gets_its_groups_retry_max_times_plus_one_attempts(px):
    """Settings give max_attempts = the subscription group's retryMaxTimes + 1; a group the
    broker does not have gets the default group's 17."""
    topic = px.topic("R641")
    px.broker.admin("updateSubGroup", "-c", "DefaultCluster", "-g", "G641", "-r", "3")
    attempts = {}
    for group in ("G641", "G641-none"):
        c = PushConsumer(config(px.endpoint), group, Listener(b""), {topic: FilterExpression()})
        c.startup()  # returns once the proxy's Settings are applied
        try:
            attempts[group] = c._PushConsumer__consumption.backoff_policy.max_attempts
        finally:
            c.shutdown()
    assert attempts == {"G641": 4, "G641-none": 17}
