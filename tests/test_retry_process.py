"""Retry, delay and dead letters against a broker in a real process (`es-broker serve --config`).

The consumer side is raw PULL_MESSAGE and CONSUMER_SEND_MSG_BACK requests, as
a RocketMQ client sends them; a short messageDelayLevel in broker.conf keeps
the delays at a second or a few. Waiting is on broker state: a long-polled
pull is answered when the delivery service stores the message.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from es_broker.config import BrokerConfig
from es_broker.core.replay import verify
from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.message import StoredMessage
from es_broker.store import Store
from tests.process_fixtures import serve
from tests.wire_session import CLIENT_ID, Session, conf, on_wire


def record_types(data_dir: Path) -> list[dict[str, Any]]:
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        return [r for _, r in store.log.read()]
    finally:
        store.close()


def test_b097_a_delayed_message_is_delivered_exactly_once_across_a_broker_crash_in_its_delay(
    tmp_path,
):
    config, data = conf(tmp_path, "3s 1s"), tmp_path / "data"

    async def park(s: Session) -> float:
        await s.create_topic("T")
        await s.send("T", b"first", {"DELAY": "1"})
        return time.time()

    with serve(data, "--config", config) as first:
        parked_at = on_wire(first, park)
        first.process.kill()  # a crash, in the middle of the 3 s delay
        first.process.wait()
        assert time.time() < parked_at + 3

    async def after_restart(
        s: Session,
    ) -> tuple[list[StoredMessage], list[StoredMessage], int, bytes]:
        delivered = await s.pull("T", 0, hold_ms=20_000)  # answered when the schedule delivers it
        await s.send("T", b"second", {"DELAY": "2"})
        # every pass looks at every level: those until the second is delivered would repeat the first,
        # were its cursor lost
        later = await s.pull("T", 1, hold_ms=20_000)
        top = await s.ok(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": 0})
        cursors = await s.ok(RequestCode.GET_ALL_DELAY_OFFSET)
        return delivered, later, int(top.ext_fields["offset"]), cursors.body

    with serve(data, "--config", config) as second:
        delivered, later, top, cursors = on_wire(second, after_restart)
    assert [m.body for m in delivered] == [b"first"] and [m.body for m in later] == [b"second"]
    assert top == 2
    assert fastjson.loads(cursors) == {"offsetTable": {1: 1, 2: 1}}
    parked, copy = (
        [r for r in record_types(data) if r["type"] == "messages_stored" and r["topic"] != "T"][0],
        delivered[0],
    )
    assert copy.store_timestamp >= parked["ts"] + 3000  # not before its time
    deliveries = [
        r for r in record_types(data) if r["type"] == "messages_stored" and "delivery" in r
    ]
    assert [(r["delivery"]["level"], r["delivery"]["schedule_offset"]) for r in deliveries] == [
        (1, 0),
        (2, 0),
    ]
    assert verify(data) == []


def test_message_trace_shows_every_step_of_a_message_that_fails_twice_then_succeeds(tmp_path):
    config, data = conf(tmp_path, "1s 1s 1s 1s 1s 1s"), tmp_path / "data"

    async def consume(s: Session) -> tuple[str, list[StoredMessage]]:
        await s.create_topic("T")
        await s.heartbeat("G", ["T", "%RETRY%G"])
        sent = await s.send(
            "T", b"order-1", {"UNIQ_KEY": "U-ORDER-1", "TAGS": "A", "KEYS": "order-1"}
        )
        (first,) = await s.pull("T", 0)
        await s.send_back(first, "T")  # the handler failed
        (second,) = await s.pull("%RETRY%G", 0, hold_ms=20_000)
        await s.send_back(second, "T")  # failed again
        (third,) = await s.pull("%RETRY%G", 1, hold_ms=20_000)  # this time it succeeds
        await s.commit("T", 1)
        await s.commit("%RETRY%G", 2)
        return sent.ext_fields["msgId"], [first, second, third]

    with serve(data, "--config", config) as served:
        msg_id, seen = on_wire(served, consume)
        assert [(m.topic, m.reconsume_times) for m in seen] == [
            ("T", 0),
            ("%RETRY%G", 1),
            ("%RETRY%G", 2),
        ]
        # what the client shows (B-99)
        assert all(m.properties["RETRY_TOPIC"] == "T" for m in seen[1:])
        journey = served.admin_json("messageTrace", "--msg-id", msg_id)
        text = served.admin(
            "messageTrace", "--msg-id", "U-ORDER-1"
        ).stdout  # the client id finds it too
    kinds = [e["event"] for e in journey["events"]]
    assert kinds[:8] == [
        "sent",
        "delivered",
        "sent_back",
        "delay_delivered",
        "delivered",
        "sent_back",
        "delay_delivered",
        "delivered",
    ]
    # T past the original, %RETRY%G past both copies
    assert sorted(kinds[8:]) == ["offset_committed"] * 3
    events = journey["events"]
    assert (events[0]["producerGroup"], events[0]["topic"]) == ("PG", "T")
    assert {e["client"] for e in events if e["event"] == "delivered"} == {CLIENT_ID}
    backs = [e for e in events if e["event"] == "sent_back"]
    assert [(e["delayLevel"], e["delayMs"], e["reconsumeTimes"]) for e in backs] == [
        (3, 1000, 1),
        (4, 1000, 2),
    ]
    assert all(e["deliverAt"] - e["ts"] == 1000 for e in backs)
    for line in (
        "Message U-ORDER-1 (UNIQ_KEY U-ORDER-1), topic T",
        "SENT ",
        "DELIVERED",
        "SENT_BACK",
        "DELAY_DELIVERED",
        "OFFSET_COMMITTED",
        f"client {CLIENT_ID}",
        "level 3 (1s)",
        "group G on T queue 0: -1 -> 1",
    ):
        assert line in text, line
    assert verify(data) == []


def test_b104_an_always_failing_message_ends_in_a_write_only_dlq_readable_after_update_topic_perm(
    tmp_path,
):
    config, data = conf(tmp_path, "1s 1s 1s 1s 1s 1s"), tmp_path / "data"

    async def poison(s: Session) -> str:
        await s.create_topic("T")
        await s.heartbeat("G", ["T", "%RETRY%G"])
        sent = await s.send("T", b"poison", {"UNIQ_KEY": "U-POISON"})
        (message,) = await s.pull("T", 0)
        # max 2 reconsumes: the third failure dead-letters it (B-91)
        for retry_offset in (
            0,
            1,
            None,
        ):
            await s.send_back(message, "T", max_times=2)
            if retry_offset is not None:
                (message,) = await s.pull("%RETRY%G", retry_offset, hold_ms=20_000)
        await s.wait_for_route("%DLQ%G")
        return sent.ext_fields["msgId"]

    with serve(data, "--config", config) as served:
        msg_id = on_wire(served, poison)
        assert served.admin_json("topicRoute", "-t", "%DLQ%G")["queueDatas"][0]["perm"] == 2
        (status,) = served.admin_json("topicStatus", "-t", "%DLQ%G")
        assert (status["queueId"], status["minOffset"], status["maxOffset"]) == (0, 0, 1)
        assert status["lastUpdateTimestamp"] > 0
        refused = served.admin(
            "queryMsgByOffset", "-t", "%DLQ%G", "-b", "broker-a", "-i", "0", "-o", "0", check=False
        )
        assert refused.returncode == 1
        assert (
            "CODE: 16" in refused.stderr
            and "the topic[%DLQ%G] pulling message is forbidden" in refused.stderr
        )
        served.admin("updateTopicPerm", "-b", served.broker, "-t", "%DLQ%G", "-p", "6")
        dead = served.admin_json(
            "queryMsgByOffset", "-t", "%DLQ%G", "-b", "broker-a", "-i", "0", "-o", "0"
        )
        shown = served.admin(
            "queryMsgByOffset", "-t", "%DLQ%G", "-b", "broker-a", "-i", "0", "-o", "0"
        ).stdout
        redriven = served.admin("redriveDLQ", "-g", "G").stdout
        journey = served.admin_json("messageTrace", "--msg-id", msg_id)
    assert (dead["topic"], dead["reconsumeTimes"], dead["body"]) == ("%DLQ%G", 3, "poison")
    assert (dead["properties"]["ORIGIN_MESSAGE_ID"], dead["properties"]["RETRY_TOPIC"]) == (
        msg_id,
        "T",
    )
    assert (dead["properties"]["UNIQ_KEY"], dead["properties"]["DELAY"]) == ("U-POISON", "0")
    assert (
        "Reconsume Times:    3" in shown and "Store Host:" in shown and "Born Timestamp:" in shown
    )
    # mqadmin's {K=V, ...}
    assert f"ORIGIN_MESSAGE_ID={msg_id}" in shown and "RETRY_TOPIC=T" in shown
    assert "re-drove 1 dead letter(s) of G" in redriven
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
        "delivered",
        "delivered",
        "redriven",
    ]
    readers = [e["group"] for e in journey["events"][9:11]]
    # the two queryMsgByOffset reads of the DLQ
    assert readers == [
        "TOOLS_CONSUMER",
        "TOOLS_CONSUMER",
    ]
    dead_lettered = journey["events"][8]
    assert (
        dead_lettered["reason"],
        dead_lettered["targetTopic"],
        dead_lettered["maxReconsumeTimes"],
    ) == ("max_reconsume_times", "%DLQ%G", 2)
    assert journey["hops"][-1]["topic"] == "%RETRY%G" and journey["hops"][-1]["reconsumeTimes"] == 0
    assert verify(data) == []
