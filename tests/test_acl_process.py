"""Plain ACL on a real `es-broker serve` process (aclEnable=true), driven by signed Python requests.

Behaviours: docs/semantics.md "Access control (B-160..B-179)".
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from es_broker.acl.signing import Credentials
from es_broker.remoting import fastjson
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from tests.acl_fixtures import (
    ACL_YAML,
    ACL_YAML_TOPIC_C,
    ADMIN,
    PRODUCER,
    WRONG_SECRET,
    acl_conf,
    max_offset,
    refused,
    topics,
    wire,
)
from tests.process_fixtures import ROOT, ServedBroker, _env, serve
from tests.waiting import poll_until


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory) -> Iterator[ServedBroker]:
    tmp = tmp_path_factory.mktemp("acl")
    conf, _ = acl_conf(tmp)
    with serve(tmp / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        yield broker


# ------------------------------------------------------------------ produce and consume
async def test_b162_a_signed_account_sends_and_pulls_on_its_topic(acl_broker, nursery):
    await topics(nursery, acl_broker, "TopicA")
    producer = wire(nursery, PRODUCER)
    before = await max_offset(nursery, acl_broker, "TopicA")
    r = await producer.send(acl_broker.broker, "TopicA", 0, b"hello")
    assert r.code == ResponseCode.SUCCESS, r.remark
    pulled = await producer.pull(acl_broker.broker, "GroupA", "TopicA", 0, before)
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    await producer.commit(acl_broker.broker, "GroupA", "TopicA", 0, before + 1)


async def test_b161_an_unsigned_send_is_refused_and_nothing_is_stored(acl_broker, nursery):
    await topics(nursery, acl_broker, "TopicA")
    before = await max_offset(nursery, acl_broker, "TopicA")
    r = await wire(nursery, None).send(acl_broker.broker, "TopicA", 0, b"anonymous")
    refused(r, "No accessKey is configured")
    assert await max_offset(nursery, acl_broker, "TopicA") == before


async def test_b161_a_wrong_secret_is_refused_and_nothing_is_stored(acl_broker, nursery):
    await topics(nursery, acl_broker, "TopicA")
    before = await max_offset(nursery, acl_broker, "TopicA")
    r = await wire(nursery, WRONG_SECRET).send(acl_broker.broker, "TopicA", 0, b"forged")
    refused(r, "Check signature failed for accessKey=ProducerKey")
    assert await max_offset(nursery, acl_broker, "TopicA") == before


async def test_b161_an_unknown_access_key_is_refused(acl_broker, nursery):
    r = await wire(nursery, Credentials("NobodyKnowsMe", "whatever1")).send(
        acl_broker.broker, "TopicA", 0, b"x"
    )
    refused(r, "No acl config for NobodyKnowsMe")


async def test_b163_a_topic_the_account_may_not_pub_is_refused_and_nothing_is_stored(
    acl_broker, nursery
):
    await topics(nursery, acl_broker, "TopicC", "TopicD")
    producer = wire(nursery, PRODUCER)
    for topic in ("TopicC", "TopicD"):  # the default perm (DENY), an explicit DENY
        before = await max_offset(nursery, acl_broker, topic)
        refused(
            await producer.send(acl_broker.broker, topic, 0, b"x"),
            f"No default permission for topic:{topic}",
        )
        assert await max_offset(nursery, acl_broker, topic) == before


async def test_b164_a_pull_needs_sub_on_the_group_too(acl_broker, nursery):
    await topics(nursery, acl_broker, "TopicA")
    r = await wire(nursery, PRODUCER).pull(acl_broker.broker, "GroupB", "TopicA", 0, 0)
    refused(r, "No default permission for group:GroupB")


async def test_b164_a_commit_to_a_group_without_sub_is_refused_and_the_offset_stays(
    acl_broker, nursery
):
    await topics(nursery, acl_broker, "TopicA")
    admin = wire(nursery, ADMIN)
    await admin.commit(acl_broker.broker, "GroupB", "TopicA", 0, 0)
    r = await wire(nursery, PRODUCER).call(
        acl_broker.broker,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "GroupB", "topic": "TopicA", "queueId": 0, "commitOffset": 5},
    )
    refused(r, "No default permission for group:GroupB")
    assert await admin.query(acl_broker.broker, "GroupB", "TopicA", 0) == 0


async def test_b164_a_heartbeat_naming_a_group_without_sub_is_refused(acl_broker, nursery):
    producer = wire(nursery, PRODUCER)
    await producer.heartbeat(acl_broker.broker, "c1", "GroupA", "TopicA")
    body = fastjson.dumps(
        {
            "clientID": "c2",
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": "GroupA",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {
                            "topic": "TopicC",
                            "subString": "*",
                            "tagsSet": [],
                            "codeSet": [],
                            "subVersion": 0,
                            "expressionType": "TAG",
                            "classFilterMode": False,
                        }
                    ],
                }
            ],
        }
    )
    refused(
        await producer.call(acl_broker.broker, RequestCode.HEART_BEAT, body=body.encode()),
        "No default permission for topic:TopicC",
    )


# ------------------------------------------------------------------ admin-only codes
NON_ADMIN_REFUSED = [
    pytest.param(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": "MadeByProducer",
            "defaultTopic": "TBW102",
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        },
        b"",
        id="create-topic",
    ),
    pytest.param(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": "TopicA",
            "defaultTopic": "TBW102",
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 2,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        },
        b"",
        id="change-topic-perm",
    ),
    pytest.param(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicA"}, b"", id="delete-topic"),
    pytest.param(RequestCode.UPDATE_BROKER_CONFIG, {}, b"brokerPermission=4\n", id="broker-config"),
    pytest.param(
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        {},
        b'{"groupName":"GroupA","consumeEnable":false}',
        id="group-config",
    ),
    pytest.param(
        RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GroupA"}, b"", id="delete-group"
    ),
    pytest.param(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": "TopicA", "group": "GroupA", "timestamp": 0, "isForce": True},
        b"",
        id="reset-by-time",
    ),
    pytest.param(
        EsRequestCode.RESET_OFFSET,
        {"topic": "TopicA", "group": "GroupA", "kind": "earliest", "isForce": True},
        b"",
        id="server-side-reset",
    ),
    pytest.param(
        RequestCode.CLONE_GROUP_OFFSET,
        {"srcGroup": "GroupA", "destGroup": "GroupZ", "topic": "TopicA"},
        b"",
        id="clone-offsets",
    ),
    pytest.param(EsRequestCode.REDRIVE_DLQ, {"group": "GroupA"}, b"", id="redrive"),
]


@pytest.mark.parametrize(("code", "fields", "body"), NON_ADMIN_REFUSED)
async def test_b165_b166_a_non_admin_account_cannot_change_topics_groups_offsets_or_config(
    acl_broker, nursery, code, fields, body
):
    await topics(nursery, acl_broker, "TopicA")
    admin = wire(nursery, ADMIN)
    records = (await admin.runtime(acl_broker.broker))["recordLogLastSeq"]
    r = await wire(nursery, PRODUCER).call(acl_broker.broker, code, fields, body)
    refused(
        r, f"Need admin permission for request code={int(code)}, but accessKey=ProducerKey is not"
    )
    assert (await admin.runtime(acl_broker.broker))[
        "recordLogLastSeq"
    ] == records  # nothing recorded


async def test_b165_b166_an_admin_account_creates_topics_resets_offsets_and_changes_config(
    acl_broker, nursery
):
    admin = wire(nursery, ADMIN)
    await admin.create_topic(acl_broker.broker, "MadeByAdmin", 2)
    for queue_id in range(2):  # the group has offsets to reset
        await admin.commit(acl_broker.broker, "GroupA", "MadeByAdmin", queue_id, 0)
    await admin.ok(
        acl_broker.broker,
        EsRequestCode.RESET_OFFSET,
        {"topic": "MadeByAdmin", "group": "GroupA", "kind": "earliest", "isForce": True},
    )
    r = await admin.call(
        acl_broker.broker,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": "MadeByAdmin", "group": "GroupA", "timestamp": 0, "isForce": True},
    )
    # past the ACL: the command itself answered
    assert r.code == ResponseCode.CONSUMER_NOT_ONLINE, r.remark
    await admin.ok(
        acl_broker.broker, RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=6\n"
    )
    await admin.ok(acl_broker.broker, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "MadeByAdmin"})


async def test_b175_the_broker_config_answer_never_shows_the_peer_secret_nor_its_account(
    acl_broker, nursery
):
    """B-175, B-352: GET_BROKER_CONFIG shows neither the peer secret nor the peer account's name."""
    r = await wire(nursery, ADMIN).ok(acl_broker.broker, RequestCode.GET_BROKER_CONFIG)
    text = r.body.decode()
    assert "peer_access_key" not in text and ADMIN.access_key not in text
    assert ADMIN.secret_key not in text
    assert "acl_plain_file=" in text  # an admin sees where the rules are


