"""`es-broker admin -n HOST:PORT VERB ...`: mqadmin's verbs and short options, over the wire.

Human tables by default, as mqadmin prints them; `--json` on every verb for scripts.

Requests are signed (RocketMQ's AclClientRPCHook) with the first of:
`--access-key`/`--secret-key`, the environment (ES_BROKER_ACCESS_KEY and
ES_BROKER_SECRET_KEY), a tools.yml (`--tools-yml PATH`, else mqadmin's
`$ROCKETMQ_HOME/conf/tools.yml` when it exists) with `accessKey:`/`secretKey:`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import trio

from es_broker.cli import admin_ops, admin_stats  # noqa: F401 (register their verbs)
from es_broker.cli.admin_verbs import VERBS, message_fields, opt, verb
from es_broker.cli.credentials import CredentialsError, add_credential_options, admin_credentials
from es_broker.client.admin import Admin, AdminError
from es_broker.client.remoting_client import RemotingError
from es_broker.client.tls import TlsClientSettings, TlsSetupError
from es_broker.config import BrokerRole
from es_broker.log.types import ResetMode, ResetScope
from es_broker.remoting import fastjson
from es_broker.remoting.message import StoredMessage
from es_broker.remoting.peer_outcomes import peer_problems
from es_broker.timetravel.timeparse import format_time, parse_time


def table(headers: list[str], rows: list[list[Any]]) -> str:
    widths = [max(len(str(x)) for x in [h, *[r[i] for r in rows]]) for i, h in enumerate(headers)]
    lines = ["  ".join(f"{h:<{w}}" for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(f"{str(c):<{w}}" for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def message_view(m: StoredMessage) -> dict[str, Any]:
    return {
        "msgId": m.msg_id,
        "topic": m.topic,
        "tags": m.tags,
        "keys": " ".join(m.keys),
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.physical_offset,
        "reconsumeTimes": m.reconsume_times,
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
        "bornHost": f"{m.born_host[0]}:{m.born_host[1]}",
        "storeHost": f"{m.store_host[0]}:{m.store_host[1]}",
        "sysFlag": m.sys_flag,
        "properties": m.properties,
        "bodyCRC": m.body_crc,
        "body": m.uncompressed_body().decode("utf-8", errors="replace"),
    }


def render_message(m: dict[str, Any]) -> str:
    rows = [("OffsetID", m["msgId"]), *message_fields(m), ("Message Body", m["body"])]
    return "\n".join(f"{k + ':':<20}{v}" for k, v in rows)


def ok(_: Any) -> str:
    return "OK" if _ is None else json.dumps(_)


# ---------------------------------------------------------------------- topics


def _topic_opts(fn):
    for o in [
        (("-b", "--brokerAddr"), {}),
        (("-c", "--clusterName"), {}),
        (("-t", "--topic"), {"required": True}),
    ]:
        fn = opt(*o[0], **o[1])(fn)
    return fn


@verb(
    "updateTopic",
    lambda r: "\n".join(f"create topic to {a} success." for a in r["brokers"]) + f"\n{r['config']}",
)
@_topic_opts
@opt("-r", "--readQueueNums", type=int, default=8)
@opt("-w", "--writeQueueNums", type=int, default=8)
@opt("-p", "--perm", type=int, default=6)
@opt("-o", "--order", default="false")
async def update_topic(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    for addr in addrs:
        await admin.update_topic(
            addr, a.topic, a.readQueueNums, a.writeQueueNums, a.perm, a.order == "true"
        )
    return {
        "brokers": addrs,
        "config": {
            "topicName": a.topic,
            "readQueueNums": a.readQueueNums,
            "writeQueueNums": a.writeQueueNums,
            "perm": a.perm,
        },
    }


@verb(
    "updateTopicPerm",
    lambda r: "\n".join(
        f"update topic perm from {x['oldPerm']} to {x['perm']} in {x['broker']} success." for x in r
    ),
)
@_topic_opts
@opt("-p", "--perm", type=int, required=True)
async def update_topic_perm(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        await admin.update_topic_perm(addr, a.topic, a.perm)
        for addr in await admin.targets(a.brokerAddr, a.clusterName)
    ]


@verb(
    "deleteTopic", lambda r: f"delete topic [{r['topic']}] from cluster [{r['cluster']}] success."
)
@opt("-t", "--topic", required=True)
@opt("-c", "--clusterName", required=True)
async def delete_topic(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    await admin.delete_topic(await admin.master_addrs(a.clusterName), a.topic)
    return {"topic": a.topic, "cluster": a.clusterName}


@verb("topicList", lambda r: "\n".join(r))
@opt("-c", "--clusterModel", action="store_true")
async def topic_list(admin: Admin, a: argparse.Namespace) -> list[str]:
    return await admin.topic_list()


@verb("topicRoute", lambda r: json.dumps(r, indent=2, default=str))
@opt("-t", "--topic", required=True)
async def topic_route(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    route = await admin.route(a.topic)
    return json.loads(route.encode(standard_json=True))  # broker ids as JSON's string keys


@verb(
    "topicStatus",
    lambda rows: table(
        ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
        [
            [
                r["brokerName"],
                r["queueId"],
                r["minOffset"],
                r["maxOffset"],
                format_time(r["lastUpdateTimestamp"]),
            ]
            for r in rows
        ],
    ),
)
@opt("-t", "--topic", required=True)
async def topic_status(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    return await admin.topic_status(a.topic)


# ---------------------------------------------------------------------- groups


@verb(
    "updateSubGroup",
    lambda r: (
        "\n".join(f"create subscription group to {x} success." for x in r["brokers"])
        + f"\n{r['config']}"
    ),
)
@opt("-b", "--brokerAddr")
@opt("-c", "--clusterName")
@opt("-g", "--groupName", required=True)
@opt("-s", "--consumeEnable", default="true")
@opt("-m", "--consumeFromMinEnable", default="false")
@opt("-d", "--consumeBroadcastEnable", default="false")
@opt("-q", "--retryQueueNums", type=int, default=1)
@opt("-r", "--retryMaxTimes", type=int, default=16)
@opt("-i", "--brokerId", type=int, default=0)
@opt("-w", "--whichBrokerWhenConsumeSlowly", type=int, default=1)
@opt("-a", "--notifyConsumerIdsChanged", default="true")
async def update_sub_group(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    config = {
        "groupName": a.groupName,
        "consumeEnable": a.consumeEnable == "true",
        "consumeFromMinEnable": a.consumeFromMinEnable == "true",
        "consumeBroadcastEnable": a.consumeBroadcastEnable == "true",
        "retryQueueNums": a.retryQueueNums,
        "retryMaxTimes": a.retryMaxTimes,
        "brokerId": a.brokerId,
        "whichBrokerWhenConsumeSlowly": a.whichBrokerWhenConsumeSlowly,
        "notifyConsumerIdsChangedEnable": a.notifyConsumerIdsChanged == "true",
    }
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    for addr in addrs:
        await admin.update_group(addr, config)
    return {"brokers": addrs, "config": config}


@verb(
    "deleteSubGroup",
    lambda r: "\n".join(
        f"delete subscription group [{r['group']}] from broker [{x}] success." for x in r["brokers"]
    ),
)
@opt("-b", "--brokerAddr")
@opt("-c", "--clusterName")
@opt("-g", "--groupName", required=True)
@opt("-r", "--removeOffset", default="false")
async def delete_sub_group(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    for addr in addrs:
        await admin.delete_group(addr, a.groupName, a.removeOffset == "true")
    return {"group": a.groupName, "brokers": addrs}


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
                [i + 1, c["clientId"], c["clientAddr"], c["language"], c["version"]]
                for i, c in enumerate(r["connectionSet"])
            ],
        )
        + f"\n\nConsumeType: {r['consumeType']}\nMessageModel: {r['messageModel']}"
        + f"\nConsumeFromWhere: {r['consumeFromWhere']}"
    ),
)
@opt("-g", "--consumerGroup", required=True)
async def consumer_connection(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
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


def _render_reset_plan(results: list[dict[str, Any]]) -> str:
    out = []
    for r in results:
        out.append(f"{r['brokerName']}: {r['outcome']}")
        out.append(
            table(
                ["#queueId", "#current", "#target", "#final", "#outcome"],
                [
                    [q["queueId"], q["current"], q["target"], q["final"], q["outcome"]]
                    for q in r["queues"]
                ],
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
    choices=list(ResetMode),
    help="server_side: the broker writes the offsets itself",
)
@opt(
    "--scope",
    choices=list(ResetScope),
    help="read_queues: every read queue, creating offsets",
)
async def reset_offset(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
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


# ---------------------------------------------------------------------- messages


@verb("queryMsgById", render_message)
@opt("-i", "--msgId", required=True)
async def query_msg_by_id(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    return message_view(await admin.view_message(a.msgId))


@verb("queryMsgByOffset", render_message)
@opt("-t", "--topic", required=True)
@opt("-b", "--brokerName", required=True)
@opt("-i", "--queueId", type=int, required=True)
@opt("-o", "--offset", type=int, required=True)
async def query_msg_by_offset(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    return message_view(await admin.message_by_offset(a.topic, a.brokerName, a.queueId, a.offset))


@verb(
    "queryMsgByKey",
    lambda rows: table(
        ["#Message ID", "#QID", "#Offset"],
        [[m["msgId"], m["queueId"], m["queueOffset"]] for m in rows],
    ),
)
@opt("-t", "--topic", required=True)
@opt("-k", "--msgKey", required=True)
async def query_msg_by_key(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    return [message_view(m) for m in await admin.messages_by_key(a.topic, a.msgKey)]


@verb(
    "sendMessage",
    lambda r: table(
        ["#Broker Name", "#QID", "#Send Result", "#MsgId"],
        [[r["brokerName"], r["queueId"], r["sendStatus"], r["msgId"]]],
    ),
)
@opt("-t", "--topic", required=True)
@opt("-p", "--body", required=True)
@opt("-k", "--keys")
@opt("-c", "--tags")
@opt("-b", "--broker")
@opt("-i", "--qid", type=int)
async def send_message(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    return await admin.send_message(a.topic, a.body.encode(), a.tags, a.keys, a.broker, a.qid)


@verb("consumeMessage", lambda rows: "\n\n".join(render_message(m) for m in rows) or "no message")
@opt("-t", "--topic", required=True)
@opt("-b", "--brokerName")
@opt("-i", "--queueId", type=int)
@opt("-o", "--offset", type=int)
@opt("-g", "--consumerGroup", help="accepted as mqadmin's; es-broker reads without a group")
@opt("-s", "--beginTimestamp", help="currentTimeMillis | yyyy-MM-dd#HH:mm:ss:SSS")
@opt("-e", "--endTimestamp", help="currentTimeMillis | yyyy-MM-dd#HH:mm:ss:SSS")
@opt("-c", "--MessageNumber", "--messageNumber", dest="messageNumber", type=int, default=128)
async def consume_message(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    """Up to -c messages from -o (else the queue's minimum, or -s's offset) to -e's offset."""
    if a.messageNumber <= 0:
        raise ValueError("Please input a positive messageNumber!")
    begin = parse_time(a.beginTimestamp) if a.beginTimestamp else None
    end = parse_time(a.endTimestamp) if a.endTimestamp else None
    if begin is not None and end is not None and begin > end:
        raise ValueError(
            "Please make sure that the beginTimestamp is less than or equal to the endTimestamp"
        )
    out: list[dict[str, Any]] = []
    names = await admin.broker_names()
    route = await admin.route(a.topic)
    for qd in route.queue_datas:
        if a.brokerName and qd.broker_name != a.brokerName or qd.broker_name not in names:
            continue
        addrs = names[qd.broker_name]
        addr = addrs.get(0) or next(iter(addrs.values()))
        for qid in range(qd.read_queue_nums):
            if a.queueId is not None and qid != a.queueId:
                continue
            offset = a.offset if a.offset is not None else 0
            if a.offset is None and begin is not None:
                offset = await admin.queue_offsets(addr, a.topic, qid, at=begin)
            stop = (
                await admin.queue_offsets(addr, a.topic, qid, at=end) if end is not None else None
            )
            while len(out) < a.messageNumber and (stop is None or offset <= stop):
                try:
                    m = await admin.message_by_offset(a.topic, qd.broker_name, qid, offset)
                except ValueError:
                    break
                out.append(message_view(m))
                offset = m.queue_offset + 1
    return out


