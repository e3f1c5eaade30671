"""The log applies a record through the projections' HANDLERS tables: each projection that keeps
something of its type, in the projections' order, and no other (es_broker/projections/dispatch.py)."""

from __future__ import annotations

from typing import Any

from es_broker.log import RecordLog
from es_broker.log.types import RecordType
from es_broker.projections.dispatch import Dispatching, handlers

STORED = RecordType.MESSAGES_STORED.value
DELIVERED = RecordType.MESSAGES_DELIVERED.value
TOPIC = RecordType.TOPIC_UPDATED.value


class _Toy:
    databases: tuple[str, ...] = ()

    def __init__(self, name: str, calls: list[tuple[str, int, str]]) -> None:
        self.name, self.calls = name, calls

    def bind(self, log: RecordLog) -> None:
        pass


class Tabled(_Toy, Dispatching):
    def _stored(self, txn: Any, seq: int, record: Any) -> None:
        self.calls.append((self.name, seq, "stored"))

    def _delivered(self, txn: Any, seq: int, record: Any) -> None:
        self.calls.append((self.name, seq, "delivered"))

    HANDLERS = handlers(
        {RecordType.MESSAGES_STORED: _stored, RecordType.MESSAGES_DELIVERED: _delivered}
    )


class EveryRecord(_Toy, Dispatching):
    """Its own apply (a mark per record) before its table, as stats and history have."""

    def apply(self, txn: Any, seq: int, record: Any) -> None:
        self.calls.append((self.name, seq, "every"))
        super().apply(txn, seq, record)

    def _stored(self, txn: Any, seq: int, record: Any) -> None:
        self.calls.append((self.name, seq, "stored"))

    HANDLERS = handlers({RecordType.MESSAGES_STORED: _stored})


class Plain(_Toy):
    """A projection without a table: its apply sees every record."""

    def apply(self, txn: Any, seq: int, record: Any) -> None:
        self.calls.append((self.name, seq, record["type"]))


def _log(tmp_path: Any, calls: list[tuple[str, int, str]]) -> RecordLog:
    return RecordLog(
        tmp_path,
        [Tabled("a", calls), Plain("b", calls), EveryRecord("c", calls), Tabled("d", calls)],
    )


def test_a_record_reaches_the_projections_that_handle_its_type_in_their_order(tmp_path):
    calls: list[tuple[str, int, str]] = []
    log = _log(tmp_path, calls)
    log.apply(None, 1, {"type": STORED})
    assert calls == [
        ("a", 1, "stored"),
        ("b", 1, STORED),
        ("c", 1, "every"),
        ("c", 1, "stored"),
        ("d", 1, "stored"),
    ]


def test_a_record_no_table_names_reaches_only_the_projections_with_their_own_apply(tmp_path):
    calls: list[tuple[str, int, str]] = []
    log = _log(tmp_path, calls)
    log.apply(None, 2, {"type": TOPIC})
    log.apply(None, 3, {"type": "no_such_type"})
    assert calls == [
        ("b", 2, TOPIC),
        ("c", 2, "every"),
        ("b", 3, "no_such_type"),
        ("c", 3, "every"),
    ]


def test_each_type_finds_its_own_handlers(tmp_path):
    calls: list[tuple[str, int, str]] = []
    log = _log(tmp_path, calls)
    for seq, kind in enumerate((STORED, DELIVERED, STORED), start=1):
        log.apply(None, seq, {"type": kind})
    assert [(name, seq, what) for name, seq, what in calls if name in "ad"] == [
        ("a", 1, "stored"),
        ("d", 1, "stored"),
        ("a", 2, "delivered"),
        ("d", 2, "delivered"),
        ("a", 3, "stored"),
        ("d", 3, "stored"),
    ]
