"""A slave's own journal of offset commits and deliveries (B-30, B-113): storage only.

A slave's record log is the master's, record for record, so what a slave
decides by itself while the master is away (a consumer's commit, a pull it
served) is kept here: an LMDB environment of its own next to the log
(`<data dir>/slave_offsets`), invisible to replay and verify. Each entry gets
a journal position from one counter shared by commits and deliveries, so one
`journal_upto` of the master's merge record (commands/slave_offsets.py)
covers both. What wins when the journal reaches the master is decided there,
not here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, TypeGuard

import lmdb
import msgpack

from es_broker.commands import names
from es_broker.commands.errors import IllegalRequest
from es_broker.projections.keys import U64

JOURNAL_DIR = "slave_offsets"

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


def latest_per_queue(commits: Iterable[SlaveCommit]) -> dict[tuple[str, str, int], SlaveCommit]:
    """The slave's own latest commit per (T, G, Q): later time, then later in its journal."""
    latest: dict[tuple[str, str, int], SlaveCommit] = {}
    for c in commits:
        seen = latest.get(c.key)
        if seen is None or (c.ts, c.local_seq) >= (seen.ts, seen.local_seq):
            latest[c.key] = c
    return latest


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
    """The checks of a shipped delivery: names, queue, offsets (what a master's Broker.start_pull would have recorded)."""
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
    start from the oldest entry's replicated sequence: SlaveBroker.__init__.)
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
