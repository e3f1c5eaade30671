"""Merging a slave's offset commits on the master (S-5, B-123), and the slave's own view of them."""

from __future__ import annotations

import msgpack
import pytest

from es_broker.commands.errors import IllegalRequest
from es_broker.commands.slave_journal import (
    JOURNAL_DIR,
    SlaveCommit,
    SlaveDelivery,
    SlaveOffsetJournal,
)
from es_broker.commands.slave_offsets import effective_offset, merge_job
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.core.slave_broker import SlaveBroker
from es_broker.ha.protocol import MergeRequest
from es_broker.log.types import SlaveMergeOutcome
from tests.conftest import START, make_topic

G, T = "G", "T"


def commit(local_seq: int, ts: int, offset: int, queue_id: int = 0) -> SlaveCommit:
    return SlaveCommit(local_seq, ts, T, G, queue_id, offset, -1, "client_commit", "client-1", 0)


async def merge(broker: Broker, *commits: SlaveCommit):
    return await broker.submit(
        merge_job(
            broker.store,
            broker_id=1,
            slave_addr="127.0.0.1:10921",
            journal_upto=max(c.local_seq for c in commits),
            commits=list(commits),
        )
    )


async def test_s005_a_slave_commit_later_than_the_masters_last_change_wins(broker, clock):
    await make_topic(broker)
    await broker.commit_offset(G, T, 0, 10)  # at START
    outcome = await merge(broker, commit(1, START + 5, 7))
    assert [q[3:6] for q in outcome.queues] == [
        (10, 7, SlaveMergeOutcome.APPLIED)
    ]  # later wins, even when smaller
    assert broker.stored_offset(G, T, 0) == 7


async def test_s005_a_master_change_later_than_the_slave_commit_stays(broker, clock):
    await make_topic(broker)
    clock.advance(100)
    await broker.commit_offset(G, T, 0, 10)
    outcome = await merge(broker, commit(1, START + 5, 70))
    assert [q[3:6] for q in outcome.queues] == [(10, 10, SlaveMergeOutcome.KEPT_MASTER)]
    assert broker.stored_offset(G, T, 0) == 10


async def test_s005_equal_times_go_to_the_larger_offset(broker, clock):
    await make_topic(broker, queues=2)
    await broker.commit_offset(G, T, 0, 10)
    await broker.commit_offset(G, T, 1, 10)
    outcome = await merge(broker, commit(1, START, 11, queue_id=0), commit(2, START, 9, queue_id=1))
    assert [(q[2], q[5]) for q in outcome.queues] == [
        (0, SlaveMergeOutcome.APPLIED),
        (1, SlaveMergeOutcome.KEPT_MASTER),
    ]


async def test_s005_only_the_slaves_latest_commit_of_a_queue_counts_and_a_queue_new_to_the_master_takes_it(
    broker,
):
    await make_topic(broker)
    outcome = await merge(
        broker, commit(1, START + 1, 5), commit(2, START + 2, 9), commit(3, START + 3, 8)
    )
    assert [q[3:6] for q in outcome.queues] == [(-1, 8, SlaveMergeOutcome.APPLIED)]
    (record,) = [r for _, r in broker.store.log.read() if r["type"] == "slave_offsets_merged"]
    # every commit is in the record
    assert len(record["commits"]) == 3 and record["journal_upto"] == 3


async def test_s005_a_merge_is_an_offset_change_with_its_cause_and_replays_byte_for_byte(
    broker, config
):
    await make_topic(broker)
    await broker.commit_offset(G, T, 0, 3)
    await merge(broker, commit(1, START + 9, 6))
    with broker.store.read() as txn:
        *_, change = broker.store.offsets.changes(txn, T, G, 0)
    assert (change.old, change.new, change.cause, change.requester) == (
        3,
        6,
        "slave_merge",
        "client-1",
    )
    broker.writer.close()
    broker.close()
    assert verify(config.storePathRootDir) == []


async def test_b123_compat_overwrite_drops_the_slave_commits_and_says_so(
    tmp_path, clock, config, nursery
):
    b = Broker.open(
        tmp_path / "compat",
        config.replace(
            storePathRootDir=str(tmp_path / "compat"), slave_offset_merge="compat_overwrite"
        ),
        clock,
    )
    await nursery.start(b.run)
    await make_topic(b)
    await b.commit_offset(G, T, 0, 4)
    outcome = await merge(b, commit(1, START + 50, 40))
    assert outcome.policy == "compat_overwrite"
    assert [q[3:6] for q in outcome.queues] == [(4, 4, SlaveMergeOutcome.DISCARDED)]
    assert b.stored_offset(G, T, 0) == 4


