"""The lines `es-broker history` prints for the records that explain offset changes."""

from __future__ import annotations

import pytest

from es_broker.cli.timetravel import describe
from es_broker.log.vocabulary import RecordType
from es_broker.timetravel.query import HistoryEntry


def reset_to(kind: str, value: int | None) -> HistoryEntry:
    return HistoryEntry(
        seq=7,
        time=1,
        ts=1,
        group="G",
        topic="T",
        kind=RecordType.RESET_REQUESTED,
        requester="127.0.0.1:1",
        detail={"kind": kind, "value": value, "force": True, "queues": [], "notified": []},
    )


@pytest.mark.parametrize(
    ("kind", "value", "said"),
    [
        ("time", 0, "to time 0 (the earliest)"),  # resetOffsetByTime -s 0
        ("time", -1, "to latest (max)"),
        ("time", None, "to latest (max)"),
        ("offset", 42, "to offset 42"),
    ],
)
def test_a_reset_request_says_where_it_goes(kind, value, said):
    assert said in describe(reset_to(kind, value))


def test_a_reset_to_a_time_names_the_time():
    line = describe(reset_to("time", 1_700_000_000_123))
    assert "to time 20" in line and ",123" in line
