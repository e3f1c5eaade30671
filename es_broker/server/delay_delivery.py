"""The delay delivery service (ScheduleMessageService's timer, B-97, B-98): masters only.

Each pass is one job of the core (`Broker.deliver_delayed`), which reads the
broker's clock and records every delivery with its cursor advance. Between
passes the service sleeps until the earliest due time, or until a delayed
message is stored (the core calls `wake`), whichever comes first; it never
sleeps longer than MAX_IDLE so that a stepped wall clock is noticed.
"""

from __future__ import annotations

import logging

import trio

from es_broker.core.broker import Broker
from es_broker.log import WriterClosed
from es_broker.server.longpoll import PullHoldService

log = logging.getLogger(__name__)

FIRST_DELAY = 1.0  # s: the first pass runs 1 s after start (B-97)
MAX_IDLE = 1.0  # s: the longest sleep between passes
RETRY_AFTER_FAILURE = 0.1  # s: DELAY_FOR_A_WHILE, after a pass that could not be written


class DelayDeliveryService:
    def __init__(self, broker: Broker, holds: PullHoldService) -> None:
        self.broker = broker
        self.holds = holds
        self._wake = trio.Event()
        self.passes = 0
        self.delivered = 0

    def wake(self) -> None:
        """A delayed message was stored: look again (its due time may be the earliest now)."""
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.broker.on_delayed_stored = self.wake
        task_status.started()
        await trio.sleep(FIRST_DELAY)
        while True:
            try:
                done = await self.broker.deliver_delayed()
            except WriterClosed:
                return  # shutting down
            except Exception:  # a failed pass is retried; the cursor did not move (B-97)
                log.exception("delayed delivery pass failed")
                await trio.sleep(RETRY_AFTER_FAILURE)
                continue
            self.passes += 1
            self.delivered += len(done.delivered)
            for d in done.delivered:
                self.holds.notify(d.topic, d.queue_id)  # wake pulls held on the real queue
            wait = (
                MAX_IDLE if done.next_due is None else max(0.0, (done.next_due - done.now) / 1000)
            )
            with trio.move_on_after(min(wait, MAX_IDLE)):
                await self._wake.wait()
            self._wake = trio.Event()
