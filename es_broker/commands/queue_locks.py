"""Queue locks of orderly consumers: RocketMQ 4.9.8's RebalanceLockManager (B-142..B-147).

A lock is held per (group, topic, broker name, queue id) by one client id.
LOCK_BATCH_MQ takes free queues, renews the caller's own, and takes a queue
whose owner has not renewed it for more than `lockMaxLiveTime` ms; it
answers only the queues the caller now holds. UNLOCK_BATCH_MQ releases the
caller's queues. es-broker also releases a client's queues when its channel
closes or it unregisters (B-145; 4.9.8 waits for the expiry), and a periodic
pass releases expired locks so that the history shows when they lapsed.

As in RocketMQ the table is kept in memory only: a restart starts with no
locks. Every change of owner (taken, released, expired) is decided here with
the broker clock and recorded as one `queue_locks_changed` record per request
before the table changes; a renewal changes no owner and records nothing. A
change that cannot be recorded (a full disk) is not made: new queues are not
granted, releases wait for the expiry.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import trio

from es_broker.clock import Clock
from es_broker.commands.errors import BrokerError
from es_broker.log import AppendContext, WriterClosed
from es_broker.log.records import RecordOutOfRange
from es_broker.log.types import Cause, QueueLocksChanged

log = logging.getLogger(__name__)


Queue = tuple[str, str, int]  # topic, broker name, queue id (RocketMQ's MessageQueue)


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_ms: int  # the last take or renewal (RocketMQ's lastUpdateTimestamp)
    holder: Any = None  # the connection of the last take or renewal; its close releases the lock


class QueueLocks:
    """The broker's lock table; every method runs on the trio thread, changes one at a time."""

    def __init__(
        self,
        submit: Callable[[Callable[[AppendContext], Any]], Awaitable[Any]],
        clock: Clock,
        max_live_ms: int,
    ) -> None:
        if max_live_ms <= 0:
            raise ValueError(
                f"rocketmq.broker.rebalance.lockMaxLiveTime must be positive, got {max_live_ms}"
            )
        self.submit = submit
        self.clock = clock
        self.max_live_ms = max_live_ms
        self.table: dict[str, dict[Queue, LockEntry]] = {}
        # a decision and its record, then the next (RocketMQ's ReentrantLock)
        self._mutex = trio.Lock()

    def expired(self, entry: LockEntry, now: int) -> bool:
        """RocketMQ's LockEntry.isExpired: not renewed for strictly more than lockMaxLiveTime."""
        return now - entry.last_update_ms > self.max_live_ms

    def owner(self, group: str, queue: Queue) -> str | None:
        """The client holding a queue now, or None (free or expired)."""
        entry = self.table.get(group, {}).get(queue)
        if entry is None or self.expired(entry, self.clock.now_ms()):
            return None
        return entry.client_id

    async def lock_batch(
        self, group: str, client_id: str, queues: Iterable[Queue], holder: Any = None
    ) -> list[Queue]:
        """tryLockBatch: the queues `client_id` holds after the call, renewed or newly taken."""
        async with self._mutex:
            now = self.clock.now_ms()
            table = self.table.get(group, {})
            renewed: list[Queue] = []
            taken: list[Queue] = []
            changes: list[list[Any]] = []
            for queue in dict.fromkeys(queues):
                entry = table.get(queue)
                if (
                    entry is not None
                    and entry.client_id == client_id
                    and not self.expired(entry, now)
                ):
                    renewed.append(queue)
                elif entry is None:
                    taken.append(queue)
                    changes.append([*queue, client_id, "", -1])
                elif self.expired(entry, now):  # the owner (maybe the caller itself) let it lapse
                    taken.append(queue)
                    changes.append([*queue, client_id, entry.client_id, entry.last_update_ms])
                # else: held by another client, refused
            if changes and not await self._record(group, client_id, Cause.LOCK, changes, now):
                taken = []  # not recorded, not granted: the client retries on its next lock round
            table = self.table.setdefault(group, {})
            for queue in renewed:
                entry = table[queue]
                entry.last_update_ms, entry.holder = now, holder
            for queue in taken:
                table[queue] = LockEntry(client_id, now, holder)
            return [q for q in dict.fromkeys(queues) if q in renewed or q in taken]

    async def unlock_batch(self, group: str, client_id: str, queues: Iterable[Queue]) -> bool:
        """unlockBatch: release the queues `client_id` holds (expired or not); False if not recorded."""
        async with self._mutex:
            table = self.table.get(group, {})
            mine = [
                q for q in dict.fromkeys(queues) if q in table and table[q].client_id == client_id
            ]
            return await self._release(group, client_id, Cause.UNLOCK, mine)

    async def release_client(self, group: str, client_id: str) -> bool:
        """A client unregistered from a group: its queues of the group are released."""
        async with self._mutex:
            table = self.table.get(group, {})
            return await self._release(
                group,
                client_id,
                Cause.UNREGISTERED,
                [q for q, e in table.items() if e.client_id == client_id],
            )

    async def release_holder(self, holder: Any) -> bool:
        """A connection closed: every queue last taken or renewed through it is released."""
        ok = True
        async with self._mutex:
            for group, table in list(self.table.items()):
                by_client: dict[str, list[Queue]] = {}
                for queue, entry in table.items():
                    if entry.holder is holder:
                        by_client.setdefault(entry.client_id, []).append(queue)
                for client_id, queues in by_client.items():
                    ok = await self._release(group, client_id, Cause.CHANNEL_CLOSED, queues) and ok
        return ok

    async def expire(self) -> int:
        """The expiry pass: release every lock not renewed for more than lockMaxLiveTime; how many."""
        released = 0
        async with self._mutex:
            now = self.clock.now_ms()
            for group, table in list(self.table.items()):
                lapsed = [q for q, e in table.items() if self.expired(e, now)]
                if lapsed and await self._release(group, "", Cause.EXPIRED, lapsed, now):
                    released += len(lapsed)
        return released

    async def _release(
        self, group: str, client_id: str, cause: Cause, queues: list[Queue], now: int | None = None
    ) -> bool:
        if not queues:
            return True
        table = self.table[group]
        now = self.clock.now_ms() if now is None else now
        changes = [[*q, "", table[q].client_id, table[q].last_update_ms] for q in queues]
        if not await self._record(group, client_id, cause, changes, now):
            return (
                False  # kept: the lock lapses after lockMaxLiveTime and the expiry pass records it
            )
        for queue in queues:
            del table[queue]
        if not table:
            del self.table[group]
        return True

    async def _record(
        self, group: str, client_id: str, cause: Cause, changes: list[list[Any]], now: int
    ) -> bool:
        try:
            record = QueueLocksChanged(
                group=group,
                client=client_id,
                cause=cause,
                max_live_ms=self.max_live_ms,
                changes=changes,
            ).to_record(now)
            await self.submit(lambda ctx: ctx.append(record))
        except (
            BrokerError,
            RecordOutOfRange,
            WriterClosed,
        ) as exc:  # a full disk, shutting down (B-147)
            log.warning(
                "queue lock change of group %s (%s, %d queues) not recorded, not made: %s",
                group,
                cause,
                len(changes),
                getattr(exc, "remark", exc),
            )
            return False
        return True
