"""`es-broker admin statsAll` and VIEW_BROKER_STATS_DATA against a broker process (B-363..B-366).

The counts come from the stats projection's minutes of broker time: a test sends known
messages, reads their store times back from the broker, and knows which minute holds each,
so every number statsAll prints is exact.
"""

from __future__ import annotations

import json
from collections import Counter

from es_broker.client.admin import Admin, AdminError
from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.remoting.stats_bodies import BrokerStatsData, BrokerStatsItem
from tests.helpers import (
    Collector,
    admin_json,
    cli_ok,
    consumer,
    numbered,
    produce,
    topic_ready,
    wait_until,
)
from tests.process_fixtures import serve

MINUTE = 60_000


async def traffic(broker, nursery) -> tuple[list[int], list[int]]:
    """T: 10 messages consumed by G, then 5 it has not consumed; U: 3 messages, no consumer.
    Returns the store times of T's 15 messages and U's 3."""
    await topic_ready(broker, "T", 2)
    await topic_ready(broker, "U", 1)
    sent = await produce(broker, nursery, "T", numbered("a", 10))
    got = Collector()
    c = consumer(broker, "G", got, {"T": "*"})
    await c.start(nursery)
    await got.wait_count(10)

    async def caught_up() -> bool:
        return (await admin_json(broker, "consumerProgress", "-g", "G"))["diffTotal"] == 0

    await wait_until("G caught up", caught_up)
    await c.shutdown()
    sent += await produce(broker, nursery, "T", numbered("b", 5))
    sent_u = await produce(broker, nursery, "U", numbered("u", 3))
    async with Admin.open(broker.namesrv_addr) as admin:
        t = [(await admin.view_message(r.offset_msg_id)).store_timestamp for r in sent]
        u = [(await admin.view_message(r.offset_msg_id)).store_timestamp for r in sent_u]
    return t, u


def rows_by(rows: list[dict]) -> dict[tuple[str, str | None], dict]:
    return {(r["topic"], r["group"]): r for r in rows}


