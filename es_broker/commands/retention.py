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

import bisect
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
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
    # a step's heads, for the pass's QueueHeads once the step is stored (B-678)
    heads: HeadsStep | None = field(default=None, compare=False, repr=False)


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
        new_min = _corrected(store, txn, topic, qid, lo, hi, phy_min)
        if new_min is not None:
            out.append([topic, qid, lo, new_min])
    return out


def _corrected(
    store: Store, txn: lmdb.Transaction[bytes], topic: str, qid: int, lo: int, hi: int, phy_min: int
) -> int | None:
    """A queue's new minimum once the commit log below phy_min is gone; None: it stays."""
    if hi == 0 or store.cq.unit_at(txn, topic, qid, lo).physical_offset >= phy_min:
        return None
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
    # none in that file: the minimum stays stale (B-18)
    return new_min if new_min is not None and new_min != lo else None


# a queue's head unit's physical offset, its key, topic, queue id
Head = tuple[int, bytes, str, int]
# a queue's topic, queue id, min, max
Bounds = tuple[str, int, int, int]


@dataclass(frozen=True, slots=True)
class HeadsStep:
    """What a step found through `QueueHeads.below`, for `QueueHeads.settle` once it is stored."""

    phy_min: int
    corrected: list[list[Any]]  # corrected_minimums' rows
    heads: list[Head]  # the pass's queues by head as the step began (read anew, or the kept ones)
    stale: dict[bytes, Bounds]  # and its queues wholly below an earlier step's phyMin
    upto: int
    after: list[Head]  # the heads of the queues it read, after it
    woken: list[bytes]  # queues that were wholly below and have changed since
    after_stale: dict[bytes, Bounds]  # queues it found wholly below its phyMin


class QueueHeads:
    """The queues of the consume queues by the physical offset of their head unit, for one clean
    pass (B-678): read whole at the pass's first step, so that each later step reads the queues
    whose head lies below its new phyMin, not every queue. A queue all of whose units lie below
    a step's phyMin keeps its minimum (B-18) until it stores a message: it is kept apart with its
    bounds, and a step reads it again only when they have changed. It finds what
    `corrected_minimums` finds, in its order, while these hold between its reading and a step: a
    queue's head never moves back (only retention moves it, and passes run one at a time, B-677;
    a deleted queue is read again and found gone), and a unit stored since lies at or past the
    commit log's end of that moment, `upto`: a step that reaches past it reads every queue again.
    A step changes it only once the step is stored (`settle`): a step the writer runs again (its
    transaction aborted) finds it as it was.
    """

    __slots__ = ("_heads", "_stale", "_upto")

    def __init__(self) -> None:
        self._heads: list[Head] | None = None
        self._stale: dict[bytes, Bounds] = {}
        self._upto = 0

    def below(self, store: Store, txn: lmdb.Transaction[bytes], phy_min: int) -> HeadsStep:
        """`corrected_minimums(store, txn, phy_min)`, with what `settle` keeps of it."""
        cq = store.cq
        heads, stale, upto = self._heads, self._stale, self._upto
        if heads is None or phy_min > upto:
            upto = store.commitlog.phy_max(txn)
            heads, stale = sorted(cq.heads(txn)), {}
        taken = [
            (key, topic, qid)
            for _, key, topic, qid in heads[: bisect.bisect_left(heads, (phy_min,))]
        ]
        woken = []
        for key, (topic, qid, lo, hi) in stale.items():
            if cq.bounds(txn, topic, qid) != (lo, hi):
                woken.append(key)
                taken.append((key, topic, qid))
        taken.sort()  # the order of the consume queues' own table
        corrected: list[list[Any]] = []
        after: list[Head] = []
        after_stale: dict[bytes, Bounds] = {}
        for key, topic, qid in taken:
            lo, hi = cq.bounds(txn, topic, qid)
            if not hi:  # gone (its topic deleted): out of the pass
                continue
            new_min = _corrected(store, txn, topic, qid, lo, hi, phy_min)
            if new_min is not None:
                corrected.append([topic, qid, lo, new_min])
                lo = new_min
            head = cq.unit_at(txn, topic, qid, lo).physical_offset
            if head < phy_min:  # every unit below phyMin: its minimum stays (B-18)
                after_stale[key] = (topic, qid, lo, hi)
            else:
                after.append((head, key, topic, qid))
        return HeadsStep(phy_min, corrected, heads, stale, upto, after, woken, after_stale)

    def settle(self, step: HeadsStep) -> None:
        """`step` was stored: the queues it read have their heads after it."""
        heads, stale = step.heads, step.stale
        del heads[: bisect.bisect_left(heads, (step.phy_min,))]
        for head in step.after:
            bisect.insort(heads, head)
        for key in step.woken:
            del stale[key]
        stale.update(step.after_stale)
        self._heads, self._stale, self._upto = heads, stale, step.upto


def step_end(store: Store, txn: lmdb.Transaction[bytes], phy_min: int, file_end: int) -> int:
    """Where a step of retention from `phy_min` ends (B-676): a message's start at most
    `retention_step_bytes` past it (the last walk mark there, B-477), else the file's end."""
    step = store.config.retention_step_bytes
    if step <= 0 or phy_min + step >= file_end:
        return file_end
    mark = store.commitlog.walk_start(txn, phy_min + step + 1)
    return mark if phy_min < mark < file_end else file_end


def retention_job(
    store: Store,
    *,
    manual: bool = False,
    reason: str | None = None,
    heads: QueueHeads | None = None,
) -> Callable[[AppendContext], RetentionPass]:
    """One step of a clean pass (CleanCommitLogService): decide, record, apply (B-676).

    The step expires the oldest expired file from phyMin on, at most `retention_step_bytes` of
    it; `deleted_files` names the file when the step reaches its end. `reason`: the trigger the
    pass's first step found, which its later steps carry (a pass begun at the delete hour ends
    after it). `heads`: the pass's queues by head (B-678), which the step reads instead of every
    queue; its outcome's `heads` is settled into them by the caller once it is stored. None: every
    queue is read (`corrected_minimums`)."""
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
        step = None if heads is None else heads.below(store, txn, new_phy_min)
        queues = corrected_minimums(store, txn, new_phy_min) if step is None else step.corrected
        lost = lost_messages(store, txn, queues)
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
        return RetentionPass(why, tuple(deleted), new_phy_min, seq, step)

    return job


def lost_messages(
    store: Store, txn: lmdb.Transaction[bytes], queues: list[list[Any]]
) -> list[list[Any]]:
    """[group, topic, queue, offset, lost] of every offset below a corrected queue's new minimum
    (S-11), in the offset table's order: the rows of the corrected queues' topics only."""
    moved = {(t, q): (old, new) for t, q, old, new in queues}
    rows = []
    for topic in {t for t, _ in moved}:
        for key, group, qid, offset in store.offsets.of_topic(txn, topic):
            old_new = moved.get((topic, qid))
            if old_new is not None and 0 <= offset < old_new[1]:
                lost = old_new[1] - max(offset, old_new[0])
                rows.append((key, [group, topic, qid, offset, lost]))
    rows.sort(key=itemgetter(0))
    return [row for _, row in rows]


def _disk_used_percent(store: Store) -> float:
    usage = shutil.disk_usage(store.log.path)
    return usage.used * 100 / usage.total if usage.total else 0.0
