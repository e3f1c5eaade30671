"""The single writer: group commit of concurrent appends, LMDB work off the trio thread.

Every request that changes state becomes a job, a function run inside the
write transaction that decides what to record and appends it. The writer
takes every job that is waiting, runs them all in one transaction in a worker
thread, commits once, and then wakes each caller with its own result. With
SYNC_FLUSH the commit is durable before anyone is answered; with ASYNC_FLUSH
it is durable after the next flush tick (flushIntervalCommitLog).

A full disk is a state of the writer, not a crash (RocketMQ's DISK_FULL
running flag): the batch that meets it is refused with StoreFullError, and so
is every job after it, at once and without touching the disk, except that
one batch per `probe_interval` is tried as a probe. The first probe that
lands ends the state; what the broker kept aside meanwhile (`ResumeRecords`)
is appended first in that same transaction.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, Protocol, Self, TypeVar

import trio

from es_broker.log import hops
from es_broker.log.arrival import current_ticket, take_turn
from es_broker.log.store import AppendContext, RecordLog, StoreFullError

T = TypeVar("T")
Q = TypeVar("Q", bound="Queued[Any]")

log = logging.getLogger(__name__)

PROBE_INTERVAL = 1.0  # s: while the disk is full, one write is tried this often


class ResumeRecords(Protocol):
    """Records kept aside while the disk was full, to be appended before writes resume."""

    def pending(self) -> bool: ...

    def take(self) -> Callable[[AppendContext], Any] | None:
        """A job appending what is kept aside now, or None; what it holds is in flight until told."""

    def landed(self) -> None: ...

    def refused(self) -> None: ...


class WritesFenced(Exception):
    """The log takes no writes now: this broker no longer holds (or cannot renew) its leader lease."""


def _nothing(ctx: AppendContext) -> None:
    return None


class Queued(Generic[T]):
    """A job in the writer's queue (`GroupCommitWriter.enqueue`).

    Its result is `value` when `ok`, else the error in `value`. Without a
    `then` callback, `GroupCommitWriter.outcome` waits for it; with one, the
    writer calls `then(self)` once the group commit is done, on the trio
    thread, and nothing waits. A subclass may read its outcome its own way
    (`es_broker.core.pending.Pending`); `GroupCommitWriter.push` queues one.
    """

    __slots__ = ("job", "done", "then", "ok", "value", "trace")

    def __init__(
        self,
        job: Callable[[AppendContext], T],
        then: Callable[[Self], None] | None = None,
    ) -> None:
        self.job = job
        self.then = then
        self.done = trio.Event() if then is None else None
        self.ok = False
        self.value: Any = None
        self.trace: hops.Trace | None = None  # traced hops only

    def result(self) -> T:
        """The job's result, or its error raised (once its group commit is done)."""
        if self.ok:
            value: T = self.value
            return value
        raise self.value


def _requests(batch: list[Queued[Any]]) -> int:
    return sum(p.job is not _nothing for p in batch)


