"""The trace index of deliveries: one entry per `messages_delivered` record (B-472)."""

from __future__ import annotations

import trio

from es_broker.clock import ManualClock
from es_broker.commands import trace
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.projections.message_trace import delivered_offsets, delivered_value
from es_broker.remoting.message import tag_hash
from tests.conftest import make_topic
from tests.helpers import local_ms


def entries(broker: Broker) -> list[tuple[bytes, bytes]]:
    with broker.store.read() as txn:
        return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=broker.store.trace.pulls)]


def delivered(broker: Broker, topic: str, queue_id: int, offset: int) -> list[int]:
    with broker.store.read() as txn:
        return list(broker.store.trace.deliveries_of(txn, topic, queue_id, offset))


async def test_b472_a_pull_is_one_entry_whatever_it_delivered(broker):
    await make_topic(broker, "T", queues=1)
    await broker.put_messages("T", 0, [MessageIn(b"m%d" % i) for i in range(32)])
    first = await broker.pull("G1", "T", 0, 0, 32, client="a")
    second = await broker.pull("G2", "T", 0, 0, 32, client="b")
    assert len(first.messages) == len(second.messages) == 32
    assert len(entries(broker)) == 2 + 1  # an entry per record, and the queue's widest span
    seqs = [seq for seq, r in broker.store.log.read() if r["type"] == "messages_delivered"]
    for offset in (0, 17, 31):
        assert delivered(broker, "T", 0, offset) == seqs
    assert delivered(broker, "T", 0, 32) == []
    assert delivered(broker, "T", 1, 0) == []


async def test_b472_a_filtered_pull_answers_the_offsets_it_handed_out_only(broker):
    await make_topic(broker, "T", queues=1)
    await broker.put_messages(
        "T", 0, [MessageIn(b"m%d" % i, {"TAGS": "AB"[i % 2]}) for i in range(9)]
    )
    got = await broker.pull("G", "T", 0, 0, 32, tags_codes=frozenset({tag_hash("A")}), client="a")
    assert got.offsets == (0, 2, 4, 6, 8)
    (seq,) = [seq for seq, r in broker.store.log.read() if r["type"] == "messages_delivered"]
    assert [o for o in range(10) if delivered(broker, "T", 0, o)] == [0, 2, 4, 6, 8]
    assert delivered(broker, "T", 0, 4) == [seq]


async def test_b472_a_lookup_finds_every_pull_that_covered_the_offset_in_order(broker):
    await make_topic(broker, "T", queues=1)
    await broker.put_messages("T", 0, [MessageIn(b"m%d" % i) for i in range(40)])
    wide = await broker.pull("G1", "T", 0, 0, 32, client="a")  # 0..31
    for start in range(0, 40, 3):  # narrow pulls by another group, in their own records
        await broker.pull("G2", "T", 0, start, 3, client="b")
    again = await broker.pull("G1", "T", 0, 30, 5, client="a")  # 30..34
    assert wide.offsets[-1] == 31 and again.offsets == (30, 31, 32, 33, 34)
    records = {seq: r for seq, r in broker.store.log.read() if r["type"] == "messages_delivered"}
    for offset in range(41):
        expected = [seq for seq, r in records.items() if offset in r["offsets"]]
        assert delivered(broker, "T", 0, offset) == expected, offset


def test_b472_a_value_holds_a_count_or_the_distances():
    for offsets in ([5], [5, 6, 7], [5, 7], [0, 1, 3, 2**31], [10, 10 + 2**33]):
        value = delivered_value(offsets)
        assert [offsets[0] + d for d in delivered_offsets(value)] == offsets
    assert len(delivered_value(list(range(100, 132)))) == 4


async def history(data_dir: str) -> Broker:
    clock = ManualClock(local_ms(1, 10))
    config = BrokerConfig(storePathRootDir=data_dir, mappedFileSizeCommitLog=2000)
    broker = Broker.open(data_dir, config, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await make_topic(broker, "T", queues=2)
        for i in range(12):
            await broker.put_messages("T", i % 2, [MessageIn(b"x" * 200, {"KEYS": f"k{i}"})] * 3)
            clock.advance(60_000)
        for qid in (0, 1):
            for group in ("G1", "G2"):
                await broker.pull(group, "T", qid, 0, 4, client="c")
                await broker.pull(group, "T", qid, 4, 32, client="c")
        clock.set(local_ms(20, 4, 30))
        await broker.retention_pass(manual=True)
        await broker.put_messages("T", 0, [MessageIn(b"after", {"KEYS": "k-after"})])
        nursery.cancel_scope.cancel()
    return broker


def test_b472_retention_keeps_the_deliveries_of_expired_messages_until_sealing(tmp_path):
    """A delivery entry leaves the trace index only when a sealing archives its record (B-461):
    retention alone moves the queues' minimum and keeps every delivery findable."""
    broker = trio.run(history, str(tmp_path))
    with broker.store.read() as txn:
        queues = {(t, q): lo for t, q, lo, _ in broker.store.cq.queues(txn)}
    assert queues[("T", 0)] > 0  # retention moved the queues' minimum
    pulls = [(seq, r) for seq, r in broker.store.log.read() if r["type"] == "messages_delivered"]
    for _topic, qid in queues:
        for offset in range(18):
            expected = [seq for seq, r in pulls if r["queue_id"] == qid and offset in r["offsets"]]
            assert delivered(broker, "T", qid, offset) == expected
    below = [r for _, r in pulls if max(r["offsets"]) < queues[("T", r["queue_id"])]]
    assert below  # the history reached a pull wholly below the minimum
    journey = trace.journey(broker.store, "k-after")
    assert journey["found"] is False  # a KEYS part is no message id
    broker.close()
    assert verify(tmp_path) == []
