"""Consumer offsets: commit (B-28, B-30, B-31), query (B-37) and time lookup (B-68..B-70, S-7)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import lmdb

from es_broker.commands import names
from es_broker.commands.errors import IllegalRequest
from es_broker.log import AppendContext
from es_broker.log.types import (
    Cause,
    OffsetCommitIgnored,
    OffsetCommitted,
    OffsetQueried,
    OffsetsRemoved,
)
from es_broker.log.views import offset_committed_record
from es_broker.projections.consume_queue import UNITS_PER_FILE
from es_broker.remoting.codes import ResponseCode
from es_broker.store import Store

QUERY_NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"

FENCE_MS = 60_000  # a reset fence holds at most this long (S-3)


class OffsetCommit(NamedTuple):
    """An offset commit as UPDATE_CONSUMER_OFFSET asks for it, built once from its header.

    `cause` tells a consumer's commit from an operator's (B-131); `requester` is who sent it.
    """

    group: str
    topic: str
    queue_id: int
    offset: int
    cause: Cause = Cause.CLIENT_COMMIT
    requester: str = ""


def _check_queue_id(queue_id: object) -> int:
    if not isinstance(queue_id, int) or isinstance(queue_id, bool) or queue_id < 0:
        raise IllegalRequest(f"queueId {queue_id!r} must be a non-negative integer")
    return queue_id


@functools.lru_cache(maxsize=4096)
def _check_names(group: str, topic: str) -> None:
    """The group's and the topic's name checks, made once a pair: a consumer commits the same
    pairs, each pull and each commit (a refusal raises, and is not kept)."""
    names.check_group_name(group)
    names.check_topic_name(topic)


def commit_job(
    store: Store,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    cause: Cause,
    requester: str,
) -> Callable[[AppendContext], int]:
    """Store an offset: an overwrite, lower values included (B-28)."""
    if type(group) is str and type(topic) is str:
        _check_names(group, topic)
    else:  # what the checks say of anything else (a text is all a cache can hold)
        names.check_group_name(group)
        names.check_topic_name(topic)
    _check_queue_id(queue_id)
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise IllegalRequest(f"commitOffset {offset!r} must be an integer")

    def job(ctx: AppendContext) -> int:
        now = store.clock.now_ms()
        old, pending = store.offsets.commit_state(ctx.txn, topic, group, queue_id)
        why = cause
        if pending is not None and cause in (Cause.CLIENT_COMMIT, Cause.PULL_COMMIT):
            target, reset_seq, reset_ts = pending
            if offset == target:
                why = Cause.RESET  # the client applying the reset (B-78)
            elif store.config.reset_fence and now - reset_ts < FENCE_MS:
                # a late commit would undo the reset (S-3): recorded, not applied
                return ctx.append(
                    OffsetCommitIgnored(
                        group=group,
                        topic=topic,
                        queue_id=queue_id,
                        offset=offset,
                        current=old,
                        reason="reset_fence",
                        reset_seq=reset_seq,
                        target=target,
                        requester=requester,
                    ).to_record(now)
                )
        return ctx.append(
            offset_committed_record(  # OffsetCommitted(...).to_record(now)
                now,
                group=group,
                topic=topic,
                queue_id=queue_id,
                offset=offset,
                old=old,
                cause=why,
                requester=requester,
            )
        )

    return job


@dataclass(frozen=True, slots=True)
class OffsetAnswer:
    """The QUERY_CONSUMER_OFFSET answer and what it was decided from (B-37)."""

    code: ResponseCode
    offset: int
    row: int  # the row of the B-37 table that decided
    stored: int
    min_offset: int
    head_in_memory: bool | None  # None: no unit at offset 0 to judge
    phy_max: int

    @property
    def remark(self) -> str | None:
        return QUERY_NOT_FOUND_REMARK if self.code == ResponseCode.QUERY_NOT_FOUND else None


def decide_query(
    store: Store, txn: lmdb.Transaction[bytes], group: str, topic: str, queue_id: int
) -> OffsetAnswer:
    """B-37: stored offset; else 0 while the queue head is unread-able from disk; else not found."""
    stored = store.offsets.query(txn, topic, group, queue_id)
    lo, _ = store.cq.bounds(txn, topic, queue_id)
    phy_max = store.commitlog.phy_max(txn)
    head = store.cq.unit(txn, topic, queue_id, 0)
    in_memory = (
        None if head is None else phy_max - head.physical_offset <= store.config.in_memory_threshold
    )
    if stored >= 0:
        return OffsetAnswer(ResponseCode.SUCCESS, stored, 1, stored, lo, in_memory, phy_max)
    if store.config.new_group_start != "strict" and lo <= 0 and in_memory is not False:
        return OffsetAnswer(ResponseCode.SUCCESS, 0, 2, stored, lo, in_memory, phy_max)
    return OffsetAnswer(ResponseCode.QUERY_NOT_FOUND, -1, 3, stored, lo, in_memory, phy_max)


def query_job(
    store: Store, group: str, topic: str, queue_id: int, requester: str
) -> Callable[[AppendContext], OffsetAnswer]:
    """Answer a query; a 'no offset stored' answer is recorded with its verdict (B-134)."""
    _check_queue_id(queue_id)

    def job(ctx: AppendContext) -> OffsetAnswer:
        answer = decide_query(store, ctx.txn, group, topic, queue_id)
        if answer.row != 1:
            ctx.append(
                OffsetQueried(
                    group=group,
                    topic=topic,
                    queue_id=queue_id,
                    row=answer.row,
                    offset=answer.offset,
                    code=int(answer.code),
                    min_offset=answer.min_offset,
                    head_in_memory=answer.head_in_memory,
                    phy_max=answer.phy_max,
                    requester=requester,
                ).to_record(store.clock.now_ms())
            )
        return answer

    return job


# ---------------------------------------------------------------------- time lookup


def _div20(x: int) -> int:
    """Java's integer division by 20 (truncates toward zero)."""
    return x // 20 if x >= 0 else -((-x) // 20)


