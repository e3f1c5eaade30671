"""es-broker's bound signature against a real `es-broker serve` process with aclEnable=true.

The attacks: a captured frame re-sent byte for byte on a new connection, a RocketMQ signature
re-aimed at an admin code, a bound signature carried to another code, renamed fields, an extra
empty field. Each is refused (NO_PERMISSION or the signature refusal) and changes nothing.

Behaviours: docs/semantics.md "es-broker's bound signature and reads within perms (B-345..B-354)".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import trio

from es_broker.acl.signing import SCHEME_ROCKETMQ, Credentials, sign, verify
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.frames import decode_frame, encode_frame
from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf, max_offset, refused, topics, wire
from tests.process_fixtures import ServedBroker, serve


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory) -> Iterator[ServedBroker]:
    tmp = tmp_path_factory.mktemp("bound")
    conf, _ = acl_conf(tmp)
    with serve(tmp / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        yield broker


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory) -> Iterator[ServedBroker]:
    tmp = tmp_path_factory.mktemp("strict")
    conf, _ = acl_conf(tmp, aclStrictSignatures=True)
    with serve(tmp / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        yield broker


def captured(code: int, fields: dict[str, object], creds: Credentials, body: bytes = b"") -> bytes:
    """The frame a client signing with `creds` puts on the wire (what an eavesdropper keeps)."""
    command = request(code, fields, body, opaque=7)
    signed = creds.sign_request(code, command.ext_fields, command.body)
    return encode_frame(dataclasses.replace(command, ext_fields=signed))


async def exchange(addr: str, frame: bytes) -> RemotingCommand:
    """Send `frame` byte for byte on a new connection; the answer."""
    host, port = addr.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = await stream.receive_some()
            assert chunk, "the broker closed the connection without an answer"
            data += chunk
    return decode_frame(data)


def no_permission(r: RemotingCommand, words: str) -> None:
    assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
    assert r.remark is not None and words in r.remark, r.remark


async def topic_exists(nursery, broker: ServedBroker, topic: str) -> bool:
    r = await wire(nursery, ADMIN).call(
        broker.broker, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}
    )
    assert r.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST), (r.code, r.remark)
    return r.code == ResponseCode.SUCCESS


# ------------------------------------------------------------------ replay
async def test_b349_a_replayed_admin_delete_topic_is_refused_and_the_recreated_topic_stays(
    acl_broker, nursery
):
    """B-349: a captured DELETE_TOPIC re-sent on a new connection after the topic came back is refused."""
    await topics(nursery, acl_broker, "Victim0")
    frame = captured(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Victim0"}, ADMIN)
    r = await exchange(acl_broker.broker, frame)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert not await topic_exists(nursery, acl_broker, "Victim0")
    await topics(nursery, acl_broker, "Victim0")
    no_permission(
        await exchange(acl_broker.broker, frame), "Replayed request from accessKey=AdminKey01"
    )
    assert await topic_exists(nursery, acl_broker, "Victim0")


async def test_b349_a_replayed_reset_offset_is_refused_and_the_offset_stays(acl_broker, nursery):
    """B-349: a captured RESET_OFFSET (9101) re-sent later does not move the group back again."""
    await topics(nursery, acl_broker, "TopicA")
    admin = wire(nursery, ADMIN)
    for _ in range(3):
        assert (await admin.send(acl_broker.broker, "TopicA", 1, b"m")).code == ResponseCode.SUCCESS
    end = await max_offset(nursery, acl_broker, "TopicA", 1)
    await admin.commit(acl_broker.broker, "GroupA", "TopicA", 1, end)
    reset = {
        "topic": "TopicA",
        "group": "GroupA",
        "kind": "earliest",
        "value": 0,
        "isForce": True,
        "mode": "server_side",
        "scope": "read_queues",
    }
    frame = captured(EsRequestCode.RESET_OFFSET, reset, ADMIN)
    first = await exchange(acl_broker.broker, frame)
    assert first.code == ResponseCode.SUCCESS, first.remark
    assert await admin.query(acl_broker.broker, "GroupA", "TopicA", 1) == 0
    await admin.commit(acl_broker.broker, "GroupA", "TopicA", 1, end)
    no_permission(await exchange(acl_broker.broker, frame), "Replayed request")
    assert await admin.query(acl_broker.broker, "GroupA", "TopicA", 1) == end


async def test_b349_a_replayed_bound_send_is_stored_once(acl_broker, nursery):
    """B-349: a normal account's send signed with es-broker's scheme, re-sent, is refused."""
    await topics(nursery, acl_broker, "TopicA")
    before = await max_offset(nursery, acl_broker, "TopicA", 2)
    fields = {  # SendMessageRequestHeader, V1 names
        "producerGroup": "PG",
        "topic": "TopicA",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": 2,
        "sysFlag": 0,
        "bornTimestamp": 0,
        "flag": 0,
        "properties": "",
        "reconsumeTimes": 0,
        "unitMode": False,
    }
    frame = captured(RequestCode.SEND_MESSAGE, fields, PRODUCER, b"pay me once")
    assert (await exchange(acl_broker.broker, frame)).code == ResponseCode.SUCCESS
    no_permission(await exchange(acl_broker.broker, frame), "Replayed request")
    assert await max_offset(nursery, acl_broker, "TopicA", 2) == before + 1


async def test_b348_a_stale_bound_request_is_refused(acl_broker, nursery):
    """B-348: a bound request whose esTimestamp is older than the window (60 s) is refused."""
    await topics(nursery, acl_broker, "Victim2")
    command = request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Victim2"}, opaque=3)
    fields = ADMIN.sign_request(command.code, command.ext_fields, None, now_ms=1_000_000)
    r = await exchange(
        acl_broker.broker, encode_frame(dataclasses.replace(command, ext_fields=fields))
    )
    no_permission(r, "Stale request from accessKey=AdminKey01")
    assert await topic_exists(nursery, acl_broker, "Victim2")


# ------------------------------------------------------------------ re-aimed signatures
async def test_b347_a_rocketmq_signature_re_aimed_at_delete_topic_is_refused(acl_broker, nursery):
    """B-347: RocketMQ's signature of GET_TOPIC_STATS_INFO verifies for code 215 too; 215 refuses it."""
    await topics(nursery, acl_broker, "Victim1")
    fields = sign({"topic": "Victim1"}, b"", ADMIN.access_key, ADMIN.secret_key)
    stats = request(RequestCode.GET_TOPIC_STATS_INFO, fields, opaque=5)
    assert (await exchange(acl_broker.broker, encode_frame(stats))).code == ResponseCode.SUCCESS
    re_aimed = dataclasses.replace(stats, code=int(RequestCode.DELETE_TOPIC_IN_BROKER))
    no_permission(
        await exchange(acl_broker.broker, encode_frame(re_aimed)),
        "Request code=215 is admin-only and takes es-broker's signature (esSignature) only",
    )
    # renamed to another admin code's field, or padded with an empty field: RocketMQ's signature
    # still verifies (it signs values only), the admin code refuses the scheme all the same
    renamed = {("groupName" if k == "topic" else k): v for k, v in fields.items()}
    for forged in (
        request(RequestCode.DELETE_SUBSCRIPTIONGROUP, renamed, opaque=6),
        request(RequestCode.DELETE_TOPIC_IN_BROKER, {**fields, "x": ""}, opaque=7),
    ):
        assert verify(forged.ext_fields, forged.body, ADMIN.secret_key)
        no_permission(
            await exchange(acl_broker.broker, encode_frame(forged)),
            f"Request code={forged.code} is admin-only",
        )
    assert await topic_exists(nursery, acl_broker, "Victim1")


