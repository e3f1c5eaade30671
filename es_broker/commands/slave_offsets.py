"""Offsets a slave takes while clients cannot reach the master, and their merge back (B-30, B-123, S-5).

A slave's record log is the master's, record for record: it may not append
anything of its own, or its sequence numbers would part from the master's.
So UPDATE_CONSUMER_OFFSET on a slave (B-30, B-113: clients commit to any
broker of the name while the master is absent) goes to a *slave journal*: an
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
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import lmdb
import msgpack

from es_broker.commands import names
from es_broker.commands.errors import IllegalRequest
from es_broker.commands.store import Store
from es_broker.log import AppendContext
from es_broker.log.scan import prefixed
from es_broker.log.types import MessagesDelivered, SlaveOffsetsMerged
from es_broker.projections.keys import U64, offset_key

if TYPE_CHECKING:
    from es_broker.commands.broker import Broker

JOURNAL_DIR = "slave_offsets"
LATEST_WINS = "latest_wins"
COMPAT_OVERWRITE = "compat_overwrite"
MERGE_POLICIES = (LATEST_WINS, COMPAT_OVERWRITE)

# outcome of one queue in a `slave_offsets_merged` record
APPLIED = "applied"  # the slave's commit was later: the master's offset moves to it
KEPT_MASTER = (
    "kept_master"  # the master's own latest change was later (or equal with a larger offset)
)
DISCARDED = "discarded"  # compat_overwrite: the slave's commit is lost, as in RocketMQ

_META_LAST_LOCAL = (
    b"last_local_seq"  # journal positions never repeat, even after every entry was merged
)


@dataclass(frozen=True, slots=True)
class SlaveCommit:
    """One UPDATE_CONSUMER_OFFSET a slave accepted (the fields of an `offset_committed` record)."""

    local_seq: int  # position in the slave journal
    ts: int
    topic: str
    group: str
    queue_id: int
    offset: int
    old: int  # what the slave would have answered before this commit
    cause: str
    requester: str
    replicated_seq: int  # the last master record the slave had applied: what it knew then

    def row(self) -> list[Any]:
        return [
            self.local_seq,
            self.ts,
            self.topic,
            self.group,
            self.queue_id,
            self.offset,
            self.old,
            self.cause,
            self.requester,
            self.replicated_seq,
        ]

    @classmethod
    def from_row(cls, row: list[Any]) -> SlaveCommit:
        return cls(*row)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.topic, self.group, self.queue_id)


@dataclass(frozen=True, slots=True)
class SlaveDelivery:
    """One PULL_MESSAGE a slave answered with messages (the fields of a `messages_delivered` record)."""

    local_seq: int  # position in the slave journal (the counter the commits use)
    ts: int  # the slave's time of the delivery
    group: str
    topic: str
    queue_id: int
    offset: int  # the requested offset
    offsets: tuple[int, ...]  # the queue offsets handed out
    next_offset: int
    client: str
    replicated_seq: int  # the last master record the slave had applied

    def row(self) -> list[Any]:
        return [
            self.local_seq,
            self.ts,
            self.group,
            self.topic,
            self.queue_id,
            self.offset,
            list(self.offsets),
            self.next_offset,
            self.client,
            self.replicated_seq,
        ]

    @classmethod
    def from_row(cls, row: list[Any]) -> SlaveDelivery:
        (
            local_seq,
            ts,
            group,
            topic,
            queue_id,
            offset,
            offsets,
            next_offset,
            client,
            replicated_seq,
        ) = row
        return cls(
            local_seq,
            ts,
            group,
            topic,
            queue_id,
            offset,
            tuple(offsets),
            next_offset,
            client,
            replicated_seq,
        )


@dataclass(frozen=True, slots=True)
class OffsetChangeAt:
    """The master's latest change of one offset: when, and to what (-1: removed)."""

    seq: int
    ts: int
    offset: int


def check_policy(policy: str) -> str:
    if policy not in MERGE_POLICIES:
        raise IllegalRequest(
            f"slave_offset_merge {policy!r} is not one of {', '.join(MERGE_POLICIES)}"
        )
    return policy


def slave_commit_wins(commit: SlaveCommit, master: OffsetChangeAt | None) -> bool:
    """latest_wins: the later change by record time; equal times go to the larger offset (S-5)."""
    return master is None or (commit.ts, commit.offset) > (master.ts, master.offset)