def _attempt(
    write: Callable[[list[Callable[[AppendContext], Any]]], list[tuple[bool, Any]]],
    jobs: list[Callable[[AppendContext], Any]],
) -> tuple[list[tuple[bool, Any]], Exception | None]:
    """`write(jobs)`'s outcomes, or the error that refused the whole batch (a full disk, a corrupt log)."""
    try:
        return write(jobs), None
    except Exception as exc:
        return [], exc


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

    def __init__(
        self,
        log: RecordLog,
        *,
        max_batch: int = 512,
        flush_interval_ms: int = 500,
        probe_interval: float = PROBE_INTERVAL,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.log = log
        self.max_batch = max_batch
        self.inline = not log.sync_on_commit
        self.flush_interval = flush_interval_ms / 1000
        self._queue: deque[Queued[Any]] = deque()
        self._wake = trio.lowlevel.ParkingLot()  # the writer task, parked while the queue is empty
        self._closed = False
        self._committed = trio.Event()
        # wraps each batch's completions: the server holds the answers they put and writes each
        # connection's with one write at its end (server/edge/outbox.py HeldAnswers)
        self.completing: Callable[[], AbstractContextManager[None]] = nullcontext
        self._pushed = 0  # jobs ever queued; `jobs` counts those completed
        self.batches = 0
        self.jobs = 0
        # the disk-full state: since when (broker time, ms), why, and what it refused
        self.now_ms = now_ms
        self.probe_interval = probe_interval
        self.disk_full_since: int | None = None
        self.disk_full_error: StoreFullError | None = None
        self.refused_while_full = 0
        self._next_probe = 0.0
        self.resume: ResumeRecords | None = None
        self.on_resumed: Callable[[], None] = lambda: None
        # why this log takes no writes now (a leader that cannot renew its lease, B-374); None: it does
        self.fence: Callable[[], str | None] = lambda: None

    @property
    def waiting(self) -> int:
        """Jobs queued and not yet taken into a group commit."""
        return len(self._queue)

    @property
    def disk_full(self) -> bool:
        return self.disk_full_since is not None

    def probe_soon(self) -> None:
        """Let the next batch try the disk even if the probe interval has not passed (space was freed)."""
        self._next_probe = 0.0

    async def submit(self, job: Callable[[AppendContext], T]) -> T:
        """Run job in the next group commit and return its result (or raise its error).

        A job submitted under an arrival ticket (es_broker.log.arrival) enters
        the queue after the jobs of its connection's earlier tickets. It enters
        it even if its connection closes meanwhile (the listener cancels the
        connection's tasks), as a job queued when its frame was decoded does:
        a consumer's oneway commit on shutdown, sent behind a pull, is kept
        (B-480). The wait ends: the earlier tickets' tasks, cancelled too,
        release their turns on the way out.
        """
        ticket = current_ticket()
        if ticket is None:
            return await self.outcome(self.enqueue(job))
        try:
            with trio.CancelScope(shield=True):
                await ticket.wait_turn()
            queued = self.enqueue(job)
        finally:
            ticket.release()
        return await self.outcome(queued)

    def enqueue(
        self, job: Callable[[AppendContext], T], then: Callable[[Queued[T]], None] | None = None
    ) -> Queued[T]:
        """Put job in the queue of the next group commit now; `outcome` waits for its result, or,
        given `then`, the writer calls `then(queued)` when the commit is done (it must not block,
        and what it raises is logged, not propagated).

        No arrival ticket is consulted: jobs enter the queue in the order of
        these calls, so a caller that enqueues as frames are decoded keeps
        their arrival order by itself.
        """
        return self.push(Queued(job, then))

    def push(self, pending: Q) -> Q:
        """`enqueue` of a job already wrapped in its `Queued` (or a subclass of it); returns it."""
        if self._closed:
            raise WriterClosed("the broker is shutting down")
        self._queue.append(pending)
        self._pushed += 1
        if self._wake:
            self._wake.unpark()
        if hops.ON:  # traced hops only: `trace` is None otherwise
            pending.trace = hops.mark(hops.SUBMITTED)
        return pending

    def _take(self) -> list[Queued[Any]]:
        queue = self._queue
        if len(queue) <= self.max_batch:
            batch = list(queue)
            queue.clear()
            return batch
        return [queue.popleft() for _ in range(self.max_batch)]

    def commit_waiting(self) -> None:
        """Commit the queued jobs now, in the caller, when the writer commits on the trio thread.

        For a read loop about to wait for its socket: the jobs its frames
        queued (and any other connection's queued before them) are committed
        and answered without waiting for the writer task's turn, which saves
        a scheduler pass per request. With SYNC_FLUSH (the commit runs in a
        thread) it does nothing: the writer task commits. Jobs are committed
        in the order queued either way, one batch of at most `max_batch`.
        """
        if self.inline and self._queue:
            self._commit_now(self._take())

    def commit_after_read(self, started: int) -> None:
        """A read loop's hook before it waits for its socket, `started` the requests whose start its
        read pass ran: the jobs of several (a pipelined connection) are committed now, as
        `commit_waiting`; a lone one's is left to
        the writer task, woken when it was queued, which runs after every other connection read in
        the same scheduler pass, so that many connections with a request each share one commit
        instead of one commit each (B-672)."""
        if started > 1:
            self.commit_waiting()

    async def outcome(self, queued: Queued[T]) -> T:
        """The result of an enqueued job once its group commit is done (or its error, raised)."""
        assert queued.done is not None, "a job with a `then` callback is not waited for"
        await queued.done.wait()
        hops.mark(hops.WOKEN)
        return queued.result()

    async def settled(self) -> None:
        """Return once every job queued before this call is complete (at once when none is waiting).

        For a read that must see what the same peer asked to write just
        before it (a consumer's offset query after its offset commit). A
        caller holding an arrival ticket first waits for its turn, so the
        jobs of its connection's earlier ticketed requests are queued too.
        """
        await take_turn()
        target = self._pushed
        while self.jobs < target:
            await self._committed.wait()

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
            nursery.start_soon(self._probe_ticks)
            task_status.started()
            while True:
                if not self._queue:
                    if self._closed:
                        return
                    await self._wake.park()
                    continue
                batch = self._take()
                if self.inline:
                    self._commit_now(batch)
                else:
                    await self._commit_in_thread(batch)
                # the woken callers and the readers run between batches
                await trio.lowlevel.checkpoint()

    def _refused_fast(self, batch: list[Queued[Any]]) -> list[tuple[bool, Any]] | None:
        """While the disk is full and no probe is due: every job refused without a write."""
        if self.disk_full_error is not None and time.monotonic() < self._next_probe:
            self.refused_while_full += _requests(batch)
            return [(False, self.disk_full_error)] * len(batch)
        return None

    def _commit_now(self, batch: list[Queued[Any]]) -> None:
        started = self._start(batch)
        if started is not None:
            jobs, kept_aside, before = started
            self._finish(batch, kept_aside, before, _attempt(self.log.write_batch, jobs))
            self.log.grow_ahead()

    async def _commit_in_thread(self, batch: list[Queued[Any]]) -> None:
        started = self._start(batch)
        if started is not None:
            jobs, kept_aside, before = started
            # shielded: once handed to the thread the batch completes, so no caller is left hanging
            with trio.CancelScope(shield=True):
                attempt = await trio.to_thread.run_sync(_attempt, self._write_in_thread, jobs)
            self._finish(batch, kept_aside, before, attempt)
            self.log.grow_ahead()  # here, on the trio thread (`_write_in_thread`)

    def _write_in_thread(
        self, jobs: list[Callable[[AppendContext], Any]]
    ) -> list[tuple[bool, Any]]:
        # the map is remapped on the trio thread, meanwhile free of read transactions: in this
        # thread, the pulls read on the trio thread would lose the map under them
        return self.log.write_batch(jobs, trio.from_thread.run_sync)

    def _start(
        self, batch: list[Queued[Any]]
    ) -> (
        tuple[list[Callable[[AppendContext], Any]], Callable[[AppendContext], Any] | None, int]
        | None
    ):
        """The jobs to write (after the records kept aside while the disk was full, when probing), what
        was kept aside and the last sequence before; None when the batch was refused without a write."""
        hops.stamp_batch(batch, hops.PICKED)
        reason = self.fence()
        if reason is not None:  # every job refused, nothing written (B-374)
            self._complete(batch, [(False, WritesFenced(reason))] * len(batch))
            return None
        refused = self._refused_fast(batch)
        if refused is not None:
            self._complete(batch, refused)
            return None
        jobs = [p.job for p in batch]
        probing = self.disk_full_error is not None
        kept_aside = self.resume.take() if probing and self.resume is not None else None
        if kept_aside is not None:
            jobs.insert(0, kept_aside)  # recorded before anything new
        return jobs, kept_aside, self.log.last_seq

    def _finish(
        self,
        batch: list[Queued[Any]],
        kept_aside: object,
        before: int,
        attempt: tuple[list[tuple[bool, Any]], Exception | None],
    ) -> None:
        written, exc = attempt
        if exc is None:
            self._complete(batch, self._written(written, kept_aside, before))
        else:
            self._complete(batch, self._not_written(batch, kept_aside, exc))

    def _complete(self, batch: list[Queued[Any]], outcomes: list[tuple[bool, Any]]) -> None:
        """Hand each job its outcome: wake its waiter, or call its `then` (all inside `completing()`)."""
        hops.stamp_batch(batch, hops.COMMITTED)
        with self.completing():
            for pending, (ok, value) in zip(batch, outcomes, strict=True):
                pending.ok, pending.value = ok, value
                if pending.then is None:
                    pending.done.set()  # type: ignore[union-attr]
                else:
                    try:
                        pending.then(pending)
                    except Exception:  # one caller's bug must not stop the writer or its batch
                        log.exception("the completion of a write job failed")
        self.batches += 1
        self.jobs += len(batch)
        self._committed.set()
        self._committed = trio.Event()

    def _not_written(
        self, batch: list[Queued[Any]], kept_aside: object, exc: Exception
    ) -> list[tuple[bool, Any]]:
        """The whole batch refused: a full disk (that state entered), or a corrupt log."""
        if kept_aside is not None and self.resume is not None:
            self.resume.refused()
        if isinstance(exc, StoreFullError):
            self._enter_disk_full(exc)
            self.refused_while_full += _requests(batch)
            return [(False, self.disk_full_error)] * len(batch)
        return [(False, exc)] * len(batch)

    def _written(
        self, outcomes: list[tuple[bool, Any]], kept_aside: object, before: int
    ) -> list[tuple[bool, Any]]:
        """The jobs' outcomes of a committed batch; a probe that appended ends the disk-full state."""
        probing = self.disk_full_error is not None
        if kept_aside is not None and self.resume is not None:
            ok, value = outcomes.pop(0)
            if not ok:  # not the disk: a fault of its own, which a retry would only repeat
                log.error(
                    "the records kept aside while the disk was full could not be appended: %r",
                    value,
                )
            self.resume.landed()
        if probing and self.log.last_seq > before:  # a batch that appended nothing proves nothing
            self._leave_disk_full()
        return outcomes

    def _enter_disk_full(self, exc: StoreFullError) -> None:
        self._next_probe = time.monotonic() + self.probe_interval
        if self.disk_full_error is None:
            self.disk_full_since = self.now_ms()
            self.refused_while_full = 0
            log.warning(
                "disk full: the record log at %s is not writable (%s); writes are refused with "
                "SERVICE_NOT_AVAILABLE, reads go on, a write is tried every %.1f s",
                self.log.path,
                exc.reason,
                self.probe_interval,
            )
        self.disk_full_error = exc

    def _leave_disk_full(self) -> None:
        since = self.disk_full_since or self.now_ms()
        # at the entering line's level: `serve` logs WARNING and above unless -v, and an operator
        # who saw the disk fill must see it end (README, "A full disk")
        log.warning(
            "disk space returned: the record log at %s is writable again after %.1f s; %d writes were "
            "refused meanwhile",
            self.log.path,
            (self.now_ms() - since) / 1000,
            self.refused_while_full,
        )
        self.disk_full_since = None
        self.disk_full_error = None
        self.on_resumed()

    async def _probe_ticks(self) -> None:
        """While the disk is full, records kept aside are themselves the probe: writes resume unasked."""
        while True:
            await trio.sleep(self.probe_interval)
            if self.disk_full and self.resume is not None and self.resume.pending():
                if self._closed:
                    return
                self.push(Queued(_nothing))

    async def _flush_ticks(self) -> None:
        while True:
            await trio.sleep(self.flush_interval)
            try:
                await trio.to_thread.run_sync(self.log.flush)
            except StoreFullError as exc:  # what is committed stays readable; writes wait for space
                self._enter_disk_full(exc)

    def close(self) -> None:
        """Refuse new jobs; the writer task ends once it has committed those already queued."""
        self._closed = True
        self._wake.unpark_all()
