"""The writer's record builders (es_broker/log/views.py) against their record classes: the same
record, key for key and in the same order (hence the same msgpack bytes), and the same refusal.

`messages_stored_record`, `messages_delivered_record` and `offset_committed_record` build the
records a send and a pull store without the typed object; the classes stay what every other
path builds and what `parse` reads back, so the two must never drift apart.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from es_broker.log import records, views
from es_broker.log.typed import TypedRecord
from es_broker.log.types import Cause, MessagesDelivered, MessagesStored, OffsetCommitted

BUILDERS: list[tuple[type[TypedRecord], Callable[..., Any]]] = [
    (MessagesStored, views.messages_stored_record),
    (MessagesDelivered, views.messages_delivered_record),
    (OffsetCommitted, views.offset_committed_record),
]

# past 64 bits, past a field's range (queue_id), texts that are not UTF-8: what `check` refuses
ints = st.one_of(
    st.integers(min_value=-(2**31), max_value=2**40),
    st.sampled_from([-1, 2**63 - 1, 2**63, -(2**63) - 1, 2**70]),
)
texts = st.one_of(st.text(max_size=12), st.just("\ud800"))
maps = st.none() | st.dictionaries(st.text(max_size=4), ints | texts, max_size=3)


@pytest.mark.parametrize(("cls", "builder"), BUILDERS)
def test_a_builder_takes_its_class_fields_in_order(
    cls: type[TypedRecord], builder: Callable[..., Any]
) -> None:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    params = list(inspect.signature(builder).parameters.values())
    assert params[0].name == "ts"
    assert [p.name for p in params[1:]] == [f.name for f in fields]
    assert [p.default for p in params[1:]] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in fields
    ]


def _same(cls: type[TypedRecord], builder: Callable[..., Any], ts: int, **fields: Any) -> None:
    try:
        expected: Any = cls(**fields).to_record(ts)
    except records.RecordOutOfRange as exc:
        expected = exc
    try:
        got: Any = builder(ts, **fields)
    except records.RecordOutOfRange as exc:
        got = exc
    if isinstance(expected, Exception):
        assert type(got) is type(expected) and str(got) == str(expected)
    else:
        assert list(got.items()) == list(expected.items())
        assert records.pack(got) == records.pack(expected)


@given(
    ts=ints,
    topic=texts,
    queue_id=ints,
    queue_offset=ints,
    units=st.lists(st.lists(ints, min_size=3, max_size=3), min_size=1, max_size=3),
    producer_group=texts,
    requester=texts,
    diverted_from=st.none() | texts,
    delay=maps,
    cause=st.none() | st.sampled_from(Cause),
    delivery=maps,
    transaction=maps,
)
def test_messages_stored_record_is_its_class_record(ts: int, **fields: Any) -> None:
    _same(MessagesStored, views.messages_stored_record, ts, **fields)


@given(
    ts=ints,
    group=texts,
    topic=texts,
    queue_id=ints,
    offset=ints,
    offsets=st.lists(ints, max_size=4),
    next_offset=ints,
    client=texts,
    served_by=maps,
)
def test_messages_delivered_record_is_its_class_record(ts: int, **fields: Any) -> None:
    _same(MessagesDelivered, views.messages_delivered_record, ts, **fields)


@given(
    ts=ints,
    group=texts,
    topic=texts,
    queue_id=ints,
    offset=ints,
    old=ints,
    cause=st.sampled_from(Cause),
    requester=texts,
)
def test_offset_committed_record_is_its_class_record(ts: int, **fields: Any) -> None:
    _same(OffsetCommitted, views.offset_committed_record, ts, **fields)
