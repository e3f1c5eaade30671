"""No read crosses a perm: with aclEnable=true, a real `es-broker serve` process answers each
account only the messages, offsets and names it may see.

The account is tests/acl_fixtures.PRODUCER: PUB|SUB on TopicA, SUB on GroupA, DENY by default;
TopicSecret and GroupSecret belong to the admin account.

Behaviours: docs/semantics.md "es-broker's bound signature and reads within perms (B-345..B-354)".
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from es_broker.remoting import message as wire_message
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf, refused, topics, wire
from tests.process_fixtures import ServedBroker, serve


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory) -> Iterator[ServedBroker]:
    tmp = tmp_path_factory.mktemp("reads")
    conf, _ = acl_conf(tmp)
    with serve(tmp / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        yield broker


async def _sent(nursery, broker: ServedBroker) -> dict[str, int]:
    """TopicSecret holds an admin message, TopicA one of the producer's; offsets committed for both."""
    await topics(nursery, broker, "TopicA", "TopicSecret")
    admin, producer = wire(nursery, ADMIN), wire(nursery, PRODUCER)
    for group in ("GroupSecret", "GroupA"):
        await admin.ok(
            broker.broker,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            body=b'{"groupName":"%s","consumeEnable":true}' % group.encode(),
        )
    phys = {}
    for who, topic in ((admin, "TopicSecret"), (producer, "TopicA")):
        r = await who.send(broker.broker, topic, 0, f"body of {topic}".encode())
        assert r.code == ResponseCode.SUCCESS, r.remark
        phys[topic] = wire_message.parse_offset_msg_id(r.require_str("msgId"))[1]
    await admin.commit(broker.broker, "GroupSecret", "TopicSecret", 0, 1)
    await producer.commit(broker.broker, "GroupA", "TopicA", 0, 1)
    return phys


def no_permission(r, words: str) -> None:
    assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
    assert r.remark is not None and words in r.remark, r.remark
    assert not r.body


async def test_b350_view_message_by_id_needs_sub_on_the_messages_topic(acl_broker, nursery):
    """B-350: VIEW_MESSAGE_BY_ID of a TopicSecret message is refused to an account without SUB on it."""
    phys = await _sent(nursery, acl_broker)
    producer = wire(nursery, PRODUCER)
    r = await producer.call(
        acl_broker.broker, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys["TopicSecret"]}
    )
    no_permission(r, f"No permission to read the message at offset {phys['TopicSecret']}")
    assert b"TopicSecret" not in (r.remark or "").encode()
    own = await producer.ok(
        acl_broker.broker, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys["TopicA"]}
    )
    assert wire_message.decode_one(own.body)[0].body == b"body of TopicA"
    admin = await wire(nursery, ADMIN).ok(
        acl_broker.broker, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys["TopicSecret"]}
    )
    assert wire_message.decode_one(admin.body)[0].body == b"body of TopicSecret"


async def test_b350_query_message_and_offset_reads_need_sub_on_the_topic(acl_broker, nursery):
    """B-350: by key, by unique key, max offset and topic stats of TopicSecret are refused."""
    await _sent(nursery, acl_broker)
    producer = wire(nursery, PRODUCER)
    query = {
        "topic": "TopicSecret",
        "key": "k",
        "maxNum": 32,
        "beginTimestamp": 0,
        "endTimestamp": 1 << 62,
    }
    for code, fields in (
        (RequestCode.QUERY_MESSAGE, query),
        (RequestCode.QUERY_MESSAGE, {**query, "_UNIQUE_KEY_QUERY": "true"}),
        (RequestCode.GET_MAX_OFFSET, {"topic": "TopicSecret", "queueId": 0}),
        (RequestCode.GET_TOPIC_STATS_INFO, {"topic": "TopicSecret"}),
        (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "GroupSecret"}),
    ):
        r = await producer.call(acl_broker.broker, code, fields)
        refused(r, "No default permission for ")
        assert not r.body


async def test_b350_get_all_consumer_offset_and_consume_stats_show_only_what_the_account_may_sub(
    acl_broker, nursery
):
    """B-350: GET_ALL_CONSUMER_OFFSET lists TopicA@GroupA only; an admin sees every group."""
    await _sent(nursery, acl_broker)
    mine = await wire(nursery, PRODUCER).ok(acl_broker.broker, RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert b"TopicA@GroupA" in mine.body and b"Secret" not in mine.body
    every = await wire(nursery, ADMIN).ok(acl_broker.broker, RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert b"TopicSecret@GroupSecret" in every.body
    stats = await wire(nursery, PRODUCER).ok(
        acl_broker.broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "GroupA"}
    )
    assert b"TopicA" in stats.body and b"Secret" not in stats.body


async def test_b351_topic_and_group_lists_are_filtered_to_the_accounts_scope(acl_broker, nursery):
    """B-351: GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG, ACCOUNT_SCOPE name no secret."""
    await _sent(nursery, acl_broker)
    producer, admin = wire(nursery, PRODUCER), wire(nursery, ADMIN)
    for code in (
        RequestCode.GET_ALL_TOPIC_CONFIG,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        EsRequestCode.ACCOUNT_SCOPE,
    ):
        mine = await producer.ok(acl_broker.broker, code)
        assert b"Secret" not in mine.body, (code, mine.body[:300])
        every = await admin.ok(acl_broker.broker, code)
        assert b"Secret" in every.body, code
    topics_body = (await producer.ok(acl_broker.broker, RequestCode.GET_ALL_TOPIC_CONFIG)).body
    assert b"TopicA" in topics_body
    groups_body = (
        await producer.ok(acl_broker.broker, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    ).body
    assert b"GroupA" in groups_body


async def test_b352_broker_config_shows_no_account_name_and_no_acl_path_to_a_non_admin(
    acl_broker, nursery
):
    """B-352: GET_BROKER_CONFIG names no account; the ACL file's path only to admins."""
    mine = (await wire(nursery, PRODUCER).ok(acl_broker.broker, RequestCode.GET_BROKER_CONFIG)).body
    assert ADMIN.access_key.encode() not in mine and b"plain_acl.yml" not in mine
    assert b"acl_plain_file" not in mine and b"brokerName=" in mine
    every = (await wire(nursery, ADMIN).ok(acl_broker.broker, RequestCode.GET_BROKER_CONFIG)).body
    assert b"plain_acl.yml" in every and ADMIN.access_key.encode() not in every
