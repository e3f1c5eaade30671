"""Retention: expired commit-log files, min-offset correction, data lost to retention (B-14..B-19, S-11)."""

from __future__ import annotations

import pytest

from es_broker.commands.messages import GetStatus
from es_broker.commands.placement import MessageIn
from es_broker.core.broker import Broker
from es_broker.remoting.codes import ResponseCode
from tests.conftest import make_topic
from tests.helpers import local_ms

HOUR = 3_600_000


@pytest.fixture
async def small(config, clock, nursery):
    """A broker whose commit-log files hold 1000 bytes (about 8 small messages each)."""
    clock.set(local_ms(1, 10))
    b = Broker.open(config.storePathRootDir, config.replace(mappedFileSizeCommitLog=1000), clock)
    await nursery.start(b.run)
    await make_topic(b, queues=1)
    return b


async def fill(broker: Broker, n: int) -> None:
    for i in range(n):
        await broker.put_message("T", 0, MessageIn(b"m%02d" % i))


def test_b014_delete_when_is_a_local_hour_list():
    from es_broker.commands.retention import is_time_to_delete

    assert is_time_to_delete("04", local_ms(2, 4, 59))
    assert not is_time_to_delete("04", local_ms(2, 5, 0))
    assert is_time_to_delete("03;04;05", local_ms(2, 5, 10))


