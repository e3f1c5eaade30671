"""The one reading and the one printing of times, for every `es-broker` command.

TIME arguments: `now`, epoch millis, mqadmin's `yyyy-MM-dd#HH:mm:ss:SSS`, or
ISO 8601. mqadmin parses its date pattern in the admin host's local time zone
(B-72), so a date without a zone is local time here too; ISO 8601 with a zone
(or `Z`) is exact. What `now` stands for is the caller's: the wall clock for
the time-travel commands, -1 ("the latest") for resetOffsetByTime's `-s now`.

Printed times are local, with milliseconds, as mqadmin prints them
(UtilAll.timeMillisToHumanString2): 2024-05-01 10:42:00,123.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

_MILLIS = re.compile(r"-?\d+")
_MQADMIN = "%Y-%m-%d#%H:%M:%S:%f"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_time(text: str, now: Callable[[], int] = wall_clock_ms) -> int:
    """Milliseconds since the epoch for a TIME argument; ValueError says what is accepted."""
    value = text.strip()
    if value.lower() == "now":
        return now()
    if _MILLIS.fullmatch(value):
        return int(value)
    try:
        if "#" in value:
            moment = datetime.strptime(value, _MQADMIN)
        else:
            moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"time {text!r} is not 'now', epoch millis, yyyy-MM-dd#HH:mm:ss:SSS or ISO 8601 "
            "(e.g. 2024-05-01T10:42:00, 2024-05-01T10:42:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a naive time is the local time, as mqadmin reads it
    return round(moment.timestamp() * 1000)


def format_time(ms: int) -> str:
    """Local time with milliseconds, 2024-05-01 10:42:00,123; `-` for no time (0 or less)."""
    if ms <= 0:
        return "-"
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{ms % 1000:03d}"


def utc_day(ms: int) -> str:
    """The UTC calendar day of a time, the partition key of the export."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d")
