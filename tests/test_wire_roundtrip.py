"""Producer, consumer and admin requests over TCP against a real broker (docs/protocol.md §7)."""

from __future__ import annotations

from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.remoting.message import decode_all, encode_properties
from tests.helpers import wait_until


async def send(running, topic, queue_id, body, props=None):
    return await running.call(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "PG",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": queue_id,
            "f": 0,
            "g": 1,
            "h": 0,
            "i": encode_properties(props or {}).decode(),
            "j": 0,
            "k": False,
            "m": False,
        },
        body,
    )


async def test_route_lists_the_broker_after_a_topic_is_created(running):
    await running.create_topic("T1", queues=4)
    # what the registration loop does on a change
    await running.server._register_all(running.client)
    response = await running.client.invoke(
        running.namesrv_addr,
        request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, version=121),
    )
    assert response.code == ResponseCode.SUCCESS
    route = fastjson.loads(response.body)
    assert route["brokerDatas"][0]["brokerAddrs"] == {0: running.addr}
    assert route["queueDatas"][0]["writeQueueNums"] == 4


async def test_a_send_that_creates_its_topic_asks_for_one_registration_and_the_route_lists_it(
    running,
):
    asked = running.server._register_wanted
    sent = await send(running, "AUTO1", -1, b"first")
    assert sent.code == ResponseCode.SUCCESS
    assert running.server._register_wanted == asked + 1  # the send created AUTO1 from TBW102
    assert (await send(running, "AUTO1", -1, b"second")).code == ResponseCode.SUCCESS
    assert running.server._register_wanted == asked + 1  # it existed: nothing new to register

    async def routed() -> bool:
        response = await running.client.invoke(
            running.namesrv_addr,
            request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "AUTO1"}, version=121),
        )
        return response.code == ResponseCode.SUCCESS

    await wait_until("AUTO1 in the name server's routes", routed)


async def test_send_then_pull_returns_the_stored_message(running):
    await running.create_topic("T1")
    sent = await send(running, "T1", 2, b"hello", {"TAGS": "TagA", "KEYS": "k1"})
    assert sent.code == ResponseCode.SUCCESS
    assert sent.ext_fields["queueId"] == "2" and sent.ext_fields["queueOffset"] == "0"
    pulled = await running.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "T1",
            "queueId": 2,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "TagA",
            "subVersion": 0,
        },
    )
    assert pulled.code == ResponseCode.SUCCESS and pulled.remark == "FOUND"
    (message,) = decode_all(pulled.body)
    assert message.body == b"hello" and message.tags == "TagA"
    assert message.msg_id == sent.ext_fields["msgId"]
    assert pulled.ext_fields["nextBeginOffset"] == "1"


async def test_b063_long_polled_pull_is_answered_when_a_message_arrives(running, nursery):
    import trio

    await running.create_topic("T1")
    answers = []
    pull = request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "T1",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 6,
            "commitOffset": 0,
            "suspendTimeoutMillis": 15000,
            "subscription": "*",
            "subVersion": 0,
        },
    )

    async def consumer():
        answers.append(await running.client.invoke(running.addr, pull, timeout=30))

    nursery.start_soon(consumer)
    await trio.testing.wait_all_tasks_blocked()
    assert answers == []  # held: the queue is empty
    await send(running, "T1", 0, b"late")
    while not answers:
        await trio.testing.wait_all_tasks_blocked()
    assert answers[0].code == ResponseCode.SUCCESS
    assert [m.body for m in decode_all(answers[0].body)] == [b"late"]