# ---------------------------------------------------------------------- dead letters and journeys (es-broker)


def fmt_ms(ms: int) -> str:
    """A delay as messageDelayLevel writes it: 10s, 2m, 1h."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _render_redrive(r: dict[str, Any]) -> str:
    rows = r["items"]
    sent = [x for x in rows if x["newMsgId"]]
    if r["dryRun"]:
        head = (
            f"dry run: {sum(1 for x in rows if not x['skipped'])} dead letter(s) of {r['group']} would go to "
            f"{'%RETRY%' + r['group'] if r['target'] == 'retry' else 'their original topic'}"
        )
    else:
        head = f"re-drove {len(sent)} dead letter(s) of {r['group']}"
    body = table(
        [
            "#Broker",
            "#DLQ Offset",
            "#Dead Letter",
            "#Original Topic",
            "#To",
            "#QID",
            "#New MsgId",
            "#Note",
        ],
        [
            [
                x["broker"],
                x["dlqQueueOffset"],
                x["dlqMsgId"],
                x["originalTopic"] or "-",
                x["targetTopic"] or "-",
                "-" if x["targetQueueId"] is None else x["targetQueueId"],
                x["newMsgId"] or "-",
                x["skipped"] or "",
            ]
            for x in rows
        ],
    )
    return head + ("\n" + body if rows else "")


@verb("redriveDLQ", _render_redrive)
@opt("-g", "--consumerGroup", required=True)
@opt("-t", "--topic", help="only dead letters whose original topic (RETRY_TOPIC) is this one")
@opt(
    "--to",
    dest="target",
    choices=["retry", "original"],
    default="retry",
    help="retry: re-send to %%RETRY%%G (default); original: to the original topic",
)
@opt("--max", dest="max_count", type=int, help="at most this many dead letters")
@opt("--dry-run", action="store_true", help="list what would be re-driven; change nothing")
async def redrive_dlq(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    """Re-send dead letters of a group with reconsume times reset (S-9); each re-drive is a record."""
    items = await admin.redrive_dlq(a.consumerGroup, a.topic, a.target, a.max_count, a.dry_run)
    return {"group": a.consumerGroup, "target": a.target, "dryRun": a.dry_run, "items": items}


def _trace_line(e: dict[str, Any]) -> str:
    kind = e["event"]
    where = f"{e.get('topic')} queue {e.get('queueId')} offset {e.get('queueOffset')}"
    if kind == "sent":
        text = (
            f"{where}, producer group {e['producerGroup'] or '-'}, client {e['requester'] or '-'}, "
            f"born {format_time(e['bornTimestamp'] or 0)} at {e['bornHost'] or '-'}"
        )
        if e.get("divertedFrom"):
            text += f" (sent to {e['divertedFrom']} past its retry limit: dead-lettered, B-95)"
        if e.get("delay"):
            d = e["delay"]
            text += (
                f"; delayed level {d['level']} for {d['real_topic']} queue {d['real_queue_id']}, "
                f"due {format_time(d['deliver_at'])}"
            )
        return text
    if kind == "delivered":
        text = f"{where} to group {e['group']}, client {e['client'] or '-'}"
        served_by = e.get("servedBy")
        if served_by:
            text += (
                f", served by slave {served_by['brokerId']} at {served_by['addr'] or '-'} "
                f"(recorded {format_time(e['recordedTs'])})"
            )
        return text
    if kind in ("offset_committed", "offset_moved_back"):
        return (
            f"group {e['group']} on {e['topic']} queue {e['queueId']}: {e['old']} -> {e['new']} "
            f"({e['cause']}, {e['requester'] or '-'})"
        )
    if kind == "sent_back":
        return (
            f"by group {e['group']} (client {e['requester'] or '-'}): retry {e['reconsumeTimes']} of "
            f"{e['maxReconsumeTimes']}, level {e['delayLevel']} ({fmt_ms(e['delayMs'])}), due "
            f"{format_time(e['deliverAt'])}, for {e['targetTopic']} queue {e['targetQueueId']} as {e['newMsgId']}"
        )
    if kind == "dead_lettered":
        return (
            f"by group {e['group']} (client {e['requester'] or '-'}): {e['reason']} (reconsumed "
            f"{e['reconsumeTimes'] - 1} times, max {e['maxReconsumeTimes']}), to {e['targetTopic']} queue "
            f"{e['targetQueueId']} as {e['newMsgId']}"
        )
    if kind == "dropped":
        return f"by group {e['group']} (client {e['requester'] or '-'}): {e['reason']} (retryQueueNums 0, B-94)"
    if kind == "delay_delivered":
        return f"level {e['level']} due {format_time(e['due'])}: to {where} as {e['newMsgId']}"
    if kind == "redriven":
        return f"by {e['requester'] or '-'}: to {e['targetTopic']} queue {e['targetQueueId']} as {e['newMsgId']}"
    return json.dumps({k: v for k, v in e.items() if k not in ("seq", "ts", "event")})


def render_trace(j: dict[str, Any]) -> str:
    first = j["hops"][0] if j["hops"] else {}
    head = (
        f"Message {j['msgId']} (UNIQ_KEY {first.get('uniqKey') or '-'}), topic {first.get('topic')}, "
        f"{len(j['hops'])} stored cop{'y' if len(j['hops']) == 1 else 'ies'}, from broker {j['broker']}"
    )
    rows = [
        [format_time(e["ts"]), e["seq"], e["event"].upper(), _trace_line(e)] for e in j["events"]
    ]
    return head + "\n" + table(["#Time", "#Seq", "#Event", "#Details"], rows)


@verb("messageTrace", render_trace)
@opt(
    "--msg-id",
    "-i",
    dest="msgId",
    required=True,
    help="the offset msg id (or the UNIQ_KEY) of any copy",
)
async def message_trace(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    """A message's whole journey from the broker's records (es-broker)."""
    return await admin.message_trace(a.msgId)


@verb(
    "openTransactions",
    lambda rows: table(
        ["#Broker", "#Producer Group", "#Topic", "#QID", "#Transaction Id", "#Born", "#Checks"],
        [
            [
                r["broker"],
                r["producerGroup"],
                r["topic"],
                r["queueId"],
                r["transactionId"],
                format_time(r["bornTimestamp"]),
                r["checks"],
            ]
            for r in rows
        ],
    ),
)
@opt("-g", "--producerGroup", help="only this producer group's transactions")
async def open_transactions(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    """Half messages not yet committed, rolled back or discarded, per producer group (es-broker)."""
    return await admin.open_transactions(a.producerGroup)


# ---------------------------------------------------------------------- cluster


@verb(
    "clusterList",
    lambda rows: table(
        [
            "#Cluster Name",
            "#Broker Name",
            "#BID",
            "#Addr",
            "#Version",
            "#Peer Requests",
            "#Role",
            "#Epoch",
            "#Lag",
        ],
        [
            [
                r["cluster"],
                r["brokerName"],
                r["brokerId"],
                r["addr"],
                r["version"],
                r["peers"],
                r.get("role", ""),
                r.get("epoch", ""),
                r.get("lag", ""),
            ]
            for r in rows
        ],
    ),
)
async def cluster_list(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    info = await admin.cluster_info()
    rows = []
    for cluster, names in sorted(info.cluster_addr_table.items()):
        for name in names:
            for bid, addr in sorted(info.broker_addr_table[name].broker_addrs.items()):
                runtime = {}
                try:
                    runtime = await admin.broker_runtime(addr)
                except (AdminError, RemotingError):
                    version, peers = "(unreachable)", ""
                else:
                    # what its name servers, master or clients refused it (B-316)
                    version = runtime.get("brokerVersionDesc", "")
                    peers = "; ".join(peer_problems(runtime)) or "ok"
                rows.append(
                    {
                        "cluster": cluster,
                        "brokerName": name,
                        "brokerId": bid,
                        "addr": addr,
                        "version": version,
                        "peers": peers,
                        **ha_columns(runtime),
                    }
                )
    return rows


def ha_columns(runtime: dict[str, str]) -> dict[str, str]:
    """A node's role, fail-over epoch and lag in records behind its master (B-387)."""
    lag = ""
    if runtime.get("brokerRole") == BrokerRole.SLAVE and runtime.get("haMasterLastSeq"):
        lag = str(max(int(runtime["haMasterLastSeq"]) - int(runtime.get("haAppliedSeq", 0)), 0))
    elif runtime.get("brokerRole"):
        lag = "0"
    return {
        "role": runtime.get("brokerRole", ""),
        "epoch": runtime.get("haEpoch", ""),
        "lag": lag,
    }


