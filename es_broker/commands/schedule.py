"""Delayed delivery: due messages of SCHEDULE_TOPIC_XXXX go to their real topic (B-97, B-98).

One pass looks at the head of every level's queue. A message whose due time
(its tagsCode, corrected when it lies further ahead than the level's delay)
has come is copied to REAL_TOPIC / REAL_QID without DELAY, with the same
reconsume times and born time and a new store time. The copy's store record
carries a `delivery` map (level, schedule offset, the cursor after it), so the
copy and the cursor advance are one record: a delayed message is delivered
exactly once however often the broker restarts, and replay re-decides
nothing. A unit whose message is gone (retention) is skipped with a
`delayed_message_skipped` record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from es_broker.commands import delay, placement
from es_broker.commands.names import SCHEDULE_TOPIC
from es_broker.log import AppendContext
from es_broker.log.types import DelayedMessageSkipped
from es_broker.remoting import message as wire
from es_broker.store import Store

MAX_PER_PASS = 64  # deliveries per write transaction, so one pass never holds the writer long


@dataclass(frozen=True, slots=True)
class Delivered:
    level: int
    schedule_offset: int
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    seq: int


@dataclass(frozen=True, slots=True)
class DeliveryPass:
    """What one pass did, and when the next pass has work (broker time, ms)."""

    delivered: tuple[Delivered, ...]
    skipped: int
    next_due: int | None  # the earliest due time still waiting; None when every level is drained
    now: int


def deliver_due_job(
    store: Store, max_deliveries: int = MAX_PER_PASS
) -> Callable[[AppendContext], DeliveryPass]:
    """The job of one delivery pass over every level (ScheduleMessageService's timer tasks)."""

    def job(ctx: AppendContext) -> DeliveryPass:
        txn = ctx.txn
        now = store.clock.now_ms()
        levels = store.config.delay_levels_ms()
        phy_min = store.commitlog.phy_min(txn)
        delivered: list[Delivered] = []
        skipped = 0
        next_due: int | None = None
        for level in range(1, len(levels) + 1):
            queue = delay.schedule_queue(level)
            lo, hi = store.cq.bounds(txn, SCHEDULE_TOPIC, queue)
            # clamped into [min, max] (B-98)
            cursor = max(store.schedule.cursor(txn, level) or 0, lo)
            while cursor < hi:
                if len(delivered) + skipped >= max_deliveries:
                    # more is due: come back at once
                    return DeliveryPass(tuple(delivered), skipped, now, now)
                unit = store.cq.unit_at(txn, SCHEDULE_TOPIC, queue, cursor)
                due = delay.corrected_due(unit.tags_code, now, level, levels)
                if due > now:
                    next_due = due if next_due is None else min(next_due, due)
                    break  # FIFO within a level: nothing behind it is due either
                raw = (
                    store.log.payload(txn, unit.physical_offset)
                    if unit.physical_offset >= phy_min
                    else None
                )
                parked = wire.decode_one(raw)[0] if raw is not None else None
                real = _real_destination(parked) if parked is not None else None
                if parked is None or real is None:
                    ctx.append(
                        DelayedMessageSkipped(
                            level=level,
                            schedule_offset=cursor,
                            schedule_phy=unit.physical_offset,
                            next_cursor=cursor + 1,
                            reason="message_removed" if parked is None else "no_real_topic",
                        ).to_record(now)
                    )
                    skipped += 1
                else:
                    delivered.append(
                        deliver_parked(store, ctx, parked, real, level, cursor, due, now)
                    )
                cursor += 1
        return DeliveryPass(tuple(delivered), skipped, next_due, now)

    return job


def _real_destination(parked: wire.StoredMessage) -> tuple[str, int] | None:
    topic = parked.properties.get(delay.PROPERTY_REAL_TOPIC)
    qid = parked.properties.get(delay.PROPERTY_REAL_QID, "")
    if not topic or not qid.strip().lstrip("-").isdigit():
        return None
    return topic, int(qid)


def deliver_parked(
    store: Store,
    ctx: AppendContext,
    parked: wire.StoredMessage,
    real: tuple[str, int],
    level: int,
    cursor: int,
    due: int,
    now: int,
    *,
    timer: bool = False,
    drop: tuple[str, ...] = (),
) -> Delivered:
    """messageTimeup + putMessage: the copy, stored with the cursor advance in its own record.

    The copy keeps the parked message's store host, as RocketMQ copies it. `timer`: a message of
    the timer topic (level 0; its delivery says so); `drop`: properties the copy leaves behind.
    """
    topic, queue_id = real
    copy = placement.MessageIn(
        parked.body,
        {},
        parked.flag,
        parked.sys_flag,
        parked.born_timestamp,
        parked.born_host,
        parked.reconsume_times,
    )
    props = delay.delivered_properties(parked.properties)
    for name in drop:
        props.pop(name, None)
    raw, code = placement.encode_message(topic, queue_id, copy, props, parked.store_host)
    marks: dict[str, object] = {"level": level, "timer": True} if timer else {"level": level}
    result = placement.place(
        store,
        ctx,
        topic,
        queue_id,
        [raw],
        [code],
        ts=now,
        host=parked.store_host,
        requester="timer" if timer else "schedule",
        delivery={
            **marks,
            "schedule_offset": cursor,
            "schedule_phy": parked.physical_offset,
            "next_cursor": cursor + 1,
            "due": due,
        },
    )
    return Delivered(
        level, cursor, topic, queue_id, result.queue_offset, result.physical_offsets[0], result.seq
    )
