"""A change started: the one implementation of each operation of the broker core that records.

An operation that changes state is started synchronously (`Broker.start_put`, `start_pull`,
`start_commit_offset`, `BrokerBase.start`): its checks run, raising a refusal there, and its job
enters the writer's queue before the start returns, so requests started in the order a
connection's frames are read reach the log in that order (B-140, B-312). Its outcome is then
awaited (`await pending`: every async form is a start, then this) or, for a request answered
from the writer's completion without a task of its own, handed to `then(pending)`, which reads
it with `pending.result()`; nothing waits then, and no event is made.

A change the broker keeps outside its log (a slave's journal) or one with nothing to record is
done when it is started (`Pending.at_once`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from enum import Enum
from typing import Any, Generic, TypeVar

import trio

from es_broker.log import AppendContext, Queued, StoreFullError, hops
from es_broker.log.records import RecordOutOfRange
from es_broker.log.writer import WritesFenced

T = TypeVar("T")

#: what the writer may answer a job it did not append: a full disk, a record out of its bounds,
#: a log that is fenced (not the leader now)
NotWritten = StoreFullError | RecordOutOfRange | WritesFenced


class Unrecorded(Enum):
    """A read that records, when its record could not be written."""

    DISK_FULL = "disk_full"
    FENCED = "fenced"  # not the leader now (B-374): the read is answered, nothing recorded
    FOLLOWER = "follower"  # a slave: its log takes only its master's records


def _nothing(ctx: AppendContext) -> None:
    return None


class Pending(Queued[Any], Generic[T]):
    """A change started; `await` it, or read it in `then` with `result()` (a change started with a
    `then` is answered there and not awaited).

    `finish` turns the job's result into the operation's outcome (it runs on the trio thread once
    the commit is done). A job the writer did not append is refused as a client is answered
    (`refuse`: SERVICE_NOT_AVAILABLE for a full disk or a fenced log, B-150, B-374), or, for a
    read that records (`unrecorded`), its outcome is the `Unrecorded` reason handed to `finish`.
    """

    __slots__ = ("finish", "refuse", "unrecorded")

    def __init__(
        self,
        job: Callable[[AppendContext], Any],
        then: Callable[[Pending[T]], None] | None,
        finish: Callable[[Any], T] | None,
        refuse: Callable[[NotWritten], Exception],
        unrecorded: bool = False,
    ) -> None:
        # Queued's fields, set here rather than by a call to its __init__ (one per request)
        self.job = job
        self.then = then
        self.done = trio.Event() if then is None else None
        self.ok = False
        self.value = None
        self.trace = None
        self.finish = finish
        self.refuse = refuse
        self.unrecorded = unrecorded

    @classmethod
    def at_once(
        cls,
        value: Any,
        then: Callable[[Pending[T]], None] | None = None,
        finish: Callable[[Any], T] | None = None,
    ) -> Pending[T]:
        """A change done as it is started, with nothing for the writer (`then` is called now)."""
        pending: Pending[T] = cls(_nothing, _never, finish, _no_refusal)
        pending.done = None
        pending.ok = True
        pending.value = value
        pending.then = then
        if then is not None:
            then(pending)
        return pending

    def result(self) -> T:
        """The outcome, once the change is done; raises the refusal it met."""
        value: Any = self.value if self.ok else self._not_written(self.value)
        finish = self.finish
        if finish is None:
            outcome: T = value
            return outcome
        return finish(value)

    def _not_written(self, exc: Exception) -> Unrecorded:
        if self.unrecorded:
            if isinstance(exc, StoreFullError):
                return Unrecorded.DISK_FULL
            if isinstance(exc, WritesFenced):
                return Unrecorded.FENCED
        if isinstance(exc, NotWritten):  # nothing was appended: a refusal, not a failure (B-138)
            raise self.refuse(exc) from None
        raise exc

    def __await__(self) -> Generator[Any, None, T]:
        return self._outcome().__await__()

    async def _outcome(self) -> T:
        done = self.done
        if done is not None:
            await done.wait()
            hops.mark(hops.WOKEN)
        return self.result()


def _never(pending: Pending[Any]) -> None:
    raise AssertionError("a change done at once is never queued")


def _no_refusal(exc: NotWritten) -> Exception:
    return exc
