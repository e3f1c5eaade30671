"""The hot path of a send: queued with the writer as its frame is decoded, in arrival order, group committed."""

from __future__ import annotations

import pytest
import trio

from es_broker.log import GroupCommitWriter, RecordLog, WriterClosed, hops, make
from es_broker.log.arrival import ArrivalOrder


def append_job(value):
    return lambda ctx: ctx.append(make("probe", 0, value=value))


async def test_jobs_enqueued_in_one_pass_share_one_commit_in_the_order_they_were_enqueued(tmp_path):
    log = RecordLog(tmp_path)
    writer = GroupCommitWriter(log)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        # as a read loop decoding 20 frames
        queued = [writer.enqueue(append_job(i)) for i in range(20)]
        seqs = [await writer.outcome(q) for q in queued]
        nursery.cancel_scope.cancel()
    assert seqs == list(range(1, 21))
    assert [r["value"] for _, r in log.read()] == list(range(20))
    assert writer.batches == 1


async def test_outcome_raises_the_jobs_own_error(tmp_path):
    writer = GroupCommitWriter(RecordLog(tmp_path))

    def refuse(ctx):
        raise ValueError("no")

    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        queued = writer.enqueue(refuse)
        with pytest.raises(ValueError, match="no"):
            await writer.outcome(queued)
        nursery.cancel_scope.cancel()


def test_a_read_loop_about_to_wait_commits_what_is_queued_in_order_without_the_writer_task(
    tmp_path,
):
    log = RecordLog(tmp_path)
    writer = GroupCommitWriter(log, max_batch=8)
    answered = []
    for i in range(10):
        writer.enqueue(append_job(i), then=lambda q: answered.append(q.result()))
    writer.commit_waiting()  # the read loop's hook: one batch of at most max_batch, answered at once
    assert answered == list(range(1, 9))
    assert writer.batches == 1
    writer.commit_waiting()
    assert answered == list(range(1, 11))
    assert [r["value"] for _, r in log.read()] == list(range(10))
    writer.commit_waiting()  # nothing queued: nothing written
    assert writer.batches == 2


def test_with_sync_flush_the_writer_task_commits_not_the_read_loop(tmp_path):
    log = RecordLog(tmp_path, sync=True)
    writer = GroupCommitWriter(log)
    queued = writer.enqueue(append_job(0))
    writer.commit_waiting()  # the fsync belongs in the writer's thread, never on the read loop
    assert writer.batches == 0 and log.last_seq == 0

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            assert await writer.outcome(queued) == 1
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_enqueue_on_a_closed_writer_is_refused(tmp_path):
    writer = GroupCommitWriter(RecordLog(tmp_path))
    writer.close()
    with pytest.raises(WriterClosed):
        writer.enqueue(append_job(0))


def test_arrival_order_is_settled_once_every_ticket_is_released():
    order = ArrivalOrder()
    assert order.settled()
    first, second = order.ticket(), order.ticket()
    assert not order.settled()
    second.release()
    assert not order.settled()  # the first is still to be queued
    first.release()
    assert order.settled()


def test_the_hop_table_counts_each_hop_from_the_previous_stamped_one(monkeypatch):
    monkeypatch.setattr(hops, "_samples", {})
    trace = hops.Trace(310, received=1_000)
    trace.at[hops.DECODED] = 3_000
    trace.at[hops.SUBMITTED] = 10_000  # the hops between were not stamped
    trace.at[hops.SENT] = 20_000
    hops.done(trace)
    table = hops.table()["310"]
    assert table["count"] == 1
    assert table["hops"]["decoded"]["p50"] == 2.0
    assert table["hops"]["submitted"]["p50"] == 7.0
    assert table["hops"]["sent"]["p50"] == 10.0
    assert table["hops"]["total"]["p50"] == 19.0
    assert "picked" not in table["hops"]