HA_STATUS_KEYS = ("brokerRole", "brokerId", "recordLogLastSeq")


@verb("haStatus", lambda r: "\n".join(f"{k:<32}: {v}" for k, v in sorted(r.items())))
@opt("-b", "--brokerAddr", required=True)
async def ha_status(admin: Admin, a: argparse.Namespace) -> dict[str, str]:
    """A node's fail-over state: node, epoch, leader, fence, replication (B-387)."""
    runtime = await admin.broker_runtime(a.brokerAddr)
    return {k: v for k, v in runtime.items() if k.startswith("ha") or k in HA_STATUS_KEYS}


@verb("haSwitch", lambda r: f"switch-over from {r.get('from')} to {r.get('to')} done")
@opt("-b", "--brokerAddr", required=True, help="the leader's address")
@opt("-t", "--to", required=True, help="the follower's ha_node_id")
async def ha_switch(admin: Admin, a: argparse.Namespace) -> dict[str, str]:
    """Planned switch-over: the leader stops writes, waits for the follower to hold them all, hands over."""
    return await admin.ha_switch(a.brokerAddr, a.to)


@verb("brokerStatus", lambda r: "\n".join(f"{k:<32}: {v}" for k, v in sorted(r.items())))
@opt("-b", "--brokerAddr", required=True)
async def broker_status(admin: Admin, a: argparse.Namespace) -> dict[str, str]:
    return await admin.broker_runtime(a.brokerAddr)


