"""Offsets a slave takes while clients cannot reach the master, and their merge back (B-30, B-123, S-5).

A slave's record log is the master's, record for record: it may not append
anything of its own, or its sequence numbers would part from the master's.
So UPDATE_CONSUMER_OFFSET on a slave (B-30, B-113: clients commit to any
broker of the name while the master is absent) goes to a *slave journal*
(commands/slave_journal.py, storage only): an
LMDB environment of its own next to the log (`<data dir>/slave_offsets`),
invisible to replay and verify. The slave answers QUERY_CONSUMER_OFFSET and
consume stats from the replicated offset table overlaid with its journal.

When the master is back the slave ships its journal to it
(HA_MERGE_SLAVE_OFFSETS) and the master decides, in one record,
`slave_offsets_merged`, which commits win:

- `latest_wins` (default, S-5): per (G, T, Q) the slave's latest commit is
  compared with the master's latest change of that offset by record time;
  the later wins, equal times go to the larger offset.
- `compat_overwrite` (B-123): RocketMQ's SlaveSynchronize, the master's table
  overwrites the slave's and every slave commit is lost; the record still
  lists them, so the loss is visible in the history.

The record carries the slave's commits and, per queue, the outcome. When it
reaches the slave through replication, the slave forgets the journal entries
it covers (`journal_upto`), so an entry is dropped only once the master's log
holds it.

Deliveries travel the same way. A PULL_MESSAGE that finds messages on a
master is the `messages_delivered` record; on a slave it is a journal entry
(`SlaveDelivery`: the slave's time, the pull, what it handed out, the
replicated sequence it stood on), at a position from the same counter as the
commits, so one `journal_upto` covers both. The master's merge appends, in
the same transaction and before `slave_offsets_merged`, one
`messages_delivered` per shipped delivery with the usual fields plus
`served_by` (slave brokerId and address, the slave's delivery time `ts`, the
journal position `local_seq`); the record's own `ts` is the master's time of
the merge. Commits and deliveries are separate databases of the journal, so
everything that reads commits (`pending`, `latest`) sees commits only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import lmdb
import msgpack

from es_broker.commands.errors import IllegalRequest
from es_broker.commands.slave_journal import (
    SlaveCommit,
    SlaveDelivery,
    check_commit,
    check_delivery,
    latest_per_queue,
)
from es_broker.log import AppendContext
from es_broker.log.scan import prefixed
from es_broker.log.types import (
    MessagesDelivered,
    SlaveMergeOutcome,
    SlaveMergePolicy,
    SlaveOffsetsMerged,
)
from es_broker.projections.keys import U64, offset_key
from es_broker.store import Store


@dataclass(frozen=True, slots=True)
class OffsetChangeAt:
    """The master's latest change of one offset: when, and to what (-1: removed)."""

    seq: int
    ts: int
    offset: int


def check_policy(policy: str) -> SlaveMergePolicy:
    try:
        return SlaveMergePolicy(policy)
    except ValueError:
        raise IllegalRequest(
            f"slave_offset_merge {policy!r} is not one of {', '.join(SlaveMergePolicy)}"
        ) from None


def slave_commit_wins(commit: SlaveCommit, master: OffsetChangeAt | None) -> bool:
    """latest_wins: the later change by record time; equal times go to the larger offset (S-5)."""
    return master is None or (commit.ts, commit.offset) > (master.ts, master.offset)


def last_change(
    store: Store, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
) -> OffsetChangeAt | None:
    """The newest entry of the offset history of (T, G, Q), or None when it never changed."""
    prefix = offset_key(topic, group, queue_id)
    # history keys are prefix + seq: the entry just before prefix + max seq is the newest one
    newest = prefixed(txn, store.offsets.history, prefix, stop=prefix + b"\xff" * 8, reverse=True)
    key, raw = next(newest, (b"", b""))
    if len(key) != len(prefix) + 8:
        return None
    ts, _old, new, _cause, _requester = msgpack.unpackb(raw)
    return OffsetChangeAt(U64.unpack(key[-8:])[0], ts, new)


