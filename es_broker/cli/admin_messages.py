"""`es-broker admin`'s message verbs: look-ups, sends, consumption, re-drives, journeys, transactions."""

from __future__ import annotations

import argparse
import json
from typing import Any

from es_broker.cli.admin_verbs import message_fields, opt, table, verb
from es_broker.client.admin import Admin
from es_broker.remoting.body_view import plain
from es_broker.remoting.message import StoredMessage
from es_broker.timetravel.timeparse import format_time, parse_time


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


# ---------------------------------------------------------------------- messages


@verb("queryMsgById", render_message)
@opt("-i", "--msgId", required=True, help="an offset message id, or a unique key (B-491)")
@opt("-t", "--topic", help="where to look a unique key up (default: every topic)")
async def query_msg_by_id(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    return message_view(await admin.message_by_id(a.msgId.strip(), a.topic))


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
    if kind in _POP_EVENTS:
        return _pop_line(e)
    return json.dumps({k: v for k, v in e.items() if k not in ("seq", "ts", "event")})


_POP_EVENTS = frozenset(
    {"popped", "acked", "invisible_changed", "pop_revived", "pop_dead_lettered"}
)


def _pop_line(e: dict[str, Any]) -> str:
    """A RocketMQ 5 pop event of the message (B-591)."""
    kind, who = e["event"], f"group {e['group']}"
    client = e.get("client") or "-"
    if e.get("forClient"):  # popped, acked or changed by a proxy for a RocketMQ 5 client
        client = f"{e['forClient']} (via {client})"
    if kind == "popped":
        fifo = ", FIFO" if e["order"] else ""
        return (
            f"{who}, client {client}: delivery {e['deliveryCount']}{fifo}, "
            f"invisible until {format_time(e['invisibleUntil'])}"
        )
    if kind == "acked":
        return f"{who}, client {client}: acked (handle of {format_time(e['popTime'])})"
    if kind == "invisible_changed":
        return (
            f"{who}, client {client}: invisible until "
            f"{format_time(e['invisibleUntil'])} under a new handle"
        )
    held = f"{who}: not acked by {e['heldBy'] or '-'} within its invisible time"
    if kind == "pop_revived":
        return f"{held}, visible again (delivery {e['deliveryCount']})"
    return (
        f"{held} after {e['deliveryCount']} deliveries (max reconsume {e['maxReconsumeTimes']}): "
        f"to {e['targetTopic']} as {e.get('newMsgId') or '- (message gone)'}"
    )


def render_trace(j: dict[str, Any]) -> str:
    first = j["hops"][0] if j["hops"] else {}
    head = (
        f"Message {j['msgId']} (UNIQ_KEY {first.get('uniqKey') or '-'}), topic {first.get('topic')}, "
        f"{len(j['hops'])} stored cop{'y' if len(j['hops']) == 1 else 'ies'}, from broker {j['broker']}"
    )
    rows = [
        [format_time(e["ts"]), e["seq"], e["event"].upper(), _trace_line(e)] for e in j["events"]
    ]
    text = head + "\n" + table(["#Time", "#Seq", "#Event", "#Details"], rows)
    clients = j.get("clientTrace") or []
    if clients:  # the clients' own trace contexts, from the trace topic (B-483)
        rows = [
            [format_time(c["timestamp"]), c["type"], c["group"], c["clientHost"], _client_line(c)]
            for c in clients
        ]
        text += "\n\nClient trace\n" + table(
            ["#Time", "#Type", "#Group", "#ClientHost", "#Details"], rows
        )
    return text


def _client_line(c: dict[str, Any]) -> str:
    kind = c["type"]
    if kind == "Pub":
        return f"to {c['topic']} at {c['storeHost']}, cost {c['costTime']}ms, {c['status']}"
    if kind == "SubBefore":
        return f"request {c['requestId']}, retry {c['retryTimes']}"
    if kind == "SubAfter":
        return (
            f"request {c['requestId']}, cost {c['costTime']}ms, {c['status']} "
            f"({c['consumeReturnType']})"
        )
    return f"transaction {c['transactionId']}: {c['transactionState']}"


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
    # each as the broker wrote it, with the broker that holds it
    return [
        dict(plain(t), broker=addr) for addr, t in await admin.open_transactions(a.producerGroup)
    ]