# ------------------------------------------------------------------ the name server
async def test_b176_an_unsigned_register_broker_does_not_change_routes(acl_broker, nursery):
    await topics(nursery, acl_broker, "TopicA")
    anonymous, producer, admin = wire(nursery, None), wire(nursery, PRODUCER), wire(nursery, ADMIN)
    body = fastjson.dumps(
        {
            "filterServerList": [],
            "topicConfigSerializeWrapper": {
                "topicConfigTable": {
                    "TopicA": {
                        "topicName": "TopicA",
                        "readQueueNums": 4,
                        "writeQueueNums": 4,
                        "perm": 6,
                        "topicFilterType": "SINGLE_TAG",
                        "topicSysFlag": 0,
                        "order": False,
                    }
                },
                "dataVersion": {"counter": 99, "timestamp": 1},
            },
        }
    ).encode()
    fake = {
        "brokerName": "broker-a",
        "brokerAddr": "10.9.9.9:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "10.9.9.9:10912",
        "brokerId": 0,
        "compressed": False,
    }
    before = await anonymous.route(acl_broker.namesrv, "TopicA")
    refused(
        await anonymous.call(acl_broker.namesrv, RequestCode.REGISTER_BROKER, fake, body),
        "No accessKey is configured",
    )
    refused(
        await producer.call(acl_broker.namesrv, RequestCode.REGISTER_BROKER, fake, body),
        "Need admin permission for request code=103",
    )
    refused(
        await anonymous.call(
            acl_broker.namesrv,
            RequestCode.UNREGISTER_BROKER,
            {
                "brokerName": "broker-a",
                "brokerAddr": acl_broker.broker,
                "clusterName": "DefaultCluster",
                "brokerId": 0,
            },
        ),
        "No accessKey is configured",
    )
    after = await anonymous.route(acl_broker.namesrv, "TopicA")  # routes stay open to read
    assert after == before == {0: acl_broker.broker}
    del admin


