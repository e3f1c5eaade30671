"""Delivery at a time: RocketMQ 5's timer messages (TIMER_DELIVER_MS and its kin, B-589).

A message sent with TIMER_DELIVER_MS (an absolute time, ms), TIMER_DELAY_SEC or
TIMER_DELAY_MS (from its store time), or the 4.x-era __STARTDELIVERTIME (absolute,
ms), due later than its store time, is parked in `rmq_sys_wheel_timer` (5.x's
TimerMessageStore topic) with its due time as tagsCode and its real topic and
queue in REAL_TOPIC / REAL_QID, as a delay level parks one in SCHEDULE_TOPIC_XXXX
(B-96): invisible to pull and pop. The store job decides the due time from the
broker's clock and records it in the store record's `delay` map (level 0, `timer`:
the property that asked). The timer pass copies each message whose time has come
to its real queue, the copy's store record carrying the `delivery` (level 0,
`timer`), or records the skip of one retention removed; the timer projection
(projections/timer.py) drops it from the messages waiting. A DELAY level wins
over a timer property, as in 5.x; a batch cannot carry one.

Unlike 5.x's time wheel, which rounds the due time down to its precision
(timerPrecisionMs, 1 s), a message is never delivered before its time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from es_broker.commands import delay, placement
from es_broker.commands.errors import MessageIllegal
from es_broker.commands.schedule import Delivered, DeliveryPass, deliver_parked
from es_broker.config import BrokerRole
from es_broker.log import AppendContext
from es_broker.log.types import DelayedMessageSkipped
from es_broker.projections.timer import TIMER_TOPIC
from es_broker.remoting import message as wire
from es_broker.store import Store

PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_START_DELIVER_TIME = "__STARTDELIVERTIME"  # the 4.x-era commercial property
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"  # on the parked message: its due time
# HookUtils#transformTimerMessage's order: a relative delay first, then the absolute time
ASKED = (
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_START_DELIVER_TIME,
)
MAX_PER_PASS = 64  # deliveries per write transaction


@dataclass(frozen=True, slots=True)
class Timer:
    """The timer property a message carries: which one, and its value."""

    name: str
    value: int

    def due(self, now: int) -> int:
        """The time the message is due, from the broker's time of its store."""
        if self.name == PROPERTY_TIMER_DELAY_SEC:
            return now + self.value * 1000
        if self.name == PROPERTY_TIMER_DELAY_MS:
            return now + self.value
        return self.value


def requested(properties: dict[str, str]) -> Timer | None:
    """The message's timer property, checked (WHEEL_TIMER_MSG_ILLEGAL: MESSAGE_ILLEGAL); None
    when it carries none."""
    for name in ASKED:
        raw = properties.get(name)
        if raw is None:
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            raise MessageIllegal(f"the {name} property {raw[:40]!r} is not an integer") from None
        if not 0 <= value <= 1 << 53:
            raise MessageIllegal(f"the {name} property {value} is out of range")
        return Timer(name, value)
    return None


def park_due(timer: Timer, now: int, max_delay_sec: int) -> int | None:
    """When a timer message stored `now` is due; None when it is due already (stored as sent).
    A due time further than timerMaxDelaySec ahead is refused, as 5.x refuses it."""
    due = timer.due(now)
    if due <= now:
        return None
    if due - now > max_delay_sec * 1000:
        raise MessageIllegal(
            f"the message is due in {due - now} ms, more than timerMaxDelaySec "
            f"({max_delay_sec} s) ahead"
        )
    return due


def park(
    store: Store,
    ctx: AppendContext,
    topic: str,
    queue_id: int,
    msg: placement.MessageIn,
    properties: dict[str, str],
    timer: Timer,
    due: int,
    *,
    ts: int,
    host: tuple[str, int],
    producer_group: str = "",
    requester: str = "",
) -> placement.PutResult:
    """Store a timer message in rmq_sys_wheel_timer queue 0, due at `due` (tagsCode)."""
    props = dict(properties)
    props[delay.PROPERTY_REAL_TOPIC] = topic
    props[delay.PROPERTY_REAL_QID] = str(queue_id)
    props[PROPERTY_TIMER_OUT_MS] = str(due)
    raw, _ = placement.encode_message(TIMER_TOPIC, 0, msg, props, host)
    result = placement.place(
        store,
        ctx,
        TIMER_TOPIC,
        0,
        [raw],
        [due],
        ts=ts,
        host=host,
        producer_group=producer_group,
        requester=requester,
        delay={
            "level": 0,
            "timer": timer.name,
            "deliver_at": due,
            "real_topic": topic,
            "real_queue_id": queue_id,
        },
    )
    return placement.PutResult(
        result.topic,
        result.queue_id,
        result.queue_offset,
        result.physical_offsets,
        result.msg_ids,
        result.store_timestamp,
        result.seq,
        real_topic=topic,
        real_queue_id=queue_id,
        deliver_at=due,
    )


def deliver_due_job(
    store: Store, max_deliveries: int = MAX_PER_PASS
) -> Callable[[AppendContext], DeliveryPass]:
    """The job of one timer pass: every parked message due by now goes to its real queue."""

    def job(ctx: AppendContext) -> DeliveryPass:
        txn = ctx.txn
        now = store.clock.now_ms()
        if store.config.brokerRole == BrokerRole.SLAVE:
            return DeliveryPass((), 0, None, now)
        delivered: list[Delivered] = []
        skipped = 0
        phy_min = store.commitlog.phy_min(txn)
        for due, offset, phy in store.timers.due(txn, now, max_deliveries):
            raw = store.log.payload(txn, phy) if phy >= phy_min else None
            parked = wire.decode_one(raw)[0] if raw is not None else None
            real = _real_destination(parked) if parked is not None else None
            if parked is None or real is None:
                reason = "message_removed" if parked is None else "no_real_topic"
                ctx.append(
                    DelayedMessageSkipped(
                        level=0,
                        schedule_offset=offset,
                        schedule_phy=phy,
                        next_cursor=offset + 1,
                        reason=reason,
                    ).to_record(now)
                )
                skipped += 1
                continue
            delivered.append(
                deliver_parked(
                    store,
                    ctx,
                    parked,
                    real,
                    0,
                    offset,
                    due,
                    now,
                    timer=True,
                    drop=(PROPERTY_TIMER_OUT_MS,),
                )
            )
        return DeliveryPass(tuple(delivered), skipped, store.timers.next_due(txn), now)

    return job


def _real_destination(parked: wire.StoredMessage) -> tuple[str, int] | None:
    topic = parked.properties.get(delay.PROPERTY_REAL_TOPIC)
    qid = parked.properties.get(delay.PROPERTY_REAL_QID, "")
    if not topic or not qid.strip().isdigit():
        return None
    return topic, int(qid)


__all__ = ["TIMER_TOPIC", "Timer", "deliver_due_job", "park", "park_due", "requested"]
