"""The pop trace under retention and sealing (B-642): an expired message's pop records leave
the hot index with the sealing that archives them; messageTrace reads them from the archive."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from es_broker.clock import ManualClock
from es_broker.commands.placement import MessageIn
from es_broker.commands.pop import PopRequest
from es_broker.commands.pop_ack import HandleUse
from es_broker.commands.trace import journey
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.pop import PopOperations
from es_broker.core.replay import verify
from es_broker.history.archive import raw_records
from es_broker.log import records
from es_broker.projections.keys import U64, queue_key
from es_broker.projections.pop import TRACED, named_offsets
from es_broker.projections.store_format import CURRENT
from es_broker.remoting import message as wire
from es_broker.store import Store
from tests.conftest import make_topic
from tests.helpers import cli_checked, local_ms

GROUP = "GP"
TOPIC = "PT"
EARLY = 12  # messages sent, popped and acked on day 1
SEGMENT = 4


async def _pop_and_ack(broker: Broker, clock: ManualClock, ops: PopOperations, n: int) -> None:
    """Pop n messages of the queue, change the first one's invisible time, ack them all."""
    request = PopRequest(GROUP, TOPIC, 0, n, 60_000, False, 0, client="app-1")
    popped = await ops.pop(request)
    assert len(popped.handed) == n
    clock.advance(1_000)
    first = popped.handed[0].queue_offset
    use = HandleUse(GROUP, TOPIC, 0, first, popped.pop_time, "app-1")
    changed = await ops.change(use, 30_000)
    for handed in popped.handed:
        clock.advance(1_000)
        pop_time = changed.pop_time if handed.queue_offset == first else popped.pop_time
        await ops.ack(HandleUse(GROUP, TOPIC, 0, handed.queue_offset, pop_time, "app-2"))


async def _history(data_dir: str) -> tuple[list[int], int]:
    """Day 1: messages popped and acked; day 20: retention expires most of them, and newer
    messages are popped and acked. (physical offsets of the early messages, those pops' time)"""
    clock = ManualClock(local_ms(1, 10))
    config = BrokerConfig(storePathRootDir=data_dir, mappedFileSizeCommitLog=2000)
    broker = Broker.open(data_dir, config, clock)
    ops = PopOperations(broker)
    phys: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await make_topic(broker, TOPIC, queues=1)
        for _ in range(EARLY):
            put = await broker.put_messages(TOPIC, 0, [MessageIn(b"x" * 200)])
            phys.extend(put.physical_offsets)
            clock.advance(60_000)
        await _pop_and_ack(broker, clock, ops, EARLY)
        clock.set(local_ms(20, 4, 30))
        await broker.retention_pass(manual=True)
        for i in range(3):
            await broker.put_messages(TOPIC, 0, [MessageIn(b"late%d" % i)])
        clock.advance(60_000)
        late = clock.now_ms()  # sealing takes the records before the newer messages' pops
        await _pop_and_ack(broker, clock, ops, 3)
        nursery.cancel_scope.cancel()
    broker.close()
    return phys, late


