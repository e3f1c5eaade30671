"""DELETE_SUBSCRIPTIONGROUP with removeOffset is one record (B-431), and the two-record form of a
log written before still replays and answers the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from es_broker.clock import ManualClock
from es_broker.commands.explain import explain
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.log import AppendContext
from es_broker.log.types import Cause, OffsetsRemoved, RecordType, SubgroupDeleted
from es_broker.schema.rows import rows_of
from es_broker.timetravel.query import TimeTravel
from tests.conftest import START, make_topic


async def _history(broker: Broker, clock: ManualClock, *, two_records: bool) -> int:
    """Group G with offsets on two queues, deleted with them at START + 1000; OTHER keeps its
    offsets, and commits once more at START + 2000.

    `two_records` deletes as a broker before B-431 did: `subgroup_deleted`, then
    `offsets_removed`, in one job. Returns the deletion's seq.
    """
    await make_topic(broker, queues=2)
    await broker.update_group({"groupName": "G"}, requester="ops")
    await broker.commit_offset("G", "T", 0, 5, requester="c1")
    await broker.commit_offset("G", "T", 1, 7, requester="c1")
    await broker.commit_offset("OTHER", "T", 0, 1, requester="c2")
    clock.advance(1000)

    def before_b431(ctx: AppendContext) -> int:
        now = clock.now_ms()
        seq = ctx.append(SubgroupDeleted(group="G", requester="ops").to_record(now))
        entries: list[list[Any]] = [["T", 0, 5], ["T", 1, 7]]
        removed = OffsetsRemoved(
            group="G", entries=entries, cause=Cause.GROUP_DELETED, requester="ops"
        )
        ctx.append(removed.to_record(now))
        return seq

    if two_records:
        seq: int | None = await broker.submit(before_b431)
    else:
        seq = await broker.delete_group("G", requester="ops", remove_offsets=True)
    assert seq is not None
    clock.advance(1000)
    await broker.commit_offset("OTHER", "T", 1, 2, requester="c2")
    return seq


@pytest.fixture
async def deleted(broker, clock) -> tuple[Broker, int]:
    return broker, await _history(broker, clock, two_records=False)


async def test_b431_delete_group_with_remove_offsets_writes_one_record_holding_the_offsets(deleted):
    broker, seq = deleted
    assert broker.store.log.last_seq == seq + 1  # the deletion, then OTHER's commit
    [(_, record)] = list(broker.store.log.read(seq, seq))
    assert record["type"] == RecordType.SUBGROUP_DELETED
    assert (record["group"], record["requester"]) == ("G", "ops")
    assert record["offsets"] == [["T", 0, 5], ["T", 1, 7]]
    assert broker.group_config("G") is None


async def test_b431_a_group_without_offsets_is_deleted_by_the_record_it_always_was(broker):
    await broker.update_group({"groupName": "G"}, requester="ops")
    seq = await broker.delete_group("G", requester="ops", remove_offsets=True)
    [(_, record)] = list(broker.store.log.read(seq))
    assert set(record) == {"type", "v", "ts", "group", "requester"}  # no `offsets` key at all


async def test_b431_the_offset_table_and_its_history_see_the_offsets_removed(deleted):
    broker, seq = deleted
    assert [broker.stored_offset("G", "T", q) for q in (0, 1)] == [-1, -1]
    assert broker.group_offsets("OTHER") == [("T", 0, 1), ("T", 1, 2)]
    with broker.store.read() as txn:
        (*_, removed) = broker.store.offsets.changes(txn, "T", "G", 1)
        history = TimeTravel(broker.store).history(txn, "G", topic="T")
    assert (removed.seq, removed.old, removed.new, removed.cause) == (seq, 7, -1, "group_deleted")
    gone = [(e.queue_id, e.old, e.new, e.cause, e.requester, e.seq) for e in history]
    assert gone[-2:] == [
        (0, 5, -1, "group_deleted", "ops", seq),
        (1, 7, -1, "group_deleted", "ops", seq),
    ]
    assert [e.kind for e in history][-2:] == ["offset_removed", "offset_removed"]


async def test_b431_offsets_at_a_time_see_the_group_before_its_deletion_and_not_after(deleted):
    broker, _ = deleted
    with broker.store.read() as txn:
        travel = TimeTravel(broker.store)
        before = [(r.queue_id, r.offset) for r in travel.offsets_at(txn, START, group="G")]
        after = [(r.queue_id, r.offset) for r in travel.offsets_at(txn, START + 1000, group="G")]
    assert (before, after) == ([(0, 5), (1, 7)], [])


async def test_b431_the_read_model_rows_show_the_removals_and_the_deletion(deleted):
    broker, seq = deleted
    [(_, record)] = list(broker.store.log.read(seq, seq))
    rows = list(rows_of(seq, record, record["ts"]))
    assert [family for family, _ in rows] == ["groups", "offsets", "offsets"]
    removals = [
        (r["group"], r["topic"], r["queue_id"], r["old"], r["new"], r["removed"], r["cause"])
        for family, r in rows
        if family == "offsets"
    ]
    assert removals == [
        ("G", "T", 0, 5, -1, True, "group_deleted"),
        ("G", "T", 1, 7, -1, True, "group_deleted"),
    ]


def _answers(broker: Broker) -> dict[str, Any]:
    """What every reader says about the deletion, without the seqs the two forms number apart."""
    travel = TimeTravel(broker.store)
    with broker.store.read() as txn:
        history = [
            (e.time, e.kind, e.queue_id, e.old, e.new, e.cause, e.requester)
            for group in ("G", "OTHER")
            for e in travel.history(txn, group)
        ]
        at = {
            t: [(r.group, r.queue_id, r.offset, r.cause) for r in travel.offsets_at(txn, t)]
            for t in (START, START + 1000, START + 2000)
        }
    rows = []
    for seq, record in broker.store.log.read():
        for family, row in rows_of(seq, record, record["ts"]):
            if family == "offsets":
                rows.append({k: v for k, v in row.items() if k not in ("seq", "type")})
    return {
        "table": broker.offset_table(),
        "groups": broker.group_table()[0],
        "history": history,
        "at": at,
        "readmodel": rows,
        # the removals are changes too (B-504): their seqs left out, as the two forms number apart
        "explain": [
            {
                k: ({f: x for f, x in v.items() if f != "seq"} if k.endswith("change") and v else v)
                for k, v in q.items()
            }
            for q in explain(broker.store, "G", "T")["queues"]
        ],
    }


def _open(path: Path, clock: ManualClock) -> Broker:
    config = BrokerConfig(storePathRootDir=str(path), total_physical_memory_bytes=1024**3)
    return Broker.open(config.storePathRootDir, config, clock)


async def test_b431_a_log_holding_the_two_record_form_replays_and_answers_the_same(tmp_path):
    answers = {}
    for two_records in (True, False):
        clock = ManualClock(START)
        path = tmp_path / ("before" if two_records else "now")
        broker = _open(path, clock)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(broker.run)
                seq = await _history(broker, clock, two_records=two_records)
                kinds = [r["type"] for _, r in broker.store.log.read(seq)]
                answers[two_records] = _answers(broker)
                nursery.cancel_scope.cancel()
        finally:
            broker.close()
        written = ["subgroup_deleted", "offsets_removed"] if two_records else ["subgroup_deleted"]
        assert kinds == [*written, "offset_committed"]
        assert verify(path) == []  # a replay rebuilds every database byte for byte
    assert answers[True] == answers[False]
