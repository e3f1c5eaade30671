"""What every operation of the broker core builds on: its store, writer, settings and lifecycle.

Every change is a job handed to the group-commit writer (`submit`), refused the
way a client is answered when the disk is full or writes are fenced; a read that
records uses `_record_unless_full` and goes on unrecorded then. The operations
themselves are the subclasses': `retries.RetryOperations`, then `broker.Broker`.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Literal, Self, TypeVar

import trio

from es_broker.clock import Clock
from es_broker.commands import broker_config, defaults, disk_full, topics
from es_broker.commands.errors import BrokerError, IllegalRequest, ServiceNotAvailable
from es_broker.commands.runtime_stats import RecordRates
from es_broker.config import BrokerConfig, BrokerRole
from es_broker.log import AppendContext, GroupCommitWriter, Queued, Record, StoreFullError
from es_broker.log.records import RecordOutOfRange
from es_broker.log.writer import WritesFenced
from es_broker.projections.configs import as_record
from es_broker.store import Store

T = TypeVar("T")


class Unrecorded(Enum):
    """A read that records, when its record could not be written."""

    DISK_FULL = "disk_full"
    FENCED = "fenced"  # not the leader now (B-374): the read is answered, nothing recorded


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

    def __init__(self, store: Store) -> None:
        self.store = store
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
        slave, which records nothing).
        """
        async with self._config_lock:
            values = broker_config.check_changes(self.store.settings, changes)
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
                if self.config.brokerRole != BrokerRole.SLAVE:
                    await self._ensure_system_topics()
                task_status.started(self)
        finally:
            self.writer.close()

    def close(self) -> None:
        self.store.close()

    def _refusal(self, exc: StoreFullError | RecordOutOfRange | WritesFenced) -> BrokerError:
        """A job the writer could not append, as the refusal a client gets."""
        if isinstance(exc, WritesFenced):  # B-374: SERVICE_NOT_AVAILABLE with the reason
            return ServiceNotAvailable(f"service not available now, writes are stopped: {exc}")
        if isinstance(exc, StoreFullError):  # a full disk: SERVICE_NOT_AVAILABLE (B-150)
            return self.disk_full_refusal()
        return IllegalRequest(str(exc))  # nothing was appended: a refusal, not a failure (B-138)

    async def submit(self, job: Callable[[AppendContext], T]) -> T:
        """Run a job in the next group commit; a full disk refuses it with SERVICE_NOT_AVAILABLE (B-150)."""
        try:
            return await self.writer.submit(job)
        except (StoreFullError, RecordOutOfRange, WritesFenced) as exc:
            raise self._refusal(exc) from None

    async def outcome(self, queued: Queued[T]) -> T:
        """The result of a job enqueued with the writer, refused as `submit` refuses."""
        try:
            return await self.writer.outcome(queued)
        except (StoreFullError, RecordOutOfRange, WritesFenced) as exc:
            raise self._refusal(exc) from None

    @property
    def disk_full(self) -> bool:
        return self.writer.disk_full

    def disk_full_refusal(self) -> ServiceNotAvailable:
        return disk_full.refusal(
            self.store.log.path, self.writer.disk_full_since, self.writer.disk_full_error
        )

    async def _record_unless_full(
        self, job: Callable[[AppendContext], T]
    ) -> T | Literal[Unrecorded.DISK_FULL, Unrecorded.FENCED]:
        """For reads that record: the job's result, or DISK_FULL when the disk is full (nothing recorded)."""
        try:
            return await self.writer.submit(job)
        except StoreFullError:
            return Unrecorded.DISK_FULL
        except WritesFenced:
            return Unrecorded.FENCED
        except RecordOutOfRange as exc:  # nothing was appended: a refusal (B-138, B-139)
            raise self._refusal(exc) from None

    def _unrecorded_outcome(
        self, queued: Queued[T]
    ) -> T | Literal[Unrecorded.DISK_FULL, Unrecorded.FENCED]:
        """`_record_unless_full` of a job queued with a `then` callback, once its commit is done."""
        try:
            return queued.result()
        except StoreFullError:
            return Unrecorded.DISK_FULL
        except WritesFenced:
            return Unrecorded.FENCED
        except RecordOutOfRange as exc:  # nothing was appended: a refusal (B-138, B-139)
            raise self._refusal(exc) from None

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
