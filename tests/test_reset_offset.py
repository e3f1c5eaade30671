"""Reset offset by time: the broker path (B-74..B-77), its record (S-12) and the admin's fallback (B-73, B-81)."""

from __future__ import annotations

import trio

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting import fastjson
from es_broker.remoting.codes import LanguageCode, RequestCode, ResponseCode
from es_broker.remoting.command import request

HEARTBEAT = (
    b'{"clientID":"10.0.0.5@7","consumerDataSet":[{"groupName":"G","consumeType":"CONSUME_PASSIVELY",'
    b'"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","unitMode":false,'
    b'"subscriptionDataSet":[{"topic":"T","subString":"*","subVersion":1}]}],"producerDataSet":[]}'
)


async def prepare(running, clock_times=(1000, 2000, 3000, 4000)):
    """Topic T with 2 queues, messages stored at the given times, group G at offsets {0: 3, 1: 1}."""
    await running.create_topic("T", queues=2)
    broker = running.server.broker
    from es_broker.commands.placement import MessageIn

    for q in (0, 1):
        for _ in clock_times:
            await broker.put_message("T", q, MessageIn(b"m"))
    await broker.commit_offset("G", "T", 0, 3)
    await broker.commit_offset("G", "T", 1, 1)


def invoke(timestamp: int, force: bool, language=LanguageCode.JAVA):
    return request(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": "T", "group": "G", "timestamp": timestamp, "isForce": force},
        language=language,
    )


async def test_b076_offline_group_answers_consumer_not_online_and_is_recorded(running):
    await prepare(running)
    response = await running.client.invoke(running.addr, invoke(-1, True))
    assert response.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert (
        response.remark
        == "Consumer not online, so can not reset offset, Group: G Topic: T Timestamp: -1"
    )
    _, record = list(running.server.broker.store.log.read())[-1]
    assert (record["type"], record["outcome"]) == ("reset_requested", "consumer_not_online")


async def test_b074_group_without_offsets_is_system_error(running):
    await running.create_topic("T", queues=2)
    response = await running.client.invoke(running.addr, invoke(-1, True))
    assert (response.code, response.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "THe consumer group <G> not exist",
    )


async def test_b076_online_clients_get_the_table_oneway_and_the_admin_gets_it_too(running, nursery):
    await prepare(running)
    notices = []

    async def on_request(channel, command):
        if command.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            notices.append(command)
        return None

    consumer = RemotingClient(nursery, on_request=on_request)
    await consumer.invoke(running.addr, request(RequestCode.HEART_BEAT, {}, HEARTBEAT))
    response = await running.client.invoke(running.addr, invoke(-1, True))
    assert response.code == ResponseCode.SUCCESS
    table = {
        k.as_dict()["queueId"]: v for k, v in fastjson.loads(response.body)["offsetTable"].items()
    }
    assert table == {0: 4, 1: 4}  # timestamp -1: every write queue to its max (B-74)
    while not notices:
        await trio.testing.wait_all_tasks_blocked()
    (notice,) = notices
    assert notice.is_oneway and notice.ext_fields["isForce"] == "false"
    assert notice.body == response.body
    # the broker path changes no offset by itself (B-77)
    assert running.server.broker.stored_offset("G", "T", 0) == 3


async def test_b075_without_force_a_reset_only_moves_backwards_and_says_so(running, nursery):
    await prepare(running)
    consumer = RemotingClient(nursery)
    await consumer.invoke(running.addr, request(RequestCode.HEART_BEAT, {}, HEARTBEAT))
    response = await running.client.invoke(running.addr, invoke(-1, False))
    table = {
        k.as_dict()["queueId"]: v for k, v in fastjson.loads(response.body)["offsetTable"].items()
    }
    assert table == {0: 3, 1: 1}  # max is ahead of both: nothing moves without force
    _, record = list(running.server.broker.store.log.read())[-1]
    assert [q[4] for q in record["queues"]] == ["unchanged_not_force", "unchanged_not_force"]
    assert record["notified"] == ["10.0.0.5@7"]


async def test_b072_c_flag_answers_the_table_as_a_list(running, nursery):
    await prepare(running)
    consumer = RemotingClient(nursery)
    await consumer.invoke(running.addr, request(RequestCode.HEART_BEAT, {}, HEARTBEAT))
    response = await running.client.invoke(running.addr, invoke(-1, True, LanguageCode.CPP))
    entries = fastjson.loads(response.body)["offsetTable"]
    assert sorted((e["queueId"], e["offset"]) for e in entries) == [(0, 4), (1, 4)]


def test_b081_offline_group_falls_back_to_the_old_path_and_writes_offsets(served):
    served.admin("updateTopic", "-b", served.broker, "-t", "T", "-r", "1", "-w", "1")
    for i in range(3):
        served.admin("sendMessage", "-t", "T", "-p", f"m{i}", "-i", "0")
    # the old path creates offsets for a group that never consumed (B-81)
    created = served.admin_json("resetOffsetByTimeOld", "-g", "OFFLINE", "-t", "T", "-s", "now")
    assert [
        (q["queueId"], q["consumerOffset"], q["rollbackOffset"]) for q in created["queues"]
    ] == [(0, 0, 3)]
    # with offsets but no consumer online, the broker path answers CONSUMER_NOT_ONLINE: the admin falls back
    first = served.admin_json("queryMsgByOffset", "-t", "T", "-b", "broker-a", "-i", "0", "-o", "0")
    result = served.admin_json(
        "resetOffsetByTime", "-g", "OFFLINE", "-t", "T", "-s", str(first["storeTimestamp"])
    )
    assert result["path"] == "old"
    assert [(q["queueId"], q["rollbackOffset"]) for q in result["queues"]] == [(0, 0)]
    progress = served.admin_json("consumerProgress", "-g", "OFFLINE")
    assert [(q["queueId"], q["consumerOffset"], q["diff"]) for q in progress["queues"]] == [
        (0, 0, 3)
    ]


def test_b072_timestamp_formats():
    from es_broker.cli.admin import parse_reset_time

    assert parse_reset_time("now") == -1
    assert parse_reset_time("1700000000000") == 1_700_000_000_000
    assert parse_reset_time("-5") == -5
    import datetime

    expected = int(datetime.datetime(2024, 1, 2, 3, 4, 5, 678000).timestamp() * 1000)
    assert parse_reset_time("2024-01-02#03:04:05:678") == expected
