"""The delay schedule: parking, delivery exactly once, cursors (B-96..B-99).

In process with a manual clock: a test moves time and runs delivery passes
itself (`Broker.deliver_delayed`, what the server's delivery service calls).
"""

from __future__ import annotations

import datetime

import pytest
import trio

from es_broker.commands.errors import MessageIllegal
from es_broker.commands.names import SCHEDULE_TOPIC
from es_broker.commands.placement import MessageIn
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.message import decode_all, decode_one, encode_properties
from tests.conftest import make_topic


def stored(broker, physical_offset):
    return decode_one(broker.message_at(physical_offset))[0]


async def delayed(broker, level: int, topic="T", queue_id=1, body=b"later", **props):
    return await broker.put_message(
        topic,
        queue_id,
        MessageIn(
            body, {"DELAY": str(level), "TAGS": "A", **props}, born_timestamp=42, reconsume_times=3
        ),
    )


def schedule_unit(broker, queue_id: int, offset: int = 0):
    with broker.store.read() as txn:
        return broker.store.cq.unit(txn, SCHEDULE_TOPIC, queue_id, offset)


async def test_b096_a_delayed_message_is_parked_in_schedule_queue_level_minus_one(broker, clock):
    await make_topic(broker)
    parked = await delayed(broker, 3)
    assert (parked.topic, parked.queue_id, parked.real_topic, parked.real_queue_id) == (
        SCHEDULE_TOPIC,
        2,
        "T",
        1,
    )
    assert parked.answer_queue_id == 1  # what the SEND answer names
    assert schedule_unit(broker, 2).tags_code == clock.now_ms() + 10_000  # store time + delay(3)
    message = stored(broker, parked.physical_offsets[0])
    assert (message.topic, message.queue_id) == (SCHEDULE_TOPIC, 2)
    assert (
        message.properties["REAL_TOPIC"],
        message.properties["REAL_QID"],
        message.properties["DELAY"],
    ) == ("T", "1", "3")
    assert broker.max_offset("T", 1) == 0  # not in its topic yet


async def test_b096_a_level_above_the_highest_is_stored_as_the_highest(broker, clock):
    await make_topic(broker)
    parked = await delayed(broker, 25)
    assert (parked.queue_id, parked.delay_level) == (17, 18)
    assert stored(broker, parked.physical_offsets[0]).properties["DELAY"] == "18"
    assert schedule_unit(broker, 17).tags_code == clock.now_ms() + 2 * 3_600_000


async def test_b096_no_delay_for_level_zero_or_below_and_none_for_a_batch(broker):
    await make_topic(broker)
    assert (await delayed(broker, 0)).topic == "T"
    assert (await delayed(broker, -2)).topic == "T"
    with pytest.raises(MessageIllegal, match="batch"):
        await broker.put_messages("T", 0, [MessageIn(b"a", {"DELAY": "1"}), MessageIn(b"b")])


async def test_b097_a_due_message_is_copied_to_its_real_queue_without_delay(broker, clock):
    await make_topic(broker)
    parked = await delayed(broker, 3, UNIQ_KEY="U1")
    clock.advance(9_999)
    early = await broker.deliver_delayed()
    assert (early.delivered, early.next_due) == ((), parked.store_timestamp + 10_000)
    clock.advance(1)
    (done,) = (await broker.deliver_delayed()).delivered
    assert (done.level, done.schedule_offset, done.topic, done.queue_id, done.queue_offset) == (
        3,
        0,
        "T",
        1,
        0,
    )
    original, copy = (
        stored(broker, parked.physical_offsets[0]),
        stored(broker, done.physical_offset),
    )
    assert (
        copy.topic,
        copy.queue_id,
        copy.body,
        copy.flag,
        copy.born_timestamp,
        copy.reconsume_times,
    ) == ("T", 1, b"later", original.flag, 42, 3)
    assert copy.store_timestamp == clock.now_ms() and copy.msg_id != original.msg_id
    assert "DELAY" not in copy.properties
    assert (
        copy.properties["WAIT"],
        copy.properties["REAL_TOPIC"],
        copy.properties["REAL_QID"],
    ) == ("false", "T", "1")
    assert (copy.properties["UNIQ_KEY"], copy.properties["TAGS"]) == ("U1", "A")
    (unit,) = decode_all(broker.get_message("T", 1, 0).body)
    assert unit.physical_offset == done.physical_offset
    assert (await broker.deliver_delayed()).delivered == ()  # exactly once


