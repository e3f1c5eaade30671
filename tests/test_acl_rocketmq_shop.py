"""A RocketMQ shop's own ACL files, nothing es-broker-specific, with ali-ons 3.12.0 (B-313).

broker.conf with `aclEnable=true` and stock keys only, `plain_acl.yml` under
`$ROCKETMQ_HOME/conf` with an admin account and a normal one: the broker
registers with the name server of its own process without signing (no
peer_access_key), so routes exist and the normal account produces and
consumes, while a stranger's unsigned REGISTER_BROKER is still refused (B-176).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from es_broker.acl.signing import Credentials
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from tests.interop_fixtures import NEEDS_ALI_ONS
from tests.process_fixtures import ServedBroker, serve
from tests.test_acl_ali_ons import keys, node

SHOP_ADMIN = Credentials("rocketmq2", "12345678")
SHOP_USER = Credentials("RocketMQ", "12345678")
TOPIC = "BAR_ACL_OK"

# RocketMQ 4.9.8's distribution/conf/plain_acl.yml, with the shop's topic
SHOP_ACL = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
      - BAR_ACL_OK=PUB|SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""

# RocketMQ 4.9.8's distribution/conf/broker.conf, with aclEnable
SHOP_BROKER_CONF = """\
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = ASYNC_FLUSH
aclEnable=true
"""


@pytest.fixture(scope="module")
def shop_broker(tmp_path_factory) -> Iterator[ServedBroker]:
    tmp = tmp_path_factory.mktemp("shop")
    home = tmp / "rocketmq"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(SHOP_ACL)
    conf = tmp / "broker.conf"
    conf.write_text(SHOP_BROKER_CONF)
    with serve(
        tmp / "data",
        "--config",
        str(conf),
        "--readmodel-url",
        "none",
        "-v",
        log_file=tmp / "broker.log",
        env={"ROCKETMQ_HOME": str(home)},
    ) as broker:
        answer = call(
            broker.broker,
            SHOP_ADMIN,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": TOPIC,
                "defaultTopic": "TBW102",
                "readQueueNums": 4,
                "writeQueueNums": 4,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            },
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        yield broker


def call(addr: str, credentials: Credentials | None, code: int, fields: dict, body: bytes = b""):
    async def run():
        async with trio.open_nursery() as nursery:
            client = RemotingClient(nursery, credentials=credentials)
            r = await client.invoke(addr, request(code, fields, body))
            nursery.cancel_scope.cancel()
            return r

    return trio.run(run)


def runtime(broker: ServedBroker) -> dict[str, str]:
    r = call(broker.broker, SHOP_USER, RequestCode.GET_BROKER_RUNTIME_INFO, {})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return fastjson.loads(r.body)["table"]


@NEEDS_ALI_ONS[0]
@NEEDS_ALI_ONS[1]
def test_b313_ali_ons_routes_produces_and_consumes_with_a_rocketmq_shops_own_files(shop_broker):
    """B-313: stock broker.conf + $ROCKETMQ_HOME/conf/plain_acl.yml: route found, send and consume succeed."""
    done = node(
        "produce.js",
        "--namesrv",
        shop_broker.namesrv,
        "--topic",
        TOPIC,
        "--group",
        "GID_BAR_PRODUCER",
        "--count",
        "5",
        *keys(SHOP_USER.access_key, SHOP_USER.secret_key),
    )
    assert done.returncode == 0, done.stderr
    sent = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [s["sendStatus"] for s in sent] == ["SEND_OK"] * 5
    done = node(
        "consume.js",
        "--namesrv",
        shop_broker.namesrv,
        "--topic",
        TOPIC,
        "--group",
        "GID_BAR_CONSUMER",
        "--expect",
        "5",
        *keys(SHOP_USER.access_key, SHOP_USER.secret_key),
    )
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert sorted(m["msgId"] for m in got) == sorted(s["msgId"] for s in sent)


def test_b313_the_broker_is_registered_in_process_and_strangers_still_are_not(shop_broker):
    """B-313: brokerStatus says the registration is ok; an unsigned REGISTER_BROKER from the wire is refused (B-176)."""
    assert runtime(shop_broker)["nameServerRegistration"] == "ok"
    stranger = {
        "brokerName": "broker-x",
        "brokerAddr": "10.9.9.9:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "10.9.9.9:10912",
        "brokerId": 0,
        "compressed": False,
    }
    r = call(shop_broker.namesrv, None, RequestCode.REGISTER_BROKER, stranger)
    assert r.code == ResponseCode.SYSTEM_ERROR and "No accessKey is configured" in (r.remark or "")
    r = call(shop_broker.namesrv, SHOP_USER, RequestCode.REGISTER_BROKER, stranger)
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert "Need admin permission for request code=103" in (r.remark or "")
    r = call(shop_broker.namesrv, None, RequestCode.GET_BROKER_CLUSTER_INFO, {})
    assert b"broker-x" not in r.body and b"broker-a" in r.body
    log = Path(shop_broker.data_dir.parent / "broker.log").read_text()
    assert "registers in-process" in log and "12345678" not in log
