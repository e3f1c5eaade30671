"""The pop revive service (RocketMQ 5's PopReviveService, B-582, B-587): masters only.

Each pass is one job of the pop core (`PopOperations.revive`), which reads the
broker's clock and records every handle whose invisible time passed: its
message visible to the group again, or dead-lettered. Between passes the
service sleeps until the earliest end of an invisible time, or until a pop hands
messages out (the earliest may be sooner now), never longer than MAX_IDLE so a
stepped wall clock is noticed; held pops of a queue whose messages came back
are woken.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from es_broker.core.pop import PopOperations
from es_broker.log import WriterClosed

log = logging.getLogger(__name__)

MAX_IDLE = 1.0  # s: the longest sleep between passes
RETRY_AFTER_FAILURE = 0.1  # s: after a pass that could not be written


class PopReviveService:
    def __init__(self, ops: PopOperations, freed: Callable[[str, int], None]) -> None:
        self.ops = ops
        self.freed = freed  # wakes the pops held on a queue
        self._wake = trio.Event()
        self.passes = 0
        self.revived = 0
        self.dead = 0

    def wake(self) -> None:
        """Handles went out: the earliest end of an invisible time may be sooner now."""
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                done = await self.ops.revive()
            except WriterClosed:
                return  # shutting down
            except Exception:  # a failed pass is retried; nothing of it was recorded
                log.exception("pop revive pass failed")
                await trio.sleep(RETRY_AFTER_FAILURE)
                continue
            self.passes += 1
            self.revived += len(done.revived)
            self.dead += done.dead
            for topic, queue_id in done.revived:
                self.freed(topic, queue_id)
            if done.more:
                continue
            wait = MAX_IDLE if done.next_due is None else (done.next_due - done.now) / 1000
            with trio.move_on_after(min(max(wait, 0.0), MAX_IDLE)):
                await self._wake.wait()
            self._wake = trio.Event()
