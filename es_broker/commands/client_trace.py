"""The clients' own trace contexts of a message, read from the trace topic (B-483).

A client with message trace on writes its Pub, SubBefore, SubAfter and
EndTransaction contexts as messages of the trace topic (msgTraceTopicName), each
keyed by the traced message's id (es_broker.remoting.trace_data). messageTrace
finds them through the trace topic's key index, by every id of the journey's
copies (UNIQ_KEY and offset msg ids), and shows them beside the broker's own
records. They are messages like any other: retention removes them with their
commit-log file, and then they are no longer shown.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

import lmdb

from es_broker.remoting import message as wire
from es_broker.remoting import trace_data
from es_broker.store import Store

MAX_TRACE_MESSAGES = 64  # per id, as mqadmin queryMsgTraceById's default maxNum
_TIME_MAX = (1 << 48) - 1


def contexts_of(
    store: Store, txn: lmdb.Transaction[bytes], msg_ids: Iterable[str]
) -> list[dict[str, Any]]:
    """The clients' contexts about a message named by any of msg_ids, oldest trace message first."""
    topic = store.config.msgTraceTopicName
    ids = sorted({m for m in msg_ids if m})
    phys: set[int] = set()
    for msg_id in ids:
        phys.update(store.keyindex.newest(txn, topic, msg_id, 0, _TIME_MAX, MAX_TRACE_MESSAGES))
    out: list[dict[str, Any]] = []
    for phy in sorted(phys):
        raw = store.log.payload(txn, phy)
        if raw is None:
            continue
        message = wire.decode_one(raw)[0]
        host = f"{message.born_host[0]}:{message.born_host[1]}"
        try:
            body = message.uncompressed_body()
        except zlib.error:
            continue  # flagged compressed by a client, yet not: nothing to read
        for ctx in trace_data.of_message(trace_data.decode(body, host), ids):
            view = ctx.view()
            view.update(traceMsgId=wire.offset_msg_id(message.store_host, phy), traceTopic=topic)
            out.append(view)
    return out