async def test_b097_delivery_is_fifo_within_a_level_and_levels_run_independently(broker, clock):
    await make_topic(broker)
    for i in range(3):
        await delayed(broker, 1, body=b"one-%d" % i)  # 1 s
        clock.advance(400)
    await delayed(broker, 2, body=b"five")  # 5 s
    clock.advance(100)  # t0 + 1300: only the first level-1 message is due (t0 + 1000)
    first = await broker.deliver_delayed()
    assert [(d.level, d.schedule_offset) for d in first.delivered] == [(1, 0)]
    assert first.next_due == first.now + 100  # the second level-1 message, at t0 + 1400
    clock.advance(10_000)
    rest = await broker.deliver_delayed()
    assert [(d.level, d.schedule_offset) for d in rest.delivered] == [(1, 1), (1, 2), (2, 0)]
    assert [m.body for m in decode_all(broker.get_message("T", 1, 0).body)] == [
        b"one-0",
        b"one-1",
        b"one-2",
        b"five",
    ]
    assert rest.next_due is None


async def test_b097_a_due_time_further_ahead_than_the_delay_means_now(broker, clock):
    await make_topic(broker)
    await delayed(broker, 2)  # due at t0 + 5 s
    clock.advance(-60_000)  # the clock stepped back a minute
    (done,) = (await broker.deliver_delayed()).delivered
    assert done.topic == "T"


async def test_b097_a_parked_message_removed_by_retention_is_skipped_and_recorded(
    config, clock, nursery
):
    clock.set(int(datetime.datetime(2024, 1, 1, 10).timestamp() * 1000))
    start = clock.now_ms()
    broker = Broker.open(
        config.storePathRootDir,
        config.replace(mappedFileSizeCommitLog=1000, messageDelayLevel="1s 100h"),
        clock,
    )
    await nursery.start(broker.run)
    await make_topic(broker, queues=2)
    await delayed(broker, 2)
    for i in range(20):  # later files; the newest is never deleted
        await broker.put_message("T", 0, MessageIn(b"m%02d" % i))
    # > 72 h later, at 04:xx
    clock.set(int(datetime.datetime(2024, 1, 5, 4, 30).timestamp() * 1000))
    assert (await broker.retention_pass()).deleted_files
    clock.set(start + 100 * 3_600_000)
    done = await broker.deliver_delayed()
    assert (done.delivered, done.skipped) == ((), 1)
    (skip,) = [r for _, r in broker.store.log.read() if r["type"] == "delayed_message_skipped"]
    assert (skip["level"], skip["schedule_offset"], skip["next_cursor"], skip["reason"]) == (
        2,
        0,
        1,
        "message_removed",
    )
    assert broker.delay_offsets() == {2: 1}


async def test_b098_cursors_are_recorded_survive_a_reopen_and_replay_the_same(
    config, clock, nursery
):
    broker = Broker.open(config.storePathRootDir, config, clock)
    async with trio.open_nursery() as inner:
        await inner.start(broker.run)
        await make_topic(broker)
        await delayed(broker, 1)
        await delayed(broker, 3)
        clock.advance(1000)
        assert len((await broker.deliver_delayed()).delivered) == 1
        inner.cancel_scope.cancel()
    broker.close()
    assert verify(config.storePathRootDir) == []
    reopened = Broker.open(config.storePathRootDir, config, clock)
    await nursery.start(reopened.run)
    assert reopened.delay_offsets() == {1: 1}  # delayOffset.json's offsetTable
    clock.advance(3_600_000)
    again = await reopened.deliver_delayed()
    # not level 1 a second time
    assert [(d.level, d.schedule_offset) for d in again.delivered] == [(3, 0)]
    assert reopened.max_offset("T", 1) == 2
    assert reopened.delay_offsets() == {1: 1, 3: 1}


async def test_b098_a_slave_never_delivers_delayed_messages(config, clock, nursery):
    master = Broker.open(config.storePathRootDir, config, clock)
    async with trio.open_nursery() as inner:
        await inner.start(master.run)
        await make_topic(master)
        await delayed(master, 1)
        inner.cancel_scope.cancel()
    master.close()
    slave = Broker.open(
        config.storePathRootDir, config.replace(brokerRole="SLAVE", brokerId=1), clock
    )
    await nursery.start(slave.run)
    clock.advance(60_000)
    assert (await slave.deliver_delayed()).delivered == ()
    assert slave.max_offset("T", 1) == 0 and slave.delay_offsets() == {}


