"""The broker's state in one place: the record log, its projections, config and clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

from es_broker.clock import Clock, SystemClock
from es_broker.config import BrokerConfig, ConfigOwner
from es_broker.log import RecordLog
from es_broker.projections import (
    CommitLogProjection,
    ConsumeQueueProjection,
    OffsetTableProjection,
    SubscriptionGroupProjection,
    TopicConfigProjection,
    all_projections,
)
from es_broker.projections.audit import AuditProjection
from es_broker.projections.broker_settings import BrokerSettingsProjection
from es_broker.projections.delivery_schedule import DeliveryScheduleProjection
from es_broker.projections.history import HistoryProjection
from es_broker.projections.key_index import KeyIndexProjection
from es_broker.projections.message_trace import MessageTraceProjection
from es_broker.projections.stats import StatsProjection
from es_broker.projections.time_index import TimeIndexProjection
from es_broker.projections.transactions import TransactionProjection

LMDB_DIR = "lmdb"


@dataclass(slots=True)
class Store:
    log: RecordLog
    commitlog: CommitLogProjection
    cq: ConsumeQueueProjection
    offsets: OffsetTableProjection
    topics: TopicConfigProjection
    groups: SubscriptionGroupProjection
    schedule: DeliveryScheduleProjection
    trace: MessageTraceProjection
    timeindex: TimeIndexProjection
    keyindex: KeyIndexProjection
    txns: TransactionProjection
    broker_settings: BrokerSettingsProjection
    stats: StatsProjection
    history: HistoryProjection
    audit: AuditProjection
    settings: ConfigOwner  # the broker's current settings: the one place they are kept
    clock: Clock

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings as they are now (read through the owner, never copied)."""
        return self.settings.current

    @config.setter
    def config(self, config: BrokerConfig) -> None:
        self.settings.current = config

    @classmethod
    def open(
        cls,
        data_dir: str | Path,
        config: BrokerConfig | None = None,
        clock: Clock | None = None,
        *,
        readonly: bool = False,
    ) -> Store:
        """Open (or create) the LMDB environment of a broker data directory."""
        config = config or BrokerConfig(storePathRootDir=str(data_dir))
        projections = all_projections()
        log = RecordLog(
            Path(data_dir) / LMDB_DIR,
            projections,
            sync=config.sync_flush,
            map_size=config.initial_map_size,
            readonly=readonly,
        )
        store = cls(log, *projections, settings=ConfigOwner(config), clock=clock or SystemClock())
        if not readonly:
            store.timeindex.ensure_built(log)  # a log written before the time index existed
            store.keyindex.ensure_built(log)  # ... or before the key index existed
            store.stats.ensure_built(log)  # ... or before the message counts existed (B-356)
            store.audit.ensure_built(store)  # ... or before the audit indexes existed (B-417)
            store.history.ensure_built(log, _held_by_slaves(store))  # ... or before B-462
        return store

    def read(self) -> lmdb.Transaction[bytes]:
        """A read transaction: a consistent snapshot of every projection."""
        return self.log.read_txn()

    def close(self) -> None:
        self.log.close()


def _held_by_slaves(store: Store) -> Iterator[tuple[int, Any]]:
    """The records that tell what a slave holds (archive and hot log), read only when iterated."""
    from es_broker.history.reader import Reading
    from es_broker.log.types import RecordType

    yield from Reading(
        store, types={RecordType.SLAVE_CAUGHT_UP.value, RecordType.HISTORY_ARCHIVED.value}
    )
