"""Responses a channel waits for on trio, timed out by one task per channel.

A request's wait for its response could be `with trio.fail_after(timeout): await event.wait()`,
but a cancel scope and an event a request are about half of what a Python client spends on a
synchronous send besides the frames (~75k instructions, `bench/client_send_cg.py`). Here the
waiting task parks itself (`wait_task_rescheduled`), the channel's reader wakes it with the
response, and the channel's `Deadlines` task, asleep until the earliest deadline of the waits it
holds, wakes those whose time is up with a `TimeoutError`. Deadlines of answered waits stay in
its heap until the task wakes (it then drops those on top) or the heap is pruned; the task
wakes about once a timeout.
"""

from __future__ import annotations

import heapq
import itertools
import math

import outcome
import trio

from es_broker.remoting.command import RemotingCommand

PRUNE_FLOOR = 4096  # entries the heap may hold before the answered ones are dropped from it


class ParkedWaiter:
    """Where one request's response (None: the connection closed) meets the task waiting for it."""

    __slots__ = ("task", "response", "done")

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.response: RemotingCommand | None = None
        self.done = False

    def set(self, response: RemotingCommand | None) -> None:
        """The response arrived (None: the connection is gone); the first of set and expire wins."""
        if self.done:
            return
        self.done = True
        self.response = response
        task = self.task
        if task is not None:
            self.task = None
            trio.lowlevel.reschedule(task, outcome.Value(response))

    def expire(self) -> None:
        """The wait's deadline passed: its task, if parked, raises TimeoutError."""
        if self.done:
            return
        self.done = True
        task = self.task
        if task is not None:
            self.task = None
            trio.lowlevel.reschedule(task, outcome.Error(TimeoutError()))

    async def wait(self) -> RemotingCommand | None:
        """The response, once set (a checkpoint even when it was already there)."""
        if self.done:
            await trio.lowlevel.checkpoint()
            return self.response
        self.task = trio.lowlevel.current_task()
        response: RemotingCommand | None = await trio.lowlevel.wait_task_rescheduled(self._abort)
        return response

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        # the waiting task was cancelled: a response or deadline that comes later finds nobody
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED


class Deadlines:
    """The deadlines of a channel's parked waits, and the task (`run`) that expires them."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, ParkedWaiter]] = []
        self._order = itertools.count()  # equal deadlines never compare their waiters
        self._scope: trio.CancelScope | None = None
        self._prune_at = PRUNE_FLOOR

    @property
    def running(self) -> bool:
        """Whether `run` keeps the deadlines (else a wait must keep its own)."""
        return self._scope is not None

    def add(self, deadline: float, waiter: ParkedWaiter) -> None:
        """`waiter` expires at `deadline` (trio's clock) unless it is set before."""
        heap = self._heap
        heapq.heappush(heap, (deadline, next(self._order), waiter))
        if len(heap) > self._prune_at:
            heap[:] = [entry for entry in heap if not entry[2].done]
            heapq.heapify(heap)
            self._prune_at = max(PRUNE_FLOOR, 2 * len(heap))
        scope = self._scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline

    async def run(self) -> None:
        """Expire each wait at its deadline, until cancelled (the channel's reader ends)."""
        heap = self._heap
        try:
            while True:
                with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                    self._scope = scope
                    await trio.sleep_forever()
                # the overdue expire; the answered on top go too, so the next sleep lasts until
                # the earliest wait still open
                now = trio.current_time()
                while heap and (heap[0][0] <= now or heap[0][2].done):
                    heapq.heappop(heap)[2].expire()
        finally:
            self._scope = None