async def test_b346_a_bound_signature_fails_for_another_code_renamed_or_extra_fields(
    acl_broker, nursery
):
    """B-346: the bound signature covers the code, the names and every field: each change fails."""
    await topics(nursery, acl_broker, "Victim1")
    await wire(nursery, ADMIN).ok(
        acl_broker.broker,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        body=b'{"groupName":"Victim1","consumeEnable":true}',
    )
    command = request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Victim1"}, opaque=9)
    fields = ADMIN.sign_request(command.code, command.ext_fields, None)
    renamed = {("groupName" if k == "topic" else k): v for k, v in fields.items()}
    for forged in (
        dataclasses.replace(
            command, code=int(RequestCode.DELETE_TOPIC_IN_BROKER), ext_fields=fields
        ),
        dataclasses.replace(
            command, code=int(RequestCode.DELETE_SUBSCRIPTIONGROUP), ext_fields=renamed
        ),
        dataclasses.replace(
            command, code=int(RequestCode.DELETE_TOPIC_IN_BROKER), ext_fields={**fields, "x": ""}
        ),
    ):
        refused(
            await exchange(acl_broker.broker, encode_frame(forged)),
            "Check signature failed for accessKey=AdminKey01",
        )
    assert await topic_exists(nursery, acl_broker, "Victim1")
    groups = await wire(nursery, ADMIN).ok(
        acl_broker.broker, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG
    )
    assert b"Victim1" in groups.body