def latest_per_queue(commits: Iterable[SlaveCommit]) -> dict[tuple[str, str, int], SlaveCommit]:
    """The slave's own latest commit per (T, G, Q): later time, then later in its journal."""
    latest: dict[tuple[str, str, int], SlaveCommit] = {}
    for c in commits:
        seen = latest.get(c.key)
        if seen is None or (c.ts, c.local_seq) >= (seen.ts, seen.local_seq):
            latest[c.key] = c
    return latest


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
    if store.config.slave_offset_merge == COMPAT_OVERWRITE:
        return mine.offset
    return (
        mine.offset
        if slave_commit_wins(mine, last_change(store, txn, topic, group, queue_id))
        else replicated
    )


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_queue(group: str, topic: str, queue_id: object) -> None:
    names.check_group_name(group)
    names.check_topic_name(topic)
    if not _is_int(queue_id) or queue_id < 0:
        raise IllegalRequest(f"queueId {queue_id!r} must be a non-negative integer")


def check_commit(group: str, topic: str, queue_id: object, offset: object) -> None:
    """The argument checks of a commit (as offsets.commit_job makes them)."""
    _check_queue(group, topic, queue_id)
    if not _is_int(offset):
        raise IllegalRequest(f"commitOffset {offset!r} must be an integer")


def check_delivery(d: SlaveDelivery) -> None:
    """The checks of a shipped delivery: names, queue, offsets (what Broker.pull would have recorded)."""
    _check_queue(d.group, d.topic, d.queue_id)
    if not (
        _is_int(d.local_seq) and _is_int(d.ts) and _is_int(d.offset) and _is_int(d.next_offset)
    ):
        raise IllegalRequest("a slave delivery's position, time and offsets must be integers")
    if not d.offsets or not all(_is_int(o) and o >= 0 for o in d.offsets):
        raise IllegalRequest(
            f"a slave delivery hands out non-negative queue offsets, not {list(d.offsets)!r}"
        )
    if not isinstance(d.client, str):
        raise IllegalRequest(f"a slave delivery's client {d.client!r} must be a string")


# ---------------------------------------------------------------------- the slave journal


