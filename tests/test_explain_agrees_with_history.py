"""`explain` and `history` agree on every offset change the offset rule knows (B-504).

Random sequences of the records that move offsets (client and pull commits, a
client's commit of a compat reset's target, server-side and compat resets,
removals, group deletions with their offsets, slave merges, clones) are
appended to a real store; for every (group, topic, queue), `explain`'s first
and latest change and its count equal the first and last offset change
`history` lists and their number, whether `explain` reads its index or scans
the records.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_broker.commands.explain import explain, explain_by_scan
from es_broker.config import BrokerConfig
from es_broker.log.records import Record
from es_broker.log.types import (
    Cause,
    OffsetCommitted,
    OffsetsRemoved,
    ResetMode,
    ResetOutcome,
    ResetRequested,
    ResetScope,
    SlaveMergeOutcome,
    SlaveMergePolicy,
    SlaveOffsetsMerged,
    SubgroupDeleted,
)
from es_broker.store import Store
from es_broker.timetravel.query import TimeTravel

GROUPS = ("G", "H")
TOPICS = ("T", "U")
QUEUES = (0, 1)
OFFSETS = st.integers(min_value=0, max_value=50)
GROUP, TOPIC, QUEUE = st.sampled_from(GROUPS), st.sampled_from(TOPICS), st.sampled_from(QUEUES)

commits = st.builds(
    lambda g, t, q, new, old, cause, who: OffsetCommitted(
        group=g, topic=t, queue_id=q, offset=new, old=old, cause=cause, requester=who
    ),
    GROUP,
    TOPIC,
    QUEUE,
    OFFSETS,
    OFFSETS,
    st.sampled_from(
        [Cause.CLIENT_COMMIT, Cause.PULL_COMMIT, Cause.ADMIN, Cause.RESET, Cause.CLONE]
    ),
    st.sampled_from(["c@1", "c@2", "ops"]),
)
resets = st.builds(
    lambda g, t, mode, finals: ResetRequested(
        group=g,
        topic=t,
        kind="earliest",
        value=0,
        timestamp=0,
        force=True,
        mode=mode,
        scope=ResetScope.COMPAT,
        requester="admin@10.0.0.9",
        notified=[],
        outcome="ok",
        queues=[[q, current, final, final, ResetOutcome.MOVED] for q, current, final in finals],
    ),
    GROUP,
    TOPIC,
    st.sampled_from([ResetMode.SERVER_SIDE, ResetMode.COMPAT]),
    st.lists(st.tuples(QUEUE, OFFSETS, OFFSETS), min_size=1, max_size=2, unique_by=lambda x: x[0]),
)
removals = st.builds(
    lambda g, entries, cause: OffsetsRemoved(
        group=g, entries=[list(e) for e in entries], cause=cause, requester="ops"
    ),
    GROUP,
    st.lists(st.tuples(TOPIC, QUEUE, OFFSETS), min_size=1, max_size=3, unique_by=lambda e: e[:2]),
    st.sampled_from([Cause.GROUP_DELETED, Cause.CLONE]),
)
deletions = st.builds(
    lambda g, entries: SubgroupDeleted(
        group=g, requester="ops", offsets=[list(e) for e in entries] or None
    ),
    GROUP,
    st.lists(st.tuples(TOPIC, QUEUE, OFFSETS), max_size=3, unique_by=lambda e: e[:2]),
)
merges = st.builds(
    lambda rows: SlaveOffsetsMerged(
        broker_id=1,
        slave_addr="10.0.0.2:10911",
        policy=SlaveMergePolicy.LATEST_WINS,
        journal_upto=1,
        commits=[],
        queues=[[t, g, q, old, new, outcome, "c@slave"] for t, g, q, old, new, outcome in rows],
        deliveries=0,
        requester="10.0.0.2:10911",
    ),
    st.lists(
        st.tuples(TOPIC, GROUP, QUEUE, OFFSETS, OFFSETS, st.sampled_from(list(SlaveMergeOutcome))),
        min_size=1,
        max_size=3,
        unique_by=lambda row: row[:3],
    ),
)
RECORDS = st.one_of(commits, resets, removals, deletions, merges)


def _append(store: Store, records: list[Record]) -> None:
    for n, record in enumerate(records):
        [(ok, result)] = store.log.write_batch([lambda ctx, r=record: ctx.append(r)])
        assert ok, (n, result)


def _from_history(store: Store, group: str, topic: str) -> dict[int, dict[str, Any]]:
    """Per queue: the first and last offset change `history` lists, and how many."""
    with store.read() as txn:
        entries = TimeTravel(store).history(txn, group, topic=topic)
    out: dict[int, dict[str, Any]] = {}
    for e in entries:
        if e.queue_id is None or e.kind not in ("offset_change", "offset_removed"):
            continue
        change = {
            "seq": e.seq,
            "ts": e.ts,
            "old": e.old,
            "new": e.new,
            "cause": e.cause,
            "requester": e.requester,
        }
        q = out.setdefault(e.queue_id, {"first_change": change, "changes": 0})
        q["latest_change"] = change
        q["changes"] += 1
    return out


def _from_explain(answer: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {
        q["queue_id"]: {k: q[k] for k in ("first_change", "latest_change", "changes")}
        for q in answer["queues"]
        if q["changes"]
    }


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(RECORDS, min_size=1, max_size=25), st.integers(1_700_000_000_000, 1_800_000_000_000)
)
def test_b504_explain_and_history_agree_on_every_offset_change(records, start):
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        store = Store.open(data, BrokerConfig(storePathRootDir=str(data)))
        try:
            _append(store, [r.to_record(start + 1000 * n) for n, r in enumerate(records)])
            for group in GROUPS:
                for topic in TOPICS:
                    told = _from_history(store, group, topic)
                    assert _from_explain(explain(store, group, topic)) == told, (group, topic)
                    assert _from_explain(explain_by_scan(store, group, topic)) == told
        finally:
            store.close()
