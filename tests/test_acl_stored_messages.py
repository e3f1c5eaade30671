"""No use of a stored message named by its offset crosses a perm (B-502, B-503).

With aclEnable=true, a real `es-broker serve` process: the account is
tests/acl_fixtures.PRODUCER (PUB|SUB on TopicA, SUB on GroupA, DENY by
default); TopicSecret belongs to the admin account. A send-back of a
TopicSecret message into the account's own group would copy it into
%RETRY%GroupA, where the account reads it (B-502); an END_TRANSACTION of a
TopicSecret half message would decide another producer's transaction (B-503).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from es_broker.remoting import message as wire_message
from es_broker.remoting.codes import RequestCode, ResponseCode
from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf, topics, wire
from tests.process_fixtures import ServedBroker, serve

TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory) -> Iterator[ServedBroker]:
    tmp = tmp_path_factory.mktemp("stored")
    conf, _ = acl_conf(tmp)
    with serve(tmp / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        yield broker


async def _offsets(nursery, broker: ServedBroker) -> dict[str, int]:
    """A TopicSecret message of the admin's and a TopicA message of the producer's: their offsets."""
    await topics(nursery, broker, "TopicA", "TopicSecret")
    admin, producer = wire(nursery, ADMIN), wire(nursery, PRODUCER)
    await admin.ok(
        broker.broker,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        body=b'{"groupName":"GroupA","consumeEnable":true,"retryQueueNums":1}',
    )
    phys = {}
    for who, topic in ((admin, "TopicSecret"), (producer, "TopicA")):
        r = await who.send(broker.broker, topic, 0, f"body of {topic}".encode())
        assert r.code == ResponseCode.SUCCESS, r.remark
        phys[topic] = wire_message.parse_offset_msg_id(r.require_str("msgId"))[1]
    return phys


def _send_back(offset: int, group: str = "GroupA") -> dict[str, object]:
    # delayLevel -1: straight to %DLQ%GroupA, stored at once (B-91)
    return {
        "offset": offset,
        "group": group,
        "delayLevel": -1,
        "originMsgId": "",
        "maxReconsumeTimes": 16,
    }


async def _max(nursery, broker: ServedBroker, topic: str) -> int:
    r = await wire(nursery, ADMIN).call(
        broker.broker, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0}
    )
    return r.require_long("offset") if r.code == ResponseCode.SUCCESS else 0


async def test_b502_send_back_of_a_message_of_a_topic_without_sub_is_refused(acl_broker, nursery):
    """B-502: CONSUMER_SEND_MSG_BACK of a TopicSecret message into the account's own group:
    NO_PERMISSION naming neither the topic nor the message, and nothing reaches its group's topics."""
    phys = await _offsets(nursery, acl_broker)
    producer = wire(nursery, PRODUCER)
    before = await _max(nursery, acl_broker, "%DLQ%GroupA")
    r = await producer.call(
        acl_broker.broker, RequestCode.CONSUMER_SEND_MSG_BACK, _send_back(phys["TopicSecret"])
    )
    assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
    assert f"No permission to send back the message at offset {phys['TopicSecret']}" in r.remark
    assert "TopicSecret" not in r.remark
    assert await _max(nursery, acl_broker, "%DLQ%GroupA") == before
    # its own message goes back as before
    own = await producer.call(
        acl_broker.broker, RequestCode.CONSUMER_SEND_MSG_BACK, _send_back(phys["TopicA"])
    )
    assert own.code == ResponseCode.SUCCESS, own.remark
    assert await _max(nursery, acl_broker, "%DLQ%GroupA") == before + 1
    # the admin sees everything: its send-back of the secret message is served
    admin = await wire(nursery, ADMIN).call(
        acl_broker.broker, RequestCode.CONSUMER_SEND_MSG_BACK, _send_back(phys["TopicSecret"])
    )
    assert admin.code == ResponseCode.SUCCESS, admin.remark