async def test_b008_a_message_never_straddles_two_commit_log_files(small):
    await fill(small, 20)
    with small.store.read() as txn:
        units = list(small.store.cq.units(txn, "T", 0, 0, 20))
    assert all(u.physical_offset // 1000 == (u.physical_offset + u.size - 1) // 1000 for u in units)


async def test_b015_expired_files_go_at_the_delete_hour_but_never_the_newest(small, clock):
    await fill(small, 20)
    clock.set(local_ms(5, 4, 30))  # days later, inside 04:xx
    done = await small.retention_pass()
    phy_max = small.store.commitlog.phy_max(small.store.read())
    assert done.reason == "time"
    assert done.deleted_files == tuple(range(0, (phy_max - 1) // 1000 * 1000, 1000))
    assert done.phy_min == (phy_max - 1) // 1000 * 1000


async def test_b014_nothing_is_deleted_outside_the_delete_hour(small, clock):
    await fill(small, 20)
    clock.set(local_ms(5, 10))
    done = await small.retention_pass()
    assert (done.reason, done.deleted_files) == (None, ())


async def test_b015_files_younger_than_72_hours_stay(small, clock):
    await fill(small, 20)
    clock.set(local_ms(2, 4, 30))  # 18.5 hours after the writes
    done = await small.retention_pass()
    assert done.deleted_files == ()


async def test_b018_min_offset_moves_to_the_first_message_still_stored(small, clock):
    await fill(small, 20)
    clock.set(local_ms(5, 4, 30))
    done = await small.retention_pass()
    with small.store.read() as txn:
        first = next(
            u for u in small.store.cq.units(txn, "T", 0, 0, 20) if u.physical_offset >= done.phy_min
        )
    assert small.min_offset("T", 0) == first.offset > 0
    assert small.max_offset("T", 0) == 20


async def test_b058_pull_below_min_after_retention_is_offset_too_small(small, clock):
    await fill(small, 20)
    clock.set(local_ms(5, 4, 30))
    await small.retention_pass()
    r = small.get_message("T", 0, 0)
    assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, small.min_offset("T", 0))


async def test_b040_after_retention_a_new_group_gets_no_offset_and_starts_at_max(small, clock):
    await fill(small, 20)
    answer = await small.query_consumer_offset("NEW1", "T", 0)
    assert (answer.code, answer.offset) == (
        ResponseCode.SUCCESS,
        0,
    )  # young topic: compat starts at 0
    clock.set(local_ms(5, 4, 30))
    await small.retention_pass()
    answer = await small.query_consumer_offset("NEW2", "T", 0)
    assert answer.code == ResponseCode.QUERY_NOT_FOUND  # the client then asks GET_MAX_OFFSET (B-45)


async def test_s011_messages_lost_to_retention_are_recorded_per_group(small, clock):
    await fill(small, 20)
    await small.commit_offset("SLOW", "T", 0, 2)
    clock.set(local_ms(5, 4, 30))
    await small.retention_pass()
    # a record a file (B-676): together they name every message lost, and the minimum's moves
    expired = [r for _, r in small.store.log.read() if r["type"] == "commitlog_expired"]
    new_min = small.min_offset("T", 0)
    assert len(expired) > 1
    lost = [entry for r in expired for entry in r["lost"]]
    assert {tuple(entry[:3]) for entry in lost} == {("SLOW", "T", 0)}
    assert sum(entry[4] for entry in lost) == new_min - 2
    moves = [move for r in expired for move in r["queues"]]
    assert moves[0][2] == 0 and moves[-1][3] == new_min
    assert all(a[3] == b[2] for a, b in zip(moves, moves[1:], strict=False))


async def test_retention_keeps_the_log_replayable(small, clock, config):
    await fill(small, 20)
    await small.commit_offset("G", "T", 0, 5)
    clock.set(local_ms(5, 4, 30))
    await small.retention_pass()
    await fill(small, 3)
    # verify from another process, as an operator would, while this broker keeps it open
    from tests.helpers import cli

    done = cli("verify", "--data-dir", config.storePathRootDir)
    assert done.returncode == 0, done.stdout


async def test_b019_bodies_below_phy_min_are_gone_but_offsets_history_stays(small, clock):
    await fill(small, 20)
    await small.commit_offset("G", "T", 0, 1)
    clock.set(local_ms(5, 4, 30))
    done = await small.retention_pass()
    assert small.message_at(0) is None
    assert small.message_at(done.phy_min) is not None
    with small.store.read() as txn:
        assert [c.new for c in small.store.offsets.changes(txn, "T", "G", 0)] == [1]


@pytest.fixture
async def stepped(config, clock, nursery):
    """Commit-log files of 512 KiB (about 400 messages of 1 KiB) expired in steps of 128 KiB."""
    clock.set(local_ms(1, 10))
    conf = config.replace(mappedFileSizeCommitLog=512 * 1024, retention_step_bytes=128 * 1024)
    b = Broker.open(config.storePathRootDir, conf, clock)
    await nursery.start(b.run)
    await make_topic(b, queues=2)
    return b


async def test_b676_a_file_is_expired_in_steps_each_a_record_and_a_transaction_of_its_own(
    stepped, clock, config
):
    body = b"x" * 1000
    for i in range(1000):
        props = {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i:04d}"}
        await stepped.put_message("T", i % 2, MessageIn(body, props))
    seqs_before = stepped.store.log.last_seq
    with stepped.store.read() as txn:
        starts = {
            u.physical_offset for q in (0, 1) for u in stepped.store.cq.units(txn, "T", q, 0, 500)
        }
    commits_before = stepped.writer.batches
    clock.set(local_ms(5, 4, 30))
    done = await stepped.retention_pass()
    store = stepped.store
    expired = [
        (s, r) for s, r in store.log.read(seqs_before + 1) if r["type"] == "commitlog_expired"
    ]
    size, step = 512 * 1024, 128 * 1024
    # two whole files (never the newest), each in steps of at most 128 KiB (ending at the walk
    # mark before, B-477): a record each, the file named by the step that reaches its end
    assert done.deleted_files == (0, size) and done.phy_min == 2 * size
    named = [r["files"] for _, r in expired if r["files"]]
    assert named == [[0], [size]] and expired[-1][1]["files"] == [size]
    assert len(expired) >= 2 * size // step
    assert stepped.writer.batches - commits_before >= len(expired)  # a transaction each
    ends = [r["phy_min"] for _, r in expired]
    previous = 0
    for end in ends:
        assert 0 < end - previous <= step or end % size == 0
        assert end in starts or end % size == 0  # a message's start: never a message cut
        previous = end
    assert {r["reason"] for _, r in expired} == {"time"}
    # what a step expired is gone whole, the rest is there: bodies, minimums, keys
    with store.read() as txn:  # message i went to queue i % 2 at offset i // 2
        units = [(u, q) for q in (0, 1) for u in store.cq.units(txn, "T", q, 0, 500)]
    kept = [(u, q) for u, q in units if u.physical_offset >= done.phy_min]
    first_kept = min(u.offset * 2 + q for u, q in kept)
    assert stepped.min_offset("T", 0) == min(u.offset for u, q in kept if q == 0) > 0
    assert stepped.get_message("T", 0, 0).status == GetStatus.OFFSET_TOO_SMALL
    assert query_keys(stepped, "k0") == [] and query_keys(stepped, "U0000") == []
    assert query_keys(stepped, f"k{first_kept}") == [body]
    assert query_keys(stepped, "k999") == [body]
    # the records replay to the same projections (another process, as an operator)
    from tests.helpers import cli

    assert cli("verify", "--data-dir", config.storePathRootDir).returncode == 0


def query_keys(broker: Broker, key: str) -> list[bytes]:
    from es_broker.remoting.message import decode_one

    found = broker.query_messages_by_key("T", key, 64, 0, 2**62)
    return [decode_one(raw)[0].body for raw in found]


async def test_b677_a_manual_pass_goes_on_after_its_answer_and_a_request_meanwhile_joins_it(
    stepped, clock
):
    for i in range(1000):
        await stepped.put_message("T", i % 2, MessageIn(b"x" * 1000))
    seqs_before = stepped.store.log.last_seq
    clock.set(local_ms(9, 10))  # every file past fileReservedTime (72 h), outside the delete hour
    # answered before its first step: the pass is under way, nothing expired yet
    done, running = await stepped.manual_retention_pass(0)
    assert running and done.deleted_files == ()
    # asked again meanwhile: the same pass, waited for to its end
    joined, running = await stepped.manual_retention_pass(60)
    size = 512 * 1024
    assert not running
    assert joined.reason == "manual" and joined.deleted_files == (0, size)
    expired = [
        r for _, r in stepped.store.log.read(seqs_before + 1) if r["type"] == "commitlog_expired"
    ]
    assert [r["files"] for r in expired if r["files"]] == [[0], [size]]  # one pass, not two
    assert {r["reason"] for r in expired} == {"manual"}
    # asked after it ended: a pass of its own, which finds nothing more (never the newest file)
    again, running = await stepped.manual_retention_pass(60)
    assert not running and again.deleted_files == () and again.phy_min == 2 * size
    assert stepped.min_offset("T", 0) > 0
    # answered while a pass is under way: the store's phyMin, not the 0 of no pass ended yet
    under_way, running = await stepped.manual_retention_pass(0)
    assert running and under_way.deleted_files == () and under_way.phy_min == 2 * size
    assert (await stepped.manual_retention_pass(60))[1] is False


async def test_b677_a_manual_request_runs_passes_while_each_expires_its_ten_files(
    config, clock, nursery
):
    clock.set(local_ms(1, 10))
    conf = config.replace(mappedFileSizeCommitLog=1000, cleanResourceInterval=1)
    b = Broker.open(config.storePathRootDir, conf, clock)
    await nursery.start(b.run)
    await make_topic(b, queues=1)
    await fill(b, 8 * 24)  # about 8 messages a file of 1000 bytes
    with b.store.read() as txn:
        files = b.store.commitlog.phy_max(txn) // 1000 + 1
    assert files > 20
    clock.set(local_ms(9, 10))
    done, running = await b.manual_retention_pass(60)
    # 4.9.8 arms 20 passes of at most 10 files each: every file but the newest goes
    assert not running and done.deleted_files == tuple(range(0, (files - 1) * 1000, 1000))
    expired = [r for _, r in b.store.log.read() if r["type"] == "commitlog_expired"]
    assert len([r for r in expired if r["files"]]) == files - 1


async def test_b678_a_pass_reads_the_queues_below_each_step_and_records_what_a_scan_of_all_would(
    config, clock, nursery
):
    """The same history in two stores: one pass driven through QueueHeads, the other reading every
    queue at each step; their records are the same, while queues are deleted, added and grown past
    the commit log's end of the first step (which makes the heads read again)."""
    from es_broker.commands.retention import QueueHeads, retention_job
    from es_broker.projections.keys import queue_key

    clock.set(local_ms(1, 10))
    conf = config.replace(
        mappedFileSizeCommitLog=512 * 1024, retention_step_bytes=128 * 1024, fileReservedTime=0
    )

    async def history(path: str, heads: QueueHeads | None) -> list[dict]:
        b = Broker.open(path, conf.replace(storePathRootDir=path), clock)
        await nursery.start(b.run)
        for name, queues in (
            ("A", 3),
            ("BX", 2),
            ("B", 2),
            ("GONE", 2),
            ("QUIET", 1),
            ("EARLY", 1),
        ):
            await make_topic(b, name, queues=queues)
        for _ in range(
            3
        ):  # a queue wholly in the first file: its minimum stays (B-18) until it stores
            await b.put_message("EARLY", 0, MessageIn(b"e" * 700))
        for i in range(2500):
            topic = ("A", "B", "BX", "GONE")[i % 4]
            await b.put_message(topic, i % 2, MessageIn(b"y" * 700))
            if i % 100 == 0:
                await b.commit_offset("G1", topic, i % 2, i // 8 - 40)
                await b.commit_offset("G2", "A", 2, 0)
        await b.put_message("QUIET", 0, MessageIn(b"q"))
        first = b.store.log.last_seq
        done, steps = None, 0
        while done is None or done.seq is not None:
            done = await b.submit(retention_job(b.store, manual=True, heads=heads))
            if heads is not None and done.heads is not None:
                heads.settle(done.heads)
            steps += 1
            if steps == 3:
                await b.delete_topic("GONE")
            if steps == 6:
                await b.put_message("EARLY", 0, MessageIn(b"e"))
            if steps == 4:  # a new queue, and enough to make the newest file of the first step old
                await make_topic(b, "LATE", queues=1)
                for _ in range(800):
                    await b.put_message("LATE", 0, MessageIn(b"z" * 700))
                await b.commit_offset("G1", "LATE", 0, 3)
        records = [r for _, r in b.store.log.read(first + 1) if r["type"] == "commitlog_expired"]
        assert steps > 12 and any(r["lost"] for r in records)
        with b.store.read() as txn:  # the heads read in one walk are the units at the minimums
            cq = b.store.cq
            assert list(cq.heads(txn)) == [
                (cq.unit_at(txn, t, q, lo).physical_offset, queue_key(t, q), t, q)
                for t, q, lo, hi in cq.queues(txn)
                if hi
            ]
            assert any(lo > 0 for _, _, lo, _ in cq.queues(txn))
        return records

    scanned = await history(config.storePathRootDir + "-scan", None)
    through_heads = await history(config.storePathRootDir + "-heads", QueueHeads())
    assert through_heads == scanned
    moved = [q for r in scanned for q in r["queues"]]
    assert {q[0] for q in moved} >= {"A", "B", "BX", "LATE"}
    assert ["EARLY", 0, 0, 3] in moved  # to the message it stored in the pass
