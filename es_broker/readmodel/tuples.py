"""The rows of a broker's busiest record types, made as tuples in their INSERT's column order.

messages_stored, messages_delivered and offset_committed make nearly every row
of a broker's log (a store, then a delivery and a commit per pull that finds
messages). `schema.rows` makes a record's rows as dicts, the reference shared
with the export and the archive, and `bulk.BulkInsert.values` turns each into
a tuple of its table's INSERT columns. Here those three types' rows are made
as the tuples at once, with the values the reference gives
(`tests/test_readmodel_tuples.py` holds the two equal), without a dict per row
and a look-up per column.

`COLUMNS` names the column order each builder writes; the follower takes this
path only when it is its INSERTs' order (`BulkInsert.columns`). A record a
builder does not cover as the reference does (a messages_stored in a %DLQ%
topic is a dead letter too), or that it cannot make (a field missing or of
another type), gives None: the reference makes its rows, or raises its own
error for the quarantine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from es_broker.log import Record
from es_broker.log.types import RecordType
from es_broker.schema.families import Source, to_json
from es_broker.schema.rows import (
    DELIVERIES_KNOWN,
    DLQ_PREFIX,
    MESSAGES_KNOWN,
    OFFSETS_KNOWN,
    extra_json,
)

# every row's trailing columns (models._Row, the FIXED columns of `bulk` last) and the records table's
_TAIL = ("seq", "n", "ts", "time", "type", "source", "broker", "role", "extra")
RECORDS = "records"
APPENDS = "queue_appends"
DELIVERIES = "deliveries"
OFFSETS = "offset_changes"

COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    RECORDS: ("v", "body", *_TAIL),
    APPENDS: (
        "topic",
        "queue_id",
        "queue_offset",
        "count",
        "size",
        "first_physical_offset",
        "producer_group",
        "requester",
        *_TAIL,
    ),
    DELIVERIES: (
        "group",
        "topic",
        "queue_id",
        "offset",
        "next_offset",
        "count",
        "client",
        "offsets",
        *_TAIL,
    ),
    OFFSETS: (
        "group",
        "topic",
        "queue_id",
        "old",
        "new",
        "removed",
        "cause",
        "requester",
        *_TAIL,
    ),
}

# a record's rows: its `records` row, and its family's table and row
Made = tuple[tuple[Any, ...], str, tuple[Any, ...]]


def _stored(record: Record) -> tuple[Any, ...] | None:
    topic = record["topic"]
    if str(topic).startswith(DLQ_PREFIX):
        return None  # a dead letter's row too: the reference's
    units = record["units"]
    return (
        topic,
        record["queue_id"],
        record["queue_offset"],
        len(units),
        sum([u[1] for u in units]),
        units[0][0] if units else None,
        record.get("producer_group"),
        record.get("requester"),
    )


def _delivered(record: Record) -> tuple[Any, ...] | None:
    get = record.get
    delivered = list(get("offsets") or ())
    return (
        get("group"),
        get("topic"),
        get("queue_id"),
        get("offset"),
        get("next_offset"),
        len(delivered),
        get("client"),
        to_json(delivered),
    )


def _committed(record: Record) -> tuple[Any, ...] | None:
    # the change `projections.offset_rule` learns from an offset_committed (its `_committed`): the
    # queue's offset from `old` to `offset`, read here without the rule's named tuple (~13k
    # instructions a record); the test holds the row equal to the rule's
    return (
        record["group"],
        record["topic"],
        record["queue_id"],
        record["old"],
        record["offset"],
        False,
        record["cause"],
        record["requester"],
    )


# by record type: its family's table, the builder of the row's own columns (None: the reference
# makes the row), and the fields the row names (the rest go to its `extra`)
_Builder = Callable[[Record], "tuple[Any, ...] | None"]
_BUILDERS: Final[dict[str, tuple[str, _Builder, frozenset[str]]]] = {
    RecordType.MESSAGES_STORED.value: (APPENDS, _stored, MESSAGES_KNOWN),
    RecordType.MESSAGES_DELIVERED.value: (DELIVERIES, _delivered, DELIVERIES_KNOWN),
    RecordType.OFFSET_COMMITTED.value: (OFFSETS, _committed, OFFSETS_KNOWN),
}


def tuple_rows(seq: int, record: Record, time: int, source: str, src: Source) -> Made | None:
    """A record's rows as tuples in `COLUMNS` order, or None: the reference makes them.

    `source` is the rows' source column, `src` names the broker and role of a
    record that carries neither (as `schema.rows.record_rows`).
    """
    try:
        kind = record["type"]
        found = _BUILDERS.get(kind)
        if found is None:
            return None
        table, build, known = found
        own = build(record)
        if own is None:
            return None
        broker = str(record.get("broker") or src.broker)
        role = str(record.get("role") or src.role)
        ts = record.get("ts")
        # every family row ends in the same columns (`_TAIL`)
        row = (*own, seq, 0, ts, time, kind, source, broker, role, extra_json(record, known))
        # the `records` row, as `schema.rows._generic_row` makes it
        generic = (
            record.get("v", 1),
            to_json(record),
            seq,
            0,
            ts,
            time,
            kind,
            source,
            broker,
            role,
            None,
        )
        return generic, table, row
    except Exception:  # the reference makes these rows or raises its own error for them
        return None
