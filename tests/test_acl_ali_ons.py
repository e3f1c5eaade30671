"""ali-ons 3.12.0 against a broker with aclEnable=true (B-161..B-164).

ali-ons signs every request itself (lib/channel.js#beforeRequest: its header
values' toString, sorted, then the body; HmacSHA1, base64); es-broker's decoded
extFields (numbers and booleans normalised to text) must verify against that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import trio

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf
from tests.interop_fixtures import INTEROP_DIR, NEEDS_ALI_ONS, NODE
from tests.process_fixtures import ServedBroker, serve

pytestmark = NEEDS_ALI_ONS


TIMEOUT = 40


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory) -> Iterator[ServedBroker]:
    tmp = tmp_path_factory.mktemp("acl_ons")
    conf, _ = acl_conf(tmp)
    log_file = tmp / "broker.log"
    with serve(
        tmp / "data", "--config", str(conf), "--readmodel-url", "none", "-v", log_file=log_file
    ) as broker:
        for topic in ("TopicA", "TopicC"):
            admin_call(
                broker.broker,
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": topic,
                    "defaultTopic": "TBW102",
                    "readQueueNums": 2,
                    "writeQueueNums": 2,
                    "perm": 6,
                    "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": 0,
                    "order": False,
                },
            )
        yield broker


def admin_call(addr: str, code: int, fields: dict) -> object:
    async def call():
        async with trio.open_nursery() as nursery:
            client = RemotingClient(nursery, credentials=ADMIN)
            r = await client.invoke(addr, request(code, fields))
            nursery.cancel_scope.cancel()
            return r

    return trio.run(call)


def refusals(broker: ServedBroker) -> list[str]:
    """The broker's log lines of refused requests (`serve -v`), each with the remark it answered."""
    return [
        line
        for line in (broker.data_dir.parent / "broker.log").read_text().splitlines()
        if "refused request code" in line
    ]


def max_offsets(broker: ServedBroker, topic: str) -> list[int]:
    return [
        admin_call(
            broker.broker, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q}
        ).require_long("offset")
        for q in range(2)
    ]


def node(script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("NODE_OPTIONS", None)
    if "--timeout" not in args:
        args = (*args, "--timeout", str(TIMEOUT))
    return subprocess.run(
        [NODE, script, *args],
        cwd=INTEROP_DIR,
        capture_output=True,
        text=True,
        timeout=TIMEOUT + 30,
        env=env,
    )


def keys(access_key: str, secret_key: str) -> list[str]:
    return ["--access-key", access_key, "--secret-key", secret_key]


def test_b162_ali_ons_with_its_keys_produces_and_consumes(acl_broker):
    done = node(
        "produce.js",
        "--namesrv",
        acl_broker.namesrv,
        "--topic",
        "TopicA",
        "--group",
        "ProducerGroup",
        "--count",
        "6",
        *keys(PRODUCER.access_key, PRODUCER.secret_key),
    )
    assert done.returncode == 0, done.stderr
    sent = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [s["sendStatus"] for s in sent] == ["SEND_OK"] * 6
    done = node(
        "consume.js",
        "--namesrv",
        acl_broker.namesrv,
        "--topic",
        "TopicA",
        "--group",
        "GroupA",
        "--expect",
        "6",
        *keys(PRODUCER.access_key, PRODUCER.secret_key),
    )
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert sorted(m["msgId"] for m in got) == sorted(s["msgId"] for s in sent)


@pytest.mark.parametrize(
    ("creds", "remark"),
    [
        pytest.param([], "No accessKey is configured", id="no-keys"),
        pytest.param(
            keys(PRODUCER.access_key, "NotTheSecret"),
            "Check signature failed for accessKey=ProducerKey",
            id="wrong-secret",
        ),
    ],
)
def test_b161_ali_ons_without_keys_or_with_a_wrong_secret_is_refused_and_nothing_is_stored(
    acl_broker, creds, remark
):
    before, seen = max_offsets(acl_broker, "TopicA"), len(refusals(acl_broker))
    done = node(
        "produce.js",
        "--namesrv",
        acl_broker.namesrv,
        "--topic",
        "TopicA",
        "--group",
        "ProducerGroup",
        "--count",
        "1",
        *creds,
    )
    # ali-ons retries a SYSTEM_ERROR and reports "still failed", not the remark
    assert done.returncode != 0
    sends = [line for line in refusals(acl_broker)[seen:] if "code 310 " in line]  # SEND_MESSAGE_V2
    assert sends and all(f"AclException: {remark}, " in line for line in sends), sends
    assert max_offsets(acl_broker, "TopicA") == before


def test_b163_ali_ons_on_a_topic_its_account_may_not_pub_is_refused_and_nothing_is_stored(
    acl_broker,
):
    before, seen = max_offsets(acl_broker, "TopicC"), len(refusals(acl_broker))
    done = node(
        "produce.js",
        "--namesrv",
        acl_broker.namesrv,
        "--topic",
        "TopicC",
        "--group",
        "ProducerGroup",
        "--count",
        "1",
        *keys(PRODUCER.access_key, PRODUCER.secret_key),
    )
    assert done.returncode != 0
    sends = [line for line in refusals(acl_broker)[seen:] if "code 310 " in line]
    assert sends and all(
        "AclException: No default permission for topic:TopicC, " in line for line in sends
    ), sends
    assert max_offsets(acl_broker, "TopicC") == before


def test_b164_ali_ons_consumer_of_a_group_it_may_not_sub_gets_nothing(acl_broker):
    seen = len(refusals(acl_broker))
    done = node(
        "consume.js",
        "--namesrv",
        acl_broker.namesrv,
        "--topic",
        "TopicA",
        "--group",
        "GroupB",
        "--expect",
        "1",
        "--timeout",
        "8",
        *keys(PRODUCER.access_key, PRODUCER.secret_key),
    )
    assert done.returncode != 0  # nothing consumed: the hard timeout ends it
    heartbeats = [line for line in refusals(acl_broker)[seen:] if "code 34 " in line]  # HEART_BEAT
    assert (
        heartbeats and "AclException: No default permission for group:GroupB, " in heartbeats[0]
    ), heartbeats


del sys