async def test_b098_get_all_delay_offset_answers_the_cursors_after_a_delivery(running):
    await running.create_topic("T")
    sent = await running.call(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "PG",
            "b": "T",
            "c": "TBW102",
            "d": 4,
            "e": 1,
            "f": 0,
            "g": 1,
            "h": 0,
            "i": encode_properties({"DELAY": "1"}).decode(),
            "j": 0,
            "k": False,
            "m": False,
        },
        b"x",
    )
    assert (sent.code, sent.ext_fields["queueId"]) == (ResponseCode.SUCCESS, "1")
    # held until the delivery service stores the copy (the first pass runs 1 s after start, B-97)
    pulled = await running.client.invoke(
        running.addr, _pull("T", 1, 0, suspend_ms=20_000), timeout=30
    )
    assert pulled.code == ResponseCode.SUCCESS
    answer = await running.call(RequestCode.GET_ALL_DELAY_OFFSET)
    assert fastjson.loads(answer.body) == {"offsetTable": {1: 1}}
    assert answer.body == b'{"offsetTable":{1:1}}'


def _pull(topic: str, queue_id: int, offset: int, suspend_ms: int = 0, group: str = "G"):
    from es_broker.remoting.command import request

    return request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": 32,
            "sysFlag": 6 if suspend_ms else 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": "*",
            "subVersion": 0,
        },
    )


async def test_b099_a_retry_reaches_the_group_through_its_retry_topic_showing_the_original_topic(
    broker, clock
):
    await make_topic(broker)
    sent = await broker.put_message("T", 0, MessageIn(b"job", {"TAGS": "A"}))
    back = await broker.send_back("G", sent.physical_offsets[0])
    clock.advance(10_000)
    (done,) = (await broker.deliver_delayed()).delivered
    result = await broker.pull("G", "%RETRY%G", back.target_queue_id, 0, client="c1")
    (retried,) = decode_all(result.body)
    # the client shows T
    assert retried.topic == "%RETRY%G" and retried.properties["RETRY_TOPIC"] == "T"
    # the retry queue's
    assert (retried.queue_offset, retried.physical_offset) == (
        0,
        done.physical_offset,
    )


async def test_b098_a_slave_refuses_send_back_as_it_refuses_every_store(config, clock, nursery):
    from es_broker.commands.errors import ServiceNotAvailable

    slave = Broker.open(
        config.storePathRootDir, config.replace(brokerRole="SLAVE", brokerId=1), clock
    )
    await nursery.start(slave.run)
    with pytest.raises(ServiceNotAvailable):
        await slave.send_back("G", 0)


async def test_b097_the_delivery_service_sleeps_until_the_next_due_time_and_wakes_on_a_new_one(
    broker, clock, nursery, mock_clock
):
    """Trio time (mock_clock) and broker time (ManualClock) both move only when the test says so."""
    from trio.testing import wait_all_tasks_blocked

    from es_broker.server.delay_delivery import FIRST_DELAY, MAX_IDLE, DelayDeliveryService
    from es_broker.server.longpoll import PullHoldService

    await make_topic(broker)
    service = DelayDeliveryService(broker, PullHoldService())
    await nursery.start(service.run)
    mock_clock.jump(FIRST_DELAY)
    await wait_all_tasks_blocked()
    assert service.passes == 1  # the first pass, 1 s after start (B-97); nothing is parked
    await delayed(broker, 2)  # due in 5 s of broker time: storing it wakes the service
    await wait_all_tasks_blocked()
    assert service.passes == 2
    clock.advance(4_999)
    mock_clock.jump(MAX_IDLE - 0.001)  # not yet: the service sleeps no longer than MAX_IDLE
    await wait_all_tasks_blocked()
    assert service.passes == 2
    mock_clock.jump(0.001)
    await wait_all_tasks_blocked()
    assert (service.passes, service.delivered) == (3, 0)  # looked, and it is 1 ms early
    clock.advance(1)
    mock_clock.jump(0.001)  # it slept exactly until the due time
    await wait_all_tasks_blocked()
    assert (service.passes, service.delivered) == (4, 1)
    assert broker.max_offset("T", 1) == 1
