"""A slave's core: the master's records are its only writes (docs/design.md §8, "Master and slave").

A slave applies the master's records with their sequence numbers, so at the
same sequence its projections are byte-identical to the master's. Anything
that would append a record of the slave's own (a created group, a recorded
query, a membership change, a reset) is either left unrecorded (heartbeats,
"no offset" queries: what RocketMQ's slave keeps in memory only) or refused
(`submit` answers SERVICE_NOT_AVAILABLE). Offset commits and deliveries (pulls
that found messages) go to the slave journal (`slave_offsets`) and are
merged back on the master (S-5), where a delivery becomes the
`messages_delivered` record it would have been, with `served_by`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from es_broker.clock import Clock
from es_broker.commands import broker_config, messages, offsets, resets
from es_broker.commands.errors import (
    BrokerError,
    GroupNotExist,
    NoPermission,
    ServiceNotAvailable,
)
from es_broker.commands.messages import GetResult
from es_broker.commands.offsets import OffsetAnswer
from es_broker.commands.slave_journal import JOURNAL_DIR, SlaveOffsetJournal, check_commit
from es_broker.commands.slave_offsets import MergeOutcome, effective_offset, merge_job
from es_broker.config import BrokerConfig, BrokerRole
from es_broker.core.broker import Broker
from es_broker.log import AppendContext, Record
from es_broker.log.arrival import take_turn
from es_broker.log.types import Cause, RecordType, ResetMode, SlaveOffsetsMerged
from es_broker.remoting.bodies import SubscriptionGroupConfig
from es_broker.remoting.codes import ResponseCode
from es_broker.store import Store

T = TypeVar("T")


class LogDiverged(BrokerError):
    """The slave's log and the master's are not one history (a gap, or a different record at a sequence)."""

    code = ResponseCode.SYSTEM_ERROR


SLAVE_LOG_REFUSAL = (
    "service not available now. the broker is a slave: its record log only takes the master's "
    "records, run this on the master"
)


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicatedBatch:
    """Records of the master from `first_seq` on, as stored, with the message bytes they place."""

    first_seq: int
    records: tuple[bytes, ...]
    payloads: tuple[tuple[int, bytes], ...]  # (physical offset, stored message), ascending

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.records) - 1


def replication_job(batch: ReplicatedBatch) -> Callable[[AppendContext], int]:
    """Apply a batch at exactly its sequence numbers; returns the last one applied."""

    def job(ctx: AppendContext) -> int:
        if ctx.next_seq != batch.first_seq:
            raise LogDiverged(
                f"replicated batch starts at {batch.first_seq}, the slave's log is at {ctx.next_seq}"
            )
        # the bytes first: the records' projections may read them
        ctx.put_payloads(list(batch.payloads))
        for raw in batch.records:
            ctx.append_raw(raw)
        return ctx.next_seq - 1

    return job


class SlaveBroker(Broker):
    """A broker whose log follows the master's: reads as usual, commits through the slave journal."""

    def __init__(self, store: Store, journal: SlaveOffsetJournal) -> None:
        super().__init__(store)
        self.journal = journal
        # replication ships new journal entries (commits, deliveries) to the master
        self.on_commit: Callable[[], None] = lambda: None

    @classmethod
    def open(
        cls, data_dir: str | Path, config: BrokerConfig | None = None, clock: Clock | None = None
    ) -> SlaveBroker:
        store = Store.open(data_dir, config, clock)
        journal = SlaveOffsetJournal(Path(data_dir) / JOURNAL_DIR, sync=store.config.sync_flush)
        broker = cls(store, journal)
        oldest = journal.oldest_replicated_seq()
        if oldest is not None:  # a merge record covering them comes after the oldest was taken
            broker.forget_merged(store.log.read(oldest + 1))
        return broker

    def close(self) -> None:
        super().close()
        self.journal.close()

    # ------------------------------------------------------------------ the log
    async def submit(self, job: Callable[[AppendContext], T]) -> T:
        """Nothing of the slave's own enters its log: its sequence numbers are the master's."""
        raise ServiceNotAvailable(SLAVE_LOG_REFUSAL)

    async def update_config(self, changes: dict[str, str], requester: str) -> int | None:
        """A slave's run-time settings change in memory only: its log is the master's (B-273).

        Checked as a master checks them; nothing is recorded, so a restart goes back to broker.conf.
        """
        async with self._config_lock:
            self.store.settings.apply(broker_config.check_changes(self.store.settings, changes))
        return None

    async def apply_replicated(self, batch: ReplicatedBatch) -> int:
        """Append the master's records as they are, with their payloads, in one transaction."""
        return await self.writer.submit(replication_job(batch))

    def forget_merged(self, applied: Iterable[tuple[int, Record]]) -> list[int]:
        """Drop the journal entries that applied `slave_offsets_merged` records of this slave cover.

        Runs on each applied batch, and at start on the records applied since
        the oldest journal entry (a crash may have come between applying a
        merge record and forgetting). Returns the merge records' sequences.
        """
        merged = []
        for seq, record in applied:
            if record["type"] != RecordType.SLAVE_OFFSETS_MERGED:
                continue
            merge = SlaveOffsetsMerged.from_record(record)
            if merge.broker_id == self.config.brokerId:
                self.journal.forget_through(merge.journal_upto)
                merged.append(seq)
        return merged

    # ------------------------------------------------------------------ offsets through the journal
    def _effective(
        self, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> int:
        return effective_offset(
            self.store, txn, self.journal.latest(topic, group, queue_id), topic, group, queue_id
        )

    async def commit_offset(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        cause: Cause = Cause.CLIENT_COMMIT,
        requester: str = "",
    ) -> int:
        """UPDATE_CONSUMER_OFFSET on a slave (B-30): into the journal; returns its journal position."""
        return self._journal_commit(group, topic, queue_id, offset, cause, requester)

    def begin_commit_offset(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        cause: Cause = Cause.CLIENT_COMMIT,
        requester: str = "",
    ) -> Awaitable[int]:
        """The commit journaled now, before this returns (B-30, B-312)."""
        return _ready(self._journal_commit(group, topic, queue_id, offset, cause, requester))

    def _journal_commit(
        self, group: str, topic: str, queue_id: int, offset: int, cause: Cause, requester: str
    ) -> int:
        check_commit(group, topic, queue_id, offset)
        with self.store.read() as txn:
            old = self._effective(txn, topic, group, queue_id)
        commit = self.journal.record(
            ts=self.store.clock.now_ms(),
            topic=topic,
            group=group,
            queue_id=queue_id,
            offset=offset,
            old=old,
            cause=cause,
            requester=requester,
            replicated_seq=self.store.log.last_seq,
        )
        self.on_commit()
        return commit.local_seq

    def stored_offset(self, group: str, topic: str, queue_id: int) -> int:
        with self.store.read() as txn:
            return self._effective(txn, topic, group, queue_id)

    def offset_table(self) -> list[tuple[str, str, int, int]]:
        """The replicated table overlaid with the slave's own commits (B-120: its own table)."""
        mine = self.journal.latest_all()
        with self.store.read() as txn:
            table = {(t, g, q): o for t, g, q, o in self.store.offsets.table(txn)}
            for topic, group, qid in mine:
                table[(topic, group, qid)] = self._effective(txn, topic, group, qid)
        return [(t, g, q, o) for (t, g, q), o in sorted(table.items())]

    async def query_consumer_offset(
        self, group: str, topic: str, queue_id: int, *, requester: str = ""
    ) -> OffsetAnswer:
        """B-37 against the slave's own table; a 'nothing stored' answer is not recorded here. The
        commits its connection sent before it are journaled first (B-312)."""
        await take_turn()
        with self.store.read() as txn:
            answer = offsets.decide_query(self.store, txn, group, topic, queue_id)
            if self.journal.latest(topic, group, queue_id) is None:
                return answer
            mine = self._effective(txn, topic, group, queue_id)
        return dataclasses.replace(
            answer, code=ResponseCode.SUCCESS, offset=mine, row=1, stored=mine
        )

    # ------------------------------------------------------------------ reads
    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        *,
        tags_codes: frozenset[int] | None = None,
        message_filter: Callable[[bytes], bool] | None = None,
        client: str = "",
        commit_offset: int | None = None,
    ) -> GetResult:
        """PULL_MESSAGE on a slave: a piggybacked commit is ignored (B-31, B-118); a delivery is journalled.

        What a master records as `messages_delivered` goes to the slave
        journal, to be recorded by the master at the next merge.
        """
        messages.check_pull_args(offset, max_msg_nums)
        group_config = await self.ensure_group(group, requester=client)
        if not group_config.consume_enable:
            raise NoPermission(f"subscription group no permission, {group}")
        with self.store.read() as txn:
            messages.check_readable(self.store, txn, topic, queue_id)
            result = messages.read_messages(
                self.store, txn, topic, queue_id, offset, max_msg_nums, tags_codes, message_filter
            )
        result = dataclasses.replace(result, group_config=group_config)
        self.messages_served += len(result.offsets)
        if result.offsets:
            self.journal.record_delivery(
                ts=self.store.clock.now_ms(),
                group=group,
                topic=topic,
                queue_id=queue_id,
                offset=offset,
                offsets=result.offsets,
                next_offset=result.next_begin_offset,
                client=client,
                replicated_seq=self.store.log.last_seq,
            )
            self.on_commit()
        return result

    async def ensure_group(self, group: str, *, requester: str = "") -> SubscriptionGroupConfig:
        """The replicated config, else RocketMQ's defaults kept in memory only, as a slave does (B-03)."""
        config = self.group_config(group)
        if config is not None:
            return config
        if not (self.config.autoCreateSubscriptionGroup or group.startswith("CID_RMQ_SYS_")):
            raise GroupNotExist(f"subscription group [{group}] does not exist, apply first please!")
        return SubscriptionGroupConfig(group)  # the defaults of B-03

    async def record_consumer_group(
        self,
        group: str,
        clients: list[str],
        consume_from_where: str,
        message_model: str,
        subscriptions: dict[str, str],
    ) -> int:
        """Membership seen by a slave is not recorded: the master records what its own heartbeats show."""
        return 0

    async def plan_reset(
        self,
        group: str,
        topic: str,
        value: int,
        force: bool,
        *,
        requester: str = "",
        notified: list[str] | None = None,
        kind: str = "time",
        mode: str | None = None,
        scope: str | None = None,
        dry_run: bool = False,
    ) -> resets.ResetPlan:
        """A slave computes a reset from its own store and tells its clients (B-120) but records nothing.

        The clients' commits that follow land in the slave journal; a
        server-side reset writes offsets itself and so needs the master.
        """
        if (mode or self.config.reset_mode) == ResetMode.SERVER_SIDE and not dry_run:
            raise ServiceNotAvailable("a server-side reset writes offsets: run it on the master")
        return await super().plan_reset(
            group,
            topic,
            value,
            force,
            requester=requester,
            notified=notified,
            kind=kind,
            mode=ResetMode.COMPAT,
            scope=scope,
            dry_run=True,
        )

    def runtime_info(self) -> dict[str, Any]:
        info = super().runtime_info()
        commits, deliveries = self.journal.pending_all()
        info["haPendingOffsetCommits"] = len(commits)
        info["haPendingDeliveries"] = len(deliveries)
        return info


