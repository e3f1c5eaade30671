"""A slave's core: the master's records are its only writes (docs/design.md §8, "Master and slave").

A slave applies the master's records with their sequence numbers, so at the
same sequence its projections are byte-identical to the master's. It is the
one `Broker` given the slave's role (`SlaveRole`): anything that would append
a record of the slave's own (a created group, a recorded query, a membership
change, a reset) is either left unrecorded (heartbeats, "no offset" queries:
what RocketMQ's slave keeps in memory only) or refused with SERVICE_NOT_AVAILABLE.
Offset commits and deliveries (pulls that found messages) go to the slave
journal (`slave_offsets`) and are merged back on the master (S-5), where a
delivery becomes the `messages_delivered` record it would have been, with
`served_by`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

import lmdb

from es_broker.clock import Clock
from es_broker.commands.errors import BrokerError, ServiceNotAvailable
from es_broker.commands.messages import GetResult
from es_broker.commands.offsets import OffsetCommit
from es_broker.commands.pull import PullRequest
from es_broker.commands.slave_journal import JOURNAL_DIR, SlaveOffsetJournal, check_commit
from es_broker.commands.slave_offsets import MergeOutcome, effective_offset, merge_job
from es_broker.config import BrokerConfig, BrokerRole
from es_broker.core.broker import Broker
from es_broker.log import AppendContext, Record
from es_broker.log.types import RecordType, ResetMode, SlaveOffsetsMerged
from es_broker.remoting.codes import ResponseCode
from es_broker.store import Store


class LogDiverged(BrokerError):
    """The slave's log and the master's are not one history (a gap, or a different record at a sequence)."""

    code = ResponseCode.SYSTEM_ERROR


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


class SlaveRole:
    """A slave's role: nothing of its own enters its log; its commits and deliveries go to its journal.

    `on_commit` is told of each new journal entry (replication ships them to the master).
    """

    follows_master = True

    def __init__(self, journal: SlaveOffsetJournal) -> None:
        self.journal = journal
        self.on_commit: Callable[[], None] = lambda: None

    def keep_commit(self, store: Store, commit: OffsetCommit) -> int:
        """UPDATE_CONSUMER_OFFSET on a slave (B-30): journaled now; its journal position."""
        group, topic, queue_id, offset = commit.group, commit.topic, commit.queue_id, commit.offset
        check_commit(group, topic, queue_id, offset)
        with store.read() as txn:
            old = self._effective(store, txn, topic, group, queue_id)
        entry = self.journal.record(
            ts=store.clock.now_ms(),
            topic=topic,
            group=group,
            queue_id=queue_id,
            offset=offset,
            old=old,
            cause=commit.cause,
            requester=commit.requester,
            replicated_seq=store.log.last_seq,
        )
        self.on_commit()
        return entry.local_seq

    def keep_pull(self, store: Store, pull: PullRequest, result: GetResult) -> None:
        """A pull on a slave: a piggybacked commit is ignored (B-31, B-118); a delivery is journaled,
        to be recorded by the master as the `messages_delivered` it would have been at the next
        merge (S-5)."""
        if result.offsets:
            self.journal.record_delivery(
                ts=store.clock.now_ms(),
                group=pull.group,
                topic=pull.topic,
                queue_id=pull.queue_id,
                offset=pull.offset,
                offsets=result.offsets,
                next_offset=result.next_begin_offset,
                client=pull.client,
                replicated_seq=store.log.last_seq,
            )
            self.on_commit()

    def own_offset(
        self, store: Store, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> int | None:
        if self.journal.latest(topic, group, queue_id) is None:
            return None
        return self._effective(store, txn, topic, group, queue_id)

    def own_offsets(self) -> Collection[tuple[str, str, int]]:
        return self.journal.latest_all().keys()

    def _effective(
        self, store: Store, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> int:
        mine = self.journal.latest(topic, group, queue_id)
        return effective_offset(store, txn, mine, topic, group, queue_id)

    def reset_as(
        self, mode: str | None, default_mode: str, dry_run: bool
    ) -> tuple[str | None, bool]:
        """Computed from the slave's own store, recorded nowhere (B-120): its clients' commits that
        follow land in its journal; a server-side reset writes offsets itself and needs the master."""
        if (mode or default_mode) == ResetMode.SERVER_SIDE and not dry_run:
            raise ServiceNotAvailable("a server-side reset writes offsets: run it on the master")
        return ResetMode.COMPAT, True

    def runtime_fields(self) -> dict[str, int]:
        commits, deliveries = self.journal.pending_all()
        return {"haPendingOffsetCommits": len(commits), "haPendingDeliveries": len(deliveries)}

    def close(self) -> None:
        self.journal.close()


class SlaveBroker(Broker):
    """A broker given the slave's role, and what only a slave does: apply its master's records, and
    forget the journal entries a merge of the master covered."""

    role: SlaveRole

    def __init__(self, store: Store) -> None:
        journal = SlaveOffsetJournal(
            store.log.path.parent / JOURNAL_DIR, sync=store.config.sync_flush
        )
        super().__init__(store, SlaveRole(journal))
        oldest = journal.oldest_replicated_seq()
        if oldest is not None:  # a merge record covering them comes after the oldest was taken
            self.forget_merged(store.log.read(oldest + 1))

    @property
    def journal(self) -> SlaveOffsetJournal:
        """The slave's offset commits and deliveries, until the master has merged them (S-5)."""
        return self.role.journal

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
