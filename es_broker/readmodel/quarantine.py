"""What the read models do with a record they cannot store: tell data errors from the rest.

A data error belongs to one record (an int beyond int64, a value the driver
cannot bind, a row that breaks a constraint): the record is quarantined and
skipped, and the follower or the export goes on. Every other error (the
database down, locked or full, the disk full) belongs to the moment: nothing
is skipped, the work is tried again later.
"""

from __future__ import annotations

import time
from typing import Any

from es_broker.schema.families import RunningTime

INT64_MAX = 2**63 - 1
ERROR_TEXT = 2000  # characters of an error kept with a quarantined record


def is_data_error(exc: BaseException) -> bool:
    """True when `exc` is about the values of the record being stored, not about the database."""
    if isinstance(exc, (OverflowError, ValueError, TypeError, UnicodeError)):
        return True
    try:
        from sqlalchemy import exc as sa_exc
    except ImportError:  # pragma: no cover - the export needs no SQLAlchemy
        return False
    if isinstance(exc, (sa_exc.DataError, sa_exc.IntegrityError)):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        # sqlite3 refuses a value it cannot bind with a ProgrammingError; any other is about the database
        return "Error binding parameter" in str(exc.orig)
    if isinstance(exc, sa_exc.StatementError):  # raised while processing the record's parameters
        return exc.orig is not None and is_data_error(exc.orig)
    return False


def error_text(exc: BaseException) -> str:
    """The error as kept with a quarantined record: its class and message, without the SQL echo."""
    orig = getattr(exc, "orig", None)
    shown = orig if isinstance(orig, BaseException) else exc
    return f"{type(shown).__name__}: {shown}"[:ERROR_TEXT]


def effective_time(clock: RunningTime, record: dict[str, Any]) -> int:
    """Advance the running time by a record's ts; a ts no table can hold raises and leaves the clock alone.

    Otherwise one absurd ts would become the effective time of every later
    record and make all of them unstorable.
    """
    ts = record.get("ts")
    # the common case, what `advance` gives for it without its int() and max(): time moves on
    if type(ts) is int and 0 <= clock.value <= ts <= INT64_MAX:
        clock.value = ts
        return ts
    before = clock.value
    try:
        time_ = clock.advance(record.get("ts"))
    except (TypeError, ValueError):
        clock.value = before
        raise
    if time_ > INT64_MAX:
        clock.value = before
        raise OverflowError(f"ts {record.get('ts')} is beyond int64")
    return time_


def running_version() -> str:
    """The es-broker version running now (recorded with a failure, so an upgrade retries it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("es-broker")
    except PackageNotFoundError:
        return "unknown"


def now_ms() -> int:
    return int(time.time() * 1000)
