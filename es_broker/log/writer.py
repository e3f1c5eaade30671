"""The single writer: group commit of concurrent appends, LMDB work off the trio thread.

Every request that changes state becomes a job, a function run inside the
write transaction that decides what to record and appends it. The writer
takes every job that is waiting, runs them all in one transaction in a worker
thread, commits once, and then wakes each caller with its own result. With
SYNC_FLUSH the commit is durable before anyone is answered; with ASYNC_FLUSH
it is durable after the next flush tick (flushIntervalCommitLog).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from es_broker.log.store import AppendContext, RecordLog

T = TypeVar("T")


class _Pending:
    __slots__ = ("job", "done", "ok", "value")

    def __init__(self, job: Callable[[AppendContext], Any]) -> None:
        self.job = job
        self.done = trio.Event()
        self.ok = False
        self.value: Any = None


class WriterClosed(Exception):
    """The writer has stopped; the job was not run."""


class GroupCommitWriter:
    """Batches concurrent jobs into one LMDB write transaction.

    With SYNC_FLUSH the transaction runs in a worker thread, so the fsync of
    its commit never stalls the event loop. With ASYNC_FLUSH the commit does
    not fsync and takes tens of microseconds, less than handing the batch to
    a thread and back (which costs about half a millisecond of GIL hand-over
    per batch on CPython, measured with bench/wire_bench.py): the batch runs
    on the trio thread, capped at `max_batch` jobs so the loop is never held
    for long, and the flush tick's fsync runs in a thread.
    """

    def __init__(self, log: RecordLog, *, max_batch: int = 512, flush_interval_ms: int = 500) -> None:
        self.log = log
        self.max_batch = max_batch
        self.inline = not log.sync_on_commit
        self.flush_interval = flush_interval_ms / 1000
        self._send, self._recv = trio.open_memory_channel[_Pending](math.inf)
        self._committed = trio.Event()
        self.batches = 0
        self.jobs = 0

    async def submit(self, job: Callable[[AppendContext], T]) -> T:
        """Run job in the next group commit and return its result (or raise its error)."""
        pending = _Pending(job)
        try:
            self._send.send_nowait(pending)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise WriterClosed("the broker is shutting down") from None
        await pending.done.wait()
        if pending.ok:
            return pending.value
        raise pending.value

    async def wait_past(self, seq: int) -> int:
        """Wait until a record with a sequence number >= seq is committed (the tail)."""
        while self.log.last_seq < seq:
            await self._committed.wait()
        return self.log.last_seq

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer loop; runs until cancelled. Also flushes in ASYNC_FLUSH mode."""
        async with trio.open_nursery() as nursery:
            if not self.log.sync_on_commit:
                nursery.start_soon(self._flush_ticks)
            task_status.started()
            async for first in self._recv:
                batch = [first]
                while len(batch) < self.max_batch:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except trio.WouldBlock:
                        break
                await self._commit(batch)

    async def _commit(self, batch: list[_Pending]) -> None:
        jobs = [p.job for p in batch]
        try:
            if self.inline:
                outcomes = self.log.write_batch(jobs)
            else:
                # shielded: once handed to the thread the batch completes, so no caller is left hanging
                with trio.CancelScope(shield=True):
                    outcomes = await trio.to_thread.run_sync(self.log.write_batch, jobs)
        except Exception as exc:  # the whole batch was refused (disk full, corrupt log)
            outcomes = [(False, exc)] * len(batch)
        for pending, (ok, value) in zip(batch, outcomes, strict=True):
            pending.ok, pending.value = ok, value
            pending.done.set()
        self.batches += 1
        self.jobs += len(batch)
        self._committed.set()
        self._committed = trio.Event()
        if self.inline:
            await trio.lowlevel.checkpoint()  # let the woken callers and readers run between batches

    async def _flush_ticks(self) -> None:
        while True:
            await trio.sleep(self.flush_interval)
            await trio.to_thread.run_sync(self.log.flush)

    def close(self) -> None:
        self._send.close()
