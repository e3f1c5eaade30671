"""Consumer offsets end to end: a broker in a real process, our Python client over TCP, the admin CLI.

The scenarios of the Consumer-offsets issue: reset by time with the consumer
online and offline (B-72..B-81, S-12), and where a new group starts with
CONSUME_FROM_LAST_OFFSET on a young topic and after retention (B-37, B-40,
S-6), with `es-broker explain` saying why.
"""

from __future__ import annotations

import json
import sys

import trio

from es_broker.client import PushConsumer
from tests.helpers import (
    FAST,
    Collector,
    admin_json,
    cli_ok,
    consumer,
    numbered,
    produce,
    topic_ready,
    wait_until,
)
from tests.process_fixtures import ROOT, _env, serve

TIMEOUT = 30.0
ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))


async def lag_zero(broker, group: str) -> bool:
    progress = await admin_json(broker, "consumerProgress", "-g", group)
    return bool(progress["queues"]) and progress["diffTotal"] == 0


async def test_b078_reset_by_time_online_then_offline_fallback_then_non_force(tmp_path, nursery):
    with serve(tmp_path / "data") as broker:
        await topic_ready(broker, "T", 2)
        await produce(broker, nursery, "T", numbered("a", 20))
        middle = await produce(broker, nursery, "T", numbered("mid", 1))
        await produce(broker, nursery, "T", numbered("b", 9))
        collector = Collector()
        c1 = consumer(broker, "G", collector, {"T": "*"}, instance_name="c1")
        await c1.start(nursery)
        await collector.wait_count(30)
        await wait_until("broker state", lambda: lag_zero(broker, "G"), TIMEOUT)

        # online: the broker computes the table and tells the consumer, which re-consumes from there
        shown = await admin_json(broker, "queryMsgById", "-i", middle[0].offset_msg_id)
        reset = await admin_json(
            broker, "resetOffsetByTime", "-g", "G", "-t", "T", "-s", str(shown["storeTimestamp"])
        )
        assert reset["path"] == "broker"
        targets = {q["queueId"]: q["offset"] for q in reset["queues"]}
        # counted over the first delivery only: the re-deliveries may arrive before the admin returns
        expected_again = sum(
            1 for m in collector.received[:30] if m.queue_offset >= targets[m.queue.queue_id]
        )
        await collector.wait_count(30 + expected_again)
        again = collector.received[30:]
        assert b"mid0" in {m.body for m in again}
        assert all(m.queue_offset >= targets[m.queue.queue_id] for m in again)
        await wait_until("broker state", lambda: lag_zero(broker, "G"), TIMEOUT)

        # offline: CONSUMER_NOT_ONLINE, the admin falls back to writing offsets; the next start resumes there
        await c1.shutdown()
        await wait_until("broker state", lambda: _offline(broker, "G"), TIMEOUT)
        heads = [
            await admin_json(
                broker, "queryMsgByOffset", "-t", "T", "-b", "broker-a", "-i", str(q), "-o", "0"
            )
            for q in (0, 1)
        ]
        # at or before every queue's first message
        earliest = min(h["storeTimestamp"] for h in heads)
        fallback = await admin_json(
            broker, "resetOffsetByTime", "-g", "G", "-t", "T", "-s", str(earliest)
        )
        assert fallback["path"] == "old"
        assert {q["rollbackOffset"] for q in fallback["queues"]} == {0}
        resumed = Collector()
        consumer2 = consumer(broker, "G", resumed, {"T": "*"}, instance_name="c2")
        await consumer2.start(nursery)
        await resumed.wait_count(30)
        assert sorted(m.body for m in resumed.received) == sorted(
            m.body for m in collector.received[:30]
        )
        await wait_until("broker state", lambda: lag_zero(broker, "G"), TIMEOUT)

        # non-force forward: nothing moves, and every queue says why
        (plan,) = await admin_json(
            broker, "resetOffset", "-g", "G", "-t", "T", "--to-offset", "100", "-f", "false"
        )
        assert {q["outcome"] for q in plan["queues"]} == {"unchanged_not_force"}
        assert all(q["final"] == q["current"] for q in plan["queues"])
        await consumer2.shutdown()


async def _offline(broker, group: str) -> bool:
    done = await trio.run_process(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "admin",
            "-n",
            broker.namesrv,
            "consumerConnection",
            "-g",
            group,
        ],
        capture_stdout=True,
        capture_stderr=True,
        env=_env(),
        cwd=ROOT,
        check=False,
    )
    return done.returncode != 0


