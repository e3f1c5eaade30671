"""`es-broker admin queryMsgTraceById`: the clients' trace contexts of a message, as mqadmin shows them.

mqadmin's verb (QueryMsgTraceByIdSubCommand) queries the trace topic by key (the
message id) and decodes each found trace message with TraceDataEncoder; the
client host is the trace message's born host (TraceView). This does the same over
QUERY_MESSAGE, so it answers for any broker that stores trace messages (B-484).
"""

from __future__ import annotations

import argparse
from typing import Any

from es_broker.cli.admin_verbs import opt, table, verb
from es_broker.client.admin import Admin
from es_broker.remoting import trace_data
from es_broker.timetravel.timeparse import format_time


def client_trace_rows(views: list[dict[str, Any]]) -> str:
    """The Pub rows, then each consumer group's SubAfter rows, as mqadmin prints them."""
    pubs = [v for v in views if v["type"] == trace_data.TraceType.PUB]
    subs = [v for v in views if v["type"] == trace_data.TraceType.SUB_AFTER]
    out = []
    if pubs:
        head = ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"]
        rows = [
            ["Pub", v["group"], v["clientHost"], format_time(v["timestamp"]),
             f"{v['costTime']}ms", v["status"]]
            for v in pubs
        ]  # fmt: skip
        out.append(table(head, rows))
    for group in dict.fromkeys(v["group"] for v in subs):
        head = ["#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status"]
        rows = [
            ["Sub", v["group"], v["clientHost"], format_time(v["timestamp"]),
             f"{v['costTime']}ms", v["status"]]
            for v in subs
            if v["group"] == group
        ]  # fmt: skip
        out.append(table(head, rows))
    return "\n\n".join(out) if out else "no trace of this message"


@verb("queryMsgTraceById", client_trace_rows)
@opt("-i", "--msgId", required=True, help="the message id (UNIQ_KEY) the clients traced")
@opt(
    "-t",
    "--traceTopic",
    default=trace_data.DEFAULT_TRACE_TOPIC,
    help="the trace topic (default RMQ_SYS_TRACE_TOPIC)",
)
@opt("--maxNum", type=int, default=64, help="most trace messages per broker (default 64)")
async def query_msg_trace_by_id(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    """Query a message trace: the contexts clients with message trace on wrote about it."""
    views: list[dict[str, Any]] = []
    for m in await admin.messages_by_key(a.traceTopic, a.msgId, a.maxNum):
        host = f"{m.born_host[0]}:{m.born_host[1]}"
        contexts = trace_data.decode(m.uncompressed_body(), host)
        views += [c.view() for c in trace_data.of_message(contexts, [a.msgId])]
    return views
