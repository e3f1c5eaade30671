"""What the writer keeps in memory from one write transaction to the next (B-643): a send's queue
bounds and last block (the consume queue), a commit's stored offset and pending reset (the offset
table). Kept only when the next write transaction directly follows the one that committed them
(`RecordLog.follows`); forgotten after a transaction aborted, and after any other write
transaction committed between. Held here through group commits, a batch aborted after its
appends, and a write of another transaction; the store then replays to the same bytes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from es_broker.commands import offsets, topics
from es_broker.commands.errors import IllegalRequest
from es_broker.commands.messages import PutRequest
from es_broker.commands.placement import MessageIn, encode_message, place
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.log import AppendContext, records
from es_broker.log.types import Cause, MessagesDelivered
from es_broker.projections.consume_queue import _BOUNDS
from es_broker.projections.keys import I64, offset_key, queue_key
from es_broker.projections.stats import TOPIC_PUT, VALUE
from es_broker.store import Store

TOPIC, GROUP, HOST = "T", "G", ("127.0.0.1", 10911)
TS = 1_700_000_000_000
Job = Callable[[AppendContext], int]


def _ignore(_: Any) -> None:
    return None


def _send(store: Store, queue: int, fail: bool = False) -> Job:
    """A job storing one message in `queue` (then raising, with `fail`); returns its offset."""

    def job(ctx: AppendContext) -> int:
        raw, tags = encode_message(TOPIC, queue, MessageIn(b"body"), {}, HOST)
        placed = place(store, ctx, TOPIC, queue, [raw], [tags], ts=TS, host=HOST)
        if fail:
            raise RuntimeError("the batch fails after its appends")
        return placed.queue_offset

    return job


def _commit(store: Store, offset: int, fail: bool = False) -> Job:
    """A job committing `offset` of queue 0 (then raising, with `fail`); returns the offset it
    recorded as the one before."""
    commit = offsets.commit_job(
        store, GROUP, TOPIC, 0, offset, cause=Cause.CLIENT_COMMIT, requester="127.0.0.1@c"
    )

    def job(ctx: AppendContext) -> int:
        seq = commit(ctx)
        if fail:
            raise RuntimeError("the batch fails after its appends")
        return int(records.unpack(ctx.txn.get(records.seq_key(seq), db=store.log.log_db))["old"])

    return job


def _deliver(store: Store, queue: int, offsets: list[int], fail: bool = False) -> Job:
    """A job recording a delivery of `offsets` of `queue` (then raising, with `fail`)."""

    def job(ctx: AppendContext) -> int:
        first = offsets[0]
        delivered = MessagesDelivered(
            group=GROUP,
            topic=TOPIC,
            queue_id=queue,
            offset=first,
            offsets=offsets,
            next_offset=offsets[-1] + 1,
            client="127.0.0.1@c",
        )
        seq = ctx.append(delivered.to_record(TS))
        if fail:
            raise RuntimeError("the batch fails after its appends")
        return seq

    return job


def test_b643_a_group_commit_reads_only_what_was_committed(tmp_path: Path) -> None:
    store = Store.open(tmp_path, BrokerConfig(storePathRootDir=str(tmp_path)))
    write = store.log.write_batch
    try:
        # group commits: a queue's next send and commit read what the commit before kept
        assert write([_send(store, 0), _send(store, 1), _send(store, 0)]) == [
            (True, 0),
            (True, 0),
            (True, 1),
        ]
        assert write([_send(store, 0), _commit(store, 4)]) == [(True, 2), (True, -1)]
        assert write([_commit(store, 6), _send(store, 0)]) == [(True, 4), (True, 3)]

        # a batch aborted after its appends: nothing of it is kept, in LMDB or in memory
        failed = write([_send(store, 0), _send(store, 0, fail=True)])
        assert failed[0] == (True, 4) and failed[1][0] is False  # the good job re-ran alone
        failed = write([_commit(store, 9), _send(store, 0), _commit(store, 11, fail=True)])
        assert failed[:2] == [(True, 6), (True, 5)] and failed[2][0] is False
        assert write([_send(store, 0), _commit(store, 12)]) == [(True, 6), (True, 9)]
        aborted = write([_send(store, 0), _commit(store, 20), _send(store, 1, fail=True)])
        assert [ok for ok, _ in aborted] == [True, True, False]
        assert write([_send(store, 0), _commit(store, 21)]) == [(True, 8), (True, 20)]

        # deliveries (their counts, the queue's widest delivery): an aborted wide one is not kept
        assert [ok for ok, _ in write([_deliver(store, 0, [0, 1]), _deliver(store, 1, [0])])]
        aborted = write([_deliver(store, 0, [2, 8], fail=True)])
        assert aborted[0][0] is False
        assert [ok for ok, _ in write([_deliver(store, 0, [3, 6]), _send(store, 0)])]
        assert [ok for ok, _ in write([_deliver(store, 0, [4]), _deliver(store, 1, [1, 2])])]
    finally:
        store.close()
    assert verify(tmp_path) == []


def test_b643_a_write_between_two_group_commits_is_read(tmp_path: Path) -> None:
    store = Store.open(tmp_path, BrokerConfig(storePathRootDir=str(tmp_path)))
    write, cq, table = store.log.write_batch, store.cq, store.offsets
    try:
        assert write([_send(store, 0), _commit(store, 1)]) == [(True, 0), (True, -1)]
        assert write([_send(store, 0), _commit(store, 2)]) == [(True, 1), (True, 1)]
        with store.log.env.begin(write=True) as txn:  # not the writer's group commit
            txn.put(queue_key(TOPIC, 0), _BOUNDS.pack(0, 9), db=cq.meta)
            txn.put(offset_key(TOPIC, GROUP, 0), I64.pack(7), db=table.db)
        assert write([_send(store, 0), _commit(store, 3)]) == [(True, 9), (True, 7)]
        with store.log.env.begin(write=True) as txn:
            txn.delete(offset_key(TOPIC, GROUP, 0), db=table.db)
            for key in list(txn.cursor(db=store.stats.total_db).iternext(values=False)):
                if key.startswith(TOPIC_PUT):
                    txn.put(key, VALUE.pack(100, 0, 100), db=store.stats.total_db)
        assert write([_commit(store, 4), _send(store, 0)]) == [(True, -1), (True, 10)]
        with store.read() as txn:
            assert {counts.messages for _, counts in store.stats.totals(txn, TOPIC_PUT)} == {101}
    finally:
        store.close()


def test_b643_a_send_reads_its_topic_as_the_last_update_left_it(tmp_path: Path) -> None:
    def send(queue: int) -> PutRequest:
        return PutRequest(TOPIC, queue, [MessageIn(b"body")], "127.0.0.1:1", "P")

    async def body() -> None:
        broker = Broker.open(tmp_path, BrokerConfig(storePathRootDir=str(tmp_path)))
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(broker.run)
                await broker.update_topic({"topicName": TOPIC, "writeQueueNums": 4})
                assert (await broker.put(send(3))).queue_id == 3
                await broker.update_topic(
                    {"topicName": TOPIC, "writeQueueNums": 2, "readQueueNums": 2}
                )
                with pytest.raises(IllegalRequest, match="queueId"):
                    await broker.put(send(3))
                # a group commit of a send, an update and a send: the second reads the update
                first = broker.start_put(send(1), _ignore)
                config = {"topicName": TOPIC, "writeQueueNums": 1, "readQueueNums": 1}
                update = broker.writer.enqueue(
                    topics.update_topic_job(broker.store, config, ""), _ignore
                )
                second = broker.start_put(send(1), _ignore)
                batches = broker.writer.batches
                broker.writer.commit_waiting()
                assert broker.writer.batches == batches + 1
                assert first.ok and update.ok and not second.ok
                assert isinstance(second.value, IllegalRequest)
                nursery.cancel_scope.cancel()
        finally:
            broker.close()

    trio.run(body)
