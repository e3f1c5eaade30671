"""Bad input to the core API: a typed error with a RocketMQ code and a clear remark, nothing changed."""

from __future__ import annotations

import pytest

from es_broker.commands.errors import BrokerError
from es_broker.commands.placement import MessageIn
from es_broker.remoting.codes import ResponseCode
from tests.conftest import make_topic


async def refused(broker, call, code: ResponseCode, remark: str):
    before = broker.store.log.last_seq
    with pytest.raises(BrokerError) as err:
        result = call()
        if hasattr(result, "__await__"):
            await result
    assert err.value.code == code
    assert remark in err.value.remark
    assert broker.store.log.last_seq == before


async def test_send_to_unknown_topic_is_topic_not_exist(broker):
    await refused(
        broker,
        lambda: broker.put_message("NOPE", 0, MessageIn(b"x")),
        ResponseCode.TOPIC_NOT_EXIST,
        "topic[NOPE] not exist",
    )


async def test_pull_from_unknown_topic_is_topic_not_exist(broker):
    await refused(
        broker, lambda: broker.pull("G", "NOPE", 0, 0), ResponseCode.TOPIC_NOT_EXIST, "NOPE"
    )


async def test_b013_send_to_queue_out_of_range_is_system_error(broker):
    await make_topic(broker, queues=2)
    await refused(
        broker,
        lambda: broker.put_message("T", 2, MessageIn(b"x")),
        ResponseCode.SYSTEM_ERROR,
        "queueId[2] is illegal",
    )


async def test_negative_pull_offset_is_refused(broker):
    await make_topic(broker)
    await refused(
        broker, lambda: broker.pull("G", "T", 0, -1), ResponseCode.SYSTEM_ERROR, "negative"
    )


async def test_negative_queue_id_for_pull_is_refused(broker):
    await make_topic(broker)
    await refused(
        broker, lambda: broker.pull("G", "T", -1, 0), ResponseCode.SYSTEM_ERROR, "queueId[-1]"
    )


async def test_body_over_max_message_size_is_message_illegal(broker):
    await make_topic(broker)
    await refused(
        broker,
        lambda: broker.put_message("T", 0, MessageIn(b"x" * (4 * 1024 * 1024 + 1))),
        ResponseCode.MESSAGE_ILLEGAL,
        "exceeds maxMessageSize 4194304",
    )


async def test_body_of_exactly_max_message_size_is_stored(broker):
    await make_topic(broker)
    result = await broker.put_message("T", 0, MessageIn(b"x" * (4 * 1024 * 1024)))
    assert result.queue_offset == 0


@pytest.mark.parametrize("topic", ["", "bad topic", "a/b", "x" * 128, "tab\t"])
async def test_b024_illegal_topic_names_are_refused(broker, topic):
    await refused(
        broker,
        lambda: broker.update_topic({"topicName": topic}),
        ResponseCode.SYSTEM_ERROR,
        "topic",
    )


async def test_b024_system_topic_cannot_be_created(broker):
    await refused(
        broker,
        lambda: broker.update_topic({"topicName": "SCHEDULE_TOPIC_XXXX"}),
        ResponseCode.SYSTEM_ERROR,
        "conflict with system topic",
    )


async def test_b024_sending_to_schedule_topic_is_forbidden(broker):
    await refused(
        broker,
        lambda: broker.put_message("SCHEDULE_TOPIC_XXXX", 0, MessageIn(b"x")),
        ResponseCode.NO_PERMISSION,
        "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden.",
    )


async def test_b021_pull_from_write_only_topic_is_no_permission(broker):
    await make_topic(broker, perm=2)
    await refused(
        broker,
        lambda: broker.pull("G", "T", 0, 0),
        ResponseCode.NO_PERMISSION,
        "the topic[T] pulling message is forbidden",
    )


async def test_b020_perm_change_is_recorded_with_old_and_new(broker):
    await make_topic(broker)
    await broker.update_topic_perm("T", 2, requester="ops")
    assert broker.topic_config("T").perm == 2
    _, record = list(broker.store.log.read())[-1]
    assert (record["type"], record["old_perm"], record["perm"], record["requester"]) == (
        "topic_perm_changed",
        6,
        2,
        "ops",
    )


async def test_wrong_types_are_refused(broker):
    await refused(
        broker,
        lambda: broker.update_topic({"topicName": "T", "readQueueNums": "8"}),
        ResponseCode.SYSTEM_ERROR,
        "readQueueNums must be an integer",
    )
    await refused(
        broker,
        lambda: broker.commit_offset("G", "T", 0, "12"),
        ResponseCode.SYSTEM_ERROR,
        "commitOffset",
    )


async def test_perm_change_of_unknown_topic_is_topic_not_exist(broker):
    await refused(
        broker, lambda: broker.update_topic_perm("NOPE", 6), ResponseCode.TOPIC_NOT_EXIST, "NOPE"
    )


async def test_auto_create_from_tbw102_on_send(broker):
    result = await broker.put_message(
        "NEWT", -1, MessageIn(b"x"), default_topic="TBW102", default_topic_queue_nums=4
    )
    config = broker.topic_config("NEWT")
    assert (config.write_queue_nums, config.perm) == (4, 6)
    assert 0 <= result.queue_id < 4
