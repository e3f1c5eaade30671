"""Send-back, retry topic and dead letters, broker side (B-90..B-95, B-103..B-105, S-10).

The broker core in process with a manual clock: each test decides time and
drives the consumer side with pulls and send-backs as a client would.
"""

from __future__ import annotations

import pytest

from es_broker.commands.errors import BrokerError, GroupNotExist, NoPermission
from es_broker.commands.names import SCHEDULE_TOPIC
from es_broker.commands.placement import MessageIn
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.message import decode_all, decode_one
from tests.conftest import make_topic


async def open_broker(config, clock, nursery, **changes) -> Broker:
    b = Broker.open(config.storePathRootDir, config.replace(**changes), clock)
    await nursery.start(b.run)
    return b


async def send(broker, topic="T", queue_id=0, body=b"m", props=None, reconsume_times=0, **kw):
    return await broker.put_message(
        topic,
        queue_id,
        MessageIn(body, props or {"TAGS": "A", "UNIQ_KEY": "U1"}, reconsume_times=reconsume_times),
        **kw,
    )


def stored(broker, physical_offset):
    return decode_one(broker.message_at(physical_offset))[0]


def closed_and_verified(broker) -> bool:
    """Close the broker's environment and replay its log: every projection must come back identical."""
    broker.close()
    return verify(broker.config.storePathRootDir) == []


def records(broker, kind):
    return [r for _, r in broker.store.log.read() if r["type"] == kind]


async def fail_and_redeliver(broker, clock, group, phy, **kw):
    """One failed delivery: send back, let the delay pass, deliver; the copy in %RETRY%G."""
    result = await broker.send_back(group, phy, **kw)
    if result.decision != "retry":
        return result, None
    clock.advance(result.stored.deliver_at - clock.now_ms())
    done = await broker.deliver_delayed()
    (delivered,) = done.delivered
    return result, stored(broker, delivered.physical_offset)


async def test_b090_send_back_for_an_unknown_group_without_auto_create_is_group_not_exist(
    config, clock, nursery
):
    broker = await open_broker(config, clock, nursery, autoCreateSubscriptionGroup=False)
    await make_topic(broker)
    sent = await send(broker)
    with pytest.raises(GroupNotExist):
        await broker.send_back("G", sent.physical_offsets[0])
    assert broker.topic_config("%RETRY%G") is None


async def test_b090_send_back_on_a_broker_without_write_is_no_permission(config, clock, nursery):
    broker = await open_broker(config, clock, nursery, brokerPermission=4)
    await make_topic(broker)
    sent = await send(broker)
    with pytest.raises(NoPermission, match="sending message is forbidden"):
        await broker.send_back("G", sent.physical_offsets[0])
    assert records(broker, "message_sent_back") == []


async def test_b090_retry_topic_without_write_is_no_permission(broker):
    await make_topic(broker)
    await make_topic(broker, "%RETRY%G", queues=1, perm=4)
    sent = await send(broker)
    with pytest.raises(NoPermission, match=r"the topic\[%RETRY%G\] sending message is forbidden"):
        await broker.send_back("G", sent.physical_offsets[0])


async def test_b090_unknown_offset_is_system_error_but_the_retry_topic_stays_created(broker):
    with pytest.raises(BrokerError) as refused:
        await broker.send_back("G", 123456)
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert refused.value.remark == "look message by offset failed, 123456"
    retry = broker.topic_config("%RETRY%G")
    assert (retry.read_queue_nums, retry.write_queue_nums, retry.perm) == (1, 1, 6)
    assert broker.group_config("G") is not None


async def test_b090_retry_queue_is_random_over_retry_queue_nums_and_recorded(broker):
    await make_topic(broker)
    await broker.update_group({"groupName": "G", "retryQueueNums": 4})
    sent = await send(broker)
    chosen = {
        (await broker.send_back("G", sent.physical_offsets[0])).target_queue_id for _ in range(40)
    }
    assert chosen <= {0, 1, 2, 3} and len(chosen) > 1
    assert broker.topic_config("%RETRY%G").write_queue_nums == 4
    recorded = [r["target_queue_id"] for r in records(broker, "message_sent_back")]
    assert set(recorded) == chosen  # the decision is in the record: replay does not draw again
    assert closed_and_verified(broker)