# ------------------------------------------------------------------ the file: reload, refusal
async def test_b168_a_changed_file_takes_effect_without_a_restart(tmp_path, nursery):
    conf, acl_file = acl_conf(tmp_path)
    with serve(tmp_path / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        await topics(nursery, broker, "TopicC")
        producer = wire(nursery, PRODUCER)
        refused(
            await producer.send(broker.broker, "TopicC", 0, b"x"),
            "No default permission for topic:TopicC",
        )
        acl_file.write_text(ACL_YAML_TOPIC_C)

        async def sent() -> bool:
            return (
                await producer.send(broker.broker, "TopicC", 0, b"x")
            ).code == ResponseCode.SUCCESS

        await poll_until(sent, 30, "TopicC opened to ProducerKey by the changed file")


async def test_b169_an_invalid_file_on_reload_is_logged_and_the_old_rules_stay(tmp_path, nursery):
    conf, acl_file = acl_conf(tmp_path)
    log_file = tmp_path / "broker.log"
    with serve(
        tmp_path / "data", "--config", str(conf), "--readmodel-url", "none", log_file=log_file
    ) as broker:
        await topics(nursery, broker, "TopicA")
        acl_file.write_text(ACL_YAML.replace("TopicA=PUB|SUB", "TopicA=PUBLISH"))
        await poll_until(
            lambda: "ACL reload refused" in log_file.read_text(), 30, "the refused reload logged"
        )
        text = log_file.read_text()
        assert "topicPerms[0] must be DENY, PUB, SUB or PUB|SUB, got 'PUBLISH'" in text
        assert "ProducerSecret" not in text and "AdminSecret01" not in text
        r = await wire(nursery, PRODUCER).send(broker.broker, "TopicA", 0, b"old rules")
        assert r.code == ResponseCode.SUCCESS, r.remark


def _start_refused(tmp_path: Path, yaml_text: str | None) -> subprocess.CompletedProcess:
    conf, acl_file = acl_conf(tmp_path, yaml_text or "")
    if yaml_text is None:
        acl_file.unlink()
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--listen",
            "127.0.0.1:0",
            "--namesrv-listen",
            "127.0.0.1:0",
            "--config",
            str(conf),
            "--readmodel-url",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        cwd=ROOT,
    )


def test_b167_an_invalid_file_at_startup_stops_the_broker_with_a_clear_message(tmp_path):
    done = _start_refused(
        tmp_path, ACL_YAML.replace("secretKey: ProducerSecret", "secretKey: short")
    )
    assert done.returncode == 2
    assert (
        "accounts[1] (accessKey 'ProducerKey'): secretKey is required and must be longer than 6"
        in done.stderr
    )
    assert "short" not in done.stderr.replace("secretKey", "")


def test_b167_a_missing_file_at_startup_stops_the_broker(tmp_path):
    done = _start_refused(tmp_path, None)
    assert done.returncode == 2
    assert "the ACL file does not exist" in done.stderr
