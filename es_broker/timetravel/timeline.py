"""A group's offsets over a window of time, and its newest changes: cheap answers for a chart.

`timeline` samples the offset table at evenly spaced moments (each sample the
same answer as `TimeTravel.offsets_at`), so its cost grows with the number of
samples and queues, never with the number of changes. `recent_changes` walks
each queue's history backwards from the end of the window and stops after
`limit` entries, so the newest changes of a group with a million of them are
a few hundred seeks away.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import lmdb
import msgpack

from es_broker.log import records
from es_broker.log.scan import prefixed
from es_broker.projections.keys import I64, U64, queue_key
from es_broker.timetravel.query import HistoryEntry, TimeTravel, _topics_for

_NEVER = 2**64  # beyond every seq: no later entry changes the answer


@dataclass(frozen=True, slots=True)
class Sample:
    """The offset table of a group at one moment, summed over its queues."""

    at: int
    position: int
    offset: int  # sum of the queues' offsets (queues without an offset count 0)
    max_offset: int  # sum of the queues' max
    lag: int  # sum of the queues' lag (queues without an offset: none)
    queues: int  # queues that had an offset then

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


@dataclass(frozen=True, slots=True)
class QueueLine:
    """One queue's offset, max and lag at each sample moment (None: no offset then)."""

    topic: str
    queue_id: int
    offsets: list[int | None]
    max_offsets: list[int]
    lags: list[int | None]

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


def window(
    travel: TimeTravel, txn: lmdb.Transaction[bytes], group: str, topic: str | None
) -> tuple[int, int] | None:
    """From the group's first offset change to the log's last record (None: no offset ever)."""
    first_seq = None
    cur = txn.cursor(db=travel.history_db)
    for prefix, _t, _g, _q in travel._queue_prefixes(txn, group, topic):
        if cur.set_range(prefix):
            seq = U64.unpack(cur.key()[-8:])[0]
            first_seq = seq if first_seq is None else min(first_seq, seq)
    if first_seq is None:
        return None
    if first_seq <= travel.horizon(txn):  # a floor entry (B-460): the first is in the archive index
        side = travel.before_horizon(txn)
        with side.store.read() as stxn:
            early = window(side, stxn, group, topic)
        if early is not None:
            return early[0], travel.time_of(txn, travel.store.log.last_seq)
    last = travel.store.log.last_seq
    return travel.time_of(txn, first_seq), travel.time_of(txn, last)


def timeline(
    travel: TimeTravel,
    txn: lmdb.Transaction[bytes],
    group: str,
    *,
    topic: str | None = None,
    since: int,
    until: int,
    points: int,
) -> list[Sample]:
    """`points` samples from `since` to `until` (both included), each equal to `offsets_at` summed."""
    return timeline_by_queue(
        travel, txn, group, topic=topic, since=since, until=until, points=points
    )[0]


