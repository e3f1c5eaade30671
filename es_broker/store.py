"""The broker's state in one place: the record log, its projections, config and clock."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

from es_broker.clock import Clock, SystemClock
from es_broker.config import BrokerConfig, BrokerRole, ConfigOwner
from es_broker.history.reader import Reading
from es_broker.log import Record, RecordLog, chunks, records
from es_broker.log.types import RecordType
from es_broker.projections import (
    CommitLogProjection,
    ConsumeQueueProjection,
    OffsetTableProjection,
    SubscriptionGroupProjection,
    TopicConfigProjection,
    all_projections,
    consume_queue,
    key_index,
    message_trace,
    store_format,
)
from es_broker.projections.audit import INDEXED, AuditProjection
from es_broker.projections.broker_settings import BrokerSettingsProjection
from es_broker.projections.delivery_schedule import DeliveryScheduleProjection
from es_broker.projections.history import HistoryProjection
from es_broker.projections.key_index import KeyIndexProjection
from es_broker.projections.keys import queue_key
from es_broker.projections.message_trace import MessageTraceProjection
from es_broker.projections.pop import PopProjection, expire_traced
from es_broker.projections.stats import StatsProjection
from es_broker.projections.store_format import Step, StoreFormatProjection
from es_broker.projections.time_index import TimeIndexProjection
from es_broker.projections.timer import TimerProjection
from es_broker.projections.transactions import TransactionProjection
from es_broker.remoting import message as wire

LMDB_DIR = "lmdb"


def require_broker_data(data_dir: str | Path) -> None:
    """FileNotFoundError unless data_dir holds a broker's log (read-only verbs create nothing)."""
    if not (Path(data_dir) / LMDB_DIR / "data.mdb").exists():
        raise FileNotFoundError(f"no broker data in {data_dir}")