# ---------------------------------------------------------------------- ACL (mqadmin's acl verbs)


def _acl_target_opts(fn):
    for o in [(("-b", "--brokerAddr"), {}), (("-c", "--clusterName"), {})]:
        fn = opt(*o[0], **o[1])(fn)
    return fn


def _csv(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def _render_acl_update(r: dict[str, Any]) -> str:
    lines = [f"create or update plain access config to {a} success." for a in r["brokers"]]
    return "\n".join(lines + [json.dumps(r["config"])])


@verb("updateAclConfig", _render_acl_update)
@_acl_target_opts
@opt("-a", "--accessKey", required=True)
@opt("-s", "--secretKey", required=True)
@opt("-w", "--whiteRemoteAddress")
@opt("-i", "--defaultTopicPerm")
@opt("-u", "--defaultGroupPerm")
@opt("-t", "--topicPerms", help="e.g. topicA=DENY,topicD=SUB")
@opt("-g", "--groupPerms", help="e.g. groupA=DENY,groupD=SUB")
@opt("-m", "--admin", default="false")
async def update_acl_config(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    config = {
        "accessKey": a.accessKey,
        "whiteRemoteAddress": a.whiteRemoteAddress,
        "admin": a.admin.lower() == "true",
        "defaultTopicPerm": a.defaultTopicPerm,
        "defaultGroupPerm": a.defaultGroupPerm,
        "topicPerms": _csv(a.topicPerms),
        "groupPerms": _csv(a.groupPerms),
    }
    for addr in addrs:
        await admin.update_acl_config(
            addr,
            a.accessKey,
            a.secretKey,
            white_remote_address=a.whiteRemoteAddress,
            admin=config["admin"],
            default_topic_perm=a.defaultTopicPerm,
            default_group_perm=a.defaultGroupPerm,
            topic_perms=config["topicPerms"],
            group_perms=config["groupPerms"],
        )
    # the secret is never printed
    return {
        "brokers": addrs,
        "config": {**config, "secretKey": "******"},
    }


@verb(
    "deleteAclConfig",
    lambda r: "\n".join(
        [f"delete plain access config account from {a} success." for a in r["brokers"]]
        + [f"account's accesskey is:{r['accessKey']}"]
    ),
)
@_acl_target_opts
@opt("-a", "--accessKey", required=True)
async def delete_acl_config(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    for addr in addrs:
        await admin.delete_acl_config(addr, a.accessKey)
    return {"brokers": addrs, "accessKey": a.accessKey}


@verb(
    "updateGlobalWhiteAddr",
    lambda r: "\n".join(
        f"update global white remote addresses to {a} success." for a in r["brokers"]
    ),
)
@_acl_target_opts
@opt("-g", "--globalWhiteRemoteAddresses", required=True, help="e.g. 10.10.103.*,192.168.0.*")
@opt("-p", "--aclFileFullPath", help="the ACL file to change (default: the broker's plain_acl.yml)")
async def update_global_white_addr(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    patterns = _csv(a.globalWhiteRemoteAddresses) or []
    for addr in addrs:
        await admin.update_global_white_addrs(addr, patterns, a.aclFileFullPath)
    return {"brokers": addrs, "globalWhiteRemoteAddresses": patterns}


def _render_acl_versions(rows: list[dict[str, Any]]) -> str:
    return table(
        [
            "#Cluster Name",
            "#Broker Name",
            "#Broker Addr",
            "#AclFilePath",
            "#AclConfigVersionNum",
            "#AclLastUpdateTime",
        ],
        [
            [
                r["clusterName"],
                r["brokerName"],
                r["brokerAddr"],
                path,
                v.get("counter", 0),
                format_time(v.get("timestamp", 0)),
            ]
            for r in rows
            for path, v in sorted(r["allAclFileVersion"].items())
        ],
    )


@verb("clusterAclConfigVersion", _render_acl_versions)
@_acl_target_opts
async def cluster_acl_config_version(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        await admin.acl_config_version(addr)
        for addr in await admin.targets(a.brokerAddr, a.clusterName)
    ]


def _render_acl_config(rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        out += [
            f"broker {r['brokerAddr']}",
            "",
            f"{'globalWhiteRemoteAddresses':<20}: {r['globalWhiteAddrs']}",
            "",
            "accounts:",
        ]
        for account in r["plainAccessConfigs"]:
            out += [f"  {k:<18}: {'' if v is None else v}" for k, v in account.items()] + [""]
    return "\n".join(out)


@verb("getAccessConfigSubCommand", _render_acl_config)
@_acl_target_opts
async def get_access_config(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    """4.9.0's listing of every account; es-broker masks the secret keys."""
    return [
        {"brokerAddr": addr, **fastjson.loads((await admin.acl_config(addr)).encode())}
        for addr in await admin.targets(a.brokerAddr, a.clusterName)
    ]


# ---------------------------------------------------------------------- entry


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("admin", help="mqadmin's verbs against a running broker")
    p.add_argument("-n", "--namesrvAddr", default="127.0.0.1:9876", help="name server HOST:PORT")
    add_credential_options(p, None)
    add_tls_options(p, None)
    verbs = p.add_subparsers(dest="verb", required=True)
    for name, (_, _, options) in VERBS.items():
        vp = verbs.add_parser(name)
        options(vp)
        vp.add_argument("--json", action="store_true", help="print JSON instead of a table")
        # SUPPRESS: a verb that is not given them keeps what came before the verb
        add_credential_options(vp, argparse.SUPPRESS)
        add_tls_options(vp, argparse.SUPPRESS)
    p.set_defaults(func=run_admin)


def add_tls_options(p: argparse.ArgumentParser, default: Any) -> None:
    """--tls, --tls-ca; before the verb and after it (B-354)."""
    p.add_argument(
        "--tls",
        action="store_true",
        default=default if default is not None else False,
        help="speak TLS to the name server and the brokers, verifying their certificates",
    )
    p.add_argument(
        "--tls-ca",
        default=default,
        metavar="FILE",
        help="the PEM CA bundle the servers' certificates chain to (implies --tls; else the "
        "system store)",
    )


def admin_tls(args: argparse.Namespace) -> TlsClientSettings | None:
    """The TLS settings --tls / --tls-ca ask for (None: plain TCP); TlsSetupError on an unusable CA."""
    ca = getattr(args, "tls_ca", None)
    if not getattr(args, "tls", False) and not ca:
        return None
    settings = TlsClientSettings(ca_file=ca)
    settings.context()  # an unusable CA file is an error now, not at the first connection
    return settings


def run_admin(args: argparse.Namespace) -> int:
    fn, render, _ = VERBS[args.verb]
    try:
        credentials = admin_credentials(args, os.environ)
        tls = admin_tls(args)
    except (CredentialsError, TlsSetupError) as exc:
        print(f"es-broker admin {args.verb}: {exc}", file=sys.stderr)
        return 2

    async def main() -> tuple[Any, Exception | None]:
        async with Admin.open(args.namesrvAddr, credentials=credentials, tls=tls) as admin:
            try:
                return await fn(admin, args), None
            except (AdminError, RemotingError, ValueError, KeyError) as exc:
                return None, exc

    result, error = trio.run(main)
    if error is not None:
        print(f"es-broker admin {args.verb}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, default=str) if args.json else render(result))
    return 0