async def explain(broker, group: str) -> dict:
    done = await cli_ok(
        "explain", "--data-dir", str(broker.data_dir), "--group", group, "--topic", "T", "--json"
    )
    return json.loads(done.stdout)


async def test_b040_last_offset_starts_at_0_when_young_and_at_max_after_retention(
    tmp_path, nursery
):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"mappedFileSizeCommitLog=1500\nfileReservedTime=0\ndeleteWhen={ALL_HOURS}\n"
        "cleanResourceInterval=100\n"
    )
    with serve(tmp_path / "data", "--config", str(conf)) as broker:
        await topic_ready(broker, "T", 1)
        await produce(broker, nursery, "T", numbered("young", 5))
        young = Collector()
        c1 = consumer(broker, "NEW1", young, {"T": "*"}, instance_name="c1")
        await c1.start(nursery)
        await young.wait_count(5)  # the whole history: the broker answered 0 (B-40)
        await c1.shutdown()
        (q,) = (await explain(broker, "NEW1"))["queues"]
        assert (
            q["start"]["row"] == 2
            and "consumes the queue's whole history (B-40)" in q["start"]["why"]
        )

        # rolls the commit log: the head's files expire at once
        await produce(broker, nursery, "T", numbered("old", 40))

        async def head_removed() -> bool:
            status = await admin_json(broker, "topicStatus", "-t", "T")
            return status[0]["minOffset"] > 0

        await wait_until("broker state", head_removed, TIMEOUT)
        later = Collector()
        c2 = consumer(broker, "NEW2", later, {"T": "*"}, instance_name="c2")
        await c2.start(nursery)

        async def started() -> bool:
            return bool((await explain(broker, "NEW2"))["queues"])

        await wait_until("broker state", started, TIMEOUT)
        await produce(broker, nursery, "T", numbered("fresh", 1))
        await later.wait_count(1)
        assert [m.body for m in later.received] == [b"fresh0"]  # started at max (B-37 row 3, B-45)
        (q,) = (await explain(broker, "NEW2"))["queues"]
        assert (
            q["start"]["answer"] == "QUERY_NOT_FOUND"
            and "started at the queue's max" in q["start"]["why"]
        )
        await c2.shutdown()


async def test_s006_strict_new_group_start_begins_at_max_on_a_young_topic(tmp_path, nursery):
    conf = tmp_path / "broker.conf"
    conf.write_text("new_group_start=strict\n")
    with serve(tmp_path / "data", "--config", str(conf)) as broker:
        await topic_ready(broker, "T", 1)
        await produce(broker, nursery, "T", numbered("young", 5))
        collector = Collector()
        c = consumer(broker, "NEW", collector, {"T": "*"}, instance_name="c1")
        await c.start(nursery)

        async def started() -> bool:
            return bool((await explain(broker, "NEW"))["queues"])

        await wait_until("broker state", started, TIMEOUT)
        await produce(broker, nursery, "T", numbered("fresh", 1))
        await collector.wait_count(1)
        assert [m.body for m in collector.received] == [b"fresh0"]
        await c.shutdown()


async def test_b043_broadcasting_keeps_offsets_in_the_local_file(tmp_path, nursery):
    from es_broker.client import ConsumeFromWhere, MessageModel
    from es_broker.client.offset_store import LocalFileOffsetStore
    from es_broker.remoting.bodies import MessageQueue

    with serve(tmp_path / "data") as broker:
        await topic_ready(broker, "T", 2)
        await produce(broker, nursery, "T", numbered("b", 8))
        collector = Collector()
        c = PushConsumer(
            broker.namesrv,
            "G",
            collector,
            subscriptions={"T": "*"},
            instance_name="c1",
            client_ip="127.0.0.1",
            message_model=MessageModel.BROADCASTING,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            config=FAST.replace(offset_store_dir=str(tmp_path / "offsets")),
        )
        await c.start(nursery)
        await collector.wait_count(8)
        status = await admin_json(broker, "topicStatus", "-t", "T")
        wanted = {MessageQueue("T", "broker-a", r["queueId"]): r["maxOffset"] for r in status}
        store = LocalFileOffsetStore(tmp_path / "offsets", "127.0.0.1@c1", "G")

        async def persisted() -> bool:
            return store._read_file() == wanted

        await wait_until("broker state", persisted, TIMEOUT)
        await c.shutdown()
        assert (await admin_json(broker, "consumerProgress", "-g", "G"))[
            "queues"
        ] == []  # never on the broker
