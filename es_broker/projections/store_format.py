"""The store format: which layout a data directory's projections are in (B-470).

Database `store_meta` holds the number under `store_format`. A directory
without it is format 1 if it holds anything (it was written before the
number was kept), else it is new and gets the current number at its first
open.

A start that finds an older number brings the projections to the current
layout one step at a time (`upgrade`), each step in one write transaction:
it rebuilds the databases whose layout changed, deletes the older layout's,
writes the step's number and appends a `store_upgraded` record (from, to,
the entries written), so the history shows when the layout changed. A crash
leaves the directory at the last finished step, and the next start goes on
from there. A slave converts without the record: its log is its master's,
record for record.

A read-only open never converts: `es-broker verify` of an older directory
answers "old format, run serve once to upgrade" (`OldStoreFormat`) instead
of reporting as differences what is only the older layout.

| format | layout changed                                                         |
|--------|------------------------------------------------------------------------|
| 1      | (before the number) key_index, key_expiry, key_meta                    |
| 2      | key_hash: the key index in IndexService's shape, no key_expiry (B-471) |
| 3      | trace_pulls: a delivery entry per record, not per message (B-472)      |
| 4      | cq_blocks: consume-queue units in blocks of 32 (B-473)                 |
| 5      | trace_stored: no entry of a sealed record (B-465)                      |
| 6      | cq_pages: consume-queue blocks of 145 units, a page each (B-474)       |
| 7      | commitlog_chunks: the commit log's bytes in 2022-byte chunks, two to a |
|        | leaf page, instead of `commitlog`'s entry per message; commitlog_marks |
|        | (B-475)                                                                |
| 8      | audit_explain: every offset change the offset rule knows, not only     |
|        | commits (B-504); rebuilt by the audit index's `ensure_built`           |
| 9      | pop_trace: no entry of an expired message's sealed record (B-642)      |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import lmdb

from es_broker.log import Record, RecordLog
from es_broker.log.types import StoreUpgraded
from es_broker.projections import consume_queue, key_index, message_trace
from es_broker.projections.keys import U32

LEGACY_COMMITLOG = ("commitlog",)  # message bytes, an entry per message (before format 7)

# every database of an older layout (a directory holding one of them predates the number)
LEGACY_DATABASES = (
    key_index.LEGACY_DATABASES
    + message_trace.LEGACY_DATABASES
    + consume_queue.LEGACY_DATABASES
    + consume_queue.BLOCKS_OF_32
    + LEGACY_COMMITLOG
)

FIRST = 1  # a directory written before the number was kept
CURRENT = 9
_KEY = b"store_format"


class OldStoreFormat(Exception):
    """A data directory in an older layout, opened where it cannot be converted."""

    def __init__(self, found: int) -> None:
        super().__init__(
            f"old format: the data directory is in store format {found}, this es-broker "
            f"writes format {CURRENT}; run `es-broker serve` on it once to upgrade"
        )
        self.found = found


@dataclass(frozen=True, slots=True)
class Step:
    """What brings a directory to format `to` from the one before it."""

    to: int
    dropped: tuple[str, ...]  # the older layout's databases
    rebuild: Callable[[lmdb.Transaction[bytes]], list[list[Any]]]  # [database, entries] written


class StoreFormatProjection:
    name = "store_format"
    databases = ("store_meta",)

    def bind(self, log: RecordLog) -> None:
        self.log = log
        self.db = log.db("store_meta")

    def apply(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        """Nothing: `store_upgraded` only tells what its transaction did."""

    def applier(self, kind: str) -> Callable[[lmdb.Transaction[bytes], int, Record], None] | None:
        """None: no record type costs this projection a call (RecordLog.apply)."""
        return None

    def number(self, txn: lmdb.Transaction[bytes]) -> int:
        """The directory's store format (FIRST when it predates the number)."""
        raw = txn.get(_KEY, db=self.db) if self.db is not None else None
        if raw is not None:
            return int(U32.unpack(raw)[0])
        return FIRST if self._holds_data(txn) else CURRENT

    def _holds_data(self, txn: lmdb.Transaction[bytes]) -> bool:
        log = self.log
        if txn.stat(log.log_db)["entries"]:
            return True
        if log.commitlog_db is not None and txn.stat(log.commitlog_db)["entries"]:
            return True
        names = {bytes(key) for key, _ in txn.cursor()}
        return any(name.encode() in names for name in LEGACY_DATABASES)

    def set_number(self, txn: lmdb.Transaction[bytes], number: int) -> None:
        txn.put(_KEY, U32.pack(number), db=self.db)

    def check(self) -> None:
        """Raise OldStoreFormat for a directory in an older layout (a read-only view)."""
        with self.log.env.begin() as txn:
            found = self.number(txn)
        if found < CURRENT:
            raise OldStoreFormat(found)

    def legacy(self, txn: lmdb.Transaction[bytes], name: str) -> Any:
        """A database of an older layout, None when the directory has none."""
        try:
            return self.log.env.open_db(name.encode(), txn=txn, create=False)
        except lmdb.NotFoundError:
            return None

    def upgrade(self, steps: Sequence[Step], *, now_ms: int, record: bool) -> list[StoreUpgraded]:
        """Bring the directory to CURRENT, a write transaction per step; what each step did."""
        log = self.log
        with log.env.begin() as txn:
            found = self.number(txn)
            kept = txn.get(_KEY, db=self.db) is not None
        if found >= CURRENT:
            if not kept:  # a new directory: it starts in the current format
                _ok(log.write_batch([lambda ctx: self.set_number(ctx.txn, CURRENT)]))
            return []
        done: list[StoreUpgraded] = []
        for step in steps:
            if step.to <= found:
                continue

            def job(ctx: Any, step: Step = step, before: int = found) -> StoreUpgraded:
                counts = step.rebuild(ctx.txn)
                for name in step.dropped:
                    _drop(log, ctx.txn, name)
                self.set_number(ctx.txn, step.to)
                upgraded = StoreUpgraded(
                    from_format=before, to_format=step.to, counts=counts, dropped=list(step.dropped)
                )
                if record:
                    ctx.append(upgraded.to_record(now_ms))
                return upgraded

            done.append(_ok(log.write_batch([job])))
            found = step.to
        return done


def _drop(log: RecordLog, txn: lmdb.Transaction[bytes], name: str) -> None:
    try:
        db = log.env.open_db(name.encode(), txn=txn, create=False)
    except lmdb.NotFoundError:
        return
    txn.drop(db, delete=True)


def _ok(results: list[tuple[bool, Any]]) -> Any:
    ((ok, result),) = results
    if not ok:
        raise result
    return result