async def test_b347_rocketmq_signed_sends_and_pulls_still_work(acl_broker, nursery):
    """B-347: RocketMQ's scheme stays accepted for the codes that are not admin-only."""
    await topics(nursery, acl_broker, "TopicA")
    rocketmq = wire(nursery, dataclasses.replace(PRODUCER, scheme=SCHEME_ROCKETMQ))
    before = await max_offset(nursery, acl_broker, "TopicA", 3)
    assert (
        await rocketmq.send(acl_broker.broker, "TopicA", 3, b"rmq")
    ).code == ResponseCode.SUCCESS
    pulled = await rocketmq.pull(acl_broker.broker, "GroupA", "TopicA", 3, before)
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark


async def test_b347_strict_signatures_refuse_rocketmq_scheme_for_every_code(strict_broker, nursery):
    """B-347: aclStrictSignatures=true refuses RocketMQ's scheme; the bound scheme goes through."""
    await topics(nursery, strict_broker, "TopicA")
    before = await max_offset(nursery, strict_broker, "TopicA")
    rocketmq = wire(nursery, dataclasses.replace(PRODUCER, scheme=SCHEME_ROCKETMQ))
    no_permission(
        await rocketmq.send(strict_broker.broker, "TopicA", 0, b"rmq"), "aclStrictSignatures=true"
    )
    assert await max_offset(nursery, strict_broker, "TopicA") == before
    r = await wire(nursery, PRODUCER).send(strict_broker.broker, "TopicA", 0, b"bound")
    assert r.code == ResponseCode.SUCCESS, r.remark


async def test_b347_the_name_server_takes_admin_codes_with_the_bound_scheme_only(
    acl_broker, nursery
):
    """B-347: the name server's admin codes (B-176) refuse RocketMQ's scheme too; routes still work."""
    put = {"namespace": "ns", "key": "k", "value": "v"}
    rocketmq = wire(nursery, dataclasses.replace(ADMIN, scheme=SCHEME_ROCKETMQ))
    no_permission(
        await rocketmq.call(acl_broker.namesrv, RequestCode.PUT_KV_CONFIG, put),
        "takes es-broker's signature",
    )
    await wire(nursery, ADMIN).ok(acl_broker.namesrv, RequestCode.PUT_KV_CONFIG, put)
    frame = captured(RequestCode.PUT_KV_CONFIG, {**put, "value": "v2"}, ADMIN)
    assert (await exchange(acl_broker.namesrv, frame)).code == ResponseCode.SUCCESS
    no_permission(await exchange(acl_broker.namesrv, frame), "Replayed request")
    await topics(nursery, acl_broker, "TopicA")  # the broker's own registration is signed: routes
    route = await wire(nursery, None).call(
        acl_broker.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}
    )
    assert route.code == ResponseCode.SUCCESS, route.remark


@pytest.fixture(scope="module")
def mqadmin_broker(tmp_path_factory) -> Iterator[ServedBroker]:
    tmp = tmp_path_factory.mktemp("mqadmin")
    conf, _ = acl_conf(tmp, aclAdminRocketmqSignatures=True)
    with serve(tmp / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        yield broker


async def test_b347_admin_rocketmq_signatures_let_java_mqadmin_run_admin_codes(
    mqadmin_broker, nursery
):
    """B-347: aclAdminRocketmqSignatures=true admits RocketMQ's signature on admin-only codes, as
    4.9.8 does (Java's mqadmin signs only that way); a non-admin account is still refused."""
    mqadmin = wire(nursery, dataclasses.replace(ADMIN, scheme=SCHEME_ROCKETMQ))
    await mqadmin.create_topic(mqadmin_broker.broker, "MqadminTopic", 4)  # answered SUCCESS
    assert await topic_exists(nursery, mqadmin_broker, "MqadminTopic")
    producer = wire(nursery, dataclasses.replace(PRODUCER, scheme=SCHEME_ROCKETMQ))
    denied = await producer.call(
        mqadmin_broker.broker, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "MqadminTopic"}
    )
    assert denied.code != ResponseCode.SUCCESS
    assert denied.remark is not None and "Need admin permission" in denied.remark, denied.remark
    assert await topic_exists(nursery, mqadmin_broker, "MqadminTopic")
