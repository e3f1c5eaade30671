"""What every operation of the broker core builds on: its store, writer, settings and lifecycle.

Every change is a job started with the group-commit writer (`start`, core/pending.py),
refused the way a client is answered when the disk is full or writes are fenced;
a read that records goes on unrecorded then (`start_unless_full`). The async form
of every start is the start in the caller's arrival turn, then its outcome
awaited (`in_turn`; `submit` for a plain job). What differs between a master and
a slave is the broker's role (core/roles.py). The operations themselves are the
subclasses': `retries.RetryOperations`, then `broker.Broker`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, Self, TypeVar

import trio

from es_broker.clock import Clock
from es_broker.commands import broker_config, defaults, disk_full, topics
from es_broker.commands.errors import BrokerError, IllegalRequest, ServiceNotAvailable
from es_broker.commands.runtime_stats import RecordRates
from es_broker.config import BrokerConfig, BrokerRole
from es_broker.core.pending import NotWritten, Pending, Unrecorded
from es_broker.core.roles import SLAVE_LOG_REFUSAL, MasterRole, Role
from es_broker.log import AppendContext, GroupCommitWriter, Record, StoreFullError
from es_broker.log.arrival import current_ticket
from es_broker.log.records import RecordOutOfRange
from es_broker.log.writer import WritesFenced
from es_broker.projections.configs import as_record
from es_broker.store import Store

T = TypeVar("T")
P = ParamSpec("P")

__all__ = ["SYSTEM", "BrokerBase", "ReadOnly", "Unrecorded"]

SYSTEM = "system"


class ReadOnly(AppendContext):
    """A job's context on a read transaction: for dry runs, which must not append."""

    __slots__ = ()

    def append(self, record: Record) -> int:
        raise RuntimeError("a dry run must not append records")

    def append_raw(self, raw: bytes) -> int:
        raise RuntimeError("a dry run must not append records")


