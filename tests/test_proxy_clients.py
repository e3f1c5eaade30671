"""5.x clients as the brokers and the 4.x admin tools see them (B-650, B-651).

The official Python client (PyPI) against a broker process behind `es-broker proxy`;
the admin tool is `es-broker admin` against the same name server. Waits are polls
with deadlines, never sleeps.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq import Producer as V5Producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from tests.proxy_fixtures import Proxied, config, proxied, raw
from tests.test_proxy_receive import consumer, receive_until, send5
from tests.waiting import poll_until_sync


@pytest.fixture(scope="module")
def px(tmp_path_factory) -> Iterator[Proxied]:
    tmp: Path = tmp_path_factory.mktemp("proxyclients")
    with proxied(tmp) as p:
        yield p


def connection(px: Proxied, group: str) -> dict[str, Any] | None:
    """consumerConnection's answer, None while the group has no client online."""
    done = px.broker.admin("consumerConnection", "-g", group, "--json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def client_ids(px: Proxied, group: str) -> set[str]:
    found = connection(px, group)
    return {c["clientId"] for c in found["connectionSet"]} if found else set()


def test_b650_a_5x_simple_consumer_is_listed_while_it_lives_and_its_group_progresses(px):
    topic = px.topic("C650")
    send5(px, topic, [f"m{i}".encode() for i in range(4)])
    c = consumer(px, "G650", topic)
    try:
        poll_until_sync(lambda: c.client_id in client_ids(px, "G650"), 30, "the 5.x client listed")
        found = connection(px, "G650")
        assert found is not None
        (listed,) = found["connectionSet"]
        assert listed["clientId"] == c.client_id
        # the proxy's connection, as a 4.x tool sees any client: HOST:PORT
        host, port = listed["clientAddr"].rsplit(":", 1)
        assert host and port.isdigit()
        assert listed["language"] == "PYTHON"
        assert found["consumeType"] == "CONSUME_ACTIVELY"
        assert found["messageModel"] == "CLUSTERING"
        assert set(found["subscriptionTable"]) == {topic}

        receive_until(c, 4)
        progress = poll_until_sync(
            lambda: (
                (p := px.broker.admin_json("consumerProgress", "-g", "G650"))["queues"]
                and p["diffTotal"] == 0
                and p
            ),
            30,
            "the group's progress",
        )
        assert {q["topic"] for q in progress["queues"]} == {topic}
        assert sum(q["consumerOffset"] for q in progress["queues"]) == 4
    finally:
        c.shutdown()
    poll_until_sync(lambda: c.client_id not in client_ids(px, "G650"), 30, "the client gone")


def test_b651_consumer_status_of_a_5x_client_gives_what_the_proxy_knows(px):
    topic = px.topic("C651")
    c = consumer(px, "G651", topic, "TagB")
    try:
        poll_until_sync(lambda: c.client_id in client_ids(px, "G651"), 30, "the client listed")
        status = px.broker.admin_json("consumerStatus", "-g", "G651", "-i", c.client_id, "-s")[
            "runningInfo"
        ]
        props = status["properties"]
        assert props["consumeType"] == "CONSUME_ACTIVELY"
        assert props["clientType"] == "SIMPLE_CONSUMER"
        settings = json.loads(props["settings"])
        assert settings["subscription"]["group"]["name"] == "G651"
        (sub,) = status["subscriptionSet"]
        assert (sub["topic"], sub["subString"]) == (topic, "TagB")
        # the Python client does not answer PrintThreadStackTraceCommand: said, not invented
        assert props["jstack"].startswith("not available")
        assert not status.get("jstack")
    finally:
        c.shutdown()


def producer_ids(px: Proxied, topic: str) -> set[str]:
    done = px.broker.admin("producerConnection", "-g", topic, "-t", topic, "--json", check=False)
    if done.returncode != 0:
        return set()
    return {c["clientId"] for c in json.loads(done.stdout)["connectionSet"]}


def test_b650_a_5x_producer_is_a_producer_group_per_topic_while_it_lives(px):
    topic = px.topic("P650")
    producer = V5Producer(config(px.endpoint), topics=(topic,))
    producer.startup()
    try:
        poll_until_sync(lambda: producer.client_id in producer_ids(px, topic), 30, "listed")
    finally:
        producer.shutdown()
    poll_until_sync(lambda: producer.client_id not in producer_ids(px, topic), 30, "gone")


@dataclass
class RawClient:
    """A 5.x SimpleConsumer spoken with grpc itself: its Telemetry stream, what it sends on it."""

    call: Any
    outgoing: queue.Queue
    metadata: tuple[tuple[str, str], ...]

    def heartbeat(self, px: Proxied, group: str) -> None:
        beat = spb.HeartbeatRequest(
            group=pb.Resource(name=group), client_type=pb.ClientType.SIMPLE_CONSUMER
        )
        answer = raw(px, "Heartbeat", beat, spb.HeartbeatResponse, metadata=self.metadata)
        assert answer.status.code == pb.Code.OK


@contextmanager
def raw_client(px: Proxied, client_id: str, group: str, topic: str) -> Iterator[RawClient]:
    """Open the client's Telemetry stream and send its Settings; closed at the end."""
    settings = pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER)
    settings.subscription.group.name = group
    settings.subscription.subscriptions.add().topic.name = topic
    me = (("x-mq-client-id", client_id), ("x-mq-language", "JAVA"))
    outgoing: queue.Queue = queue.Queue()
    outgoing.put(spb.TelemetryCommand(settings=settings))

    def commands():
        while (command := outgoing.get(timeout=60)) is not None:
            yield command

    with grpc.insecure_channel(px.endpoint) as channel:
        stream = channel.stream_stream(
            "/apache.rocketmq.v2.MessagingService/Telemetry",
            request_serializer=spb.TelemetryCommand.SerializeToString,
            response_deserializer=spb.TelemetryCommand.FromString,
        )
        call = stream(commands(), metadata=me, timeout=60)
        try:
            assert next(call).HasField("settings")
            yield RawClient(call, outgoing, me)
        finally:
            outgoing.put(None)
            call.cancel()


