"""The stats' compiled appliers against their pure-Python reference (B-355, B-356): the same counts.

`count_stored` and `count_delivered` (es_broker/projections/_speedups.pyx) apply a send's and a
pull's record to StatsProjection's counts. Here the same records, in the same group commits, go
through two logs, one whose stats projection applies them with the reference
(`stats.REFERENCE`) and one with the compiled twins, whichever implementation the suite runs on;
the two logs' counts must be the same bytes.
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_broker.log.types import MessagesDelivered, MessagesStored, RecordType
from es_broker.projections import stats
from es_broker.projections.consume_queue import ConsumeQueueProjection
from tests.projection_twins import databases_after

fast = importlib.import_module("es_broker.projections._speedups")

STORED, DELIVERED = RecordType.MESSAGES_STORED.value, RecordType.MESSAGES_DELIVERED.value
SIZES = [1, 1023, 1024, 1025, 4096, 600_000, 5_000_000]  # around RocketMQ 5's size buckets
TIMES = [0, 59_999, 60_000, 60_001, 3_600_000]  # within a minute and across
KINDS = ["normal", "delay", "transaction", "ended", "send_back", "schedule"]


def _stored(
    topic: str, qid: int, offset: int, phy: int, sizes: list[int], ts: int, kind: str
) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if kind == "delay":
        extra["delay"] = {"real_topic": topic, "real_queue_id": qid, "level": 3}
    elif kind in ("transaction", "ended"):
        state = "prepared" if kind == "transaction" else "committed"
        extra["transaction"] = {"state": state, "real_topic": "Real", "real_queue_id": 0}
    elif kind == "send_back":
        extra["cause"] = "send_back"
    elif kind == "schedule":
        extra["delivery"] = {"level": 3, "schedule_offset": 0, "next_cursor": 1}
    units, at = [], phy
    for size in sizes:
        units.append([at, size, 0])
        at += size
    return MessagesStored(
        topic=topic,
        queue_id=qid,
        queue_offset=offset,
        units=units,
        producer_group="P",
        requester="127.0.0.1:1",
        **extra,
    ).to_record(ts)


sends = st.lists(
    st.tuples(
        st.sampled_from(["T", "U"]),
        st.integers(0, 1),
        st.lists(st.sampled_from(SIZES), min_size=1, max_size=3),
        st.sampled_from(TIMES),
        st.sampled_from(KINDS),
        st.sampled_from(["G", "H"]),  # the group of the pull that follows (the next step)
        st.booleans(),  # a pull of the queue follows
        st.booleans(),  # the group commit ends after this step
    ),
    min_size=1,
    max_size=12,
)


def _batches(steps: list[tuple[Any, ...]]) -> list[list[dict[str, Any]]]:
    """The steps' records, cut into group commits: each send, and a pull of what its queue holds."""
    batches: list[list[dict[str, Any]]] = [[]]
    ends: dict[tuple[str, int], int] = {}
    pulled: dict[tuple[str, str, int], int] = {}
    phy = 0
    for topic, qid, sizes, ts, kind, group, pull, cut in steps:
        offset = ends.get((topic, qid), 0)
        batches[-1].append(_stored(topic, qid, offset, phy, sizes, ts, kind))
        phy += sum(sizes)
        ends[(topic, qid)] = offset + len(sizes)
        if pull:
            first = pulled.get((group, topic, qid), 0)
            offsets = list(range(first, offset + len(sizes)))
            pulled[(group, topic, qid)] = offset + len(sizes)
            record = MessagesDelivered(
                group=group,
                topic=topic,
                queue_id=qid,
                offset=first,
                offsets=offsets,
                next_offset=offset + len(sizes),
                client="c",
            ).to_record(ts)
            batches[-1].append(record)
        if cut:
            batches.append([])
    return [batch for batch in batches if batch]


def _counts(path: Path, appliers: dict[str, Any], batches: list[list[dict[str, Any]]]) -> Any:
    counting = stats.StatsProjection()
    counting.HANDLERS = {**stats.StatsProjection.HANDLERS, **appliers}  # this log's appliers
    return databases_after(
        path,
        [ConsumeQueueProjection(), counting],
        batches,
        lambda: [counting.total_db, counting.minute_db],
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sends)
def test_b356_the_compiled_appliers_count_as_the_reference_does(steps):
    batches = _batches(steps)
    reference = {
        STORED: stats.REFERENCE["count_stored"],
        DELIVERED: stats.REFERENCE["count_delivered"],
    }
    twins = {STORED: fast.count_stored, DELIVERED: fast.count_delivered}
    with tempfile.TemporaryDirectory() as tmp:
        expected = _counts(Path(tmp) / "reference", reference, batches)
        got = _counts(Path(tmp) / "compiled", twins, batches)
    assert got == expected
    assert expected[0], "the sends counted something"


def test_the_stats_projection_applies_the_compiled_appliers_when_they_are_built():
    handlers = stats.StatsProjection.HANDLERS
    if stats.count_stored is fast.count_stored:  # compiled: the twins are the handlers
        assert handlers[STORED] is fast.count_stored and handlers[DELIVERED] is fast.count_delivered
    else:  # ES_BROKER_PURE_PYTHON: the reference
        assert handlers[STORED] is stats.REFERENCE["count_stored"]
        assert handlers[DELIVERED] is stats.REFERENCE["count_delivered"]


def test_a_unit_without_its_size_is_refused_by_the_twin_as_by_the_reference():
    # the twins index as Python does (checked): a unit too short raises IndexError, never reads
    # past its list
    record = {"type": STORED, "topic": "T", "ts": 0, "units": [[5]]}
    errors = []
    for applier in (stats.REFERENCE["count_stored"], fast.count_stored):
        try:
            applier(stats.StatsProjection(), None, 2, record)
        except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
            errors.append(type(exc))
    assert errors == [IndexError, IndexError]
