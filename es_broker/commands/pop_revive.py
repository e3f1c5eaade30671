"""The pop revive pass: handles past their invisible time come back to the group, or go to %DLQ%G
(RocketMQ 5's PopReviveService, B-582, B-587).

One pass is one writer job that reads the broker's clock once and takes the
handles whose invisible time ended by then, earliest first. Per queue it
writes one `pop_expired` record: the messages visible to the group again (the
next pop of the queue hands them out before newer ones), and those handed out
more than the group's retryMaxTimes + 1 times, stored in `%DLQ%G` as a
consumer's send-back dead-letters them (B-91) in the same transaction, with
the group's offset moved past them when they were its lowest (B-585).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from es_broker.commands import delay, names, placement, retry
from es_broker.commands.errors import MessageIllegal
from es_broker.commands.pop_ack import moved_offset
from es_broker.config import BrokerRole
from es_broker.log import AppendContext
from es_broker.log.types import Cause, PopExpired
from es_broker.projections.pop import Due, Lease
from es_broker.remoting import message as wire
from es_broker.remoting.bodies import SubscriptionGroupConfig
from es_broker.store import Store

MAX_PER_PASS = 256  # handles per write transaction, so one pass never holds the writer long
REVIVER = "pop_revive"  # the requester of what the pass stores


@dataclass(frozen=True, slots=True)
class RevivePass:
    """What one pass did, and when the next has work (broker time, ms)."""

    revived: tuple[tuple[str, int], ...]  # (topic, queue) with messages visible again
    dead: int
    next_due: int | None  # the earliest end of an invisible time still ahead; None: none out
    now: int
    more: bool  # stopped at MAX_PER_PASS with more due


def revive_job(
    store: Store, max_handles: int = MAX_PER_PASS
) -> Callable[[AppendContext], RevivePass]:
    """The job of one revive pass over every group's handles."""

    def job(ctx: AppendContext) -> RevivePass:
        txn = ctx.txn
        now = store.clock.now_ms()
        if store.config.brokerRole == BrokerRole.SLAVE:
            return RevivePass((), 0, None, now, False)
        due = store.pop.due(txn, now, max_handles + 1)
        more = len(due) > max_handles
        by_queue: dict[tuple[str, str, int], list[Due]] = {}
        for item in due[:max_handles]:
            by_queue.setdefault((item.group, item.topic, item.queue_id), []).append(item)
        revived: list[tuple[str, int]] = []
        dead = 0
        for (group, topic, queue_id), items in sorted(by_queue.items()):
            back, gone = _expire_queue(store, ctx, group, topic, queue_id, items, now)
            if back:
                revived.append((topic, queue_id))
            dead += gone
        return RevivePass(tuple(revived), dead, store.pop.next_deadline(txn), now, more)

    return job


def _expire_queue(
    store: Store,
    ctx: AppendContext,
    group: str,
    topic: str,
    queue_id: int,
    items: list[Due],
    now: int,
) -> tuple[int, int]:
    """One queue's lapsed handles: (messages visible again, messages dead-lettered)."""
    txn = ctx.txn
    group_config = store.groups.get(txn, group) or SubscriptionGroupConfig(group)
    limit = group_config.retry_max_times
    revived: list[list[Any]] = []
    dead: list[list[Any]] = []
    for item in sorted(items, key=lambda d: d.offset):
        lease = store.pop.lease(txn, group, topic, queue_id, item.offset)
        if lease is None or lease.ready:  # pragma: no cover - the index holds only handles out
            continue
        entry: list[Any] = [lease.offset, lease.pop_time, lease.times, lease.client]
        if lease.times > limit:  # handed out 1 + retryMaxTimes times, never acked (B-91)
            dead.append(entry + list(_dead_letter(store, ctx, group, topic, queue_id, lease, now)))
        else:
            revived.append(entry)
    leases = [lease.offset for lease in store.pop.leases_of(txn, group, topic, queue_id)]
    cursor = store.pop.cursor(txn, group, topic, queue_id)
    commit = None
    if dead and cursor is not None:
        table = store.offsets.query(txn, topic, group, queue_id)
        commit = moved_offset(table, leases, cursor, {entry[0] for entry in dead})
    ctx.append(
        PopExpired(
            group=group,
            topic=topic,
            queue_id=queue_id,
            revived=revived,
            dead=dead,
            max_reconsume_times=limit,
            commit=commit,
        ).to_record(now)
    )
    return len(revived), len(dead)


def _dead_letter(
    store: Store,
    ctx: AppendContext,
    group: str,
    topic: str,
    queue_id: int,
    lease: Lease,
    now: int,
) -> tuple[int, str]:
    """The message's copy in %DLQ%G's queue 0, as a send-back stores one (B-91): its physical
    offset and msg id; (-1, "") when retention removed the message or it cannot be copied."""
    txn = ctx.txn
    unit = store.cq.unit(txn, topic, queue_id, lease.offset)
    raw = None
    if unit is not None and unit.physical_offset >= store.commitlog.phy_min(txn):
        raw = store.log.payload(txn, unit.physical_offset)
    if raw is None:
        return -1, ""
    original = wire.decode_one(raw)[0]
    props = dict(original.properties)
    props.setdefault(retry.PROPERTY_RETRY_TOPIC, original.topic)
    props[delay.PROPERTY_WAIT] = "false"
    props[delay.PROPERTY_DELAY] = "0"
    props[retry.PROPERTY_ORIGIN_MESSAGE_ID] = (
        props.get(retry.PROPERTY_ORIGIN_MESSAGE_ID, "").strip() or original.msg_id
    )
    copy = placement.MessageIn(
        original.body,
        {},
        original.flag,
        original.sys_flag,
        original.born_timestamp,
        original.born_host,
        original.reconsume_times + lease.times,
    )
    target = names.dlq_topic(group)
    try:
        encoded, code = placement.encode_message(target, 0, copy, props, original.store_host)
    except MessageIllegal:
        return -1, ""
    retry.ensure_dlq_topic(store, ctx, group, REVIVER)
    stored = placement.place(
        store,
        ctx,
        target,
        0,
        [encoded],
        [code],
        ts=now,
        host=original.store_host,
        requester=REVIVER,
        cause=Cause.POP_DEAD_LETTER,
    )
    return stored.physical_offsets[0], stored.msg_ids[0]