async def test_the_slave_answers_its_own_commit_until_the_merge_decides(broker, clock, tmp_path):
    await make_topic(broker)
    journal = SlaveOffsetJournal(tmp_path / "journal")
    mine = journal.record(
        ts=START + 5,
        topic=T,
        group=G,
        queue_id=0,
        offset=12,
        old=-1,
        cause="client_commit",
        requester="c",
        replicated_seq=broker.store.log.last_seq,
    )
    with broker.store.read() as txn:
        assert effective_offset(broker.store, txn, mine, T, G, 0) == 12
    clock.advance(100)
    await broker.commit_offset(G, T, 0, 20)  # a newer change reached the slave through the log
    with broker.store.read() as txn:
        # latest_wins, as the merge will
        assert effective_offset(broker.store, txn, mine, T, G, 0) == 20
    compat = broker.store
    compat.config = broker.config.replace(slave_offset_merge="compat_overwrite")
    with compat.read() as txn:
        # RocketMQ: the slave's table until sync
        assert effective_offset(compat, txn, mine, T, G, 0) == 12


def test_slave_journal_keeps_commits_across_reopening_and_never_reuses_a_position(tmp_path):
    journal = SlaveOffsetJournal(tmp_path / "j")
    for i in range(3):
        journal.record(
            ts=i,
            topic=T,
            group=G,
            queue_id=0,
            offset=i,
            old=-1,
            cause="client_commit",
            requester="c",
            replicated_seq=9,
        )
    journal.close()
    journal = SlaveOffsetJournal(tmp_path / "j")
    assert [c.offset for c in journal.pending()] == [0, 1, 2] and journal.latest(
        T, G, 0
    ).offset == 2
    assert (
        journal.forget_through(3) == 3
        and journal.pending() == []
        and journal.latest(T, G, 0) is None
    )
    journal.close()
    journal = SlaveOffsetJournal(tmp_path / "j")
    assert (
        journal.record(
            ts=9,
            topic=T,
            group=G,
            queue_id=0,
            offset=9,
            old=-1,
            cause="client_commit",
            requester="c",
            replicated_seq=9,
        ).local_seq
        == 4
    )


def test_slave_journal_keeps_deliveries_apart_from_commits_across_reopening_and_forgets_both(
    tmp_path,
):
    journal = SlaveOffsetJournal(tmp_path / "j")
    journal.record(
        ts=1,
        topic=T,
        group=G,
        queue_id=0,
        offset=2,
        old=-1,
        cause="client_commit",
        requester="c",
        replicated_seq=9,
    )
    for first in (0, 3):  # positions 2 and 3: the commits' counter
        journal.record_delivery(
            ts=10 + first,
            group=G,
            topic=T,
            queue_id=1,
            offset=first,
            offsets=range(first, first + 3),
            next_offset=first + 3,
            client="c@1",
            replicated_seq=9,
        )
    journal.close()
    journal = SlaveOffsetJournal(tmp_path / "j")
    assert journal.pending_deliveries() == [
        SlaveDelivery(2, 10, G, T, 1, 0, (0, 1, 2), 3, "c@1", 9),
        SlaveDelivery(3, 13, G, T, 1, 3, (3, 4, 5), 6, "c@1", 9),
    ]
    # commits only: the overlay never sees a delivery
    assert [c.local_seq for c in journal.pending()] == [1]
    assert journal.latest(T, G, 1) is None and journal.latest(T, G, 0).offset == 2
    commits, deliveries, upto = journal.next_batch(0, 2)  # the first two positions, of either kind
    assert ([c.local_seq for c in commits], [d.local_seq for d in deliveries], upto) == (
        [1],
        [2],
        2,
    )
    assert journal.next_batch(2, 2)[1:] == ([journal.pending_deliveries()[1]], 3)
    assert journal.next_batch(3, 2) == ([], [], 3)
    assert journal.forget_through(2) == 2  # the commit and the first delivery
    assert [d.local_seq for d in journal.pending_deliveries()] == [3] and journal.pending() == []
    assert journal.forget_through(3) == 1 and journal.pending_all() == ([], [])
    journal.close()
    journal = SlaveOffsetJournal(tmp_path / "j")
    assert journal.pending_all() == ([], [])
    # never reused
    assert (
        journal.record_delivery(
            ts=20,
            group=G,
            topic=T,
            queue_id=0,
            offset=0,
            offsets=[0],
            next_offset=1,
            client="c",
            replicated_seq=9,
        ).local_seq
        == 4
    )
    journal.close()


