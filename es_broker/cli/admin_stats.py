"""`es-broker admin statsAll`: mqadmin 4.9.8's StatsAllSubCommand over the stats projection.

Per topic (retry and dead-letter topics left out, `-t` one only): the groups that consume
it (QUERY_TOPIC_CONSUME_BY_WHO), its put TPS and 24-hour count (VIEW_BROKER_STATS_DATA
TOPIC_PUT_NUMS) summed over the masters of its route, each group's get TPS and 24-hour
count (GROUP_GET_NUMS `topic@group`) and its accumulation (GET_CONSUME_STATS' diff).
`-a` prints only rows with messages in the 24 hours. `--at TIME` answers for a past
moment: the counts end there and the accumulation is the offset table then (B-366).
"""

from __future__ import annotations

import argparse
from typing import Any

from es_broker.cli.admin_verbs import opt, verb
from es_broker.client.admin import Admin, AdminError
from es_broker.commands.names import DLQ_PREFIX, RETRY_PREFIX
from es_broker.remoting.bodies import ConsumeStats
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from es_broker.remoting.headers import GetConsumeStatsRequestHeader
from es_broker.remoting.stats_bodies import BrokerStatsData
from es_broker.timetravel.timeparse import parse_time

HEADER = ("#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS")
HEADER_24 = ("#InMsg24Hour", "#OutMsg24Hour")


def sum_24_hours(data: BrokerStatsData) -> int:
    """StatsAllSubCommand.compute24HourSum: the day's sum, else the hour's, else the minute's."""
    for item in (data.stats_day, data.stats_hour, data.stats_minute):
        if item is not None and item.sum != 0:
            return item.sum
    return 0


def _front(text: str) -> str:
    """UtilAll.frontStringAtLeast(text, 32): at most the first 32 characters."""
    return text[:32]


def render_stats_all(rows: list[dict[str, Any]]) -> str:
    lines = [
        "%-32s  %-32s %12s %11s %11s %14s %14s" % (*HEADER, *HEADER_24)  # noqa: UP031 (mqadmin's)
    ]
    for r in rows:
        if r["group"] is None:
            lines.append(
                "%-32s  %-32s %12d %11.2f %11s %14d %14s"  # noqa: UP031
                % (_front(r["topic"]), "", 0, r["inTps"], "", r["inMsg24Hour"], "NO_CONSUMER")
            )
        else:
            lines.append(
                "%-32s  %-32s %12d %11.2f %11.2f %14d %14d"  # noqa: UP031
                % (
                    _front(r["topic"]),
                    _front(r["group"]),
                    r["accumulation"],
                    r["inTps"],
                    r["outTps"],
                    r["inMsg24Hour"],
                    r["outMsg24Hour"],
                )
            )
    return "\n".join(lines)


async def _stats(
    admin: Admin, masters: list[str], name: str, key: str, at: int | None
) -> tuple[float, int]:
    """(minute TPS, 24-hour count) summed over `masters`; a broker without the item adds 0."""
    tps, total = 0.0, 0
    for addr in masters:
        try:
            data = await admin.broker_stats(addr, name, key, at)
        except AdminError:  # 4.9.8 catches and goes on: "The stats ... not exist"
            continue
        tps += data.stats_minute.tps if data.stats_minute is not None else 0.0
        total += sum_24_hours(data)
    return tps, total


async def _accumulation(
    admin: Admin, masters: list[str], group: str, topic: str, at: int | None
) -> int:
    """ConsumeStats.computeTotalDiff over the masters (negative as 0); at `at`, the offset table then."""
    diff = 0
    stats_of_group = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
    if at is not None:
        for answer in await admin.offsets_at(group, at, topic=topic):
            for q in answer.body.queues:
                diff += q.max_offset - q.offset
        return max(diff, 0)
    for addr in masters:
        try:
            r = await admin._ok(
                addr,
                f"consume stats of {group}",
                request(RequestCode.GET_CONSUME_STATS, stats_of_group),
            )
        except AdminError:
            continue
        for stats in ConsumeStats.decode(r.body).offset_table.values():
            diff += stats.broker_offset - stats.consumer_offset
    return max(diff, 0)


async def topic_rows(
    admin: Admin, topic: str, active: bool, at: int | None
) -> list[dict[str, Any]]:
    """printTopicDetail: the rows of one topic."""
    route = await admin.route(topic)
    masters = [a for a in (d.broker_addrs.get(0) for d in route.broker_datas) if a]
    groups: set[str] = set()
    for addr in masters:
        try:
            groups.update(await admin.topic_consumed_by(addr, topic))
        except AdminError:
            continue
    in_tps, in_24 = await _stats(admin, masters, "TOPIC_PUT_NUMS", topic, at)
    if not groups:
        if active and in_24 <= 0:
            return []
        row = {"topic": topic, "group": None, "accumulation": 0, "inTps": in_tps}
        return [row | {"outTps": None, "inMsg24Hour": in_24, "outMsg24Hour": None}]
    rows = []
    for group in sorted(groups):
        out_tps, out_24 = await _stats(admin, masters, "GROUP_GET_NUMS", f"{topic}@{group}", at)
        accumulation = await _accumulation(admin, masters, group, topic, at)
        if active and in_24 <= 0 and out_24 <= 0:
            continue
        rows.append(
            {
                "topic": topic,
                "group": group,
                "accumulation": accumulation,
                "inTps": in_tps,
                "outTps": out_tps,
                "inMsg24Hour": in_24,
                "outMsg24Hour": out_24,
            }
        )
    return rows


@verb("statsAll", render_stats_all)
@opt("-t", "--topic", default=None, help="one topic only")
@opt("-a", "--activeTopic", action="store_true", help="only topics with messages in 24 hours")
@opt("--at", default=None, metavar="TIME", help="the counts up to a past moment (B-366)")
async def stats_all(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    at = parse_time(a.at) if a.at else None
    rows: list[dict[str, Any]] = []
    for topic in await admin.topic_list():
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            continue
        if a.topic and topic != a.topic:
            continue
        try:
            rows.extend(await topic_rows(admin, topic, a.activeTopic, at))
        except AdminError:  # 4.9.8 goes on with the next topic
            continue
    return rows
