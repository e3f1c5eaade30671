"""The busiest record types' rows made as tuples (readmodel/tuples.py) are the reference's rows.

`schema.rows` (dicts, shared with the export and the archive) is the
reference; the follower on SQLite makes messages_stored, messages_delivered
and offset_committed rows as tuples of their INSERT's columns instead. These
check that both give the same values, record by record and table by table
(variants included: fields beyond the columns, a %DLQ% topic, a broker and
role of the record's own, fields missing), and that a follower stores the
same tables either way.
"""

from __future__ import annotations

import copy
import tempfile
from typing import Any

from sqlalchemy.dialects import sqlite

from es_broker.log.types import RecordType
from es_broker.readmodel.bulk import BulkInsert
from es_broker.readmodel.follower import _ALL_TABLES, open_follower, table_rows
from es_broker.readmodel.quarantine import effective_time
from es_broker.readmodel.tuples import COLUMNS, tuple_rows
from es_broker.schema.families import RunningTime, Source
from tests.test_readmodel_follower import busy_log, dump, open_log  # noqa: F401  (fixture)

HOT = {RecordType.MESSAGES_STORED, RecordType.MESSAGES_DELIVERED, RecordType.OFFSET_COMMITTED}


def _reference(
    bulk: BulkInsert, seq: int, record: dict[str, Any], time: int, source: Source
) -> list[tuple[str, tuple[Any, ...]]]:
    out = []
    for name, rows in table_rows(source.broker, seq, record, time, source).items():
        out += [(name, values) for values in bulk.values(_ALL_TABLES[name], rows)]
    return sorted(out, key=lambda item: item[0])


def _variants(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record, and forms of it the tuple builders must make as the reference does or leave to it."""
    out = [record]
    more = copy.deepcopy(record)
    more["served_by"] = {"broker_id": 1, "ts": 5}  # a field no column names: `extra`
    out.append(more)
    own = copy.deepcopy(record)
    own["broker"], own["role"] = "broker-b", "SLAVE"
    out.append(own)
    for key in ("producer_group", "requester", "client", "offsets", "ts", "v", "topic", "units"):
        if key in record:
            fewer = copy.deepcopy(record)
            del fewer[key]
            out.append(fewer)
    if "topic" in record:
        dlq = copy.deepcopy(record)
        dlq["topic"] = "%DLQ%G"
        out.append(dlq)
    if "units" in record:
        empty = copy.deepcopy(record)
        empty["units"] = []
        out.append(empty)
    return out


def test_tuple_rows_are_the_reference_rows(busy_log):  # noqa: F811
    bulk = BulkInsert(sqlite.dialect())
    for name, columns in COLUMNS.items():
        assert bulk.columns(_ALL_TABLES[name]) == columns, name
    source = Source()
    clock = RunningTime(0)
    made = {kind: 0 for kind in HOT}
    store = open_log(busy_log)
    try:
        for seq, record in store.log.read(1):
            time = effective_time(clock, record)
            variants = _variants(record) if record["type"] in HOT else [record]
            for variant in variants:
                rows = tuple_rows(seq, variant, time, source.broker, source)
                if rows is None:
                    continue
                made[variant["type"]] += 1
                generic, table, row = rows
                assert sorted([("records", generic), (table, row)]) == _reference(
                    bulk, seq, variant, time, source
                ), variant
    finally:
        store.close()
    assert all(count > 100 for count in made.values()), made


def test_tuple_rows_leave_the_reference_what_they_do_not_cover():
    source = Source()
    dead = {
        "type": "messages_stored",
        "v": 1,
        "ts": 7,
        "topic": "%DLQ%G",
        "queue_id": 0,
        "queue_offset": 3,
        "units": [[0, 10, 0]],
    }
    assert tuple_rows(1, dead, 7, source.broker, source) is None  # a dead letter's row too
    assert tuple_rows(1, {"type": "topic_updated", "topic": "T"}, 7, "b", source) is None
    broken = {"type": "messages_stored", "v": 1, "ts": 7, "topic": "T", "units": 5}
    assert tuple_rows(1, broken, 7, source.broker, source) is None  # the reference's error


def test_a_follower_stores_the_same_tables_with_and_without_tuples(busy_log):  # noqa: F811
    tables = []
    for tuples in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/readmodel.sqlite"
            store = open_log(busy_log)
            follower = open_follower(url, store.log, Source(), batch=300)
            assert follower.tuples
            follower.tuples = tuples
            follower.catch_up()
            follower.engine.dispose()
            store.close()
            tables.append(dump(url))
    assert tables[0] == tables[1]
    assert len(tables[0]["queue_appends"]) == 300


def _reference_time(clock: RunningTime, record: dict[str, Any]) -> int:
    """effective_time as it was written first: `RunningTime.advance`, then the int64 check."""
    before = clock.value
    try:
        value = clock.advance(record.get("ts"))
    except (TypeError, ValueError):
        clock.value = before
        raise
    if value > 2**63 - 1:
        clock.value = before
        raise OverflowError(value)
    return value


def test_effective_time_takes_a_ts_as_advance_does():
    """The follower's shortcut for an int ts that moves time on gives what `advance` gives."""
    values = [None, 0, 1, 5, -3, 10**12, 2**63 - 1, 2**63, True, False, 7.5, "12", "x", [], 2**70]
    for start in (0, 4, 10**12, 2**63 - 1):
        for ts in values:
            outcomes = []
            for function in (effective_time, _reference_time):
                clock = RunningTime(start)
                record = {"type": "messages_stored"} if ts is None else {"ts": ts}
                try:
                    outcome: Any = function(clock, record)
                except Exception as exc:
                    outcome = type(exc)
                outcomes.append((outcome, clock.value))
            assert outcomes[0] == outcomes[1], (start, ts)
