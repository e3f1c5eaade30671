"""Retry and dead letters with our Python PushConsumer against a broker process (B-87..B-105).

A short messageDelayLevel makes the retry schedule take seconds; the delays
themselves are read from the broker's records (messageTrace), not timed.
"""

from __future__ import annotations

import trio

from es_broker.client import ConsumeResult, PushConsumer
from tests.helpers import FAST, Collector, admin_json, cli_ok, numbered, produce, topic_ready
from tests.process_fixtures import serve
from tests.waiting import poll_until

SHORT_LEVELS = "messageDelayLevel=" + " ".join(["1s"] * 18) + "\n"


def fails_first(times: int):
    return lambda m: (
        ConsumeResult.RECONSUME_LATER if m.reconsume_times < times else ConsumeResult.SUCCESS
    )


async def test_b092_fail_twice_then_succeed_delivers_three_times_with_growing_levels(
    tmp_path, nursery
):
    conf = tmp_path / "broker.conf"
    conf.write_text(SHORT_LEVELS)
    with serve(tmp_path / "data", "--config", str(conf)) as broker:
        await topic_ready(broker, "T", 1)
        (sent,) = await produce(broker, nursery, "T", numbered("order", 1))
        collector = Collector(fails_first(2))
        c = PushConsumer(
            broker.namesrv,
            "G",
            collector,
            subscriptions={"T": "*"},
            instance_name="c1",
            client_ip="127.0.0.1",
            config=FAST,
        )
        await c.start(nursery)
        await collector.wait_count(3)
        await c.shutdown()
        assert [m.reconsume_times for m in collector.received] == [0, 1, 2]
        # retries show the original topic (B-99)
        assert {m.topic for m in collector.received} == {"T"}
        journey = await admin_json(broker, "messageTrace", "--msg-id", sent.offset_msg_id)
        backs = [e for e in journey["events"] if e["event"] == "sent_back"]
        # 3 + rt (B-92)
        assert [(e["delayLevel"], e["reconsumeTimes"]) for e in backs] == [(3, 1), (4, 2)]


async def test_b091_always_failing_message_goes_to_a_write_only_dlq_then_readable(
    tmp_path, nursery
):
    conf = tmp_path / "broker.conf"
    conf.write_text(SHORT_LEVELS)
    with serve(tmp_path / "data", "--config", str(conf)) as broker:
        await topic_ready(broker, "T", 1)
        (sent,) = await produce(broker, nursery, "T", numbered("poison", 1))
        collector = Collector(lambda m: ConsumeResult.RECONSUME_LATER)
        c = PushConsumer(
            broker.namesrv,
            "G",
            collector,
            subscriptions={"T": "*"},
            instance_name="c1",
            client_ip="127.0.0.1",
            config=FAST.replace(max_reconsume_times=2),
        )
        await c.start(nursery)
        await collector.wait_count(3)  # maxReconsumeTimes + 1 deliveries, then the DLQ (B-91)

        async def dead_lettered() -> bool:
            journey = await admin_json(broker, "messageTrace", "--msg-id", sent.offset_msg_id)
            return any(e["event"] == "dead_lettered" for e in journey["events"])

        await poll_until(dead_lettered, 30, "dead-lettering")  # the broker announces it to nobody
        await c.shutdown()
        assert len(collector.received) == 3
        (status,) = await admin_json(broker, "topicStatus", "-t", "%DLQ%G")
        assert status["maxOffset"] == 1
        refused = await trio.run_process(
            [
                *_cli(broker),
                "queryMsgByOffset",
                "-t",
                "%DLQ%G",
                "-b",
                "broker-a",
                "-i",
                "0",
                "-o",
                "0",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        # perm 2: NO_PERMISSION (B-104)
        assert refused.returncode == 1 and b"CODE: 16" in refused.stderr
        await cli_ok(
            "admin",
            "-n",
            broker.namesrv,
            "updateTopicPerm",
            "-b",
            broker.broker,
            "-t",
            "%DLQ%G",
            "-p",
            "6",
        )

        dead = Collector()
        reader = PushConsumer(
            broker.namesrv,
            "DLQ_READER",
            dead,
            subscriptions={"%DLQ%G": "*"},
            instance_name="r1",
            client_ip="127.0.0.1",
            config=FAST,
        )
        await reader.start(nursery)
        await dead.wait_count(1)
        await reader.shutdown()
        (letter,) = dead.received
        assert letter.body == b"poison0" and letter.reconsume_times == 3
        assert letter.properties["ORIGIN_MESSAGE_ID"] == sent.offset_msg_id
        assert letter.properties["RETRY_TOPIC"] == "T"


def _cli(broker) -> list[str]:
    import sys

    return [sys.executable, "-m", "es_broker.cli", "admin", "-n", broker.namesrv]
