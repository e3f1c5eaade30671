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

from es_broker.log.records import Record
from es_broker.log.vocabulary import RecordType


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