async def test_a_merge_records_the_slaves_deliveries_with_served_by_before_the_merge_record(
    broker, clock, config
):
    await make_topic(broker)
    clock.advance(1000)
    served = SlaveDelivery(3, START + 5, G, T, 0, 0, (0, 1), 2, "c@1", 7)
    outcome = await broker.submit(
        merge_job(
            broker.store,
            broker_id=1,
            slave_addr="127.0.0.1:10921",
            journal_upto=3,
            commits=[],
            deliveries=[served],
        )
    )
    assert (outcome.deliveries, outcome.queues) == (1, ())
    *_, (_, delivered), (seq, merged) = broker.store.log.read()
    assert (delivered["type"], delivered["ts"], delivered["offsets"], delivered["client"]) == (
        "messages_delivered",
        START + 1000,
        [0, 1],
        "c@1",
    )
    assert delivered["served_by"] == {
        "broker_id": 1,
        "addr": "127.0.0.1:10921",
        "ts": START + 5,
        "local_seq": 3,
    }
    assert (
        seq,
        merged["type"],
        merged["journal_upto"],
        merged["deliveries"],
        merged["commits"],
    ) == (outcome.seq, "slave_offsets_merged", 3, 1, [])
    # a delivery the request does not cover would be shipped again
    with pytest.raises(IllegalRequest):
        merge_job(
            broker.store,
            broker_id=1,
            slave_addr="a",
            journal_upto=2,
            commits=[],
            deliveries=[served],
        )
    with pytest.raises(IllegalRequest):
        merge_job(
            broker.store,
            broker_id=1,
            slave_addr="a",
            journal_upto=3,
            commits=[],
            deliveries=[SlaveDelivery(3, START, G, T, 0, 0, (), 0, "c", 7)],
        )
    broker.writer.close()
    broker.close()
    assert verify(config.storePathRootDir) == []


def test_merge_request_body_carries_deliveries_and_still_reads_the_plain_list_of_commits():
    c = commit(1, START, 4)
    d = SlaveDelivery(2, START, G, T, 0, 0, (0,), 1, "c", 0)
    both = MergeRequest.from_command(MergeRequest(1, "s:1", 2, (c,), (d,)).to_command())
    assert (both.commits, both.deliveries, both.journal_upto) == ((c,), (d,), 2)
    old_form = MergeRequest(1, "s:1", 1, (c,)).to_command()  # without deliveries: the first form
    assert isinstance(msgpack.unpackb(old_form.body), list)
    assert MergeRequest.from_command(old_form).deliveries == ()


async def test_a_slave_forgets_at_start_the_commits_a_merge_record_already_covers(
    tmp_path, clock, config, nursery
):
    # the log holds the master's merge record; the slave crashed before it dropped the journal entries
    data = tmp_path / "slave"
    master_config = config.replace(storePathRootDir=str(data))
    b = Broker.open(data, master_config, clock)
    await nursery.start(b.run)
    await make_topic(b)
    journal = SlaveOffsetJournal(data / JOURNAL_DIR)
    taken = journal.record(
        ts=START,
        topic=T,
        group=G,
        queue_id=0,
        offset=5,
        old=-1,
        cause="client_commit",
        requester="c",
        replicated_seq=b.store.log.last_seq,
    )
    journal.close()
    await merge(b, taken)
    b.writer.close()
    b.close()
    slave = SlaveBroker.open(data, master_config.replace(brokerRole="SLAVE", brokerId=1), clock)
    try:
        assert slave.journal.pending() == [] and slave.stored_offset(G, T, 0) == 5
    finally:
        slave.close()


async def test_a_slave_forgets_at_start_the_deliveries_a_merge_record_already_covers(
    tmp_path, clock, config, nursery
):
    data = tmp_path / "slave"
    master_config = config.replace(storePathRootDir=str(data))
    b = Broker.open(data, master_config, clock)
    await nursery.start(b.run)
    await make_topic(b)
    journal = SlaveOffsetJournal(data / JOURNAL_DIR)
    served = journal.record_delivery(
        ts=START,
        group=G,
        topic=T,
        queue_id=0,
        offset=0,
        offsets=[0],
        next_offset=1,
        client="c",
        replicated_seq=b.store.log.last_seq,
    )
    journal.close()
    await b.submit(
        merge_job(
            b.store,
            broker_id=1,
            slave_addr="s",
            journal_upto=served.local_seq,
            commits=[],
            deliveries=[served],
        )
    )
    b.writer.close()
    b.close()
    slave = SlaveBroker.open(data, master_config.replace(brokerRole="SLAVE", brokerId=1), clock)
    try:
        assert slave.journal.pending_all() == ([], [])
    finally:
        slave.close()