async def test_b502_a_dead_letter_whose_first_topic_is_secret_is_not_sent_back_either(
    acl_broker, nursery
):
    """B-502: a copy in a group's own topics keeps its first topic (RETRY_TOPIC); SUB on that
    topic is needed too, so a copy the admin made does not open the secret."""
    phys = await _offsets(nursery, acl_broker)
    admin = wire(nursery, ADMIN)
    await admin.ok(
        acl_broker.broker,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": "%RETRY%GroupA", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
    )
    copy = await admin.send(
        acl_broker.broker,
        "%RETRY%GroupA",
        0,
        b"a copy of the secret",
        {"RETRY_TOPIC": "TopicSecret"},
    )
    assert copy.code == ResponseCode.SUCCESS, copy.remark
    offset = wire_message.parse_offset_msg_id(copy.require_str("msgId"))[1]
    r = await wire(nursery, PRODUCER).call(
        acl_broker.broker, RequestCode.CONSUMER_SEND_MSG_BACK, _send_back(offset)
    )
    assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
    assert phys["TopicA"] >= 0


async def test_b503_end_transaction_of_a_half_message_of_a_topic_without_pub_is_refused(
    acl_broker, nursery
):
    """B-503: END_TRANSACTION names a half message by offset; the account must have PUB on its
    real topic (4.9.8 checks the signature only), else NO_PERMISSION and the half stays open."""
    await _offsets(nursery, acl_broker)
    admin, producer = wire(nursery, ADMIN), wire(nursery, PRODUCER)
    halves = {}
    for who, topic in ((admin, "TopicSecret"), (producer, "TopicA")):
        r = await who.call(
            acl_broker.broker,
            RequestCode.SEND_MESSAGE_V2,
            {
                "a": "pg_tx",
                "b": topic,
                "c": "TBW102",
                "d": 4,
                "e": 0,
                "f": TRANSACTION_PREPARED_TYPE,
                "g": 0,
                "h": 0,
                "i": wire_message.encode_properties(
                    {"TRAN_MSG": "true", "PGROUP": "pg_tx", "UNIQ_KEY": f"TX{topic}"}
                ).decode(),
                "j": 0,
                "k": False,
                "m": False,
            },
            b"half of " + topic.encode(),
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        phy = wire_message.parse_offset_msg_id(r.require_str("msgId"))[1]
        halves[topic] = (phy, r.require_long("queueOffset"), r.require_str("msgId"))

    def end(topic: str) -> dict[str, object]:
        phy, queue_offset, msg_id = halves[topic]
        return {
            "producerGroup": "pg_tx",
            "tranStateTableOffset": queue_offset,
            "commitLogOffset": phy,
            "commitOrRollback": TRANSACTION_COMMIT_TYPE,
            "fromTransactionCheck": False,
            "msgId": msg_id,
        }

    before = await _max(nursery, acl_broker, "TopicSecret")
    r = await producer.call(acl_broker.broker, RequestCode.END_TRANSACTION, end("TopicSecret"))
    assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
    assert "No permission to end the transaction of the message at offset" in r.remark
    assert "has no PUB on it" in r.remark and "TopicSecret" not in r.remark
    assert await _max(nursery, acl_broker, "TopicSecret") == before
    ok = await producer.call(acl_broker.broker, RequestCode.END_TRANSACTION, end("TopicA"))
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    done = await admin.call(acl_broker.broker, RequestCode.END_TRANSACTION, end("TopicSecret"))
    assert done.code == ResponseCode.SUCCESS, done.remark
    assert await _max(nursery, acl_broker, "TopicSecret") == before + 1


async def test_b502_send_back_needs_a_topic_the_group_subscribes_when_its_subscriptions_are_known(
    acl_broker, nursery
):
    """B-502: a group whose heartbeat subscribes only its retry topic sends back a TopicA message
    (which the account may SUB): its first topic is none the group subscribes, refused."""
    phys = await _offsets(nursery, acl_broker)
    producer = wire(nursery, PRODUCER)
    heartbeat = {
        "clientID": "127.0.0.1@b502",
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": "GroupA",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {"topic": "%RETRY%GroupA", "subString": "*", "subVersion": 1}
                ],
                "unitMode": False,
            }
        ],
    }
    await producer.ok(
        acl_broker.broker, RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode()
    )
    r = await producer.call(
        acl_broker.broker, RequestCode.CONSUMER_SEND_MSG_BACK, _send_back(phys["TopicA"])
    )
    assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
    assert "its topic is none that group GroupA subscribes" in r.remark