async def test_b091_max_reconsume_times_from_the_header_else_the_group(broker):
    await make_topic(broker)
    await broker.update_group({"groupName": "G", "retryMaxTimes": 2})
    at_two = await send(broker, reconsume_times=2)
    at_one = await send(broker, reconsume_times=1)
    assert (await broker.send_back("G", at_two.physical_offsets[0])).decision == "dlq"  # group: 2
    assert (await broker.send_back("G", at_one.physical_offsets[0])).decision == "retry"
    assert (
        await broker.send_back("G", at_two.physical_offsets[0], max_reconsume_times=3)
    ).decision == "retry"
    assert (
        await broker.send_back("G", at_one.physical_offsets[0], max_reconsume_times=1)
    ).decision == "dlq"


async def test_b091_default_limit_retries_rt_0_to_15_and_dead_letters_rt_16(broker):
    await make_topic(broker)
    decisions = {}
    for rt in (0, 15, 16, 17):
        sent = await send(broker, reconsume_times=rt)
        decisions[rt] = (await broker.send_back("G", sent.physical_offsets[0])).decision
    assert decisions == {0: "retry", 15: "retry", 16: "dlq", 17: "dlq"}


async def test_b091_delay_level_minus_one_dead_letters_at_any_reconsume_times(broker):
    await make_topic(broker)
    sent = await send(broker)
    result = await broker.send_back("G", sent.physical_offsets[0], -1)
    assert (result.decision, result.reason, result.target_topic, result.delay_level) == (
        "dlq",
        "delay_level_negative",
        "%DLQ%G",
        0,
    )
    dead = stored(broker, result.stored.physical_offsets[0])
    assert (dead.topic, dead.queue_id, dead.properties["DELAY"]) == ("%DLQ%G", 0, "0")


@pytest.mark.parametrize(
    ("rt", "header_level", "expected"), [(0, 0, 3), (4, 0, 7), (0, 5, 5), (15, 0, 18), (0, 30, 18)]
)
async def test_b092_retry_level_is_3_plus_reconsume_times_or_the_header_clamped_to_18(
    broker, rt, header_level, expected
):
    await make_topic(broker)
    sent = await send(broker, reconsume_times=rt)
    result = await broker.send_back("G", sent.physical_offsets[0], header_level)
    assert result.delay_level == expected
    parked = stored(broker, result.stored.physical_offsets[0])
    assert (parked.topic, parked.queue_id, parked.properties["DELAY"]) == (
        SCHEDULE_TOPIC,
        expected - 1,
        str(expected),
    )


async def test_b093_the_new_message_copies_the_original_and_adds_the_retry_properties(
    broker, clock
):
    await make_topic(broker)
    sent = await send(broker, "T", 2, b"payload", {"TAGS": "A", "KEYS": "k1", "UNIQ_KEY": "U1"})
    original = stored(broker, sent.physical_offsets[0])
    clock.advance(5000)
    result = await broker.send_back("G", sent.physical_offsets[0])
    copy = stored(broker, result.stored.physical_offsets[0])
    assert copy.physical_offset != original.physical_offset and copy.msg_id != original.msg_id
    assert copy.store_timestamp == original.store_timestamp + 5000
    assert (
        copy.body,
        copy.flag,
        copy.sys_flag,
        copy.born_timestamp,
        copy.born_host,
        copy.store_host,
    ) == (
        original.body,
        original.flag,
        original.sys_flag,
        original.born_timestamp,
        original.born_host,
        original.store_host,
    )
    assert copy.reconsume_times == original.reconsume_times + 1
    props = copy.properties
    # the broker's id: it never sees UNIQ_KEY as an id
    assert props["ORIGIN_MESSAGE_ID"] == original.msg_id
    assert (props["RETRY_TOPIC"], props["UNIQ_KEY"], props["TAGS"], props["KEYS"]) == (
        "T",
        "U1",
        "A",
        "k1",
    )
    assert (props["WAIT"], props["DELAY"], props["REAL_TOPIC"], props["REAL_QID"]) == (
        "false",
        "3",
        "%RETRY%G",
        str(result.target_queue_id),
    )
    # a second failure keeps the first ORIGIN_MESSAGE_ID and RETRY_TOPIC
    clock.advance(10_000)
    (delivered,) = (await broker.deliver_delayed()).delivered
    again = await broker.send_back("G", delivered.physical_offset)
    second = stored(broker, again.stored.physical_offsets[0])
    assert (second.properties["ORIGIN_MESSAGE_ID"], second.properties["RETRY_TOPIC"]) == (
        original.msg_id,
        "T",
    )
    assert second.reconsume_times == 2


