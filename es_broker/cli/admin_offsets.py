"""`es-broker admin`'s consumer verbs: progress, connections and the offset resets (S-2, B-72..B-81)."""

from __future__ import annotations

import argparse
from typing import Any

from es_broker.cli.admin_verbs import opt, table, verb
from es_broker.client.admin import Admin
from es_broker.remoting.admin_bodies import ResetOffsetResult
from es_broker.remoting.bodies import ConsumerConnection
from es_broker.timetravel.timeparse import format_time, parse_time


def _render_progress(r: dict[str, Any]) -> str:
    rows = [
        [
            q["topic"],
            q["brokerName"],
            q["queueId"],
            q["brokerOffset"],
            q["consumerOffset"],
            q["diff"],
            format_time(q["lastTimestamp"]),
        ]
        for q in r["queues"]
    ]
    return (
        table(
            [
                "#Topic",
                "#Broker Name",
                "#QID",
                "#Broker Offset",
                "#Consumer Offset",
                "#Diff",
                "#LastTime",
            ],
            rows,
        )
        + f"\n\nConsume TPS: 0.00\nDiff Total: {r['diffTotal']}"
    )


@verb("consumerProgress", _render_progress)
@opt("-g", "--groupName", required=True)
async def consumer_progress(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    queues = await admin.consumer_progress(a.groupName)
    rows = [
        {
            "topic": q.topic,
            "brokerName": q.broker_name,
            "queueId": q.queue_id,
            "brokerOffset": q.broker_offset,
            "consumerOffset": q.consumer_offset,
            "diff": q.diff,
            "lastTimestamp": q.last_timestamp,
        }
        for q in queues
    ]
    return {"group": a.groupName, "queues": rows, "diffTotal": sum(q.diff for q in queues)}


@verb(
    "consumerConnection",
    lambda r: (
        table(
            ["#", "#ClientId", "#ClientAddr", "#Language", "#Version"],
            [
                [i + 1, c.client_id, c.client_addr, c.language, c.version]
                for i, c in enumerate(r.connection_set)
            ],
        )
        + f"\n\nConsumeType: {r.consume_type}\nMessageModel: {r.message_model}"
        + f"\nConsumeFromWhere: {r.consume_from_where}"
    ),
)
@opt("-g", "--consumerGroup", required=True)
async def consumer_connection(admin: Admin, a: argparse.Namespace) -> ConsumerConnection:
    return await admin.consumer_connection(a.consumerGroup)


def parse_reset_time(text: str) -> int:
    """-s of resetOffsetByTime (B-72): `now` is -1 (the broker's latest), else a TIME."""
    return parse_time(text, now=lambda: -1)


def _render_reset(r: dict[str, Any]) -> str:
    if r["path"] == "old":
        return table(
            [
                "#brokerName",
                "#queueId",
                "#brokerOffset",
                "#consumerOffset",
                "#timestampOffset",
                "#rollbackOffset",
            ],
            [
                [
                    q["brokerName"],
                    q["queueId"],
                    q["brokerOffset"],
                    q["consumerOffset"],
                    q["timestampOffset"],
                    q["rollbackOffset"],
                ]
                for q in r["queues"]
            ],
        )
    head = (
        f"rollback consumer offset by specified consumerGroup[{r['group']}], topic[{r['topic']}], "
        f"force[{str(r['force']).lower()}], timestamp(string)[{r['time']}], timestamp(long)[{r['timestamp']}]"
    )
    return (
        head
        + "\n"
        + table(
            ["#brokerName", "#queueId", "#offset"],
            [[q["brokerName"], q["queueId"], q["offset"]] for q in r["queues"]],
        )
    )


@verb("resetOffsetByTime", _render_reset)
@opt("-g", "--group", required=True)
@opt("-t", "--topic", required=True)
@opt("-s", "--timestamp", required=True)
@opt("-f", "--force", default="true")
@opt("-c", "--cplus", action="store_true")
async def reset_offset_by_time(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    timestamp = parse_reset_time(a.timestamp)
    force = a.force == "true"
    result = await admin.reset_offset_by_time(a.group, a.topic, timestamp, force, a.cplus)
    return {
        "group": a.group,
        "topic": a.topic,
        "force": force,
        "time": a.timestamp,
        "timestamp": timestamp,
        **result,
    }


def _render_reset_plan(results: list[ResetOffsetResult]) -> str:
    out = []
    for r in results:
        out.append(f"{r.broker_name}: {r.outcome}")
        out.append(
            table(
                ["#queueId", "#current", "#target", "#final", "#outcome"],
                [[q.queue_id, q.current, q.target, q.final, q.outcome] for q in r.queues],
            )
        )
    return "\n".join(out)


@verb("resetOffset", _render_reset_plan)
@opt("-g", "--group", required=True)
@opt("-t", "--topic", required=True)
@opt("--to-time", help="now | millis | yyyy-MM-dd#HH:mm:ss:SSS")
@opt("--to-offset", type=int)
@opt("--shift-by", type=int)
@opt("--to-earliest", action="store_true")
@opt("--to-latest", action="store_true")
@opt("-f", "--force", default="true")
@opt("--dry-run", action="store_true", help="print current/target/final per queue, change nothing")
@opt(
    "--mode",
    choices=["compat", "server_side"],
    help="server_side: the broker writes the offsets itself",
)
@opt(
    "--scope",
    choices=["compat", "read_queues"],
    help="read_queues: every read queue, creating offsets",
)
async def reset_offset(admin: Admin, a: argparse.Namespace) -> list[ResetOffsetResult]:
    chosen = [
        (k, v)
        for k, v in (
            ("time", a.to_time),
            ("offset", a.to_offset),
            ("shift", a.shift_by),
            ("earliest", a.to_earliest or None),
            ("latest", a.to_latest or None),
        )
        if v is not None
    ]
    if len(chosen) != 1:
        raise ValueError(
            "give exactly one of --to-time, --to-offset, --shift-by, --to-earliest, --to-latest"
        )
    kind, raw = chosen[0]
    value = (
        parse_reset_time(raw)
        if kind == "time"
        else (raw if isinstance(raw, int) and raw is not True else 0)
    )
    return await admin.reset_offset(
        a.group,
        a.topic,
        kind,
        value,
        force=a.force == "true",
        dry_run=a.dry_run,
        mode=a.mode,
        scope=a.scope,
    )


@verb("resetOffsetByTimeOld", _render_reset)
@opt("-g", "--group", required=True)
@opt("-t", "--topic", required=True)
@opt("-s", "--timestamp", required=True)
@opt("-f", "--force", default="true")
async def reset_offset_by_time_old(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    timestamp = parse_reset_time(a.timestamp)
    force = a.force == "true"
    queues = await admin.reset_offset_old(a.group, a.topic, timestamp, force)
    return {
        "group": a.group,
        "topic": a.topic,
        "force": force,
        "time": a.timestamp,
        "timestamp": timestamp,
        "path": "old",
        "queues": queues,
    }
