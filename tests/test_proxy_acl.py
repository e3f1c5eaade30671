"""5.x clients sign with the plain ACL's accounts; the proxy checks the signature and forwards as
the account, so the broker checks its permissions as for a 4.x client (B-613, B-614)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trio
from rocketmq import FilterExpression, Message, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf, max_offset, topics
from tests.process_fixtures import ServedBroker, serve
from tests.proxy_fixtures import config, proxy, send_raw, signed
from tests.waiting import poll_until_sync


@pytest.fixture(scope="module")
def acl_proxy(tmp_path_factory) -> Iterator[tuple[ServedBroker, str]]:
    tmp: Path = tmp_path_factory.mktemp("proxyacl")
    conf, acl_file = acl_conf(tmp)
    with (
        serve(
            tmp / "data",
            "--config",
            str(conf),
            "--readmodel-url",
            "none",
            log_file=tmp / "broker.log",
        ) as broker,
        proxy(broker.namesrv, "--acl-file", str(acl_file), log_file=tmp / "proxy.log") as (
            _,
            endpoint,
        ),
    ):
        yield broker, endpoint


async def test_b613_a_signed_5x_client_sends_as_its_account(acl_proxy, nursery):
    broker, endpoint = acl_proxy
    await topics(nursery, broker, "TopicA")
    before = sum([await max_offset(nursery, broker, "TopicA", q) for q in range(4)])

    def send() -> None:
        producer = Producer(config(endpoint, PRODUCER.access_key, PRODUCER.secret_key), ("TopicA",))
        producer.startup()
        try:
            m = Message()
            m.topic, m.body = "TopicA", b"signed"
            producer.send(m)
        finally:
            producer.shutdown()

    await trio.to_thread.run_sync(send)
    after = sum([await max_offset(nursery, broker, "TopicA", q) for q in range(4)])
    assert after == before + 1


@pytest.mark.parametrize(
    "metadata, why",
    [
        ((("x-mq-client-id", "acl-test"),), "no authorization metadata"),
        (
            signed(PRODUCER.access_key, "NotTheSecret"),
            "signature of accessKey 'ProducerKey' does not match",
        ),
        (signed("NoSuchKey", "x"), "no account has the accessKey 'NoSuchKey'"),
    ],
)
async def test_b613_an_unsigned_or_badly_signed_call_is_unauthenticated(
    acl_proxy, nursery, metadata, why
):
    broker, endpoint = acl_proxy
    await topics(nursery, broker, "TopicA")
    before = await max_offset(nursery, broker, "TopicA", 0)
    with pytest.raises(grpc.RpcError) as refused:
        await trio.to_thread.run_sync(send_raw, endpoint, "TopicA", metadata)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert why in refused.value.details()
    assert await max_offset(nursery, broker, "TopicA", 0) == before


async def test_b614_a_topic_the_account_may_not_pub_is_permission_denied(acl_proxy, nursery):
    broker, endpoint = acl_proxy
    await topics(nursery, broker, "TopicD")
    with pytest.raises(grpc.RpcError) as refused:
        await trio.to_thread.run_sync(
            send_raw, endpoint, "TopicD", signed(PRODUCER.access_key, PRODUCER.secret_key)
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "TopicD" in refused.value.details()
    assert [await max_offset(nursery, broker, "TopicD", q) for q in range(4)] == [0, 0, 0, 0]
    admin = await trio.to_thread.run_sync(
        send_raw, endpoint, "TopicD", signed(ADMIN.access_key, ADMIN.secret_key)
    )
    assert admin.status.code == pb.Code.OK  # the admin account may


def test_b650_a_signed_5x_consumer_is_registered_as_its_account(acl_proxy):
    """The proxy's registration of a 5.x consumer signs as the consumer's account: the broker
    takes its heartbeat (SUB on GroupA and TopicA) and lists it."""
    broker, endpoint = acl_proxy
    keys = ("--access-key", ADMIN.access_key, "--secret-key", ADMIN.secret_key)

    def listed() -> set[str]:
        done = broker.admin("consumerConnection", "-g", "GroupA", "--json", *keys, check=False)
        if done.returncode != 0:
            return set()
        return {c["clientId"] for c in json.loads(done.stdout)["connectionSet"]}

    broker.admin("updateTopic", "-t", "TopicA", "-c", "DefaultCluster", *keys)
    c = SimpleConsumer(
        config(endpoint, PRODUCER.access_key, PRODUCER.secret_key),
        "GroupA",
        {"TopicA": FilterExpression("*")},
        await_duration=2,
    )
    c.startup()
    try:
        poll_until_sync(lambda: c.client_id in listed(), 30, "the signed 5.x consumer listed")
    finally:
        c.shutdown()
    poll_until_sync(lambda: c.client_id not in listed(), 30, "the signed 5.x consumer gone")