def timeline_by_queue(
    travel: TimeTravel,
    txn: lmdb.Transaction[bytes],
    group: str,
    *,
    topic: str | None = None,
    since: int,
    until: int,
    points: int,
) -> tuple[list[Sample], list[QueueLine]]:
    """The samples summed over queues, and each queue's own line, at the same `points` moments.

    Each value is `offsets_at` of that queue at that moment: the cost is a few
    seeks per queue and moment, whatever the number of changes in the window.
    """
    points = max(points, 2)
    span = max(until - since, 0)
    moments = [since + span * i // (points - 1) for i in range(points)]
    positions = [travel.position_at(txn, at) for at in moments]
    horizon = travel.horizon(txn)
    late = [i for i, p in enumerate(positions) if p >= horizon]
    sums, lines = _by_queue(travel, txn, group, topic, [positions[i] for i in late], late, points)
    early = [i for i, p in enumerate(positions) if p < horizon]
    if early:  # B-460: moments before the horizon, from the archive index
        side = travel.before_horizon(txn)
        with side.store.read() as stxn:
            early_sums, early_lines = _by_queue(
                side, stxn, group, topic, [positions[i] for i in early], early, points
            )
        for total, more in zip(sums, early_sums, strict=True):
            for i in early:
                total[i] = more[i]
        for key, (offsets, maxes, lags) in early_lines.items():
            line = lines.setdefault(key, ([None] * points, [0] * points, [None] * points))
            for i in early:
                line[0][i], line[1][i], line[2][i] = offsets[i], maxes[i], lags[i]
    offset, top, lag, held = sums
    samples = [
        Sample(moments[i], positions[i], offset[i], top[i], lag[i], held[i]) for i in range(points)
    ]
    return samples, [QueueLine(t, q, *line) for (_, t, q), line in sorted(lines.items())]


def _by_queue(
    travel: TimeTravel,
    txn: lmdb.Transaction[bytes],
    group: str,
    topic: str | None,
    positions: list[int],
    slots: list[int],
    points: int,
) -> tuple[list[list[int]], dict[tuple[bytes, str, int], tuple[list[Any], list[Any], list[Any]]]]:
    """The sums (offset, max, lag, queues held) and each queue's line at `positions`, written to
    `slots` of lists of `points` (the moments of one side of the horizon)."""
    offset = [0] * points
    top = [0] * points
    lag = [0] * points
    held = [0] * points
    lines: dict[tuple[bytes, str, int], tuple[list[Any], list[Any], list[Any]]] = {}
    cur = txn.cursor(db=travel.history_db)
    qmax = txn.cursor(db=travel.index.qmax_db)
    for prefix, t, _g, q in travel._queue_prefixes(txn, group, topic):
        offsets: list[int | None] = [None] * points
        maxes = [0] * points
        lags: list[int | None] = [None] * points
        qprefix = queue_key(t, q)
        # each answer holds until the queue's next entry: moments before it need no seek
        change_until = max_until = -1
        new = queue_max = 0
        known = removed = False
        for i, position in zip(slots, positions, strict=True):
            if position > change_until:
                found, change_until = _latest_until(cur, prefix, position)
                known = found is not None
                if found is not None:
                    removed = travel._removed(txn, found[0])
                    new = msgpack.unpackb(found[1])[2]
            if not known:
                continue
            if position > max_until:
                found_max, max_until = _latest_until(qmax, qprefix, position)
                queue_max = I64.unpack(found_max[1])[0] if found_max else 0
            maxes[i] = queue_max
            if removed:
                continue
            held[i] += 1
            top[i] += queue_max
            if new >= 0:
                offsets[i] = new
                lags[i] = queue_max - new
                offset[i] += new
                lag[i] += queue_max - new
        lines[(prefix, t, q)] = (offsets, maxes, lags)
    return [offset, top, lag, held], lines


def _latest_until(
    cur: lmdb.Cursor[bytes], prefix: bytes, position: int
) -> tuple[tuple[bytes, bytes] | None, int]:
    """`_latest(cur, prefix, position)`, and the last position with the same answer.

    The seek lands on the prefix's first entry after `position`, so the next
    entry's seq comes free: every position before it has the same latest entry.
    """
    if position <= 0:
        return None, 0
    after = prefix + U64.pack(position + 1)
    if cur.set_range(after):
        key = cur.key()
        until = (
            U64.unpack(key[-8:])[0] - 1
            if len(key) == len(after) and key.startswith(prefix)
            else _NEVER
        )
        found = cur.prev()
    else:
        until = _NEVER
        found = cur.last()
    if not found:
        return None, until
    key = cur.key()
    if len(key) != len(after) or not key.startswith(prefix):
        return None, until
    return (key, cur.value()), until


def recent_changes(
    travel: TimeTravel,
    txn: lmdb.Transaction[bytes],
    group: str,
    *,
    topic: str | None = None,
    since: int | None = None,
    until: int | None = None,
    limit: int = 200,
    events_only: bool = False,
    changes_only: bool = False,
) -> tuple[list[HistoryEntry], bool]:
    """The newest `limit` history entries of the window, oldest first, and whether older ones exist.

    The entries are those of `TimeTravel.history` (offset changes and the
    records that explain them); `events_only` leaves the offset changes out,
    `changes_only` the records that explain them (a reset record and the
    changes it made share their seq: a list of changes shows each once).
    """
    lo = travel.position_at(txn, since - 1) + 1 if since is not None else 1
    hi = travel.position_at(txn, until) if until is not None else travel.store.log.last_seq
    if hi < lo:
        return [], False
    horizon = travel.horizon(txn)
    newest = _newest(
        travel, txn, group, topic, max(lo, horizon + 1), hi, limit + 1, events_only, changes_only
    )
    if len(newest) <= limit and lo <= horizon:  # B-460: older ones from the archive index
        side = travel.before_horizon(txn)
        with side.store.read() as stxn:
            newest += _newest(
                side,
                stxn,
                group,
                topic,
                lo,
                min(hi, horizon),
                limit + 1 - len(newest),
                events_only,
                changes_only,
            )
    more = len(newest) > limit
    return sorted(newest[:limit], key=lambda e: e.seq), more


def _newest(
    travel: TimeTravel,
    txn: lmdb.Transaction[bytes],
    group: str,
    topic: str | None,
    lo: int,
    hi: int,
    limit: int,
    events_only: bool,
    changes_only: bool,
) -> list[HistoryEntry]:
    """The newest `limit` entries between two positions, newest first, with their times."""
    if hi < lo or limit <= 0:
        return []
    # lazy streams: the merge reads each queue only as far back as the newest `limit` need
    streams: list[Iterable[tuple[int, dict[str, Any]]]] = []
    if not changes_only:
        streams.append(_events_backwards(travel, txn, group, topic, lo, hi, limit))
    if not events_only:
        streams += [
            _changes_backwards(travel, txn, prefix, t, g, q, lo, hi, limit)
            for prefix, t, g, q in travel._queue_prefixes(txn, group, topic)
        ]
    newest = list(islice(heapq.merge(*streams, key=lambda e: -e[0]), limit))
    times = travel._times_of(txn, sorted(seq for seq, _ in newest))[::-1]
    return [
        HistoryEntry(time=time, **fields) for (_, fields), time in zip(newest, times, strict=True)
    ]


def _changes_backwards(
    travel: TimeTravel,
    txn: lmdb.Transaction[bytes],
    prefix: bytes,
    topic: str,
    group: str,
    queue_id: int,
    lo: int,
    hi: int,
    limit: int,
) -> Iterator[tuple[int, dict[str, Any]]]:
    stop = prefix + U64.pack(hi + 1)
    for n, (key, raw) in enumerate(
        prefixed(txn, travel.history_db, prefix, stop=stop, reverse=True)
    ):
        if n >= limit or len(key) != len(prefix) + 8:
            return
        seq = U64.unpack(key[-8:])[0]
        if seq < lo:
            return
        ts, old, new, cause, requester = msgpack.unpackb(raw)
        removed = travel._removed(txn, key)
        yield (
            seq,
            {
                "seq": seq,
                "ts": ts,
                "group": group,
                "topic": topic,
                "kind": "offset_removed" if removed else "offset_change",
                "queue_id": queue_id,
                "old": old,
                "new": new,
                "cause": cause,
                "requester": requester,
            },
        )


def _events_backwards(
    travel: TimeTravel,
    txn: lmdb.Transaction[bytes],
    group: str,
    topic: str | None,
    lo: int,
    hi: int,
    limit: int,
) -> list[tuple[int, dict[str, Any]]]:
    prefix = group.encode() + b"\x00"
    out: list[tuple[int, dict[str, Any]]] = []
    stop = prefix + U64.pack(hi + 1)
    for key, raw in prefixed(txn, travel.index.events_db, prefix, stop=stop, reverse=True):
        if len(out) >= limit or len(key) != len(prefix) + 8:
            break
        seq = U64.unpack(key[-8:])[0]
        if seq < lo:
            break
        record = records.unpack(raw)
        if topic is None or topic in _topics_for(record, group):
            detail = {
                k: v for k, v in record.items() if k not in ("type", "v", "ts", "group", "topic")
            }
            out.append(
                (
                    seq,
                    {
                        "seq": seq,
                        "ts": record["ts"],
                        "group": group,
                        "topic": record.get("topic", ""),
                        "kind": record["type"],
                        "queue_id": record.get("queue_id"),
                        "cause": record["type"],
                        "requester": str(record.get("requester") or record.get("client") or ""),
                        "detail": detail,
                    },
                )
            )
    return out
