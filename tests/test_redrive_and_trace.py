"""Re-driving dead letters (S-9) and a message's journey from the records (messageTrace).

In process with a manual clock; the process tests (test_retry_process.py)
run the same through the wire and the admin CLI.
"""

from __future__ import annotations

import pytest

from es_broker.cli.admin import render_trace
from es_broker.commands import trace
from es_broker.commands.errors import TopicNotExist
from es_broker.commands.placement import MessageIn
from es_broker.commands.slave_journal import SlaveDelivery
from es_broker.commands.slave_offsets import merge_job
from es_broker.config import BrokerConfig
from es_broker.core.replay import replay
from es_broker.remoting.message import decode_one
from es_broker.store import Store
from es_broker.timetravel.timeparse import format_time
from tests.conftest import make_topic


def stored(broker, physical_offset):
    return decode_one(broker.message_at(physical_offset))[0]


async def dead_letter(broker, topic: str, body: bytes = b"poison", group: str = "G") -> int:
    """Send to topic and dead-letter it at once (delayLevel -1); its physical offset in %DLQ%G."""
    sent = await broker.put_message(topic, 0, MessageIn(body, {"UNIQ_KEY": body.decode()}))
    return (await broker.send_back(group, sent.physical_offsets[0], -1)).stored.physical_offsets[0]


def records(broker, kind):
    return [r for _, r in broker.store.log.read() if r["type"] == kind]


async def test_s009_redrive_resends_dead_letters_to_the_retry_topic_with_reconsume_times_reset(
    broker,
):
    await make_topic(broker, "T1", queues=1)
    await make_topic(broker, "T2", queues=1)
    first, second = await dead_letter(broker, "T1", b"a"), await dead_letter(broker, "T2", b"b")
    assert broker.topic_config("%DLQ%G").perm == 2  # no read permission is needed to re-drive
    result = await broker.redrive_dlq("G", requester="ops")
    assert [(i.physical_offset, i.original_topic, i.target_topic) for i in result.items] == [
        (first, "T1", "%RETRY%G"),
        (second, "T2", "%RETRY%G"),
    ]
    copies = [
        stored(broker, broker.store.cq.unit(broker.store.read(), "%RETRY%G", 0, n).physical_offset)
        for n in range(2)
    ]
    assert [(c.body, c.reconsume_times, c.properties["RETRY_TOPIC"]) for c in copies] == [
        (b"a", 0, "T1"),
        (b"b", 0, "T2"),
    ]
    assert all("DELAY" not in c.properties for c in copies)
    assert [
        (r["offset"], r["requester"], r["stored_msg_id"])
        for r in records(broker, "dead_letter_redriven")
    ] == [(first, "ops", result.items[0].new_msg_id), (second, "ops", result.items[1].new_msg_id)]
    assert (await broker.redrive_dlq("G")).items == ()  # each dead letter goes once


async def test_s009_redrive_one_original_topic_back_to_that_topic(broker):
    await make_topic(broker, "T1", queues=1)
    await make_topic(broker, "T2", queues=1)
    await dead_letter(broker, "T1", b"a")
    await dead_letter(broker, "T2", b"b")
    result = await broker.redrive_dlq("G", topic="T2", target="original")
    (item,) = result.items
    assert (item.original_topic, item.target_topic, item.target_queue_id) == ("T2", "T2", 0)
    assert (
        stored(broker, broker.store.cq.unit(broker.store.read(), "T2", 0, 1).physical_offset).body
        == b"b"
    )
    assert [i.original_topic for i in (await broker.redrive_dlq("G", dry_run=True)).items] == ["T1"]


async def test_s009_a_dry_run_lists_and_records_nothing_and_max_limits(broker):
    await make_topic(broker, "T1", queues=1)
    for body in (b"a", b"b", b"c"):
        await dead_letter(broker, "T1", body)
    last_seq = broker.store.log.last_seq
    plan = await broker.redrive_dlq("G", dry_run=True)
    assert (len(plan.items), plan.dry_run, broker.store.log.last_seq) == (3, True, last_seq)
    assert all(i.new_msg_id is None for i in plan.items)
    limited = await broker.redrive_dlq("G", max_count=2)
    assert (len(limited.items), limited.more) == (2, True)
    assert len((await broker.redrive_dlq("G")).items) == 1


async def test_s009_redrive_without_a_dlq_says_so(broker):
    with pytest.raises(TopicNotExist, match="no dead letters"):
        await broker.redrive_dlq("NOBODY")


