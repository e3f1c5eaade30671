"""The follower's compiled bulk INSERT (readmodel/bulk.py) stores what SQLAlchemy's insert() stores.

The follower hands each table's rows to the driver's executemany itself,
without SQLAlchemy's per-row parameter processing; these check that the
rows stored are the same, and that a value SQLAlchemy refuses is refused
too, as a data error (so the record is quarantined, not retried forever).
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from sqlalchemy import Engine, select

from es_broker.readmodel import db
from es_broker.readmodel.bulk import FIXED, BulkInsert
from es_broker.readmodel.follower import _ALL_TABLES, table_rows
from es_broker.readmodel.models import Base
from es_broker.readmodel.quarantine import effective_time, is_data_error
from es_broker.schema.families import RunningTime, Source
from tests.test_readmodel_follower import busy_log, open_log  # noqa: F401  (fixture)


def _engine(url: str) -> Engine:
    engine = db.open_engine(url)
    db.upgrade(engine)
    return engine


def _dump(engine: Engine) -> dict[str, list[tuple]]:
    with engine.connect() as conn:
        return {
            t.name: [tuple(r) for r in conn.execute(select(t).order_by(*t.primary_key.columns))]
            for t in Base.metadata.sorted_tables
        }


def test_bulk_insert_stores_the_rows_sqlalchemy_insert_stores(busy_log, tmp_path):  # noqa: F811
    store = open_log(busy_log)
    source = Source()
    tables: dict[str, list[dict]] = defaultdict(list)
    clock = RunningTime(0)
    try:
        for seq, record in store.log.read(1):
            time = effective_time(clock, record)
            for name, rows in table_rows(source.broker, seq, record, time, source).items():
                tables[name].extend(rows)
    finally:
        store.close()
    # resets and offset_changes have Boolean columns (a bind processor on SQLite)
    assert {"records", "resets", "reset_queues", "offset_changes", "deliveries"} <= set(tables)
    core = _engine(f"sqlite:///{tmp_path / 'core.sqlite'}")
    bulk = _engine(f"sqlite:///{tmp_path / 'bulk.sqlite'}")
    try:
        with core.begin() as conn:
            for name, rows in tables.items():
                conn.execute(_ALL_TABLES[name].insert(), rows)
        inserter = BulkInsert(bulk.dialect)
        with bulk.begin() as conn:
            for name, rows in tables.items():
                inserter.insert(conn, _ALL_TABLES[name], rows)
        stored = _dump(bulk)
        assert stored == _dump(core)
        assert sum(len(rows) for rows in stored.values()) > 1000
    finally:
        core.dispose()
        bulk.dispose()


def test_bulk_insert_refuses_a_value_sqlalchemy_refuses_as_a_data_error(tmp_path):
    table = _ALL_TABLES["offset_changes"]
    row = {c.key: None for c in table.columns}
    row.update(source="b", seq=1, n=0, ts=1, time=1, type="t", broker="b", role="r")
    row.update(group="g", topic="t", queue_id=0, removed="not a boolean")
    engine = _engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
    try:
        with pytest.raises(Exception) as core, engine.begin() as conn:
            conn.execute(table.insert(), [row])
        with pytest.raises(Exception) as bulk, engine.begin() as conn:
            BulkInsert(engine.dialect).insert(conn, table, [row])
    finally:
        engine.dispose()
    assert is_data_error(core.value)
    assert is_data_error(bulk.value)


def _offset_rows(count: int, first_seq: int = 1) -> list[dict]:
    table = _ALL_TABLES["offset_changes"]
    rows = []
    for seq in range(first_seq, first_seq + count):
        row = {c.key: None for c in table.columns}
        row.update(source="b", seq=seq, n=0, ts=seq, time=seq, type="t", broker="b", role="r")
        row.update(
            group="g", topic="t", queue_id=seq % 4, old=seq - 1, new=seq, removed=seq % 7 == 0
        )
        rows.append(row)
    return rows


def _by_rowid(engine: Engine, name: str) -> list[tuple]:
    with engine.connect() as conn:
        return [
            tuple(r) for r in conn.exec_driver_sql(f"SELECT rowid, * FROM {name} ORDER BY rowid")
        ]


@pytest.mark.parametrize("count", [1, 49, 50, 51, 100, 137])
def test_rows_sent_many_a_statement_are_stored_in_order(tmp_path, count):
    """Rows go in statements of many rows each, the rest one a row: the rows and rowids of insert()."""
    table = _ALL_TABLES["offset_changes"]
    rows = _offset_rows(count)
    core = _engine(f"sqlite:///{tmp_path / 'core.sqlite'}")
    bulk = _engine(f"sqlite:///{tmp_path / 'bulk.sqlite'}")
    try:
        with core.begin() as conn:
            conn.execute(table.insert(), rows)
        inserter = BulkInsert(bulk.dialect)
        assert inserter._plan(table).rows > 1
        with bulk.begin() as conn:
            inserter.insert(conn, table, rows)
        assert _by_rowid(bulk, table.name) == _by_rowid(core, table.name)
        assert len(_by_rowid(bulk, table.name)) == count
    finally:
        core.dispose()
        bulk.dispose()


@pytest.mark.parametrize(
    "spoil",
    [
        lambda row: row.update(old=2**64),  # no SQLite INTEGER holds it
        lambda row: row.update(seq=1),  # the key of the first row again
    ],
)
def test_a_bad_row_in_a_statement_of_many_is_a_data_error(tmp_path, spoil):
    table = _ALL_TABLES["offset_changes"]
    rows = _offset_rows(120)
    spoil(rows[37])
    engine = _engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
    try:
        with pytest.raises(Exception) as bulk, engine.begin() as conn:
            BulkInsert(engine.dialect).insert(conn, table, rows)
        assert _by_rowid(engine, table.name) == []
    finally:
        engine.dispose()
    assert is_data_error(bulk.value)


@pytest.mark.parametrize(
    "vary",
    [
        lambda i, row: None,  # every FIXED column the same: all written as literals
        lambda i, row: row.update(type=f"t{i % 3}"),  # the type differs: the columns after it
        lambda i, row: row.update(broker="o'brien", role="r'"),  # quotes in a literal
        lambda i, row: row.update(role="r\u00e9") if i == 70 else None,  # not ASCII: bound
        lambda i, row: row.update(extra="x\x00y") if i == 10 else None,  # a NUL: bound
        lambda i, row: row.update(role="r" * 30_000),  # long: bound (not 50 times in a statement)
        # extra, the last, differs: none written so (the test's assertion below allows for it)
        lambda i, row: row.update(extra='{"k":1}') if i % 2 else None,
        lambda i, row: row.update(source="c") if i >= 60 else None,  # a group's source differs
    ],
)
def test_columns_the_same_in_a_statements_rows_written_as_literals_store_what_binding_stores(
    tmp_path, vary
):
    """The FIXED columns a statement's rows share go into it as literals: the rows and rowids of
    insert(), whatever those columns hold (quotes, text that stays bound, values that differ)."""
    table = _ALL_TABLES["offset_changes"]
    rows = _offset_rows(137)
    for i, row in enumerate(rows):
        vary(i, row)
    core = _engine(f"sqlite:///{tmp_path / 'core.sqlite'}")
    bulk = _engine(f"sqlite:///{tmp_path / 'bulk.sqlite'}")
    try:
        with core.begin() as conn:
            conn.execute(table.insert(), rows)
        inserter = BulkInsert(bulk.dialect)
        with bulk.begin() as conn:
            inserter.insert(conn, table, rows)
        assert _by_rowid(bulk, table.name) == _by_rowid(core, table.name)
        if rows[0]["extra"] == rows[1]["extra"]:
            assert inserter._plan(table).variants  # some statement had literals
        assert all(len(sql) < 100_000 for sql in inserter._plan(table).variants.values())
    finally:
        core.dispose()
        bulk.dispose()


def test_the_fixed_columns_come_last_in_the_insert():
    """`bulk.FIXED` columns are a row's last values (what `_statement` writes as literals)."""
    from sqlalchemy.dialects import sqlite

    inserter = BulkInsert(sqlite.dialect())
    for table in Base.metadata.sorted_tables:
        columns = inserter.columns(table)
        last = tuple(key for key in FIXED if key in columns)
        assert columns[len(columns) - len(last) :] == last
        assert sorted(columns) == sorted(c.key for c in table.columns)