async def test_b093_send_back_is_recorded_linking_the_original_and_the_copy(broker):
    await make_topic(broker)
    sent = await send(broker)
    result = await broker.send_back("G", sent.physical_offsets[0], requester="10.0.0.5@7")
    (record,) = records(broker, "message_sent_back")
    assert (record["offset"], record["msg_id"], record["group"], record["requester"]) == (
        sent.physical_offsets[0],
        sent.msg_ids[0],
        "G",
        "10.0.0.5@7",
    )
    assert (
        record["decision"],
        record["delay_level"],
        record["delay_ms"],
        record["target_topic"],
    ) == ("retry", 3, 10_000, "%RETRY%G")
    assert (record["stored_phy"], record["stored_seq"]) == (
        result.stored.physical_offsets[0],
        result.stored.seq,
    )
    assert record["stored_seq"] == result.seq - 1  # the copy's messages_stored, in the same job


async def test_b094_retry_queue_nums_zero_answers_success_and_stores_nothing(broker):
    await make_topic(broker)
    await broker.update_group({"groupName": "G", "retryQueueNums": 0})
    sent = await send(broker)
    stores_before = len(records(broker, "messages_stored"))
    result = await broker.send_back("G", sent.physical_offsets[0])
    assert (result.decision, result.stored) == ("dropped", None)
    assert len(records(broker, "messages_stored")) == stores_before
    assert broker.topic_config("%RETRY%G") is None and broker.topic_config("%DLQ%G") is None
    (record,) = records(broker, "message_sent_back")  # the drop is on the record, for the audit
    assert record["decision"] == "dropped"


async def test_s010_strict_retry_config_refuses_zero_retry_queues_and_dead_letters_old_ones(
    config, clock, nursery
):
    broker = await open_broker(config, clock, nursery)
    await make_topic(broker)
    await broker.update_group({"groupName": "G", "retryQueueNums": 0})  # accepted in compat mode
    sent = await send(broker)
    broker.config = broker.store.config = broker.config.replace(strict_retry_config=True)
    with pytest.raises(BrokerError, match="retryQueueNums of group G2 must be at least 1"):
        await broker.update_group({"groupName": "G2", "retryQueueNums": 0})
    result = await broker.send_back("G", sent.physical_offsets[0])
    assert (result.decision, result.reason, result.target_topic) == (
        "dlq",
        "no_retry_queues",
        "%DLQ%G",
    )


async def test_b095_send_to_the_retry_topic_at_max_reconsume_times_goes_to_the_dlq(broker):
    await make_topic(broker)
    fallback = {"TAGS": "A", "RETRY_TOPIC": "T", "ORIGIN_MESSAGE_ID": "X", "DELAY": "19"}
    below = await send(broker, "%RETRY%G", -1, props=dict(fallback, DELAY="18"), reconsume_times=15)
    at = await send(broker, "%RETRY%G", -1, props=fallback, reconsume_times=16)
    assert (below.topic, below.real_topic) == (SCHEDULE_TOPIC, "%RETRY%G")
    assert (at.topic, at.queue_id, at.diverted_from) == ("%DLQ%G", 0, "%RETRY%G")
    dead = stored(broker, at.physical_offsets[0])
    assert dead.properties["DELAY"] == "0"  # diverted with the delay cleared
    dlq = broker.topic_config("%DLQ%G")
    assert (dlq.read_queue_nums, dlq.write_queue_nums, dlq.perm) == (1, 1, 2)
    header = await send(
        broker, "%RETRY%G", -1, props=fallback, reconsume_times=3, max_reconsume_times=3
    )
    assert header.topic == "%DLQ%G"


async def test_b095_the_fallback_path_dead_letters_one_delivery_earlier_than_the_broker_path(
    broker,
):
    await make_topic(broker)
    await broker.update_group({"groupName": "G", "retryMaxTimes": 2})
    consumed = await send(broker, reconsume_times=2)  # the third delivery (rt 2) failed
    # broker path: the consumed message's rt (2) >= 2 -> DLQ after 3 deliveries
    assert (await broker.send_back("G", consumed.physical_offsets[0])).decision == "dlq"
    # fallback path after the second delivery (rt 1): the client sends rt + 1 = 2 -> DLQ already
    fallback = await send(
        broker, "%RETRY%G", -1, props={"RETRY_TOPIC": "T", "DELAY": "4"}, reconsume_times=2
    )
    assert fallback.topic == "%DLQ%G"


