"""The time index's compiled applier against its pure-Python reference (B-132): the same entries.

`time_index_apply` (es_broker/projections/_speedups.pyx) is TimeIndexProjection.apply, which
every record pays: the effective time's entries, the queue maxima of a send, the events of a
record about a group. The same records, in the same group commits, go through two logs, one
applying them with the reference (`time_index.REFERENCE`), one with the compiled twin, whichever
implementation the suite runs on; every database of the two indexes must be the same bytes.
"""

from __future__ import annotations

import importlib
import tempfile
import types
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_broker.log.types import (
    Cause,
    MessagesDelivered,
    MessagesStored,
    OffsetCommitIgnored,
    OffsetCommitted,
    OffsetsRemoved,
)
from es_broker.projections import time_index
from es_broker.projections.time_index import TimeIndexProjection
from tests.projection_twins import databases_after

fast = importlib.import_module("es_broker.projections._speedups")

# a clock that steps back (NTP) as well as forward, and a record without a time of its own
TIMES = [0, 5, 5, 1_000, 999, 60_000, 2**40]


def _record(kind: str, i: int, ts: int) -> dict[str, Any]:
    topic, group = ("T", "U")[i % 2], ("G", "H")[i % 3 % 2]
    if kind == "stored":
        made = MessagesStored(
            topic=topic,
            queue_id=i % 2,
            queue_offset=i,
            units=[[i * 10, 10, 0]] * (1 + i % 3),
            producer_group="P",
            requester="c",
        )
    elif kind == "delivered":
        made = MessagesDelivered(
            group=group,
            topic=topic,
            queue_id=0,
            offset=i,
            offsets=[i],
            next_offset=i + 1,
            client="c",
        )
    elif kind == "committed":
        made = OffsetCommitted(
            group=group,
            topic=topic,
            queue_id=0,
            offset=i,
            old=i - 1,
            cause=Cause.PULL_COMMIT,
            requester="c",
        )
    elif kind == "ignored":  # about a group, not quiet: an event of the group
        made = OffsetCommitIgnored(
            group=group,
            topic=topic,
            queue_id=0,
            offset=i,
            current=0,
            reason="reset_fence",
            reset_seq=1,
            target=0,
            requester="c",
        )
    else:  # a group's offsets removed: the removals' entries
        made = OffsetsRemoved(group=group, entries=[[topic, 0, i]], cause="admin", requester="c")
    return made.to_record(ts)


steps = st.lists(
    st.tuples(
        st.sampled_from(["stored", "delivered", "committed", "ignored", "removed"]),
        st.sampled_from(TIMES),
        st.booleans(),  # the group commit ends after this record
    ),
    min_size=1,
    max_size=16,
)


def _entries(path: Path, apply: Any, batches: list[list[dict[str, Any]]]) -> list[Any]:
    index = TimeIndexProjection()
    index.apply = types.MethodType(apply, index)  # type: ignore[method-assign]
    return databases_after(
        path,
        [index],
        batches,
        lambda: [index.time_db, index.seq_db, index.qmax_db, index.events_db, index.removed_db],
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_b132_the_compiled_applier_indexes_as_the_reference_does(steps):
    batches: list[list[dict[str, Any]]] = [[]]
    for i, (kind, ts, cut) in enumerate(steps):
        batches[-1].append(_record(kind, i, ts))
        if cut:
            batches.append([])
    batches = [batch for batch in batches if batch]
    with tempfile.TemporaryDirectory() as tmp:
        expected = _entries(
            Path(tmp) / "reference", time_index.REFERENCE["time_index_apply"], batches
        )
        got = _entries(Path(tmp) / "compiled", fast.time_index_apply, batches)
    assert got == expected
    assert expected[1], "every log has its first record's entry"


def test_the_time_index_applies_the_compiled_applier_when_it_is_built():
    if time_index.time_index_apply is fast.time_index_apply:  # compiled
        assert TimeIndexProjection.apply is fast.time_index_apply
    else:  # ES_BROKER_PURE_PYTHON: the reference
        assert TimeIndexProjection.apply is time_index.REFERENCE["time_index_apply"]
