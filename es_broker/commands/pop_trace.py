"""A message's pop events, from the records: who held it, from when to when, who acked it (B-591).

The pop projection indexes every pop record by the messages it names
(`pop_trace`; an expired message's sealed records are read from the archive,
B-642: `history.horizon.pop_records`); each becomes an event of the message's journey (messageTrace,
`trace.journey`): `popped` (the group and client that took it, its pop time,
the time it stays invisible until, the delivery count), `acked`,
`invisible_changed` (the new handle's times), `pop_revived` (its invisible time
passed: visible to the group again) and `pop_dead_lettered` (its copy in
%DLQ%G, whose hop the journey follows on).
"""

from __future__ import annotations

from typing import Any

import lmdb

from es_broker.commands import names
from es_broker.history.horizon import pop_records
from es_broker.history.reader import record_at
from es_broker.log import Record
from es_broker.log.types import RecordType
from es_broker.store import Store


def events_of(
    store: Store,
    txn: lmdb.Transaction[bytes],
    topic: str,
    queue_id: int,
    offset: int,
    msg_id: str | None,
) -> list[dict[str, Any]]:
    """The pop events of the message at (topic, queue, offset), in log order."""
    out: list[dict[str, Any]] = []
    for seq in pop_records(store, txn, topic, queue_id, offset):
        record = record_at(store, txn, seq)
        base = {
            "seq": seq,
            "ts": record["ts"],
            "msgId": msg_id,
            "group": record["group"],
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
        }
        if record.get("for_client"):  # a proxy's pop, ack or change: for this client
            base["forClient"] = record["for_client"]
        out.extend({**base, **event} for event in _events(record, offset))
    return out


def _events(record: Record, offset: int) -> list[dict[str, Any]]:
    kind = record["type"]
    if kind == RecordType.MESSAGES_POPPED:
        times = next((t for o, t in record["offsets"] if o == offset), None)
        if times is None:
            return []
        return [
            {
                "event": "popped",
                "client": record["client"],
                "popTime": record["pop_time"],
                "invisibleUntil": record["invisible_until"],
                "deliveryCount": times,
                "order": record["order"],
            }
        ]
    if kind == RecordType.POP_ACKED:
        return [{"event": "acked", "client": record["client"], "popTime": record["pop_time"]}]
    if kind == RecordType.POP_INVISIBLE_CHANGED:
        return [
            {
                "event": "invisible_changed",
                "client": record["client"],
                "oldPopTime": record["old_pop_time"],
                "popTime": record["pop_time"],
                "invisibleUntil": record["invisible_until"],
            }
        ]
    if kind == RecordType.POP_EXPIRED:
        return _expired(record, offset)
    return []


def _expired(record: Record, offset: int) -> list[dict[str, Any]]:
    for entry_offset, pop_time, times, client in record["revived"]:
        if entry_offset == offset:
            return [
                {
                    "event": "pop_revived",
                    "heldBy": client,
                    "popTime": pop_time,
                    "deliveryCount": times,
                }
            ]
    for entry_offset, pop_time, times, client, phy, new_msg_id in record["dead"]:
        if entry_offset == offset:
            event = {
                "event": "pop_dead_lettered",
                "heldBy": client,
                "popTime": pop_time,
                "deliveryCount": times,
                "maxReconsumeTimes": record["max_reconsume_times"],
                "targetTopic": names.dlq_topic(record["group"]),
            }
            if phy >= 0:
                event.update(newMsgId=new_msg_id, newPhysicalOffset=phy)
            return [event]
    return []


def onward(events: list[dict[str, Any]]) -> list[int]:
    """The physical offsets of the copies these events stored (dead letters): the next hops."""
    return [e["newPhysicalOffset"] for e in events if "newPhysicalOffset" in e]