async def test_s010_strict_retry_config_uses_one_threshold_for_both_paths(config, clock, nursery):
    broker = await open_broker(config, clock, nursery, strict_retry_config=True)
    await make_topic(broker)
    await broker.update_group({"groupName": "G", "retryMaxTimes": 2})
    fallback = await send(
        broker, "%RETRY%G", -1, props={"RETRY_TOPIC": "T", "DELAY": "4"}, reconsume_times=2
    )
    # rt after increment 2 < max + 1: retried like the broker path
    assert fallback.topic == SCHEDULE_TOPIC
    over = await send(
        broker, "%RETRY%G", -1, props={"RETRY_TOPIC": "T", "DELAY": "5"}, reconsume_times=3
    )
    assert over.topic == "%DLQ%G"


async def test_b103_dlq_topic_has_one_queue_and_dlq_topic_perm_and_keeps_an_existing_perm(
    config, clock, nursery
):
    broker = await open_broker(config, clock, nursery, dlq_topic_perm=6)
    await make_topic(broker)
    sent = await send(broker)
    await broker.send_back("G", sent.physical_offsets[0], -1)
    dlq = broker.topic_config("%DLQ%G")
    assert (dlq.read_queue_nums, dlq.write_queue_nums, dlq.perm) == (1, 1, 6)
    await broker.update_topic_perm("%DLQ%G", 2)
    await broker.send_back("G", sent.physical_offsets[0], -1)
    assert broker.topic_config("%DLQ%G").perm == 2
    assert broker.max_offset("%DLQ%G", 0) == 2


async def test_b104_a_write_only_dlq_refuses_reads_until_its_perm_is_6(broker):
    await make_topic(broker)
    sent = await send(broker)
    await broker.send_back("G", sent.physical_offsets[0], -1)
    assert broker.topic_config("%DLQ%G").perm == 2  # dlq_topic_perm default (B-103)
    with pytest.raises(NoPermission, match=r"the topic\[%DLQ%G\] pulling message is forbidden"):
        await broker.pull("TOOLS_CONSUMER", "%DLQ%G", 0, 0)
    # topicStatus still works
    assert (broker.min_offset("%DLQ%G", 0), broker.max_offset("%DLQ%G", 0)) == (
        0,
        1,
    )
    await broker.update_topic_perm("%DLQ%G", 6, requester="ops")
    (dead,) = decode_all((await broker.pull("DLQ_READER", "%DLQ%G", 0, 0)).body)
    assert dead.properties["ORIGIN_MESSAGE_ID"] == sent.msg_ids[0]
    assert dead.properties["RETRY_TOPIC"] == "T"


async def test_b105_a_dead_letter_after_the_default_17_deliveries(broker, clock):
    await make_topic(broker)
    sent = await send(broker, "T", 1)
    phy, deliveries = sent.physical_offsets[0], 1
    delays = []
    while True:
        result, copy = await fail_and_redeliver(broker, clock, "G", phy)
        if copy is None:
            break
        delays.append(result.stored.deliver_at - result.stored.store_timestamp)
        deliveries += 1
        phy = copy.physical_offset
        assert (copy.topic, copy.reconsume_times) == ("%RETRY%G", deliveries - 1)
    assert deliveries == 17 and result.decision == "dlq"
    levels = broker.config.delay_levels_ms()
    assert delays == levels[2:18]  # 10s, 30s, 1m, ... 2h (B-06)
    assert sum(delays) == ((4 * 60 + 45) * 60 + 40) * 1000  # 4 h 45 min 40 s
    dead = stored(broker, result.stored.physical_offsets[0])
    assert (dead.topic, dead.reconsume_times) == ("%DLQ%G", 17)
    props = dead.properties
    assert (
        props["RETRY_TOPIC"],
        props["ORIGIN_MESSAGE_ID"],
        props["UNIQ_KEY"],
        props["DELAY"],
    ) == ("T", sent.msg_ids[0], "U1", "0")
    # its last hop went through the schedule
    assert (props["REAL_TOPIC"], props["REAL_QID"]) == (
        "%RETRY%G",
        "0",
    )
    assert "MAX_OFFSET" not in props and "MIN_OFFSET" not in props
    assert closed_and_verified(broker)