@dataclass(slots=True)
class Store:
    log: RecordLog
    keyindex: KeyIndexProjection
    commitlog: CommitLogProjection
    cq: ConsumeQueueProjection
    offsets: OffsetTableProjection
    topics: TopicConfigProjection
    groups: SubscriptionGroupProjection
    schedule: DeliveryScheduleProjection
    trace: MessageTraceProjection
    timeindex: TimeIndexProjection
    txns: TransactionProjection
    broker_settings: BrokerSettingsProjection
    stats: StatsProjection
    history: HistoryProjection
    audit: AuditProjection
    pop: PopProjection
    timers: TimerProjection
    format: StoreFormatProjection
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
        if readonly:
            require_broker_data(data_dir)
        config = config or BrokerConfig(storePathRootDir=str(data_dir))
        projections = all_projections()
        log = RecordLog(
            Path(data_dir) / LMDB_DIR,
            projections,
            sync=config.sync_flush,
            map_size=config.initial_map_size,
            readonly=readonly,
            write_map=config.write_map,
        )
        store = cls(log, *projections, settings=ConfigOwner(config), clock=clock or SystemClock())
        if not readonly:
            try:
                store.upgrade()  # a directory in an older layout (B-470)
                store.timeindex.ensure_built(log)  # a log written before the time index existed
                store.stats.ensure_built(log)  # ... or before the message counts existed (B-356)
                store.audit.ensure_built(
                    log, store.audit_records()
                )  # ... or the audit indexes (B-417)
                store.history.ensure_built(log, _held_by_slaves(store))  # ... or before B-462
            except BaseException:
                log.close()
                raise
        return store

    def upgrade(self, *, record: bool | None = None) -> None:
        """Bring the projections to the current store format, recorded unless a slave (B-470)."""
        if record is None:  # a slave's log is its master's; an HA node's role is not known yet
            record = self.config.brokerRole != BrokerRole.SLAVE and not self.config.ha_coordinator
        steps = (
            Step(2, key_index.LEGACY_DATABASES, self._rebuild_key_index),
            Step(3, message_trace.LEGACY_DATABASES, self._convert_deliveries),
            Step(4, consume_queue.LEGACY_DATABASES, self._convert_consume_queues),
            Step(5, (), self._seal_store_index),
            Step(6, consume_queue.BLOCKS_OF_32, self._convert_consume_queue_blocks),
            Step(7, store_format.LEGACY_COMMITLOG, self._chunk_commit_log),
            Step(8, (), self._reindex_audit),
            Step(9, (), self._prune_pop_trace),
        )
        self.format.upgrade(steps, now_ms=self.clock.now_ms(), record=record)

    def _stored_messages(self, txn: lmdb.Transaction[bytes]) -> Iterator[tuple[int, bytes]]:
        """(physical offset, bytes) of every stored message, in the layout the directory has
        while it upgrades: an entry per message before format 7, else the chunks."""
        legacy = self.format.legacy(txn, store_format.LEGACY_COMMITLOG[0])
        if legacy is None:
            return self.log.payloads_in(txn)
        return ((int.from_bytes(k, "big"), v) for k, v in txn.cursor(db=legacy))

    def _rebuild_key_index(self, txn: lmdb.Transaction[bytes]) -> list[list[Any]]:
        self.keyindex.rebuild(txn, self._stored_messages(txn))
        return [["key_hash", txn.stat(self.keyindex.index_db)["entries"]]]

    def _convert_deliveries(self, txn: lmdb.Transaction[bytes]) -> list[list[Any]]:
        legacy = self.format.legacy(txn, "trace_deliveries")
        if legacy is not None:
            self.trace.convert(txn, legacy)
        # the older layout kept the deliveries of expired messages; those of sealed records go
        # as a sealing removes them (B-461)
        horizon = self.history.sealed_upto(txn)
        for topic, queue_id, low, _ in self.cq.queues(txn):
            if low > 0:
                message_trace.expire_pulls(
                    txn, self.trace.pulls, queue_key(topic, queue_id), low, horizon
                )
        return [["trace_pulls", txn.stat(self.trace.pulls)["entries"]]]

    def _convert_consume_queues(self, txn: lmdb.Transaction[bytes]) -> list[list[Any]]:
        return self._convert_units(txn, "cq")

    def _convert_consume_queue_blocks(self, txn: lmdb.Transaction[bytes]) -> list[list[Any]]:
        return self._convert_units(txn, "cq_blocks")

    def _convert_units(self, txn: lmdb.Transaction[bytes], name: str) -> list[list[Any]]:
        legacy = self.format.legacy(txn, name)
        if legacy is not None:  # else an earlier step wrote the current blocks already
            self.cq.convert(txn, legacy)
        return [["cq_pages", txn.stat(self.cq.db)["entries"]]]

    def _seal_store_index(self, txn: lmdb.Transaction[bytes]) -> list[list[Any]]:
        # a directory sealed by older code kept the store index of its sealed records; a sealing
        # now removes them (B-465), and a replay of the history would not have them
        message_trace.seal_stored(txn, self.trace.stored, self.history.sealed_upto(txn))
        return [["trace_stored", txn.stat(self.trace.stored)["entries"]]]

    def _prune_pop_trace(self, txn: lmdb.Transaction[bytes]) -> list[list[Any]]:
        # a directory sealed by older code kept the pop trace of expired messages' sealed records;
        # a sealing now removes them (B-642), each with the queues' minimums as they were then
        latest = self.history.latest(txn)
        if latest is not None:
            then: dict[bytes, int] = {}
            cur = txn.cursor(db=self.log.log_db)
            found = cur.set_range(records.seq_key(int(latest["seq"]) + 1))
            while found:  # retention after the last sealing: the minimums it found
                record = records.unpack(cur.value())
                if record["type"] == RecordType.COMMITLOG_EXPIRED:
                    for topic, queue_id, old_min, _ in record["queues"]:
                        then.setdefault(queue_key(topic, queue_id), int(old_min))
                found = cur.next()
            lows = {queue_key(t, q): low for t, q, low, _ in self.cq.queues(txn)} | then
            for queue, low in lows.items():
                if low > 0:
                    expire_traced(txn, self.pop.trace, queue, low, int(latest["last_seq"]))
        return [["pop_trace", txn.stat(self.pop.trace)["entries"]]]

    def _reindex_audit(self, txn: lmdb.Transaction[bytes]) -> list[list[Any]]:
        # the audit index of an older directory holds the commits only; `explain` now shows
        # every change the offset rule knows (B-504): the index is marked unbuilt, and
        # `ensure_built` (run after the upgrade at every writable open) builds it again
        return [["audit_explain", self.audit.forget(txn)]]

    def _chunk_commit_log(self, txn: lmdb.Transaction[bytes]) -> list[list[Any]]:
        # the message bytes in chunks (a directory restored from an older snapshot has them
        # already: a replay copied them) and the walk marks of the messages above phyMin (B-475)
        sizes: list[tuple[int, int]] = []
        if self.format.legacy(txn, store_format.LEGACY_COMMITLOG[0]) is None:
            sizes = [(phy, len(raw)) for phy, raw in self.log.payloads_in(txn)]
        else:
            batch: list[tuple[int, bytes]] = []
            for phy, raw in self._stored_messages(txn):
                batch.append((phy, raw))
                sizes.append((phy, len(raw)))
                if len(batch) >= 1024:
                    chunks.write(txn, self.log.commitlog_db, batch)
                    batch = []
            chunks.write(txn, self.log.commitlog_db, batch)
        self.commitlog.rebuild_marks(txn, sizes)
        return [
            [chunks.DATABASE, txn.stat(self.log.commitlog_db)["entries"]],
            ["commitlog_marks", txn.stat(self.commitlog.marks)["entries"]],
        ]

    def read(self) -> lmdb.Transaction[bytes]:
        """A read transaction: a consistent snapshot of every projection."""
        return self.log.read_txn()

    def message_at(self, txn: lmdb.Transaction[bytes], physical_offset: int) -> bytes | None:
        """The bytes of the message stored at a physical offset a request named (a send-back's
        offset, a message id's), None unless one was placed there and is kept.

        Beyond the bytes' own MAGICCODE and PHYSICALOFFSET (`RecordLog.payload`), the consume
        queue they name must hold a unit at that offset: a producer's body may carry bytes laid
        out as a message, its own offset written in, and they are never taken for one.
        """
        raw = self.log.payload(txn, physical_offset)
        if raw is None:
            return None
        try:
            topic, queue_id, queue_offset = wire.placement_of(raw)
        except (IndexError, struct.error, ValueError):
            return None
        unit = self.cq.unit(txn, topic, queue_id, queue_offset)
        if unit is None or unit.physical_offset != physical_offset or unit.size != len(raw):
            return None
        return raw

    def audit_records(self) -> Iterator[tuple[int, Record, int]]:
        """(seq, record, effective time) of the records the audit indexes keep, from the archive
        and the hot log, read only when iterated (`AuditProjection.ensure_built`, B-417)."""
        yield from Reading(self, types=INDEXED).timed()

    def close(self) -> None:
        self.log.close()


def _held_by_slaves(store: Store) -> Iterator[tuple[int, Any]]:
    """The records that tell what a slave holds (archive and hot log), read only when iterated."""
    yield from Reading(
        store, types={RecordType.SLAVE_CAUGHT_UP.value, RecordType.HISTORY_ARCHIVED.value}
    )
