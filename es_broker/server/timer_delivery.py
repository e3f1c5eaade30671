"""The timer delivery service (RocketMQ 5's TimerMessageStore dequeue, B-589): masters only.

When the earliest due time has come (a look in a read transaction), one writer job
(`commands.timer.deliver_due_job`) reads the broker's clock and records every delivery of a
timer message whose time has come. Otherwise the service sleeps until that time, never longer
than MAX_IDLE (a message parked meanwhile, or a stepped wall clock, is noticed within it);
pulls and pops held on a real queue are woken.
"""

from __future__ import annotations

import logging

import trio

from es_broker.commands import timer
from es_broker.commands.errors import ServiceNotAvailable
from es_broker.core.broker import Broker
from es_broker.log import WriterClosed
from es_broker.server.longpoll import PullHoldService

log = logging.getLogger(__name__)

MAX_IDLE = 0.2  # s: the longest sleep between passes
RETRY_AFTER_FAILURE = 0.1  # s: after a pass that could not be written


class TimerDeliveryService:
    def __init__(self, broker: Broker, holds: PullHoldService) -> None:
        self.broker = broker
        self.holds = holds
        self.passes = 0
        self.delivered = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        store = self.broker.store
        while True:
            with store.read() as txn:  # a look first: an idle broker writes nothing
                next_due = store.timers.next_due(txn)
            now = store.clock.now_ms()
            if next_due is None or next_due > now:
                wait = MAX_IDLE if next_due is None else (next_due - now) / 1000
                await trio.sleep(min(wait, MAX_IDLE))
                continue
            try:
                done = await self.broker.submit(timer.deliver_due_job(self.broker.store))
            except WriterClosed:
                return  # shutting down
            except ServiceNotAvailable:  # writes refused (a full disk): the next pass tries again
                await trio.sleep(MAX_IDLE)
                continue
            except Exception:  # a failed pass is retried; nothing of it was recorded
                log.exception("timer delivery pass failed")
                await trio.sleep(RETRY_AFTER_FAILURE)
                continue
            self.passes += 1
            self.delivered += len(done.delivered)
            for d in done.delivered:
                self.holds.notify(d.topic, d.queue_id)
