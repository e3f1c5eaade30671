"""Why a group started where it did, and who moved its offsets last (`es-broker explain`).

From the records (through the audit index, B-415): the QUERY_CONSUMER_OFFSET answer each queue got while the
group had no offset (with the min offset and the in-memory verdict of that
moment, B-37), the consumeFromWhere its consumers announced, what the client
then does (B-45), and the latest change of each queue's offset: every change
the offset rule knows (commits, server-side resets, removals, group deletions,
slave merges), as `history` shows them (B-504).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from es_broker.history.reader import Reading, sources_of
from es_broker.log.types import RecordType
from es_broker.projections.offset_rule import OFFSET_RECORD_TYPES, change_view, offset_changes
from es_broker.store import Store

START_RULES = {
    # (B-37 row, consumeFromWhere family) -> what the client does next (B-45)
    (2, "LAST"): "the broker answered 0 (no offset, min <= 0, head in memory: B-37 row 2), so "
    "CONSUME_FROM_LAST_OFFSET starts at 0 and consumes the queue's whole history (B-40)",
    (2, "FIRST"): "the broker answered 0 (B-37 row 2); CONSUME_FROM_FIRST_OFFSET starts at 0",
    (2, "TIMESTAMP"): "the broker answered 0 (B-37 row 2), so CONSUME_FROM_TIMESTAMP starts at 0, "
    "not at the timestamp",
    (
        3,
        "LAST",
    ): "the broker answered QUERY_NOT_FOUND (B-37 row 3), so the client asked GET_MAX_OFFSET "
    "and started at the queue's max",
    (
        3,
        "FIRST",
    ): "the broker answered QUERY_NOT_FOUND (B-37 row 3); CONSUME_FROM_FIRST_OFFSET starts at 0 "
    "(then OFFSET_TOO_SMALL corrects it to min if the head was deleted, B-48)",
    (
        3,
        "TIMESTAMP",
    ): "the broker answered QUERY_NOT_FOUND (B-37 row 3), so the client searched the offset "
    "of its consumeTimestamp (SEARCH_OFFSET_BY_TIMESTAMP)",
}


EXPLAINED = (
    RecordType.CONSUMER_GROUP_CHANGED,
    RecordType.OFFSET_QUERIED,
    *sorted(OFFSET_RECORD_TYPES),
)


def _family(consume_from_where: str | None) -> str:
    if not consume_from_where:
        return "LAST"
    if "FIRST" in consume_from_where:
        return "FIRST"
    if "TIMESTAMP" in consume_from_where:
        return "TIMESTAMP"
    return "LAST"


@dataclass
class QueueExplanation:
    queue_id: int
    current_offset: int
    start: dict[str, Any] | None = None
    first_change: dict[str, Any] | None = None
    latest_change: dict[str, Any] | None = None
    changes: int = 0

    def note(self, change: dict[str, Any]) -> None:
        """Count a change (a `change_view`) in, as the audit index's `note_change` does."""
        self.first_change = self.first_change or change
        self.latest_change = change
        self.changes += 1


def explain(store: Store, group: str, topic: str) -> dict[str, Any]:
    """Everything the records say about how (group, topic)'s offsets came to be.

    Read from the audit index (B-415), kept as the records arrived: a seek per
    queue, whatever the length of the log or of the archive.
    """
    queues: list[QueueExplanation] = []
    cited: list[int] = []
    with store.read() as txn:
        if not store.audit.is_built(txn, store.log.last_seq):
            return explain_by_scan(store, group, topic)
        consume_from_where, members = store.audit.group(txn, group)
        for qid, entry in store.audit.queues(txn, group, topic):
            start = entry["start"]
            if start is not None:
                family = _family(start["consume_from_where"])
                start = {**start, "why": START_RULES[(start["row"], family)]}
            q = QueueExplanation(
                qid,
                store.offsets.query(txn, topic, group, qid),
                start,
                entry["first_change"],
                entry["latest_change"],
                entry["changes"],
            )
            cited += [x["seq"] for x in (q.start, q.first_change, q.latest_change) if x]
            queues.append(q)
    return {
        "group": group,
        "topic": topic,
        "consume_from_where": consume_from_where,
        "clients": members,
        "queues": [asdict(q) for q in queues],
        # B-408, B-415: where the records it cites are: "hot", or "archive" and "hot"
        "read_from": sources_of(store, cited) or ["hot"],
    }


def explain_by_scan(store: Store, group: str, topic: str) -> dict[str, Any]:
    """`explain` from the records themselves, every one of the group's: for a directory written
    before the audit index that no broker opened since (read-only, so not indexed yet)."""
    queues: dict[int, QueueExplanation] = {}
    consume_from_where: str | None = None
    members: list[str] = []

    def queue(qid: int) -> QueueExplanation:
        if qid not in queues:
            with store.read() as txn:
                current = store.offsets.query(txn, topic, group, qid)
            queues[qid] = QueueExplanation(qid, current)
        return queues[qid]

    # not read by group: a slave merge holds its groups inside its queues (B-504); this is the
    # path of a directory no broker indexed yet, read once
    reading = Reading(store, types=EXPLAINED)
    for seq, r in reading:
        kind = r["type"]
        if kind == RecordType.CONSUMER_GROUP_CHANGED and r["group"] == group:
            consume_from_where, members = r["consume_from_where"], r["clients"]
        elif kind == RecordType.OFFSET_QUERIED and r["group"] == group and r["topic"] == topic:
            q = queue(r["queue_id"])
            if q.start is None:
                family = _family(consume_from_where)
                q.start = {
                    "seq": seq,
                    "ts": r["ts"],
                    "requester": r["requester"],
                    "row": r["row"],
                    "answer": r["offset"] if r["row"] == 2 else "QUERY_NOT_FOUND",
                    "min_offset": r["min_offset"],
                    "head_in_memory": r["head_in_memory"],
                    "phy_max": r["phy_max"],
                    "consume_from_where": consume_from_where,
                    "why": START_RULES[(r["row"], family)],
                }
        elif kind in OFFSET_RECORD_TYPES:  # what the offset rule says it moved (B-504)
            for change in offset_changes(r):
                if change.group == group and change.topic == topic:
                    queue(change.queue_id).note(change_view(seq, r["ts"], change))
    return {
        "group": group,
        "topic": topic,
        "consume_from_where": consume_from_where,
        "clients": members,
        "queues": [asdict(queues[q]) for q in sorted(queues)],
        "read_from": reading.sources,  # B-408: "hot", or "archive" and "hot"
    }