async def test_trace_shows_send_deliveries_send_backs_delays_dead_letter_commits_and_redrive(
    broker, clock
):
    await make_topic(broker, "T", queues=1)
    sent = await broker.put_message(
        "T", 0, MessageIn(b"job", {"UNIQ_KEY": "U-1"}), requester="producer@1", producer_group="PG"
    )
    phy = sent.physical_offsets[0]
    topic, offset = "T", 0
    for _ in range(3):  # delivered 3 times; max 2 reconsumes -> the third failure dead-letters it
        await broker.pull("G", topic, 0, offset, client="consumer@9")
        back = await broker.send_back("G", phy, max_reconsume_times=2, requester="consumer@9")
        if back.decision == "dlq":
            break
        clock.advance(back.stored.deliver_at - clock.now_ms())
        (done,) = (await broker.deliver_delayed()).delivered
        phy, topic, offset = done.physical_offset, done.topic, done.queue_offset
    await broker.commit_offset("G", "T", 0, 1, requester="consumer@9")
    await broker.redrive_dlq("G", requester="ops")
    journey = broker.message_journey(sent.msg_ids[0])
    kinds = [e["event"] for e in journey["events"]]
    assert kinds == [
        "sent",
        "delivered",
        "sent_back",
        "delay_delivered",
        "delivered",
        "sent_back",
        "delay_delivered",
        "delivered",
        "dead_lettered",
        "offset_committed",
        "redriven",
    ]
    ev = journey["events"]
    assert (ev[0]["producerGroup"], ev[0]["requester"], ev[0]["topic"]) == ("PG", "producer@1", "T")
    assert [e["client"] for e in ev if e["event"] == "delivered"] == ["consumer@9"] * 3
    assert [
        (e["delayLevel"], e["delayMs"], e["reconsumeTimes"])
        for e in ev
        if e["event"] == "sent_back"
    ] == [(3, 10_000, 1), (4, 30_000, 2)]
    assert (ev[8]["reason"], ev[8]["targetTopic"]) == ("max_reconsume_times", "%DLQ%G")
    assert (ev[9]["group"], ev[9]["old"], ev[9]["new"]) == ("G", -1, 1)
    assert [h["topic"] for h in journey["hops"]] == [
        "T",
        "SCHEDULE_TOPIC_XXXX",
        "%RETRY%G",
        "SCHEDULE_TOPIC_XXXX",
        "%RETRY%G",
        "%DLQ%G",
        "%RETRY%G",
    ]
    # any copy's id, or the client id, finds the same journey
    assert broker.message_journey(journey["hops"][5]["msgId"])["events"] == ev
    assert broker.message_journey("U-1")["events"] == ev
    assert not broker.message_journey("7F00000100002A9F00000000FFFFFFFF")["found"]


async def test_trace_shows_a_delivery_a_slave_served_at_the_slaves_time_with_the_slave(
    broker, clock
):
    await make_topic(broker, "T", queues=1)
    sent = await broker.put_message("T", 0, MessageIn(b"job"))
    await broker.pull("G", "T", 0, 0, client="consumer@1")  # the master's own delivery
    served_at = clock.now_ms() + 1000
    clock.advance(5000)  # the master was away; it merges the slave's journal when back
    served = SlaveDelivery(
        7, served_at, "G", "T", 0, 0, (0,), 1, "consumer@2", broker.store.log.last_seq
    )
    await broker.submit(
        merge_job(
            broker.store,
            broker_id=1,
            slave_addr="10.0.0.2:10921",
            journal_upto=7,
            commits=[],
            deliveries=[served],
        )
    )
    journey = broker.message_journey(sent.msg_ids[0])
    first, second = [e for e in journey["events"] if e["event"] == "delivered"]
    assert "servedBy" not in first and first["client"] == "consumer@1"
    assert (second["ts"], second["recordedTs"], second["client"]) == (
        served_at,
        clock.now_ms(),
        "consumer@2",
    )
    assert second["servedBy"] == {"brokerId": 1, "addr": "10.0.0.2:10921", "localSeq": 7}
    text = render_trace({**journey, "broker": "broker-a"})
    (line,) = [x for x in text.splitlines() if "consumer@2" in x]
    assert format_time(served_at) in line and "DELIVERED" in line
    assert f"served by slave 1 at 10.0.0.2:10921 (recorded {format_time(clock.now_ms())})" in line
    (line,) = [x for x in text.splitlines() if "consumer@1" in x]
    assert "served by" not in line


async def test_trace_reads_the_same_from_a_replayed_log(broker, clock, tmp_path):
    await make_topic(broker, "T", queues=1)
    sent = await broker.put_message("T", 0, MessageIn(b"job"))
    await broker.pull("G", "T", 0, 0, client="c")
    back = await broker.send_back("G", sent.physical_offsets[0])
    clock.advance(back.stored.deliver_at - clock.now_ms())
    await broker.deliver_delayed()
    live = broker.message_journey(sent.msg_ids[0])
    broker.close()
    replay(broker.config.storePathRootDir, tmp_path / "replayed")
    copy = Store.open(
        tmp_path / "replayed", BrokerConfig(storePathRootDir=str(tmp_path / "replayed"))
    )
    try:
        assert trace.journey(copy, sent.msg_ids[0]) == live
    finally:
        copy.close()