class SlaveOffsetJournal:
    """The commits and deliveries a slave took, in an LMDB environment of their own (not part of the record log).

    Database `journal`: 8-byte local sequence -> msgpack row of a SlaveCommit.
    Database `deliveries`: 8-byte local sequence -> msgpack row of a
    SlaveDelivery; the positions come from the same counter as the commits'.
    Database `meta`: the last journal position handed out. (A crash between
    applying a merge record and forgetting its entries is repaired at the next
    start from the oldest entry's replicated sequence: SlaveBroker.open.)
    """

    def __init__(self, path: str | Path, *, sync: bool = False) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(
            str(self.path), map_size=8 * 1024 * 1024, max_dbs=4, sync=sync, metasync=sync
        )
        self.journal_db = self.env.open_db(b"journal")
        self.deliveries_db = self.env.open_db(b"deliveries")
        self.meta_db = self.env.open_db(b"meta")
        self._latest: dict[tuple[str, str, int], SlaveCommit] = {}
        self.last_local_seq = 0
        self._reload()

    def _reload(self) -> None:
        self._latest = latest_per_queue(self.pending())
        with self.env.begin() as txn:
            raw = txn.get(_META_LAST_LOCAL, db=self.meta_db)
        self.last_local_seq = U64.unpack(raw)[0] if raw else 0

    def _write(self, fn: Callable[[lmdb.Transaction[bytes]], object]) -> None:
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    fn(txn)
                return
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def record(
        self,
        *,
        ts: int,
        topic: str,
        group: str,
        queue_id: int,
        offset: int,
        old: int,
        cause: str,
        requester: str,
        replicated_seq: int,
    ) -> SlaveCommit:
        """Keep one commit; it is durable when this returns (with the broker's flush mode)."""
        commit = SlaveCommit(
            self.last_local_seq + 1,
            ts,
            topic,
            group,
            queue_id,
            offset,
            old,
            cause,
            requester,
            replicated_seq,
        )
        self._append(self.journal_db, commit.local_seq, commit.row())
        self._latest[commit.key] = commit
        return commit

    def record_delivery(
        self,
        *,
        ts: int,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        offsets: Iterable[int],
        next_offset: int,
        client: str,
        replicated_seq: int,
    ) -> SlaveDelivery:
        """Keep one delivery (a pull that found messages) at the next journal position."""
        delivery = SlaveDelivery(
            self.last_local_seq + 1,
            ts,
            group,
            topic,
            queue_id,
            offset,
            tuple(offsets),
            next_offset,
            client,
            replicated_seq,
        )
        self._append(self.deliveries_db, delivery.local_seq, delivery.row())
        return delivery

    def _append(self, db: Any, local_seq: int, row: list[Any]) -> None:
        """Write one entry at its position and advance the position counter (both kinds share it)."""

        def put(txn: lmdb.Transaction[bytes]) -> None:
            txn.put(U64.pack(local_seq), msgpack.packb(row), db=db)
            txn.put(_META_LAST_LOCAL, U64.pack(local_seq), db=self.meta_db)

        self._write(put)
        self.last_local_seq = local_seq

    def latest(self, topic: str, group: str, queue_id: int) -> SlaveCommit | None:
        return self._latest.get((topic, group, queue_id))

    def latest_all(self) -> dict[tuple[str, str, int], SlaveCommit]:
        return dict(self._latest)

    @staticmethod
    def _rows(
        txn: lmdb.Transaction[bytes], db: Any, after: int, limit: int | None = None
    ) -> list[list[Any]]:
        cur = txn.cursor(db=db)
        if not cur.set_range(U64.pack(after + 1)):
            return []
        return [msgpack.unpackb(raw) for _, raw in islice(cur, limit)]

    def pending(self, after: int = 0) -> list[SlaveCommit]:
        """Commits not yet covered by a merge record, oldest first; those after a local sequence."""
        with self.env.begin() as txn:
            return [SlaveCommit.from_row(row) for row in self._rows(txn, self.journal_db, after)]

    def pending_deliveries(self, after: int = 0) -> list[SlaveDelivery]:
        """Deliveries not yet covered by a merge record, oldest first; those after a local sequence."""
        with self.env.begin() as txn:
            return [
                SlaveDelivery.from_row(row) for row in self._rows(txn, self.deliveries_db, after)
            ]

    def pending_all(self, after: int = 0) -> tuple[list[SlaveCommit], list[SlaveDelivery]]:
        """Commits and deliveries after a local sequence, read together (what one merge request ships)."""
        with self.env.begin() as txn:
            return (
                [SlaveCommit.from_row(row) for row in self._rows(txn, self.journal_db, after)],
                [SlaveDelivery.from_row(row) for row in self._rows(txn, self.deliveries_db, after)],
            )

    def next_batch(
        self, after: int, limit: int
    ) -> tuple[list[SlaveCommit], list[SlaveDelivery], int]:
        """The first `limit` entries after a position, commits and deliveries, and the last position they reach.

        Every entry of either kind at or before that position is in the batch,
        so a merge record with that `journal_upto` covers exactly the batch.
        """
        with self.env.begin() as txn:
            commits = [
                SlaveCommit.from_row(row) for row in self._rows(txn, self.journal_db, after, limit)
            ]
            deliveries = [
                SlaveDelivery.from_row(row)
                for row in self._rows(txn, self.deliveries_db, after, limit)
            ]
        positions = sorted([c.local_seq for c in commits] + [d.local_seq for d in deliveries])[
            :limit
        ]
        if not positions:
            return [], [], after
        upto = positions[-1]
        return (
            [c for c in commits if c.local_seq <= upto],
            [d for d in deliveries if d.local_seq <= upto],
            upto,
        )

    def oldest_replicated_seq(self) -> int | None:
        """The replicated sequence the oldest pending entry (commit or delivery) was taken on; None if none."""
        commits, deliveries = self.pending_all()
        seqs = [c.replicated_seq for c in commits] + [d.replicated_seq for d in deliveries]
        return min(seqs) if seqs else None

    def forget_through(self, local_seq: int) -> int:
        """Drop the entries (commits and deliveries) a merge record on the master covers; returns how many went."""
        dropped = 0

        def drop(txn: lmdb.Transaction[bytes]) -> None:
            nonlocal dropped
            for db in (self.journal_db, self.deliveries_db):
                cur = txn.cursor(db=db)
                while cur.first() and U64.unpack(cur.key())[0] <= local_seq:
                    cur.delete()
                    dropped += 1

        self._write(drop)
        self._reload()
        return dropped

    def close(self) -> None:
        self.env.close()


# ---------------------------------------------------------------------- the merge, on the master


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    seq: int
    policy: str
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
            if policy == COMPAT_OVERWRITE:
                outcome = APPLIED if promotion else DISCARDED
            elif slave_commit_wins(c, last_change(store, ctx.txn, topic, group, qid)):
                outcome = APPLIED
            else:
                outcome = KEPT_MASTER
            new = c.offset if outcome == APPLIED else current
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