def test_b651_a_5x_clients_answered_thread_stacks_are_its_jstack(px):
    """A client that answers PrintThreadStackTraceCommand (as the Java client does), spoken with
    grpc itself: consumerStatus -s gets that client's own stacks."""
    with raw_client(px, "stack-client", "G652", px.topic("C652")) as client:
        client.heartbeat(px, "G652")
        poll_until_sync(lambda: "stack-client" in client_ids(px, "G652"), 30, "listed")
        found = connection(px, "G652")
        assert found is not None and found["connectionSet"][0]["language"] == "JAVA"

        answer: dict[str, Any] = {}
        asking = threading.Thread(
            target=lambda: answer.update(
                px.broker.admin_json("consumerStatus", "-g", "G652", "-i", "stack-client", "-s")
            )
        )
        asking.start()
        nonce = next(client.call).print_thread_stack_trace_command.nonce
        assert nonce
        trace = spb.ThreadStackTrace(nonce=nonce, thread_stack_trace="main: at Foo.bar(Foo.java:1)")
        client.outgoing.put(
            spb.TelemetryCommand(status=pb.Status(code=pb.Code.OK), thread_stack_trace=trace)
        )
        asking.join(60)
        assert answer["runningInfo"]["jstack"] == "main: at Foo.bar(Foo.java:1)"
        assert "jstack" not in answer["runningInfo"]["properties"]
        raw(
            px,
            "NotifyClientTermination",
            spb.NotifyClientTerminationRequest(group=pb.Resource(name="G652")),
            spb.NotifyClientTerminationResponse,
            metadata=client.metadata,
        )
        poll_until_sync(lambda: not client_ids(px, "G652"), 30, "unregistered")


def test_b650_a_5x_client_that_stops_heartbeating_is_unregistered(tmp_path):
    with proxied(tmp_path, proxy_args=("--client-expiry", "2")) as short:
        topic = short.topic("C653")
        with raw_client(short, "silent-client", "G653", topic) as client:
            client.heartbeat(short, "G653")  # once, then no more
            poll_until_sync(lambda: "silent-client" in client_ids(short, "G653"), 30, "listed")
            poll_until_sync(lambda: not client_ids(short, "G653"), 30, "unregistered")


def test_b650_two_5x_consumers_of_a_group_are_two_clients_and_both_receive(px):
    """Each has a connection of its own (the brokers key a group's clients by connection); the
    NOTIFY_CONSUMER_IDS_CHANGED the second one's arrival sends the first is ignored."""
    topic = px.topic("C654")
    first = consumer(px, "G654", topic)
    second = consumer(px, "G654", topic)
    try:
        both = {first.client_id, second.client_id}
        poll_until_sync(lambda: client_ids(px, "G654") == both, 30, "both listed")
        found = connection(px, "G654")
        assert found is not None
        assert len({c["clientAddr"] for c in found["connectionSet"]}) == 2
        send5(px, topic, [b"one"])
        assert [m.body for m in receive_until(first, 1)] == [b"one"]
        send5(px, topic, [b"two"])
        assert [m.body for m in receive_until(second, 1)] == [b"two"]
    finally:
        first.shutdown()
        second.shutdown()
    poll_until_sync(lambda: not client_ids(px, "G654"), 30, "both gone")
