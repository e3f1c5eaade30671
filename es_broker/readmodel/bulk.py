"""Many rows into one table in one driver call: the follower's INSERTs without per-row SQLAlchemy work.

`conn.execute(table.insert(), rows)` builds and type-processes a parameter
set per row in Python (most of the follower's SQL time under load). Here
each table's INSERT is compiled once for the engine's dialect, naming every
column, and each row becomes a tuple (or a dict, for a named paramstyle)
passed through the columns' bind processors, so the driver's `executemany`
gets the same values SQLAlchemy would give it. A column a row does not name
is NULL, as it is when SQLAlchemy leaves it out (the read model's columns
have no defaults). A value a bind processor refuses raises its own error
(TypeError, ValueError), which `quarantine.is_data_error` takes for a data error.

On SQLite the rows go MANY_ROWS to a statement (an INSERT with as many
VALUES lists), the last ones one a statement: the same rows in the same order,
where one statement run per row costs sqlite3 its cursors and halt and Python
its GIL hand-offs (~9k instructions a row). A value refused in any row fails
the statement, and the whole batch with it, as it fails executemany.

Only SQLite is fed so: for other databases SQLAlchemy's insert() stays, as
it sends many rows in one statement ("insertmanyvalues") where a driver's
executemany may make a round trip per row (psycopg2).

Python's sqlite3 binds an int, float or str as it is, but looks every other
value up as something to adapt: with no adapter registered for its type, it
asks the value for `__conform__` and the protocol for `__adapt__`, two
AttributeErrors raised and cleared for every NULL (about four a record) and
every bool. Adapters for None and bool (None stays NULL, a bool its int,
what sqlite3 binds without them) make that one dictionary look-up.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.engine import Dialect

from es_broker.schema.families import Row


@dataclass(frozen=True, slots=True)
class _Plan:
    sql: str
    columns: tuple[str, ...]  # column keys, in the statement's parameter order
    names: tuple[str, ...] | None  # parameter names for a named paramstyle, None when positional
    processed: tuple[
        tuple[int, Callable[[Any], Any]], ...
    ]  # (place, bind processor) of some columns
    rows: int  # rows a statement of `many` takes (1: no such statement)
    many: str  # the INSERT of `rows` rows (one VALUES list a row), positional only


# rows an INSERT statement takes at most, and its parameters at most (SQLite before 3.32 allowed
# 999 a statement)
MANY_ROWS = 50
MANY_PARAMETERS = 999


class BulkInsert:
    """Compiled INSERTs of one dialect, by table; `insert` sends a table's rows in one executemany."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.direct = dialect.name == "sqlite"
        self._plans: dict[str, _Plan] = {}
        if self.direct:
            # process-wide, and binding the same values as without them (see the module's notes)
            sqlite3.register_adapter(type(None), _null)
            sqlite3.register_adapter(bool, int)

    def _plan(self, table: Table) -> _Plan:
        plan = self._plans.get(table.name)
        if plan is not None:
            return plan
        keys = [c.key for c in table.columns]
        compiled = table.insert().compile(dialect=self.dialect, column_keys=keys)
        if compiled.positional:
            order = list(compiled.positiontup or ())
            names = None
        else:
            order = list(compiled.binds)
            escaped = compiled.escaped_bind_names
            names = tuple(escaped.get(name, name) for name in order)
        if sorted(order) != sorted(
            keys
        ):  # a bind parameter that is not one column: not planned for
            raise RuntimeError(f"INSERT of {table.name} binds {order}, not its columns {keys}")
        processors = tuple(
            table.columns[key].type.dialect_impl(self.dialect).bind_processor(self.dialect)
            for key in order
        )
        processed = tuple((i, p) for i, p in enumerate(processors) if p is not None)
        sql = compiled.string
        rows = max(1, min(MANY_ROWS, MANY_PARAMETERS // len(order))) if names is None else 1
        head, values = sql.split(" VALUES ")
        many = f"{head} VALUES {', '.join([values] * rows)}"
        plan = _Plan(sql, tuple(order), names, processed, rows, many)
        self._plans[table.name] = plan
        return plan

    def columns(self, table: Table) -> tuple[str, ...]:
        """The column keys of a table's INSERT, in the order `values` and `insert_values` take them."""
        return self._plan(table).columns

    def values(self, table: Table, rows: Sequence[Row]) -> list[tuple[Any, ...]]:
        """Rows as tuples of `columns(table)` (a column a row does not name is None)."""
        columns = self._plan(table).columns
        return [tuple(map(row.get, columns)) for row in rows]

    def insert(self, conn: Connection, table: Table, rows: Sequence[Row]) -> None:
        if not self.direct:
            conn.execute(table.insert(), list(rows))
            return
        self.insert_values(conn, table, self.values(table, rows))

    def insert_values(self, conn: Connection, table: Table, values: list[tuple[Any, ...]]) -> None:
        """Tuples of `columns(table)` into the table (SQLite only: `direct`), through the bind processors."""
        plan = self._plan(table)
        sent: list[Any] = values
        if plan.processed:
            sent = [_processed(v, plan.processed) for v in values]
        if plan.names is not None:
            sent = [dict(zip(plan.names, v, strict=True)) for v in sent]
        elif plan.rows > 1 and len(sent) >= plan.rows:
            # whole statements of `rows` rows each, then the rest one a row: the same rows in the
            # same order (so the same rowids), where a statement run per row costs its own
            # cursors, halt and GIL hand-offs
            rows, chain = plan.rows, itertools.chain.from_iterable
            whole = len(sent) - len(sent) % rows
            conn.exec_driver_sql(
                plan.many, [tuple(chain(sent[i : i + rows])) for i in range(0, whole, rows)]
            )
            sent = sent[whole:]
            if not sent:
                return
        conn.exec_driver_sql(plan.sql, sent)


def _processed(
    values: tuple[Any, ...], processors: tuple[tuple[int, Callable[[Any], Any]], ...]
) -> tuple[Any, ...]:
    out = list(values)
    for i, process in processors:
        out[i] = process(out[i])
    return tuple(out)


def _null(value: None) -> None:
    """sqlite3's adapter of None: None itself, bound as NULL."""
    return value
