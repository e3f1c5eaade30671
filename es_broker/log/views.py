"""The hot path's dict views of records, and `as_view`, the one narrowing to them.

A projection applies every stored message and every delivery; building the class there
(`from_record`) costs more than the projection's own work. These TypedDicts are the same
records as the log's dicts, so mypy checks each key read on that path at no run-time cost:
    stored = as_view(record, RecordType.MESSAGES_STORED)
Required keys are the class' fields without a default (and type, v, ts); the keys of the
`total=False` half are the fields the record leaves out while None. `types.py` holds
both to the class at import, so a field added to one and not the other fails at once.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, overload

from es_broker.log.records import Record, check
from es_broker.log.vocabulary import Cause, RecordType


class _MessagesStoredKeys(TypedDict):
    type: str
    v: int
    ts: int
    topic: str
    queue_id: int
    queue_offset: int
    units: list[list[int]]
    producer_group: str
    requester: str


class MessagesStoredRecord(_MessagesStoredKeys, total=False):
    """A `messages_stored` record as the log's dict (see `MessagesStored`)."""

    diverted_from: str
    delay: dict[str, Any]
    cause: str
    delivery: dict[str, Any]
    transaction: dict[str, Any]


class _MessagesDeliveredKeys(TypedDict):
    type: str
    v: int
    ts: int
    group: str
    topic: str
    queue_id: int
    offset: int
    offsets: list[int]
    next_offset: int
    client: str


class MessagesDeliveredRecord(_MessagesDeliveredKeys, total=False):
    """A `messages_delivered` record as the log's dict (see `MessagesDelivered`)."""

    served_by: dict[str, Any]


class OffsetCommittedRecord(TypedDict):
    """An `offset_committed` record as the log's dict (see `OffsetCommitted`)."""

    type: str
    v: int
    ts: int
    group: str
    topic: str
    queue_id: int
    offset: int
    old: int
    cause: str
    requester: str


@overload
def as_view(record: Record, kind: Literal[RecordType.MESSAGES_STORED]) -> MessagesStoredRecord: ...
@overload
def as_view(
    record: Record, kind: Literal[RecordType.MESSAGES_DELIVERED]
) -> MessagesDeliveredRecord: ...
@overload
def as_view(
    record: Record, kind: Literal[RecordType.OFFSET_COMMITTED]
) -> OffsetCommittedRecord: ...
def as_view(record: Record, kind: RecordType) -> Any:
    """A record of type `kind` typed as its dict view: the same dict, neither copied nor checked.

    The caller knows the type already (a projection's handler is only given
    records of its type); `kind` tells mypy which view, so a handler reads
    the keys its record type holds and no other.
    """
    return record


# The writer's three records a message of RocketMQ's benchmark shape, built as their class'
# `to_record(ts)` builds them (same keys, same order, checked), without the object: calling a
# record class with keywords costs a kwargs dict and its frozen slots' setters, about as much again
# as the record itself. tests/test_record_builders.py holds each to its class.


def messages_stored_record(
    ts: int,
    *,
    topic: str,
    queue_id: int,
    queue_offset: int,
    units: list[list[int]],
    producer_group: str,
    requester: str,
    diverted_from: str | None = None,
    delay: dict[str, Any] | None = None,
    cause: Cause | None = None,
    delivery: dict[str, Any] | None = None,
    transaction: dict[str, Any] | None = None,
) -> Record:
    """`MessagesStored(...).to_record(ts)` (`cause` a `Cause`, written as its text)."""
    record: Record = {
        "type": "messages_stored",
        "v": 1,
        "ts": ts,
        "topic": topic,
        "queue_id": queue_id,
        "queue_offset": queue_offset,
        "units": units,
        "producer_group": producer_group,
        "requester": requester,
    }
    if diverted_from is not None:
        record["diverted_from"] = diverted_from
    if delay is not None:
        record["delay"] = delay
    if cause is not None:
        record["cause"] = str(cause)
    if delivery is not None:
        record["delivery"] = delivery
    if transaction is not None:
        record["transaction"] = transaction
    return check(record)


def messages_delivered_record(
    ts: int,
    *,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    offsets: list[int],
    next_offset: int,
    client: str,
    served_by: dict[str, Any] | None = None,
) -> Record:
    """`MessagesDelivered(...).to_record(ts)`."""
    record: Record = {
        "type": "messages_delivered",
        "v": 1,
        "ts": ts,
        "group": group,
        "topic": topic,
        "queue_id": queue_id,
        "offset": offset,
        "offsets": offsets,
        "next_offset": next_offset,
        "client": client,
    }
    if served_by is not None:
        record["served_by"] = served_by
    return check(record)


def offset_committed_record(
    ts: int,
    *,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    old: int,
    cause: Cause,
    requester: str,
) -> Record:
    """`OffsetCommitted(...).to_record(ts)` (`cause` a `Cause`, written as its text)."""
    record: Record = {
        "type": "offset_committed",
        "v": 1,
        "ts": ts,
        "group": group,
        "topic": topic,
        "queue_id": queue_id,
        "offset": offset,
        "old": old,
        "cause": str(cause),
        "requester": requester,
    }
    return check(record)
