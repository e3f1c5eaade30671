"""The handles of a 5.x PushConsumer's receives (`auto_renew`), kept invisible while it works.

A PushConsumer receives with `auto_renew` and no invisible duration: RocketMQ
5's proxy keeps each message invisible for it, renewing the broker's handle
(CHANGE_MESSAGE_INVISIBLETIME) a little before it would come back, until the
client acks it, changes its invisible duration itself, or goes away. The client
keeps the handle it was given; the broker's handle changes at each renewal, so
the proxy answers the client's ack or change with the newest one. A message held
longer than MAX_RENEW_MS is let go (it comes back to the group), as is every
message of a client whose Telemetry stream ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

log = logging.getLogger(__name__)

FIRST_MS = 60_000  # the invisible time of an auto_renew receive (defaultInvisibleTimeMills)
SLICE_MS = 60_000  # each renewal keeps the message out this much longer (renewSliceTimeMillis)
AHEAD_MS = 10_000  # renewed this long before it would come back (renewAheadTimeMillis)
MAX_RENEW_MS = 3 * 3600 * 1000  # held longer, it is let go (maxRenewDurationMillis)
TICK = 1.0  # s between two looks at what is due

# renew(group, topic, handle, invisible ms) -> the broker's new handle
Renew = Callable[[str, str, str, int], Awaitable[str]]


@dataclass(slots=True)
class Held:
    renew: Renew
    client_id: str
    group: str
    topic: str
    handle: str  # the broker's newest handle
    since: float  # monotonic s of the receive
    due: float  # monotonic s of the next renewal
    busy: anyio.Event | None = None  # set when a renewal in flight has ended


class Renewals:
    """The messages held for PushConsumers, by (group, the handle the client was given)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, renew: Renew, client_id: str, group: str, topic: str, handle: str) -> None:
        now = time.monotonic()
        due = now + (FIRST_MS - AHEAD_MS) / 1000
        self._held[(group, handle)] = Held(renew, client_id, group, topic, handle, now, due)

    async def take(self, group: str, handle: str) -> str:
        """The broker's newest handle for the one the client holds, no longer renewed (after a
        renewal in flight has ended, so that its new handle is the one answered)."""
        held = self._held.pop((group, handle), None)
        if held is None:
            return handle
        if held.busy is not None:
            await held.busy.wait()
        return held.handle

    def forget_client(self, client_id: str) -> None:
        for key in [k for k, h in self._held.items() if h.client_id == client_id]:
            del self._held[key]

    async def run(self) -> None:
        """Renew what is due, every TICK s, until cancelled."""
        while True:
            await anyio.sleep(TICK)  # a timer's period, not a wait for a condition
            now = time.monotonic()
            for key, held in list(self._held.items()):
                if held.due > now:
                    continue
                if (now - held.since) * 1000 >= MAX_RENEW_MS:
                    log.info("%s: a message held past %d ms is let go", held.group, MAX_RENEW_MS)
                    self._held.pop(key, None)
                    continue
                held.busy = anyio.Event()
                try:
                    held.handle = await held.renew(held.group, held.topic, held.handle, SLICE_MS)
                    held.due = time.monotonic() + (SLICE_MS - AHEAD_MS) / 1000
                except Exception as exc:  # it comes back to the group after its invisible time
                    log.info(
                        "%s: renewing a handle failed, the message is let go: %r", held.group, exc
                    )
                    self._held.pop(key, None)
                finally:
                    held.busy.set()
                    held.busy = None