class BrokerBase:
    """A broker's store, writer and settings, and the writing of its jobs."""

    def __init__(self, store: Store, role: Role | None = None) -> None:
        self.store = store
        self.role: Role = MasterRole() if role is None else role
        self._refuse = self._refusal  # bound once: every started change carries it
        # one change of the settings at a time, so each record's old values are the ones it replaced
        self._config_lock = trio.Lock()
        self.writer = GroupCommitWriter(
            store.log,
            flush_interval_ms=store.config.flushIntervalCommitLog,
            now_ms=store.clock.now_ms,
        )
        # deliveries answered while the disk was full, recorded before writes resume (B-152)
        self.unrecorded = disk_full.UnrecordedDeliveries(
            store.clock.now_ms, lambda: self.writer.disk_full_since
        )
        self.writer.resume = self.unrecorded
        self.writer.on_resumed = lambda: self.on_delayed_stored()  # delayed deliveries waited too
        # called after a message was parked in SCHEDULE_TOPIC_XXXX; the delay delivery service hooks in
        self.on_delayed_stored: Callable[[], None] = lambda: None
        # messages handed out by PULL_MESSAGE since start; a statistic, not state (a slave's deliveries
        # reach the log only when its master merges them)
        self.messages_served = 0
        # putTps, getFoundTps, getTransferedTps of GET_BROKER_RUNTIME_INFO, from the records applied
        self.rates = RecordRates(store.clock.now_ms())
        store.log.projections.append(self.rates)
        # the record of the last brokerPermission change: the topics' data version registered with
        # the name servers is at least it, as 4.9.8's updateBrokerConfig moves it on (B-530)
        self.permission_version = 0
        # the core's side tasks that outlive the request that began them (a manual retention
        # pass, B-677): in `run`'s nursery, so that they end with the writer
        self._tasks: trio.Nursery | None = None

    @property
    def tasks(self) -> trio.Nursery:
        """Where a side task of the running broker starts (`run`'s nursery)."""
        if self._tasks is None:
            raise RuntimeError("the broker is not running: no side task can start")
        return self._tasks

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings as they are now (the store's ConfigOwner holds them)."""
        return self.store.config

    @config.setter
    def config(self, config: BrokerConfig) -> None:
        self.store.config = config

    async def update_config(self, changes: dict[str, str], requester: str) -> int | None:
        """Change run-time settings (UPDATE_BROKER_CONFIG): checked, recorded, then applied (B-270).

        A refused key or value (IllegalRequest, SYSTEM_ERROR) changes and records nothing.
        Returns the sequence of the `broker_config_updated` record (None: nothing to change, or a
        slave, whose settings change in memory only, B-273: a restart goes back to broker.conf).
        """
        async with self._config_lock:
            values = broker_config.check_changes(self.store.settings, changes)
            if self.role.follows_master:  # its log is the master's: nothing of its own recorded
                self.store.settings.apply(values)
                return None
            if not values:  # an empty body: RocketMQ answers SUCCESS and changes nothing
                return None
            seq = await self.submit(broker_config.update_job(self.store, values, requester))
            self.store.settings.apply(values)
            if "brokerPermission" in values:
                self.permission_version = seq
            return seq

    def _reapply_recorded_config(self) -> None:
        """The run-time changes recorded for this broker, applied over broker.conf at start (B-272)."""
        values = broker_config.recorded_changes(self.store, self.config)
        if values:
            self.store.settings.apply(values)

    @classmethod
    def open(
        cls, data_dir: str | Path, config: BrokerConfig | None = None, clock: Clock | None = None
    ) -> Self:
        return cls(Store.open(data_dir, config, clock))

    async def run(self, *, task_status: trio.TaskStatus[Self] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the writer until cancelled; the broker is usable once started."""
        self._reapply_recorded_config()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.writer.run)
                self._tasks = nursery
                if self.config.brokerRole != BrokerRole.SLAVE:
                    await self._ensure_system_topics()
                task_status.started(self)
        finally:
            self._tasks = None
            self.writer.close()

    def close(self) -> None:
        self.store.close()
        self.role.close()

    def _refusal(self, exc: NotWritten) -> BrokerError:
        """A job the writer could not append, as the refusal a client gets."""
        if isinstance(exc, WritesFenced):  # B-374: SERVICE_NOT_AVAILABLE with the reason
            return ServiceNotAvailable(f"service not available now, writes are stopped: {exc}")
        if isinstance(exc, StoreFullError):  # a full disk: SERVICE_NOT_AVAILABLE (B-150)
            return self.disk_full_refusal()
        return IllegalRequest(str(exc))  # nothing was appended: a refusal, not a failure (B-138)

    def start(
        self, job: Callable[[AppendContext], T], then: Callable[[Pending[T]], None] | None = None
    ) -> Pending[T]:
        """A change started: `job` enters the next group commit's queue now (core/pending.py); a full
        disk refuses it with SERVICE_NOT_AVAILABLE (B-150), and so does a broker whose log follows
        its master's, before anything is queued."""
        if self.role.follows_master:
            raise ServiceNotAvailable(SLAVE_LOG_REFUSAL)
        return self.writer.push(Pending(job, then, None, self._refuse))

    def start_unless_full(self, job: Callable[[AppendContext], T]) -> Pending[T | Unrecorded]:
        """`start` of a read that records: its outcome is `Unrecorded` when its record could not be
        written (a full disk, a fenced log, a slave's), and the read goes on (B-151..B-153)."""
        if self.role.follows_master:
            return Pending.at_once(Unrecorded.FOLLOWER)
        return self.writer.push(Pending(job, None, None, self._refuse, unrecorded=True))

    async def in_turn(self, start: Callable[P, Pending[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """`start(*args, **kwargs)`, then its outcome awaited: the async form of every start.

        Started under an arrival ticket (es_broker.log.arrival), it starts once its connection's
        earlier ordered requests have started theirs (B-140, B-312), even if the connection
        closes meanwhile (B-480): the earlier requests' tasks, cancelled too, give their turns up
        on the way out. A refusal raised by the start gives the turn up as well.
        """
        ticket = current_ticket()
        if ticket is None:
            return await start(*args, **kwargs)
        try:
            with trio.CancelScope(shield=True):
                await ticket.wait_turn()
            pending = start(*args, **kwargs)
        finally:
            ticket.release()
        return await pending

    async def submit(self, job: Callable[[AppendContext], T]) -> T:
        """Run a job in the next group commit, in the caller's arrival turn (the writer's `submit`,
        which is its enqueue, then its outcome); refused as `start` refuses."""
        if self.role.follows_master:
            raise ServiceNotAvailable(SLAVE_LOG_REFUSAL)
        try:
            return await self.writer.submit(job)
        except (StoreFullError, RecordOutOfRange, WritesFenced) as exc:
            raise self._refusal(exc) from None

    async def _record_unless_full(self, job: Callable[[AppendContext], T]) -> T | Unrecorded:
        """`start_unless_full` of a job, then its outcome (`in_turn`)."""
        return await self.in_turn(self.start_unless_full, job)

    @property
    def disk_full(self) -> bool:
        return self.writer.disk_full

    def disk_full_refusal(self) -> ServiceNotAvailable:
        return disk_full.refusal(
            self.store.log.path, self.writer.disk_full_since, self.writer.disk_full_error
        )

    async def _ensure_system_topics(self) -> None:
        """The topics and groups RocketMQ's TopicConfigManager and SubscriptionGroupManager hold at a
        master's start, recorded when missing (B-481, B-482): one deleted comes back at the next start."""
        wanted_topics = defaults.system_topics(self.config)
        wanted_groups = defaults.default_groups()
        with self.store.read() as txn:
            topics_missing = [
                c for c in wanted_topics if self.store.topics.get(txn, c.topic_name) is None
            ]
            groups_missing = [
                g for g in wanted_groups if self.store.groups.get(txn, g.group_name) is None
            ]
        for config in topics_missing:
            job = topics.update_topic_job(self.store, as_record(config), SYSTEM, system=True)
            await self.submit(job)
        for group in groups_missing:
            await self.submit(topics.update_group_job(self.store, as_record(group), SYSTEM))
