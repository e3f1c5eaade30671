"""RocketMQ 5 clients through the gRPC proxy: the official Python client (PyPI) against a broker
process behind `es-broker proxy` (B-600..B-629, docs/protocol.md §15).

The 5.x client blocks and runs threads of its own; a test that also runs the
project's 4.x client (trio) calls the 5.x one through trio.to_thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trio
from rocketmq import Message as V5Message
from rocketmq import Producer as V5Producer
from rocketmq import TransactionChecker, TransactionResolution
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.v5.exception import IllegalArgumentException

from es_broker.client import ConsumeResult, PushConsumer, ReceivedMessage
from tests.helpers import FAST
from tests.process_fixtures import ServedBroker
from tests.proxy_fixtures import Proxied, config, proxied, raw, v5
from tests.waiting import poll_until, poll_until_sync

SETTINGS_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def px(tmp_path_factory) -> Iterator[Proxied]:
    tmp: Path = tmp_path_factory.mktemp("proxy")
    conf = ["transactionTimeOut=200", "transactionCheckInterval=200", "transactionCheckMax=50"]
    with proxied(tmp, conf=conf, proxy_args=("--settings-timeout", str(SETTINGS_TIMEOUT))) as p:
        yield p


def message(topic: str, body: bytes, **fields) -> V5Message:
    m = V5Message()
    m.topic = topic
    m.body = body
    for name, value in fields.items():
        if name == "properties":
            for k, v in value.items():
                m.add_property(k, v)
        else:
            setattr(m, name, value)
    return m


def producer(px: Proxied, *topics: str, checker=None) -> V5Producer:
    p = V5Producer(config(px.endpoint), topics=topics, checker=checker)
    p.startup()
    return p


def queue_counts(broker: ServedBroker, topic: str) -> dict[int, int]:
    rows = broker.admin_json("topicStatus", "-t", topic)
    return {int(r["queueId"]): int(r["maxOffset"]) for r in rows}


def stored(broker: ServedBroker, topic: str) -> int:
    return sum(queue_counts(broker, topic).values())


class Received:
    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.messages.extend(msgs)
        return ConsumeResult.SUCCESS


# ------------------------------------------------------------------ sending
async def test_b601_a_5x_send_with_keys_and_tags_reaches_a_4x_push_consumer(px, nursery):
    topic = px.topic("P601")
    received = Received()
    consumer = PushConsumer(
        px.broker.namesrv,
        "G601",
        received,
        subscriptions={topic: "TagA"},
        client_ip="127.0.0.1",
        config=FAST,
    )
    await consumer.start(nursery)

    def send() -> list[str]:
        p = producer(px, topic)
        try:
            ids = []
            for i in range(5):
                m = message(
                    topic, f"m{i}".encode(), tag="TagA", keys=f"key{i}", properties={"color": "red"}
                )
                ids.append(p.send(m).message_id)
            p.send(message(topic, b"other", tag="TagB"))
            return ids
        finally:
            p.shutdown()

    ids = await trio.to_thread.run_sync(send)
    await poll_until(lambda: len(received.messages) >= 5, 30, "the five TagA messages received")
    got = sorted(received.messages, key=lambda m: m.body)
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(5)]
    assert [m.properties["UNIQ_KEY"] for m in got] == ids  # the 5.x message id is the UNIQ_KEY
    assert all(m.properties["TAGS"] == "TagA" and m.properties["color"] == "red" for m in got)
    assert [m.properties["KEYS"] for m in got] == [f"key{i}" for i in range(5)]
    await consumer.shutdown()


def test_b602_a_message_group_keeps_to_one_queue_in_send_order(px):
    topic = px.topic("P602", "-a", "+message.type=FIFO", queues=4)
    p = producer(px, topic)
    try:
        order = [(f"g{i % 3}", n) for n, i in enumerate(range(12))]
        for group, n in order:
            p.send(message(topic, f"{group}-{n}".encode(), message_group=group))
    finally:
        p.shutdown()
    counts = queue_counts(px.broker, topic)
    assert sum(counts.values()) == 12
    # each group is in exactly one queue: the queues hold multiples of the groups' 4 messages
    assert all(c % 4 == 0 for c in counts.values())


def test_b603_a_type_the_topic_does_not_take_is_refused_and_nothing_is_stored(px):
    topic = px.topic("P603", "-a", "+message.type=FIFO")
    p = producer(px, topic)
    try:  # the client reads the accepted types from the route and refuses by itself
        with pytest.raises(IllegalArgumentException):
            p.send(message(topic, b"plain"))
    finally:
        p.shutdown()
    answer = raw(
        px,
        "SendMessage",
        spb.SendMessageRequest(
            messages=[v5(topic, b"plain", "01AA", message_type=pb.MessageType.NORMAL)]
        ),
        spb.SendMessageResponse,
    )  # the proxy refuses it too (a client that does not check)
    assert answer.status.code == pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "takes FIFO messages, not NORMAL" in answer.status.message
    shaped = raw(
        px,
        "SendMessage",
        spb.SendMessageRequest(
            messages=[v5(topic, b"x", "01AB", message_type=pb.MessageType.FIFO)]
        ),
        spb.SendMessageResponse,
    )  # FIFO without a message group
    assert shaped.status.code == pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert stored(px.broker, topic) == 0


# ------------------------------------------------------------------ routes
def test_b604_query_route_names_the_proxy_and_the_topic_type(px):
    topic = px.topic("P604", "-a", "+message.type=DELAY", queues=2)
    with grpc.insecure_channel(px.endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            request_serializer=spb.QueryRouteRequest.SerializeToString,
            response_deserializer=spb.QueryRouteResponse.FromString,
        )
        answer = call(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=10)
    assert answer.status.code == pb.Code.OK
    host, port = px.endpoint.rsplit(":", 1)
    assert [q.id for q in answer.message_queues] == [0, 1]
    for q in answer.message_queues:
        assert q.permission == pb.Permission.READ_WRITE and q.broker.id == 0
        assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [(host, int(port))]
        assert list(q.accept_message_types) == [pb.MessageType.DELAY]


# ------------------------------------------------------------------ transactions
class Checker(TransactionChecker):
    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.asked: list[V5Message] = []

    def check(self, message: V5Message) -> int:
        self.asked.append(message)
        return self.answer


def test_b605_commit_and_rollback_end_a_5x_transaction(px):
    topic = px.topic("P605", "-a", "+message.type=TRANSACTION")
    p = producer(px, topic, checker=Checker(TransactionResolution.ROLLBACK))
    try:
        committed = p.begin_transaction()
        kept = p.send(message(topic, b"commit", tag="tx"), committed)
        committed.commit()
        dropped = p.begin_transaction()
        p.send(message(topic, b"rollback", tag="tx"), dropped)
        dropped.rollback()
    finally:
        p.shutdown()
    poll_until_sync(lambda: stored(px.broker, topic) == 1, what="the committed message stored")
    trace = px.broker.admin_json("messageTrace", "-i", kept.message_id)
    assert "committed" in [e["event"] for e in trace["events"]]


def test_b606_an_unresolved_transaction_is_checked_over_telemetry_and_committed(px):
    topic = px.topic("P606", "-a", "+message.type=TRANSACTION")
    checker = Checker(TransactionResolution.COMMIT)
    p = producer(px, topic, checker=checker)
    try:
        tx = p.begin_transaction()
        receipt = p.send(
            message(topic, b"left open", keys="open-1"), tx
        )  # neither commit nor rollback
        poll_until_sync(lambda: checker.asked, what="the broker's check forwarded over Telemetry")
        assert checker.asked[0].message_id == receipt.message_id
        assert checker.asked[0].body == b"left open" and checker.asked[0].topic == topic
        poll_until_sync(lambda: stored(px.broker, topic) == 1, what="the checked message committed")
    finally:
        p.shutdown()
    events = [
        e["event"] for e in px.broker.admin_json("messageTrace", "-i", receipt.message_id)["events"]
    ]
    assert "checked" in events and "committed" in events


# ------------------------------------------------------------------ bad input
def _still_serves(px: Proxied, topic: str) -> None:
    assert px.process.poll() is None
    answer = raw(
        px,
        "SendMessage",
        spb.SendMessageRequest(
            messages=[v5(topic, b"after", "01FF", message_type=pb.MessageType.NORMAL)]
        ),
        spb.SendMessageResponse,
    )
    assert answer.status.code == pb.Code.OK, answer.status.message


def test_b607_malformed_protobuf_is_invalid_argument_and_nothing_is_stored(px):
    topic = px.topic("P607")
    with pytest.raises(grpc.RpcError) as failed:
        raw(px, "SendMessage", b"\x0a\xff\xff\xff\xff\x0f", spb.SendMessageResponse)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed SendMessageRequest" in failed.value.details()
    assert stored(px.broker, topic) == 0
    _still_serves(px, topic)


def test_b608_unknown_enum_values_are_refused_with_their_status(px):
    topic = px.topic("P608")
    beat = raw(px, "Heartbeat", spb.HeartbeatRequest(client_type=99), spb.HeartbeatResponse)
    assert beat.status.code == pb.Code.UNRECOGNIZED_CLIENT_TYPE
    assert "client type 99 is unknown" in beat.status.message
    send = raw(
        px,
        "SendMessage",
        spb.SendMessageRequest(messages=[v5(topic, b"x", "01A1", message_type=42)]),
        spb.SendMessageResponse,
    )
    assert send.status.code == pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "message type 42 is not served" in send.status.message
    end = raw(
        px,
        "EndTransaction",
        spb.EndTransactionRequest(
            topic=pb.Resource(name=topic), message_id="01A1", transaction_id="b:1:2", resolution=9
        ),
        spb.EndTransactionResponse,
    )
    assert end.status.code == pb.Code.BAD_REQUEST and "resolution 9" in end.status.message
    forged = raw(
        px,
        "EndTransaction",
        spb.EndTransactionRequest(
            topic=pb.Resource(name=topic), message_id="01A1", transaction_id="forged", resolution=1
        ),
        spb.EndTransactionResponse,
    )
    assert forged.status.code == pb.Code.INVALID_TRANSACTION_ID
    assert stored(px.broker, topic) == 0
    _still_serves(px, topic)


def test_b609_oversized_messages_are_refused_and_nothing_is_stored(px):
    topic = px.topic("P609")
    big = raw(
        px,
        "SendMessage",
        spb.SendMessageRequest(
            messages=[
                v5(topic, b"x" * (4 * 1024 * 1024 + 1), "01B1", message_type=pb.MessageType.NORMAL)
            ]
        ),
        spb.SendMessageResponse,
    )
    assert big.status.code == pb.Code.MESSAGE_BODY_TOO_LARGE
    assert "over the limit of 4194304" in big.status.message
    with pytest.raises(grpc.RpcError) as failed:  # over what the server reads at all
        raw(px, "SendMessage", b"\x0a" + b"\xff" * 8 * 1024 * 1024, spb.SendMessageResponse)
    assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stored(px.broker, topic) == 0
    _still_serves(px, topic)


def test_b610_a_telemetry_stream_without_settings_is_closed(px):
    with grpc.insecure_channel(px.endpoint) as channel:
        stream = channel.stream_stream(
            "/apache.rocketmq.v2.MessagingService/Telemetry",
            request_serializer=spb.TelemetryCommand.SerializeToString,
            response_deserializer=spb.TelemetryCommand.FromString,
        )
        silent = threading.Event()

        def nothing():
            silent.wait(60)  # the client keeps its side open and sends nothing
            return
            yield

        call = stream(nothing(), metadata=(("x-mq-client-id", "silent"),), timeout=30)
        try:
            with pytest.raises(grpc.RpcError) as closed:
                next(iter(call))
        finally:
            silent.set()
    assert closed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (
        f"no Settings on this Telemetry stream within {SETTINGS_TIMEOUT:g} s"
        in closed.value.details()
    )
    _still_serves(px, px.topic("P610"))


def test_b611_an_rpc_not_served_is_unimplemented_and_says_why(px):
    for method, request, response in [
        ("RecallMessage", spb.RecallMessageRequest(), spb.RecallMessageResponse),
        ("QueryOffset", spb.QueryOffsetRequest(), spb.QueryOffsetResponse),
    ]:
        with pytest.raises(grpc.RpcError) as refused:
            raw(px, method, request, response)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert f"{method} is not served" in refused.value.details()


# ------------------------------------------------------------------ telemetry
def _telemetry(px: Proxied, commands: list, answers: int) -> list:
    """Send `commands` on one Telemetry stream and read `answers` commands back."""
    with grpc.insecure_channel(px.endpoint) as channel:
        stream = channel.stream_stream(
            "/apache.rocketmq.v2.MessagingService/Telemetry",
            request_serializer=spb.TelemetryCommand.SerializeToString,
            response_deserializer=spb.TelemetryCommand.FromString,
        )
        done = threading.Event()

        def outgoing():
            yield from commands
            done.wait(30)

        call = stream(outgoing(), metadata=(("x-mq-client-id", "telemetry-test"),), timeout=30)
        try:
            got = []
            for answer in call:
                got.append(answer)
                if len(got) == answers:
                    return got
            raise AssertionError(f"the stream ended after {len(got)} answers")
        finally:
            done.set()
            call.cancel()


def test_b623_settings_are_answered_with_the_proxys_and_stacks_are_given(px):
    fifo = px.topic("P623", "-a", "+message.type=FIFO")
    consumer = pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER)
    consumer.request_timeout.seconds = 3
    consumer.subscription.group.name = "G623"
    consumer.subscription.subscriptions.add().topic.name = fifo
    producer = pb.Settings(client_type=pb.ClientType.PRODUCER)
    producer.publishing.topics.add(name=fifo)
    stack = spb.TelemetryCommand(
        print_thread_stack_trace_command=spb.PrintThreadStackTraceCommand(nonce="n-1")
    )
    first, second, third = _telemetry(
        px,
        [spb.TelemetryCommand(settings=consumer), spb.TelemetryCommand(settings=producer), stack],
        3,
    )
    sub = first.settings.subscription
    assert first.status.code == pb.Code.OK
    assert sub.fifo and sub.receive_batch_size == 32 and sub.long_polling_timeout.seconds == 30
    assert first.settings.backoff_policy.max_attempts == 17
    assert [d.seconds for d in first.settings.backoff_policy.customized_backoff.next][:3] == [
        10,
        30,
        60,
    ]
    pub = second.settings.publishing
    assert pub.max_body_size == 4 * 1024 * 1024 and pub.validate_message_type
    assert [t.name for t in pub.topics] == [fifo]
    assert second.settings.backoff_policy.exponential_backoff.multiplier == 2.0
    assert third.thread_stack_trace.nonce == "n-1"
    assert "Thread" in third.thread_stack_trace.thread_stack_trace