def effective_offset(
    store: Store,
    txn: lmdb.Transaction[bytes],
    mine: SlaveCommit | None,
    topic: str,
    group: str,
    queue_id: int,
) -> int:
    """What a slave answers for (T, G, Q): the replicated value overlaid with its own latest commit.

    With compat_overwrite the slave's own value stands until the merge, as
    RocketMQ's slave table does until the next sync; with latest_wins the
    answer already is what the merge will decide.
    """
    replicated = store.offsets.query(txn, topic, group, queue_id)
    if mine is None:
        return replicated
    if store.config.slave_offset_merge == SlaveMergePolicy.COMPAT_OVERWRITE:
        return mine.offset
    return (
        mine.offset
        if slave_commit_wins(mine, last_change(store, txn, topic, group, queue_id))
        else replicated
    )


# ---------------------------------------------------------------------- the merge, on the master


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    seq: int
    policy: SlaveMergePolicy
    queues: tuple[tuple[Any, ...], ...]  # (topic, group, queue id, old, new, outcome, requester)
    deliveries: int = 0  # `messages_delivered` records appended before the merge record


def merge_job(
    store: Store,
    *,
    broker_id: int,
    slave_addr: str,
    journal_upto: int,
    commits: list[SlaveCommit],
    deliveries: Iterable[SlaveDelivery] = (),
    requester: str = "",
    promotion: bool = False,
) -> Callable[[AppendContext], MergeOutcome]:
    """Record the slave's deliveries, then `slave_offsets_merged` with its commits and the outcome (S-5).

    Each delivery becomes a `messages_delivered` record with `served_by`; the
    merge record follows even without commits, so that its `journal_upto`
    lets the slave forget the deliveries too.

    `promotion`: the former slave's own journal, merged as it starts as a
    master. With compat_overwrite its commits are applied, because a
    RocketMQ slave promoted to master keeps its own offset table.
    """
    policy = check_policy(store.config.slave_offset_merge)
    for c in commits:
        check_commit(c.group, c.topic, c.queue_id, c.offset)
    deliveries = sorted(deliveries, key=lambda d: d.local_seq)
    for d in deliveries:
        check_delivery(d)
        if d.local_seq > journal_upto:
            raise IllegalRequest(
                f"slave delivery at journal position {d.local_seq} is past journalUpto "
                f"{journal_upto}"
            )

    def job(ctx: AppendContext) -> MergeOutcome:
        ts = store.clock.now_ms()
        for d in deliveries:  # in the slave's order; the master's time, the slave's in served_by
            ctx.append(
                MessagesDelivered(
                    group=d.group,
                    topic=d.topic,
                    queue_id=d.queue_id,
                    offset=d.offset,
                    offsets=list(d.offsets),
                    next_offset=d.next_offset,
                    client=d.client,
                    served_by={
                        "broker_id": broker_id,
                        "addr": slave_addr,
                        "ts": d.ts,
                        "local_seq": d.local_seq,
                    },
                ).to_record(ts)
            )
        queues = []
        for (topic, group, qid), c in sorted(latest_per_queue(commits).items()):
            current = store.offsets.query(ctx.txn, topic, group, qid)
            if policy == SlaveMergePolicy.COMPAT_OVERWRITE:
                outcome = SlaveMergeOutcome.APPLIED if promotion else SlaveMergeOutcome.DISCARDED
            elif slave_commit_wins(c, last_change(store, ctx.txn, topic, group, qid)):
                outcome = SlaveMergeOutcome.APPLIED
            else:
                outcome = SlaveMergeOutcome.KEPT_MASTER
            new = c.offset if outcome == SlaveMergeOutcome.APPLIED else current
            queues.append((topic, group, qid, current, new, outcome, c.requester))
        seq = ctx.append(
            SlaveOffsetsMerged(
                broker_id=broker_id,
                slave_addr=slave_addr,
                policy=policy,
                journal_upto=journal_upto,
                commits=[c.row() for c in commits],
                queues=[list(q) for q in queues],
                deliveries=len(deliveries),
                requester=requester,
                **{"promotion": True} if promotion else {},
            ).to_record(ts)
        )
        return MergeOutcome(seq, policy, tuple(queues), len(deliveries))

    return job
