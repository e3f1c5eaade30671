"""Retention: expired commit-log files are removed and queue minimums corrected (B-14..B-18, S-11).

The commit log is cut into files of mappedFileSizeCommitLog bytes (a message
never straddles two, B-08). A pass decides which files are expired
(oldest first, stop at the first live one, never the newest, at most 10),
which consume-queue minimums move, and how many unconsumed messages each
group loses; all of it goes into one `commitlog_expired` record, whose
application deletes the message bodies. Offsets, resets and every other
record stay forever, so history remains reconstructable.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lmdb

from es_broker.log import AppendContext
from es_broker.log.types import CommitlogExpired
from es_broker.projections.consume_queue import UNITS_PER_FILE
from es_broker.remoting import message as wire
from es_broker.store import Store

FILES_PER_PASS = 10  # MappedFileQueue.DELETE_FILES_BATCH_MAX


@dataclass(frozen=True, slots=True)
class RetentionPass:
    reason: str | None  # time | space | manual, or None when no trigger held
    deleted_files: tuple[int, ...]  # start offsets
    phy_min: int
    seq: int | None


def is_time_to_delete(delete_when: str, now_ms: int) -> bool:
    """Local hour of now in deleteWhen (';'-separated hours, B-14)."""
    hour = time.localtime(now_ms / 1000).tm_hour
    return any(h.strip().isdigit() and int(h) == hour for h in delete_when.split(";"))


def _last_store_time(
    store: Store, txn: lmdb.Transaction[bytes], start: int, end: int
) -> int | None:
    """Store time of the last message in [start, end) of the commit log, None if the file is empty."""
    found = store.commitlog.last_before(txn, start, end)
    if found is None:
        return None
    at = wire.STORE_TIMESTAMP_AT
    return int.from_bytes(found[1][at : at + 8], "big", signed=True)


def _first_unit_at_or_after(
    store: Store,
    txn: lmdb.Transaction[bytes],
    topic: str,
    qid: int,
    lo: int,
    hi: int,
    phy_min: int,
) -> int | None:
    a, b = lo, hi
    while a < b:  # physical offsets grow with queue offsets
        mid = (a + b) // 2
        if store.cq.unit_at(txn, topic, qid, mid).physical_offset >= phy_min:
            b = mid
        else:
            a = mid + 1
    return a if a < hi else None


def corrected_minimums(store: Store, txn: lmdb.Transaction[bytes], phy_min: int) -> list[list[Any]]:
    """[topic, queue, old min, new min] for every queue whose head now points at deleted data (B-17, B-18)."""
    out: list[list[Any]] = []
    for topic, qid, lo, hi in store.cq.queues(txn):
        if hi == 0 or store.cq.unit_at(txn, topic, qid, lo).physical_offset >= phy_min:
            continue
        newest = (hi - 1) // UNITS_PER_FILE
        first = lo // UNITS_PER_FILE
        while first < newest:  # leading CQ files whose last unit is below phyMin go (B-17)
            last = min((first + 1) * UNITS_PER_FILE, hi) - 1
            if store.cq.unit_at(txn, topic, qid, last).physical_offset >= phy_min:
                break
            first += 1
        start = max(lo, first * UNITS_PER_FILE)
        end = min((first + 1) * UNITS_PER_FILE, hi)
        new_min = _first_unit_at_or_after(store, txn, topic, qid, start, end, phy_min)
        if new_min is not None and new_min != lo:  # none in that file: min stays stale (B-18)
            out.append([topic, qid, lo, new_min])
    return out


def retention_job(
    store: Store, *, manual: bool = False
) -> Callable[[AppendContext], RetentionPass]:
    """One clean pass (CleanCommitLogService): decide, record, apply."""
    config = store.config

    def job(ctx: AppendContext) -> RetentionPass:
        txn = ctx.txn
        now = store.clock.now_ms()
        reason = "manual" if manual else None
        if reason is None and is_time_to_delete(config.deleteWhen, now):
            reason = "time"
        if reason is None and _disk_used_percent(store) > min(
            max(config.diskMaxUsedSpaceRatio, 10), 95
        ):
            reason = "space"
        phy_min, phy_max = store.commitlog.phy_min(txn), store.commitlog.phy_max(txn)
        if reason is None or phy_max == 0:
            return RetentionPass(reason, (), phy_min, None)
        size = config.mappedFileSizeCommitLog
        reserved = config.fileReservedTime * 3_600_000
        newest = (phy_max - 1) // size
        deleted: list[int] = []
        for f in range(phy_min // size, newest):
            if len(deleted) == FILES_PER_PASS:
                break
            last = _last_store_time(store, txn, f * size, (f + 1) * size)
            if last is not None and now < last + reserved:
                break  # no holes: the first live file ends the pass (B-15)
            deleted.append(f * size)
        if not deleted:
            return RetentionPass(reason, (), phy_min, None)
        new_phy_min = deleted[-1] + size
        queues = corrected_minimums(store, txn, new_phy_min)
        moved = {(t, q): (old, new) for t, q, old, new in queues}
        lost = []
        for topic, group, qid, offset in store.offsets.table(txn):
            if (topic, qid) in moved and 0 <= offset < moved[(topic, qid)][1]:
                lost.append(
                    [
                        group,
                        topic,
                        qid,
                        offset,
                        moved[(topic, qid)][1] - max(offset, moved[(topic, qid)][0]),
                    ]
                )
        seq = ctx.append(
            CommitlogExpired(
                reason=reason,
                files=deleted,
                phy_min=new_phy_min,
                file_reserved_hours=config.fileReservedTime,
                queues=queues,
                lost=lost,
            ).to_record(now)
        )
        return RetentionPass(reason, tuple(deleted), new_phy_min, seq)

    return job


def _disk_used_percent(store: Store) -> float:
    usage = shutil.disk_usage(store.log.path)
    return usage.used * 100 / usage.total if usage.total else 0.0
