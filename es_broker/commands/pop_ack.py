"""ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME: what a receipt handle may still do (B-581, B-583, B-586).

The processor checks the handle's MAC first (pop_handles.py); the writer job then
holds it against the pop projection: the message must still be out to the group
under that very handle (its pop time). A handle whose message was acked, came
back after its invisible time, was dead-lettered, got a newer handle (a change of
its invisible time) or lost it to an offset reset is stale: refused with
NO_MESSAGE and a remark saying which, nothing recorded. An ack moves the group's
offset when it acks the group's lowest message not acked (B-585).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import lmdb

from es_broker.commands.errors import BrokerError, MessageIllegal, TopicNotExist
from es_broker.log import AppendContext
from es_broker.log.types import PopAcked, PopInvisibleChanged
from es_broker.projections.pop import Lease
from es_broker.remoting.codes import ResponseCode
from es_broker.store import Store


class StaleHandle(BrokerError):
    """A handle the broker made, for a message no longer out under it."""

    code = ResponseCode.NO_MESSAGE


@dataclass(frozen=True, slots=True)
class HandleUse:
    """An ack or a change of invisible time, its handle's MAC checked."""

    group: str
    topic: str
    queue_id: int
    offset: int
    pop_time: int  # the handle's
    client: str
    for_client: str | None = None  # the client a proxy acts for


@dataclass(frozen=True, slots=True)
class Changed:
    """Where a change of invisible time left the message: its new handle's times."""

    pop_time: int
    invisible_time: int
    invisible_until: int
    times: int
    seq: int


def check_target(store: Store, txn: lmdb.Transaction[bytes], use: HandleUse) -> None:
    """The topic, queue and offset an ack or change names (AckMessageProcessor's checks)."""
    config = store.topics.get(txn, use.topic)
    if config is None:
        raise TopicNotExist(f"topic[{use.topic}] not exist, apply first please!")
    if use.queue_id >= config.read_queue_nums:
        raise MessageIllegal(
            f"queueId[{use.queue_id}] is illegal, topic:[{use.topic}] "
            f"topicConfig.readQueueNums:[{config.read_queue_nums}]"
        )
    lo, hi = store.cq.bounds(txn, use.topic, use.queue_id)
    if not lo <= use.offset < hi:
        raise StaleHandle(
            f"offset is illegal, key:{use.topic}@{use.queue_id}, commit:{use.offset}, "
            f"store:{lo}~{hi}"
        )


def current_lease(store: Store, txn: lmdb.Transaction[bytes], use: HandleUse) -> Lease:
    """The message's handle out to the group, when it is the one `use` names; else StaleHandle."""
    where = f"{use.topic}:{use.queue_id}:{use.offset}"
    lease = store.pop.lease(txn, use.group, use.topic, use.queue_id, use.offset)
    if lease is None:
        raise StaleHandle(
            f"the receipt handle is stale: message {where} is not out to group {use.group} "
            "(acked, dead-lettered, or its handles dropped when the group's offset was reset)"
        )
    if lease.ready:
        raise StaleHandle(
            f"the receipt handle is stale: the invisible time of message {where} passed "
            f"and it is visible to group {use.group} again"
        )
    if lease.pop_time != use.pop_time:
        raise StaleHandle(
            f"the receipt handle is stale: message {where} was handed out again or its "
            f"invisible time changed at {lease.pop_time}; the handle is of {use.pop_time}"
        )
    return lease


def ack_job(store: Store, use: HandleUse) -> Callable[[AppendContext], int]:
    """The writer job of one ack; its record's sequence number."""

    def job(ctx: AppendContext) -> int:
        txn = ctx.txn
        check_target(store, txn, use)
        current_lease(store, txn, use)
        leases = [
            lease.offset for lease in store.pop.leases_of(txn, use.group, use.topic, use.queue_id)
        ]
        # a handle out means the queue has pop state, hence a cursor
        cursor = store.pop.cursor(txn, use.group, use.topic, use.queue_id) or 0
        commit = moved_offset(
            store.offsets.query(txn, use.topic, use.group, use.queue_id),
            leases,
            cursor,
            {use.offset},
        )
        return ctx.append(
            PopAcked(
                group=use.group,
                topic=use.topic,
                queue_id=use.queue_id,
                offset=use.offset,
                pop_time=use.pop_time,
                client=use.client,
                commit=commit,
                for_client=use.for_client,
            ).to_record(store.clock.now_ms())
        )

    return job


def moved_offset(table: int, leases: list[int], cursor: int, ended: set[int]) -> list[int] | None:
    """[old, new] of the group's offset once the handles at `ended` end, when it moves.

    The offset is the lowest handle's, or the cursor. When the table does not hold what the
    pop state says (an offset reset since), the pop moves nothing: the next pop starts again
    from the table (B-585).
    """
    low_before = leases[0] if leases else cursor
    if table != low_before:
        return None
    low_after = min((offset for offset in leases if offset not in ended), default=cursor)
    return [table, low_after] if low_after != table else None


def change_job(
    store: Store, use: HandleUse, invisible_time: int
) -> Callable[[AppendContext], Changed]:
    """The writer job of one change of invisible time: a new handle from now (B-583)."""

    def job(ctx: AppendContext) -> Changed:
        txn = ctx.txn
        check_target(store, txn, use)
        lease = current_lease(store, txn, use)
        now = store.clock.now_ms()
        pop_time = max(now, lease.pop_time + 1)  # a new handle, never the old one's time
        until = pop_time + invisible_time
        seq = ctx.append(
            PopInvisibleChanged(
                group=use.group,
                topic=use.topic,
                queue_id=use.queue_id,
                offset=use.offset,
                old_pop_time=lease.pop_time,
                pop_time=pop_time,
                invisible_time=invisible_time,
                invisible_until=until,
                times=lease.times,
                client=use.client,
                for_client=use.for_client,
            ).to_record(now)
        )
        return Changed(pop_time, invisible_time, until, lease.times, seq)

    return job