def open_broker(config: BrokerConfig, clock: Clock | None = None) -> Broker:
    """The core for a broker's role: a SlaveBroker for brokerRole=SLAVE, else a Broker."""
    cls = SlaveBroker if config.brokerRole == BrokerRole.SLAVE else Broker
    return cls.open(config.storePathRootDir, config, clock)


async def merge_own_journal(broker: Broker, data_dir: str | Path) -> MergeOutcome | None:
    """A data directory that was a slave's, started as a master: record its journal first (promotion).

    The commits and deliveries the slave took while it followed a master that
    never came back would otherwise be lost with the role change. One merge
    record covers the whole journal, which is then emptied.
    """
    path = Path(data_dir) / JOURNAL_DIR
    if not path.is_dir():
        return None
    journal = SlaveOffsetJournal(path, sync=broker.store.config.sync_flush)
    try:
        commits, deliveries = journal.pending_all()
        if not commits and not deliveries:
            return None
        upto = max([c.local_seq for c in commits] + [d.local_seq for d in deliveries])
        outcome: MergeOutcome = await broker.submit(
            merge_job(
                broker.store,
                broker_id=broker.config.brokerId,
                slave_addr="",
                journal_upto=upto,
                commits=commits,
                deliveries=deliveries,
                requester="promotion",
                promotion=True,
            )
        )
        journal.forget_through(upto)
        return outcome
    finally:
        journal.close()


async def _ready(value: int) -> int:
    return value
