"""Arrival order: the jobs of one connection's ordered requests enter the writer as the requests arrived.

The server runs every request as its own trio task, and trio does not start
the tasks of one batch first-come-first-served (it reverses a batch at
random), so two sends pipelined on one connection could reach the writer's
queue, and the log, in either order. A connection hands each request that
appends messages a `Ticket` at the moment its frame is decoded; the writer
lets a ticketed job into its queue only once every earlier ticket of that
connection has entered it or given its turn up (refused before writing).
Only the entry into the queue is ordered: the jobs still share group commits,
and nothing waits for a commit to let the next one in.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import trio

_TICKET: ContextVar[Ticket | None] = ContextVar("es_broker_arrival_ticket", default=None)


class ArrivalOrder:
    """The turns of one connection's ordered requests, handed out in arrival order."""

    __slots__ = ("_issued", "_turn", "_given_up", "_waiting")

    def __init__(self) -> None:
        self._issued = 0
        self._turn = 0  # the ticket whose job may enter the writer's queue now
        # later tickets already through (or refused), waiting for the turn
        self._given_up: set[int] = set()
        self._waiting: dict[int, trio.Event] = {}

    def settled(self) -> bool:
        """True when every ticket handed out has been released: a job queued now keeps arrival order."""
        return self._turn == self._issued

    def ticket(self) -> Ticket:
        """The next ticket, in the order this is called (the order the frames were decoded)."""
        ticket = Ticket(self, self._issued)
        self._issued += 1
        return ticket

    async def _wait(self, number: int) -> None:
        if number == self._turn:
            return
        event = self._waiting[number] = trio.Event()
        try:
            await event.wait()
        finally:
            self._waiting.pop(number, None)

    def _release(self, number: int) -> None:
        self._given_up.add(number)
        while self._turn in self._given_up:
            self._given_up.discard(self._turn)
            self._turn += 1
        event = self._waiting.get(self._turn)
        if event is not None:
            event.set()


class Ticket:
    """One request's place in its connection's arrival order; used by the first job it submits."""

    __slots__ = ("order", "number", "used")

    def __init__(self, order: ArrivalOrder, number: int) -> None:
        self.order = order
        self.number = number
        self.used = False

    async def wait_turn(self) -> None:
        """Return once every earlier ticket of the connection has been released."""
        await self.order._wait(self.number)

    def release(self) -> None:
        """Give the turn on (idempotent): the job is in the writer's queue, or there will be none."""
        if not self.used:
            self.used = True
            self.order._release(self.number)

    def bind(self) -> None:
        """Make this the ticket of the current task's writer submissions."""
        _TICKET.set(self)


def current_ticket() -> Ticket | None:
    """The unused ticket of the current task, or None (requests that need no order)."""
    ticket = _TICKET.get()
    return ticket if ticket is not None and not ticket.used else None


def pass_turn() -> None:
    """Release the current task's ticket if it still holds one: its request will queue nothing more
    that must keep the connection's order (a pull about to wait for messages)."""
    ticket = current_ticket()
    if ticket is not None:
        ticket.release()


async def take_turn() -> None:
    """Wait until every earlier ticket of the current task's connection is released, then release its
    own (a read that must see the records of the requests sent before it); at once without one."""
    ticket = current_ticket()
    if ticket is not None:
        try:
            await ticket.wait_turn()
        finally:
            ticket.release()


@contextmanager
def unordered() -> Iterator[None]:
    """Jobs submitted inside take no turn; the current task's ticket is kept, for `pass_turn` after
    them (a pull's records wait for no earlier request, yet hold back the requests after it)."""
    token = _TICKET.set(None)
    try:
        yield
    finally:
        _TICKET.reset(token)