def search_offset(
    store: Store,
    txn: lmdb.Transaction[bytes],
    topic: str,
    queue_id: int,
    timestamp: int,
    mode: str | None = None,
) -> int:
    """getOffsetInQueueByTime (B-68); `lower_bound` / `upper_bound` per S-7."""
    mode = mode or store.config.time_lookup
    lo, hi = store.cq.bounds(txn, topic, queue_id)
    if hi == 0:
        return 0
    if mode in ("lower_bound", "upper_bound"):
        return _bound(store, txn, topic, queue_id, lo, hi, timestamp, mode == "upper_bound")
    if mode != "compat":
        raise IllegalRequest(f"time_lookup {mode!r} is not one of compat, lower_bound, upper_bound")

    def store_time(offset: int) -> tuple[int, int]:
        unit = store.cq.unit_at(txn, topic, queue_id, offset)
        return unit.physical_offset, unit.store_time

    # 1. the first file (oldest first) whose last-modified time >= ts, else the newest
    first_file, last_file = lo // UNITS_PER_FILE, (hi - 1) // UNITS_PER_FILE
    chosen = last_file
    for f in range(first_file, last_file + 1):
        last_unit = min((f + 1) * UNITS_PER_FILE, hi) - 1
        if store_time(last_unit)[1] >= timestamp:
            chosen = f
            break
    file_start = chosen * UNITS_PER_FILE
    # 2..5. binary search on byte positions inside that file only
    phy_min = store.commitlog.phy_min(txn)
    low = max(lo - file_start, 0) * 20
    high = (min(file_start + UNITS_PER_FILE, hi) - 1 - file_start) * 20
    target = left = right = -1
    left_value = right_value = -1
    while high >= low:
        mid = (low + high) // 40 * 20
        phy, s = store_time(file_start + mid // 20)
        if phy < phy_min:
            low, left = mid + 20, mid
            continue
        if s < 0:
            return 0
        if s == timestamp:
            target = mid
            break
        if s > timestamp:
            high, right, right_value = mid - 20, mid, s
        else:
            low, left, left_value = mid + 20, mid, s
    if target != -1:
        pos = target
    elif left_value == -1:
        pos = right
    elif right_value == -1:
        pos = left
    else:
        pos = right if abs(timestamp - left_value) > abs(timestamp - right_value) else left
    return _div20(file_start * 20 + pos)


def _bound(
    store: Store,
    txn: lmdb.Transaction[bytes],
    topic: str,
    queue_id: int,
    lo: int,
    hi: int,
    ts: int,
    strict: bool,
) -> int:
    """First offset whose store time is >= ts (> ts when strict); max when none."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) // 2
        s = store.cq.unit_at(txn, topic, queue_id, mid).store_time
        if s > ts or (s == ts and not strict):
            b = mid
        else:
            a = mid + 1
    return a


def group_offsets(store: Store, txn: lmdb.Transaction[bytes], group: str) -> list[list[Any]]:
    """Every `*@group` entry as removal records hold them: [topic, queue id, offset]."""
    return [[t, q, o] for t, g, q, o in store.offsets.table(txn) if g == group]


def remove_group_offsets_job(
    store: Store, group: str, *, requester: str, cause: Cause = Cause.GROUP_DELETED
) -> Callable[[AppendContext], int | None]:
    """Remove every `*@group` entry (DELETE_SUBSCRIPTIONGROUP with removeOffset, B-34)."""
    names.check_group_name(group)

    def job(ctx: AppendContext) -> int | None:
        entries = group_offsets(store, ctx.txn, group)
        if not entries:
            return None
        return ctx.append(
            OffsetsRemoved(
                group=group, entries=entries, cause=cause, requester=requester
            ).to_record(store.clock.now_ms())
        )

    return job


def clone_job(
    store: Store,
    src: str,
    dest: str,
    topic: str | None,
    *,
    online_topics: set[str] | None,
    requester: str,
) -> Callable[[AppendContext], list[str]]:
    """CLONE_GROUP_OFFSET (B-35): dest's queue map of each topic becomes a copy of src's."""
    names.check_group_name(src)
    names.check_group_name(dest)

    def job(ctx: AppendContext) -> list[str]:
        txn = ctx.txn
        table = list(store.offsets.table(txn))
        topics = sorted({t for t, g, _, _ in table if g == src and (topic is None or t == topic)})
        cloned = []
        for t in topics:
            if store.topics.get(txn, t) is None:
                continue
            if online_topics is not None and online_topics and t not in online_topics:
                continue  # src consumes other topics online, not this one (B-35)
            src_map = {q: o for tt, g, q, o in table if g == src and tt == t}
            dest_map = {q: o for tt, g, q, o in table if g == dest and tt == t}
            now = store.clock.now_ms()
            gone = [[t, q, o] for q, o in dest_map.items() if q not in src_map]
            if gone:  # the whole map is replaced: queues src has no offset for disappear
                ctx.append(
                    OffsetsRemoved(
                        group=dest, entries=gone, cause=Cause.CLONE, requester=requester
                    ).to_record(now)
                )
            for q, o in sorted(src_map.items()):
                ctx.append(
                    OffsetCommitted(
                        group=dest,
                        topic=t,
                        queue_id=q,
                        offset=o,
                        old=dest_map.get(q, -1),
                        cause=Cause.CLONE,
                        requester=requester,
                    ).to_record(now)
                )
            cloned.append(t)
        return cloned

    return job
