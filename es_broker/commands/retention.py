"""Retention: expired commit-log files are removed and queue minimums corrected (B-14..B-18, S-11).

The commit log is cut into files of mappedFileSizeCommitLog bytes (a message
never straddles two, B-08). A pass decides which files are expired
(oldest first, stop at the first live one, never the newest, at most 10),
which consume-queue minimums move, and how many unconsumed messages each
group loses. It expires them in steps (B-676): each step a `commitlog_expired`
record in a write transaction of its own, covering at most
`retention_step_bytes` of one file and ending at a message's start, whose
application deletes the message bodies and their index entries; the last step
of a file names it. So the writer is held for a step, never for a file (a GiB
of 1 KiB messages held it for seconds), and the broker's other work runs
between steps. Offsets, resets and every other record stay forever, so history
remains reconstructable.
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


def step_end(store: Store, txn: lmdb.Transaction[bytes], phy_min: int, file_end: int) -> int:
    """Where a step of retention from `phy_min` ends (B-676): a message's start at most
    `retention_step_bytes` past it (the last walk mark there, B-477), else the file's end."""
    step = store.config.retention_step_bytes
    if step <= 0 or phy_min + step >= file_end:
        return file_end
    mark = store.commitlog.walk_start(txn, phy_min + step + 1)
    return mark if phy_min < mark < file_end else file_end


def retention_job(
    store: Store, *, manual: bool = False, reason: str | None = None
) -> Callable[[AppendContext], RetentionPass]:
    """One step of a clean pass (CleanCommitLogService): decide, record, apply (B-676).

    The step expires the oldest expired file from phyMin on, at most `retention_step_bytes` of
    it; `deleted_files` names the file when the step reaches its end. `reason`: the trigger the
    pass's first step found, which its later steps carry (a pass begun at the delete hour ends
    after it)."""
    config = store.config

    def job(ctx: AppendContext) -> RetentionPass:
        txn = ctx.txn
        now = store.clock.now_ms()
        why = reason or ("manual" if manual else None)
        if why is None and is_time_to_delete(config.deleteWhen, now):
            why = "time"
        if why is None and _disk_used_percent(store) > min(
            max(config.diskMaxUsedSpaceRatio, 10), 95
        ):
            why = "space"
        phy_min, phy_max = store.commitlog.phy_min(txn), store.commitlog.phy_max(txn)
        if why is None or phy_max == 0:
            return RetentionPass(why, (), phy_min, None)
        size = config.mappedFileSizeCommitLog
        reserved = config.fileReservedTime * 3_600_000
        f = phy_min // size
        if f >= (phy_max - 1) // size:
            return RetentionPass(why, (), phy_min, None)  # never the newest file (B-15)
        last = _last_store_time(store, txn, max(phy_min, f * size), (f + 1) * size)
        if last is not None and now < last + reserved:
            return RetentionPass(why, (), phy_min, None)  # no holes: the first live file (B-15)
        new_phy_min = step_end(store, txn, phy_min, (f + 1) * size)
        deleted = [f * size] if new_phy_min == (f + 1) * size else []
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
                reason=why,
                files=deleted,
                phy_min=new_phy_min,
                file_reserved_hours=config.fileReservedTime,
                queues=queues,
                lost=lost,
            ).to_record(now)
        )
        return RetentionPass(why, tuple(deleted), new_phy_min, seq)

    return job


def _disk_used_percent(store: Store) -> float:
    usage = shutil.disk_usage(store.log.path)
    return usage.used * 100 / usage.total if usage.total else 0.0
