"""The stats projection's counts of a group commit (B-356): the same sums whatever the batches.

The projection adds a write transaction's counts in memory and writes each count once before the
commit (`StatsProjection.settle`). These tests hold that the counts of sends committed together
are those of the same sends committed one by one, that a replay (other batches) rebuilds the same
bytes, and that a transaction that is rolled back leaves none of its counts behind.
"""

from __future__ import annotations

from typing import Any

import trio

from es_broker.commands.messages import MessageIn, PutRequest
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.log.store import AppendContext
from es_broker.projections.stats import TOPIC_PUT, Counts


def _send(topic: str, i: int) -> PutRequest:
    message = MessageIn(b"m%d" % i, {"KEYS": f"k{i}"}, 0, 0, 0, ("127.0.0.1", 1))
    return PutRequest(topic, i % 2, [message], "127.0.0.1:1", "P")


def _totals(broker: Broker) -> dict[str, Counts]:
    with broker.store.read() as txn:
        return dict(broker.store.stats.totals(txn, TOPIC_PUT))


def _ignore(_: Any) -> None:
    return None


async def _with_broker(path: str, body: Any) -> Any:
    broker = Broker.open(path, BrokerConfig(storePathRootDir=path))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            for topic in ("T", "U"):
                await broker.update_topic({"topicName": topic, "readQueueNums": 2})
            result = await body(broker)
            nursery.cancel_scope.cancel()
        return result
    finally:
        broker.close()


def test_b356_counts_of_one_group_commit_equal_those_of_sends_one_by_one(tmp_path) -> None:
    async def body(broker: Broker) -> dict[str, Counts]:
        for i in range(20):  # T: twenty sends queued together, written by one group commit
            broker.start_put(_send("T", i), _ignore)
        batches = broker.writer.batches
        broker.writer.commit_waiting()
        assert broker.writer.batches == batches + 1
        for i in range(20):  # U: the same sends, one commit each
            await broker.put(_send("U", i))
        return _totals(broker)

    totals = trio.run(_with_broker, str(tmp_path / "d"), body)
    assert totals["T\x00normal"] == totals["U\x00normal"]
    assert totals["T\x00normal"].messages == totals["T\x00normal"].records == 20
    assert verify(tmp_path / "d") == []  # replayed in batches of its own: the same bytes


def test_b356_a_rolled_back_group_commit_leaves_none_of_its_counts(tmp_path) -> None:
    async def body(broker: Broker) -> dict[str, Counts]:
        good = [broker.start_put(_send("T", i), _ignore) for i in range(3)]
        put = broker._put_job(_send("T", 3))

        def spoiled(ctx: AppendContext) -> None:
            put(ctx)  # appended, then failed: the whole transaction is rolled back
            raise ValueError("spoiled after appending")

        bad = broker.writer.enqueue(spoiled, _ignore)
        good += [broker.start_put(_send("T", i), _ignore) for i in range(4, 6)]
        broker.writer.commit_waiting()  # the batch rolls back; each job is then tried alone
        assert all(q.ok for q in good) and not bad.ok
        return _totals(broker)

    totals = trio.run(_with_broker, str(tmp_path / "d"), body)
    assert totals["T\x00normal"].messages == totals["T\x00normal"].records == 5
    assert verify(tmp_path / "d") == []