def _pop_trace(data_dir: Path) -> tuple[int, int, dict[int, list[int]]]:
    """(horizon, the queue's minimum, offset -> seqs of the pop trace's entries of the queue)."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        with store.read() as txn:
            low, _ = store.cq.bounds(txn, TOPIC, 0)
            prefix = queue_key(TOPIC, 0)
            entries: dict[int, list[int]] = {}
            for key in txn.cursor(db=store.pop.trace).iternext(values=False):
                if bytes(key[: len(prefix)]) == prefix and len(key) == len(prefix) + 16:
                    offset = U64.unpack(key[-16:-8])[0]
                    entries.setdefault(offset, []).append(U64.unpack(key[-8:])[0])
            return store.history.sealed_upto(txn), low, entries
    finally:
        store.close()


def _trace(data_dir: Path, phy: int) -> dict:
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        return journey(store, wire.offset_msg_id(("127.0.0.1", 10911), phy))
    finally:
        store.close()


def _pop_events(answer: dict) -> list[tuple[str, str]]:
    kinds = ("popped", "invisible_changed", "acked")
    return [(e["event"], e["client"]) for e in answer["events"] if e["event"] in kinds]


def test_b642_sealing_prunes_the_pop_trace_of_expired_messages_and_trace_reads_the_archive(
    tmp_path,
):
    data_dir = tmp_path / "data"
    phys, late = trio.run(_history, str(data_dir))
    _, low, before = _pop_trace(data_dir)
    assert 0 < low < EARLY  # retention expired the first messages, not all of day 1's
    assert sorted(before) == list(range(EARLY + 3))  # every popped message is in the index
    traced_before = {o: _pop_events(_trace(data_dir, phys[o])) for o in (0, low - 1, low)}
    assert traced_before[0] == [("popped", "app-1"), ("invisible_changed", "app-1")] + [
        ("acked", "app-2")
    ]
    assert traced_before[low - 1] == [("popped", "app-1"), ("acked", "app-2")]

    conf = tmp_path / "broker.conf"
    conf.write_text(f"history_segment_records={SEGMENT}\n")
    done = cli_checked(
        "archive",
        "--data-dir",
        str(data_dir),
        "--before",
        str(late),
        "--config",
        str(conf),
        "--json",
    )
    assert json.loads(done.stdout)["sealed"], done.stdout
    horizon, low_after, after = _pop_trace(data_dir)
    assert low_after == low
    day_one = [seq for o in range(EARLY) for seq in before[o]]
    assert horizon >= max(day_one)  # every pop record of day 1 is sealed
    # the expired messages' entries left the index; the live messages' stayed, sealed or not
    assert [o for o in after if o < low] == []
    assert {o: after[o] for o in after} == {o: before[o] for o in before if o >= low}
    # messageTrace still tells who popped, changed and acked an expired message: from the archive
    for offset in (0, low - 1, low):
        answer = _trace(data_dir, phys[offset])
        assert answer["found"] and answer["readFrom"][0] == "archive"
        assert _pop_events(answer) == traced_before[offset], offset
    assert verify(data_dir) == []
    assert verify(data_dir, full=True) == []


async def _later(data_dir: str, start: int) -> None:
    """After the sealing: newer messages, then retention moves the queue's minimum again."""
    clock = ManualClock(start)
    config = BrokerConfig(storePathRootDir=data_dir, mappedFileSizeCommitLog=2000)
    broker = Broker.open(data_dir, config, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        for _ in range(20):
            await broker.put_messages(TOPIC, 0, [MessageIn(b"y" * 200)])
        clock.set(local_ms(30, 4, 30))
        await broker.retention_pass(manual=True)
        nursery.cancel_scope.cancel()
    broker.close()


def test_b642_a_directory_sealed_by_older_code_loses_those_pop_trace_entries_at_its_upgrade(
    tmp_path,
):
    """Format 9: a directory sealed before sealing pruned the pop trace (format 8) has the
    entries a replay would not have taken out by the upgrade, each queue's minimum as it was at
    the last sealing (retention moved it since); verify passes."""
    data_dir = tmp_path / "data"
    phys, late = trio.run(_history, str(data_dir))
    conf = tmp_path / "broker.conf"
    conf.write_text(f"history_segment_records={SEGMENT}\n")
    cli_checked(
        "archive", "--data-dir", str(data_dir), "--before", str(late), "--config", str(conf)
    )
    horizon, low, pruned = _pop_trace(data_dir)
    trio.run(_later, str(data_dir), late + 3_600_000)
    _, low_now, _ = _pop_trace(data_dir)
    kept = [o for o in pruned if low <= o < low_now and min(pruned[o]) <= horizon]
    assert low < low_now and kept  # sealed records of messages that expired after the sealing
    # what the older code left: the pop trace of every sealed pop record, in format 8
    config = BrokerConfig(storePathRootDir=str(data_dir))
    store = Store.open(data_dir, config)
    with store.log.env.begin(write=True) as txn:
        for segment in list(store.history.segments(txn)):
            for seq, raw in raw_records(segment["location"]):
                record = records.unpack(raw)
                if record["type"] in TRACED:
                    for offset in named_offsets(record):
                        key = queue_key(TOPIC, 0) + U64.pack(offset) + U64.pack(seq)
                        txn.put(key, b"", db=store.pop.trace)
        store.format.set_number(txn, 8)
    store.close()
    assert [o for o in _pop_trace(data_dir)[2] if o < low]  # the older code's entries
    store = Store.open(data_dir, config)  # the upgrade
    with store.read() as txn:
        assert store.format.number(txn) == CURRENT
    store.close()
    _, _, after = _pop_trace(data_dir)
    assert [o for o in after if o < low] == []
    assert {o: after.get(o) for o in kept} == {o: pruned[o] for o in kept}
    assert verify(data_dir) == []
    assert verify(data_dir, full=True) == []
    answer = _trace(data_dir, phys[0])
    assert _pop_events(answer) == [("popped", "app-1"), ("invisible_changed", "app-1")] + [
        ("acked", "app-2")
    ]
