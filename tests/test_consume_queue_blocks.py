"""Consume-queue units kept in blocks of consecutive offsets (B-473), 145 to a page (B-474)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from es_broker.commands.placement import MessageIn
from es_broker.projections.consume_queue import BLOCK_UNITS, UNIT
from es_broker.projections.keys import U64, queue_key
from es_broker.store import Store
from tests.conftest import make_topic


def blocks(store: Store, topic: str, queue_id: int) -> list[tuple[int, int]]:
    """(first offset, units) of every block of a queue."""
    prefix = queue_key(topic, queue_id)
    with store.read() as txn:
        return [
            (U64.unpack(key[len(prefix) :])[0], len(value) // UNIT.size)
            for key, value in txn.cursor(db=store.cq.db)
            if key[: len(prefix)] == prefix
        ]


async def test_b473_blocks_start_at_multiples_of_the_block_whatever_the_batches(broker):
    assert BLOCK_UNITS == 145
    await make_topic(broker, "T", queues=1)
    for n in (5, 150, 1, 1, 160):  # 317 units: records crossing 145 and 290
        await broker.put_messages("T", 0, [MessageIn(b"m")] * n)
    assert blocks(broker.store, "T", 0) == [(0, 145), (145, 145), (290, 27)]
    with broker.store.read() as txn:
        units = list(broker.store.cq.units(txn, "T", 0, 0, 400))
        assert [u.offset for u in units] == list(range(317))
        assert broker.store.cq.unit(txn, "T", 0, 317) is None
        for u in units:
            assert broker.store.cq.unit(txn, "T", 0, u.offset) == u
        got = list(broker.store.cq.unit_tuples(txn, "T", 0, 140, 300))
        assert [t[0] for t in got] == list(range(140, 300))
        assert got == [(u.offset, u.physical_offset, u.size, u.tags_code) for u in units[140:300]]


async def test_b474_a_whole_block_fills_one_page_whatever_the_queues_interleaving(broker):
    """Eight queues written in turn, a few units at a time (what a producer spreading over the
    queues does): each whole block is one overflow page, so the queues cost 28 bytes a unit
    and a little of the leaf pages, however their writes interleave."""
    await make_topic(broker, "T", queues=8)
    rounds = 2 * BLOCK_UNITS // 5 + 1
    for _ in range(rounds):
        for qid in range(8):
            await broker.put_messages("T", qid, [MessageIn(b"m")] * 5)
    whole = sum(n == BLOCK_UNITS for qid in range(8) for _, n in blocks(broker.store, "T", qid))
    assert whole == 16
    with broker.store.read() as txn:
        stat = txn.stat(broker.store.cq.db)
    assert stat["overflow_pages"] == whole  # each queue's open block of 5 units is in the leaf
    assert stat["overflow_pages"] * 4096 / (whole * BLOCK_UNITS) < UNIT.size + 0.3
    # the leaf pages hold a key and a page number per whole block: they grow with the queues,
    # not with the units (the open blocks passed through them while small)
    assert stat["leaf_pages"] + stat["branch_pages"] <= 8


async def test_b473_a_queue_reads_only_its_own_blocks(broker):
    for topic in ("A", "AB", "B"):
        await make_topic(broker, topic, queues=2)
    for topic in ("A", "AB", "B"):
        for qid in (0, 1):
            await broker.put_messages(topic, qid, [MessageIn(topic.encode())] * (3 + qid))
    with broker.store.read() as txn:
        for topic in ("A", "AB", "B"):
            for qid in (0, 1):
                units = list(broker.store.cq.units(txn, topic, qid, 0, 99))
                assert len(units) == 3 + qid
                assert broker.store.cq.unit(txn, topic, qid, 3 + qid) is None
        assert list(broker.store.cq.units(txn, "C", 0, 0, 99)) == []
        assert broker.store.cq.unit(txn, "A", 0, -1) is None


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 200), min_size=1, max_size=8),
    st.integers(0, 900),
    st.integers(0, 900),
)
def test_b473_units_equal_a_unit_per_offset(tmp_path_factory, batches, start, end):
    import trio

    from es_broker.clock import ManualClock
    from es_broker.config import BrokerConfig
    from es_broker.core.broker import Broker

    data_dir = str(tmp_path_factory.mktemp("cq"))

    async def run() -> None:
        broker = Broker.open(data_dir, BrokerConfig(storePathRootDir=data_dir), ManualClock())
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            await make_topic(broker, "T", queues=1)
            placed = []
            for n in batches:
                put = await broker.put_messages("T", 0, [MessageIn(b"x")] * n)
                placed += put.physical_offsets
            with broker.store.read() as txn:
                got = [u.physical_offset for u in broker.store.cq.units(txn, "T", 0, start, end)]
                assert got == placed[start:end]
                assert all(n <= BLOCK_UNITS for _, n in blocks(broker.store, "T", 0))
            nursery.cancel_scope.cancel()
        broker.close()

    trio.run(run)


async def expiring(data_dir: str) -> Store:
    import trio

    from es_broker.clock import ManualClock
    from es_broker.config import BrokerConfig
    from es_broker.core.broker import Broker
    from tests.helpers import local_ms

    clock = ManualClock(local_ms(1, 10))
    config = BrokerConfig(storePathRootDir=data_dir, mappedFileSizeCommitLog=4000)
    broker = Broker.open(data_dir, config, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await make_topic(broker, "T", queues=1)
        for _ in range(10):
            await broker.put_messages("T", 0, [MessageIn(b"x" * 100)] * 40)
            clock.advance(60_000)
        clock.set(local_ms(20, 4, 30))
        await broker.retention_pass(manual=True)
        nursery.cancel_scope.cancel()
    return broker.store


def test_b473_retention_drops_the_blocks_wholly_below_the_new_minimum(tmp_path):
    import trio

    from es_broker.core.replay import verify

    store = trio.run(expiring, str(tmp_path))
    with store.read() as txn:
        lo, hi = store.cq.bounds(txn, "T", 0)
        assert [u.offset for u in store.cq.units(txn, "T", 0, lo, hi)] == list(range(lo, hi))
    assert lo >= BLOCK_UNITS  # the history reached a whole block below the minimum
    kept = blocks(store, "T", 0)
    assert kept[0] == (0, BLOCK_UNITS)  # the head stays: B-37 judges the queue by it
    assert kept[1][0] == lo - lo % BLOCK_UNITS  # then the block holding the minimum
    store.close()
    assert verify(tmp_path) == []


def test_b473_sizes_count_the_units_left_whatever_the_gaps(tmp_path):
    """A delivery's byte count (the stats, B-356) reads one seek per block or gap: the same total
    as a unit looked up per offset, over the head block, the expired gap and the live blocks."""
    import random

    import trio

    store = trio.run(expiring, str(tmp_path))
    rnd = random.Random(5)
    with store.read() as txn:
        lo, hi = store.cq.bounds(txn, "T", 0)
        assert lo > BLOCK_UNITS  # a gap between the head block and the minimum
        for _ in range(300):
            offsets = sorted(rnd.sample(range(hi + 40), rnd.randrange(1, 40)))
            if rnd.random() < 0.3:
                rnd.shuffle(offsets)
            one_by_one = 0
            for offset in offsets:
                unit = store.cq.unit(txn, "T", 0, offset)
                one_by_one += unit.size if unit is not None else 0
            assert store.cq.sizes(txn, "T", 0, offsets) == one_by_one
    store.close()