async def test_b063_a_long_poll_of_an_existing_group_is_recorded_as_decoded_and_woken(
    running, nursery
):
    """A long poll whose group exists is read, recorded and registered for arrivals in the read
    loop (only its wait runs as a task): its piggybacked commit is stored while it waits, and a
    message stored after it wakes it with that message."""
    import trio

    await running.create_topic("T1")
    fields = {
        "consumerGroup": "G",
        "topic": "T1",
        "queueId": 0,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": 4,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
    }
    created = await running.call(RequestCode.PULL_MESSAGE, fields)  # creates the group
    assert created.code == ResponseCode.PULL_NOT_FOUND
    held = request(
        RequestCode.PULL_MESSAGE,
        {**fields, "sysFlag": 7, "commitOffset": 5, "suspendTimeoutMillis": 15000},
    )
    answers = []

    async def consumer():
        answers.append(await running.client.invoke(running.addr, held, timeout=30))

    nursery.start_soon(consumer)
    await trio.testing.wait_all_tasks_blocked()
    assert answers == []  # held: the queue is empty
    assert running.server.broker.stored_offset("G", "T1", 0) == 5  # its commit, stored meanwhile
    await send(running, "T1", 0, b"late")
    while not answers:
        await trio.testing.wait_all_tasks_blocked()
    assert answers[0].code == ResponseCode.SUCCESS
    assert [m.body for m in decode_all(answers[0].body)] == [b"late"]


async def test_unknown_request_code_is_not_supported_with_a_remark(running):
    response = await running.call(9999)
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 9999 not supported"


async def test_missing_required_header_field_is_system_error_naming_it(running):
    response = await running.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T"}
    )
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "queueId" in response.remark


HEARTBEAT = (
    b'{"clientID":"10.0.0.5@7","consumerDataSet":[{"groupName":"GR","consumeType":"CONSUME_PASSIVELY",'
    b'"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","unitMode":false,'
    b'"subscriptionDataSet":[{"topic":"T1","subString":"*","subVersion":1}]}],"producerDataSet":[]}'
)


async def test_heartbeat_registers_the_consumer_and_creates_its_retry_topic(running):
    response = await running.call(RequestCode.HEART_BEAT, {}, HEARTBEAT)
    assert response.code == ResponseCode.SUCCESS
    listed = await running.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "GR"})
    assert fastjson.loads(listed.body) == {"consumerIdList": ["10.0.0.5@7"]}
    retry = running.server.broker.topic_config("%RETRY%GR")
    assert (retry.read_queue_nums, retry.write_queue_nums, retry.perm) == (1, 1, 6)


async def test_consumer_running_info_is_relayed_to_the_client_and_back(running, nursery):
    from es_broker.net.remoting_client import RemotingClient
    from es_broker.remoting.command import response_to

    async def answer(channel, command):
        if command.code != RequestCode.GET_CONSUMER_RUNNING_INFO:
            return None  # NOTIFY_CONSUMER_IDS_CHANGED after the heartbeat
        return response_to(
            command, ResponseCode.SUCCESS, body=b'{"properties":{"PROP_CONSUME_TYPE":"x"}}'
        )

    consumer = RemotingClient(nursery, on_request=answer)
    await consumer.invoke(running.addr, request(RequestCode.HEART_BEAT, {}, HEARTBEAT))
    relayed = await running.call(
        RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "GR", "clientId": "10.0.0.5@7"}
    )
    assert relayed.code == ResponseCode.SUCCESS
    assert fastjson.loads(relayed.body)["properties"]["PROP_CONSUME_TYPE"] == "x"
    missing = await running.call(
        RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "GR", "clientId": "nobody"}
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR and "not online" in missing.remark


async def test_closing_the_connection_unregisters_the_consumer(running, nursery):
    import trio

    from es_broker.net.remoting_client import RemotingClient

    consumer = RemotingClient(nursery)
    await consumer.invoke(running.addr, request(RequestCode.HEART_BEAT, {}, HEARTBEAT))
    await consumer.aclose()
    while running.server.clients.consumer_group("GR") is not None:
        await trio.testing.wait_all_tasks_blocked()
    listed = await running.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "GR"})
    assert (
        listed.code == ResponseCode.SYSTEM_ERROR
        and listed.remark == "no consumer for this group, GR"
    )