async def test_stats_all_prints_the_counts_of_the_records(tmp_path, nursery):
    """statsAll's InMsg24Hour and OutMsg24Hour are the messages put and delivered, its
    accumulation the group's lag, its TPS the last whole minute's count per second, and a
    topic nobody consumes is NO_CONSUMER; `--at` answers for any moment from the log."""
    with serve(tmp_path / "data") as broker:
        times, u_times = await traffic(broker, nursery)
        last_minute = max(times + u_times) // MINUTE
        at = (last_minute + 1) * MINUTE  # the minute of the last message is the last whole one
        in_last = sum(1 for t in times if t // MINUTE == last_minute)
        delivered_last = sum(1 for t in times[:10] if t // MINUTE == last_minute)

        rows = rows_by(await admin_json(broker, "statsAll", "--at", str(at)))
        t, u = rows[("T", "G")], rows[("U", None)]
        assert (t["inMsg24Hour"], t["outMsg24Hour"], t["accumulation"]) == (15, 10, 5)
        assert t["inTps"] == in_last / 60
        # G's deliveries came before the last sends: a message of the first 10 stored in the
        # last minute was delivered in it
        assert delivered_last / 60 <= t["outTps"] <= 10 / 60
        assert (u["inMsg24Hour"], u["outMsg24Hour"], u["outTps"]) == (3, None, None)
        u_last = sum(1 for t in u_times if t // MINUTE == last_minute)
        assert u["inTps"] == u_last / 60

        # a day later, nothing in 24 hours: -a leaves every row out
        later = await admin_json(broker, "statsAll", "-a", "--at", str(at + 25 * 60 * MINUTE))
        assert later == []
        # before any message: the counts were 0 then
        before = rows_by(await admin_json(broker, "statsAll", "--at", str(min(times) - MINUTE)))
        assert before[("T", "G")]["inMsg24Hour"] == 0

        text = (
            await cli_ok("admin", "-n", broker.namesrv_addr, "statsAll", "--at", str(at))
        ).stdout
        lines = text.splitlines()
        assert lines[0].split() == [
            "#Topic",
            "#Consumer",
            "Group",
            "#Accumulation",
            "#InTPS",
            "#OutTPS",
            "#InMsg24Hour",
            "#OutMsg24Hour",
        ]
        t_line = next(line for line in lines if line.startswith("T "))
        assert t_line == "%-32s  %-32s %12d %11.2f %11.2f %14d %14d" % (  # noqa: UP031
            "T",
            "G",
            5,
            in_last / 60,
            t["outTps"],
            15,
            10,
        )
        u_line = next(line for line in lines if line.startswith("U "))
        assert u_line.split() == ["U", "0", f"{u_last / 60:.2f}", "3", "NO_CONSUMER"]

        # -t one topic; without --at the accumulation is GET_CONSUME_STATS' diff now
        now_rows = await admin_json(broker, "statsAll", "-t", "T")
        assert [(r["topic"], r["group"], r["accumulation"]) for r in now_rows] == [("T", "G", 5)]


async def test_view_broker_stats_data_answers_each_stats_name(tmp_path, nursery):
    """VIEW_BROKER_STATS_DATA answers TOPIC_PUT_NUMS/SIZE by topic, GROUP_GET_NUMS by
    topic@group and BROKER_PUT_NUMS by the cluster's name, the sums of the last minute, hour
    and day, tps per second, avgpt per record; an item never counted, an unknown name or a
    wrong cluster is SYSTEM_ERROR "The stats <NAME> <KEY> not exist"."""
    with serve(tmp_path / "data") as broker:
        times, u_times = await traffic(broker, nursery)
        at = (max(times + u_times) // MINUTE + 1) * MINUTE
        last = Counter(t // MINUTE for t in times)[at // MINUTE - 1]
        async with Admin.open(broker.namesrv_addr) as admin:
            put = await admin.broker_stats(broker.addr, "TOPIC_PUT_NUMS", "T", at)
            assert put.stats_minute == BrokerStatsItem(last, last * 1000 / MINUTE, 1.0)
            assert put.stats_hour == BrokerStatsItem(15, 15 * 1000 / (60 * MINUTE), 1.0)
            assert put.stats_day == BrokerStatsItem(15, 15 * 1000 / (1440 * MINUTE), 1.0)
            size = await admin.broker_stats(broker.addr, "TOPIC_PUT_SIZE", "T", at)
            assert size.stats_day is not None and size.stats_day.sum > 15 * len(b"a0")
            get = await admin.broker_stats(broker.addr, "GROUP_GET_NUMS", "T@G", at)
            assert get.stats_day is not None and get.stats_day.sum == 10
            cluster = (await admin.broker_config(broker.addr))["brokerClusterName"]
            whole = await admin.broker_stats(broker.addr, "BROKER_PUT_NUMS", cluster, at)
            assert whole.stats_day == BrokerStatsItem(18, 18 * 1000 / (1440 * MINUTE), 0.0)
            for name, key in (
                ("TOPIC_PUT_NUMS", "NOPE"),
                ("GROUP_GET_NUMS", "U@G"),
                ("BROKER_PUT_NUMS", "not-the-cluster"),
                ("QUEUE_PUT_NUMS", "T@0"),
            ):
                r = await admin.client.invoke(
                    broker.addr,
                    request(
                        RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key}
                    ),
                    5.0,
                )
                assert r.code == ResponseCode.SYSTEM_ERROR
                assert r.remark == f"The stats <{name}> <{key}> not exist"
            r = await admin.client.invoke(
                broker.addr, request(RequestCode.VIEW_BROKER_STATS_DATA, {"statsKey": "T"}), 5.0
            )
            assert r.code == ResponseCode.SYSTEM_ERROR and "statsName" in (r.remark or "")
            groups = await admin.topic_consumed_by(broker.addr, "T")
            assert groups == ["G"]
            # mqadmin's topicList -c: each topic's cluster and consuming groups, no retry topic
            done = await cli_ok("admin", "-n", broker.namesrv_addr, "topicList", "-c")
            listed = [line.split() for line in done.stdout.splitlines()]
            assert listed[0] == ["#Cluster", "Name", "#Topic", "#Consumer", "Group"]
            assert [row for row in listed[1:] if row[1] == "T"] == [[cluster, "T", "G"]]
            assert not any(row[1].startswith(("%RETRY%", "%DLQ%")) for row in listed[1:])
            try:
                await admin.broker_stats(broker.addr, "TOPIC_PUT_NUMS", "T", min(times) - MINUTE)
            except AdminError as exc:  # not counted before its first message
                assert "not exist" in str(exc)
            else:
                raise AssertionError("an item before its first count exists")


async def test_view_broker_stats_data_body_is_4_9_8_brokerstatsdata(tmp_path, nursery):
    """Golden: the body is 4.9.8's BrokerStatsData as fastjson writes it: statsDay, statsHour,
    statsMinute (sorted), each BrokerStatsItem {avgpt: double, sum: long, tps: double}."""
    item = BrokerStatsItem(sum=120, tps=2.0, avgpt=1.5)
    body = BrokerStatsData(stats_minute=item, stats_hour=item, stats_day=item).encode()
    one = '{"avgpt":1.5,"sum":120,"tps":2.0}'
    assert body == f'{{"statsDay":{one},"statsHour":{one},"statsMinute":{one}}}'.encode()
    with serve(tmp_path / "data") as broker:
        await traffic(broker, nursery)
        async with Admin.open(broker.namesrv_addr) as admin:
            r = await admin.client.invoke(
                broker.addr,
                request(
                    RequestCode.VIEW_BROKER_STATS_DATA,
                    {"statsName": "TOPIC_PUT_NUMS", "statsKey": "T"},
                ),
                5.0,
            )
    assert r.code == ResponseCode.SUCCESS
    parsed = json.loads(r.body)
    assert list(parsed) == ["statsDay", "statsHour", "statsMinute"]
    for window in parsed.values():
        assert list(window) == ["avgpt", "sum", "tps"]
        assert isinstance(window["sum"], int)
        text = r.body.decode()
        assert isinstance(window["avgpt"], float) and isinstance(window["tps"], float), text
    assert BrokerStatsData.decode(r.body) == BrokerStatsData.from_json(fastjson.loads(r.body))
