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

In such a statement, the columns that repeat row after row by construction
(`FIXED`: the record type of a family's table, the follower's source, the
log's broker and role, an `extra` that is mostly NULL), named last in the
INSERT, are written into it as literals where every row of the statement
has the same value, instead of bound once a row. Python's sqlite3 binds a
text by copying it into memory of SQLite's own, freed and allocated again at
the next bind of that parameter (~780 instructions a text, under SQLite's
mutexes), and looks a None up as something to adapt (~1.4k): these columns
were 18 of the 29 texts a message bound, and 4.6 of its NULLs. A literal
stores what the bound value stores (the column's affinity applies to both);
only None and a short ASCII text without NUL are written so, any other value
stays bound, and so do the columns before it and those a row differs in.
The statements differ by their literals: a few a table (one follower's
values), cached by the driver as any statement.

Python's sqlite3 binds an int, float or str as it is, but looks every other
value up as something to adapt: with no adapter registered for its type, it
asks the value for `__conform__` and the protocol for `__adapt__`, two
AttributeErrors raised and cleared for every NULL (about four a record) and
every bool. Adapters for None and bool (None stays NULL, a bool its int,
what sqlite3 binds without them) make that one dictionary look-up.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import iadd, itemgetter
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
    head: str  # the INSERT up to its VALUES
    fixed: int  # the place of the first of the FIXED columns, which come last (len(columns): none)
    # a statement of `rows` rows whose last columns are literals, by those literals
    variants: dict[tuple[str, ...], str] = field(default_factory=dict)
    # getters of a row's value at a place, of its values from a place on, and before it, by place
    item: tuple[Callable[[Any], Any], ...] = ()
    tail: tuple[Callable[[Any], Any], ...] = ()
    before: tuple[Callable[[Any], Any], ...] = ()
    # where the last group's run of FIXED columns with one value each began (`_statement`)
    hint: list[int] = field(default_factory=list)


# rows an INSERT statement takes at most, and its parameters at most (SQLite before 3.32 allowed
# 999 a statement)
MANY_ROWS = 50
MANY_PARAMETERS = 999
# the columns whose value repeats row after row by construction: a family table's record type, a
# follower's source, the broker and role of a log, an `extra` that is mostly NULL. A table's INSERT
# names them last, in this order, so that a row's values of them are its last ones, the record
# type (which differs from row to row in the records table) first.
FIXED = ("type", "source", "broker", "role", "extra")
VARIANTS = 256  # statements with literals kept a table, at most (then forgotten and made again)
LITERAL_MAX = 256  # characters of a text written as a literal, at most


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
        sql = compiled.string
        fixed = len(order)
        if names is None and self.direct:
            last = [key for key in FIXED if key in order]
            ordered = [key for key in order if key not in last] + last
            # the INSERT written again with the FIXED columns last, where it is SQLAlchemy's
            # statement when written in SQLAlchemy's order (else it stays as compiled)
            if _insert(self.dialect, table, order) == sql:
                order, sql, fixed = ordered, _insert(self.dialect, table, ordered), len(ordered)
                fixed -= len(last)
        processors = tuple(
            table.columns[key].type.dialect_impl(self.dialect).bind_processor(self.dialect)
            for key in order
        )
        processed = tuple((i, p) for i, p in enumerate(processors) if p is not None)
        rows = max(1, min(MANY_ROWS, MANY_PARAMETERS // len(order))) if names is None else 1
        head, values = sql.split(" VALUES ")
        many = f"{head} VALUES {', '.join([values] * rows)}"
        if rows == 1 or any(i >= fixed for i, _ in processed):
            fixed = len(order)  # no statement of many rows, or a value written differently
        places = range(len(order))
        plan = _Plan(
            sql,
            tuple(order),
            names,
            processed,
            rows,
            many,
            head,
            fixed,
            item=tuple(itemgetter(i) for i in places),
            tail=tuple(itemgetter(slice(i, None)) for i in places),
            before=tuple(itemgetter(slice(None, i)) for i in places),
            hint=[fixed],
        )
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
            rows = plan.rows
            whole = len(sent) - len(sent) % rows
            sql, run = plan.many, list[tuple[Any, ...]]()
            for i in range(0, whole, rows):
                statement, params = _statement(plan, sent[i : i + rows])
                if statement is not sql and run:  # one executemany a run of the same statement
                    conn.exec_driver_sql(sql, run)
                    run = []
                sql = statement
                run.append(params)
            conn.exec_driver_sql(sql, run)
            sent = sent[whole:]
            if not sent:
                return
        conn.exec_driver_sql(plan.sql, sent)


def _insert(dialect: Dialect, table: Table, keys: Sequence[str]) -> str:
    """The one-row INSERT of `keys` into `table`, positional (qmark), as SQLAlchemy writes it."""
    quoted = dialect.identifier_preparer
    columns = ", ".join(quoted.format_column(table.columns[key]) for key in keys)
    marks = ", ".join(["?"] * len(keys))
    return f"INSERT INTO {quoted.format_table(table)} ({columns}) VALUES ({marks})"


def _statement(plan: _Plan, group: list[Any]) -> tuple[str, tuple[Any, ...]]:
    """The INSERT of a group of `plan.rows` rows and its parameters: the last (FIXED) columns whose
    values are the same in every row, and can be written so, as literals; every other value bound.

    The search starts from the run of last columns the table's previous group had the same (the
    records table's record type differs from row to row, a family table's does not), shrinks it
    while a row differs and grows it while the column before it is the same in every row. The
    rows are read with C calls only (a getter mapped over them, a list's count, `+=` onto a list):
    a Python loop, slice or comprehension over the rows cost ~800 instructions a row.
    """
    end, count = len(plan.columns), len(group)
    first = group[0]
    at = plan.hint[0]
    # only None equals None, only a text a text (the rows hold no objects that say otherwise)
    while at < end and list(map(plan.tail[at], group)).count(first[at:]) != count:
        at += 1
    while at > plan.fixed and list(map(plan.item[at - 1], group)).count(first[at - 1]) == count:
        at -= 1
    plan.hint[0] = at
    found = [_literal(value) for value in first[at:]]
    if None in found:  # a value that stays bound: only the columns after it are written
        at = end - found[::-1].index(None)
    literals = [literal for literal in found[len(found) - (end - at) :] if literal is not None]
    if at == end:
        return plan.many, tuple(reduce(iadd, group, []))
    key = tuple(literals)
    sql = plan.variants.get(key)
    if sql is None:
        if len(plan.variants) >= VARIANTS:
            plan.variants.clear()
        values = f"({', '.join(['?'] * at + literals)})"
        sql = plan.variants[key] = f"{plan.head} VALUES {', '.join([values] * plan.rows)}"
    return sql, tuple(reduce(iadd, map(plan.before[at], group), []))


def _literal(value: Any) -> str | None:
    """`value` as an SQL literal that stores what binding it stores, or None: it stays bound.

    None is NULL; a text is quoted when it is ASCII without NUL (the statement's own text is
    encoded as a bound text is, and cannot hold a NUL) and short (`LITERAL_MAX`: a statement holds
    it once a row, and a build of SQLite may refuse a statement over 1 MB, its default limit); any
    other value is bound.
    """
    if value is None:
        return "NULL"
    if type(value) is str and len(value) <= LITERAL_MAX and value.isascii() and "\x00" not in value:
        return "'" + value.replace("'", "''") + "'"
    return None


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
