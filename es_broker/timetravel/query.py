"""Answers from the time index: offsets at T, durable offsets at T (B-133), a group's history.

Every answer is a handful of LMDB seeks per queue (O(log n) each); nothing
replays the log. "At time t" means after every record whose effective time
is <= t (B-132, see `es_broker.projections.time_index`), i.e. after log position `position_at(t)`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import lmdb
import msgpack

from es_broker.history.horizon import archive_index
from es_broker.log import records
from es_broker.log.scan import prefixed, prefixed_keys
from es_broker.projections.keys import I64, U64, queue_key, split_offset_key

# B-32/B-133: ConsumerOffsetManager persists first 10 s after start, then every
# flushConsumerOffsetInterval (5 s by default)
FIRST_PERSIST_DELAY_MS = 10_000
_AFTER_EVERY_SEQ = b"\xff" * 9  # sorts after every (queue prefix + U64 seq) key


class IndexMissing(Exception):
    """The data directory has no time index yet (written by an older es-broker)."""


@dataclass(frozen=True, slots=True)
class QueueOffsetAt:
    """One row of the offset table at a moment, with the change that set it."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_offset: int  # the queue's max at that moment
    lag: int | None  # max - offset; None while the offset is negative ("no offset", B-37)
    seq: int  # the record that set the offset
    time: int  # its effective time
    cause: str
    requester: str
    durable: int | None = None  # B-133, when asked: -1 when nothing was persisted yet
    durable_lag: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """An offset change, or a record about the group that explains changes (a reset, a correction)."""

    seq: int
    time: int
    ts: int
    group: str
    topic: str
    kind: str  # "offset_change", "offset_removed" or the record type
    queue_id: int | None = None
    old: int | None = None
    new: int | None = None
    cause: str = ""
    requester: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


class TimeTravel:
    """Reads over a Store (its log, offset table history and time index)."""

    def __init__(self, store: Any, *, archive: bool = True) -> None:
        self.store = store
        # a data directory's TimeTravel reads moments before its horizon from the archive index
        self._archive = archive and hasattr(store, "history")
        self.index = store.timeindex
        self.history_db = store.offsets.history
        self.persist_interval = store.config.flushConsumerOffsetInterval
        with store.log.read_txn() as txn:
            built = self.index.is_built(txn, store.log.last_seq)
        if not built:
            raise IndexMissing(
                f"{store.log.path} has no time index yet: open it once with es-broker "
                "(serve, or any command without a running broker) to build it"
            )

    # ------------------------------------------------------------------ the horizon (B-460)
    def horizon(self, txn: lmdb.Transaction[bytes]) -> int:
        """The last sealed seq: the index holds every entry after it, and its floor (0: none sealed)."""
        return int(self.store.history.sealed_upto(txn)) if self._archive else 0

    def before_horizon(self, txn: lmdb.Transaction[bytes]) -> TimeTravel:
        """A TimeTravel over the archive index: the same answers for positions before the horizon."""
        index = archive_index(self.store, txn)
        return TimeTravel(index, archive=False)

    # ------------------------------------------------------------------ time <-> position
    def position_at(self, txn: lmdb.Transaction[bytes], at: int) -> int:
        """The last seq whose effective time is <= at (0: before the first record)."""
        horizon = self.horizon(txn)
        if horizon and at < self._time_of(txn, horizon):
            side = self.before_horizon(txn)
            with side.store.read() as stxn:
                return side.position_at(stxn, at)
        cur = txn.cursor(db=self.index.time_db)
        if at < 0:
            return 0
        if cur.set_range(U64.pack(at + 1)):
            following: int = U64.unpack(cur.value())[0]
            return following - 1
        return self.store.log.last_seq if cur.last() else 0

    def time_of(self, txn: lmdb.Transaction[bytes], seq: int) -> int:
        """The effective time of a record."""
        if seq < self.horizon(txn):
            side = self.before_horizon(txn)
            with side.store.read() as stxn:
                return side.time_of(stxn, seq)
        return self._time_of(txn, seq)

    def _time_of(self, txn: lmdb.Transaction[bytes], seq: int) -> int:
        cur = txn.cursor(db=self.index.seq_db)
        found = cur.prev() if cur.set_range(U64.pack(seq + 1)) else cur.last()
        return U64.unpack(cur.value())[0] if found else 0

    def start(self, txn: lmdb.Transaction[bytes]) -> int | None:
        """When the broker started, as far as the log tells: the time of its first record.

        The log has no start or shutdown records yet, so the compat persist
        schedule (B-133) runs from the first record; a restart is not seen.
        """
        cur = txn.cursor(db=self.index.time_db)
        return U64.unpack(cur.key())[0] if cur.first() else None

    def persist_tick(self, txn: lmdb.Transaction[bytes], at: int) -> int | None:
        """The last compat persist tick <= at, or None before the first one (B-32, B-133)."""
        start = self.start(txn)
        return persist_tick(start, at, self.persist_interval)

    # ------------------------------------------------------------------ queues
    def queue_max_at(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, position: int
    ) -> int:
        """max(T, Q) after the record at `position` (0 for a queue without messages then)."""
        if position < self.horizon(txn):
            side = self.before_horizon(txn)
            with side.store.read() as stxn:
                return side.queue_max_at(stxn, topic, queue_id, position)
        prefix = queue_key(topic, queue_id)
        found = _latest(txn.cursor(db=self.index.qmax_db), prefix, position)
        return I64.unpack(found[1])[0] if found else 0

    def _queue_prefixes(
        self, txn: lmdb.Transaction[bytes], group: str | None, topic: str | None
    ) -> Iterator[tuple[bytes, str, str, int]]:
        """(history key prefix, topic, group, queue id) of every queue the offset table ever held."""
        cur = txn.cursor(db=self.history_db)
        start = (
            f"{topic}@{group}".encode() + b"\x00"
            if topic is not None and group is not None
            else b""
        )
        if not cur.set_range(start):
            return
        while True:
            key = cur.key()
            if not key.startswith(start):
                return
            prefix = key[:-8]
            t, g, q = split_offset_key(prefix)
            if (group is None or g == group) and (topic is None or t == topic):
                yield prefix, t, g, q
            if not cur.set_range(prefix + _AFTER_EVERY_SEQ):
                return

    # ------------------------------------------------------------------ answers
    def offsets_at(
        self,
        txn: lmdb.Transaction[bytes],
        at: int,
        *,
        group: str | None = None,
        topic: str | None = None,
        durable: bool = False,
    ) -> list[QueueOffsetAt]:
        """The offset table at `at` (every group, or one group, or one group's topic)."""
        position = self.position_at(txn, at)
        horizon = self.horizon(txn)
        if position < horizon:  # before the horizon: the archive index answers it all
            side = self.before_horizon(txn)
            with side.store.read() as stxn:
                return side.offsets_at(stxn, at, group=group, topic=topic, durable=durable)
        tick = self.persist_tick(txn, at) if durable else None
        durable_position = self.position_at(txn, tick) if tick is not None else 0
        kept_before: dict[tuple[str, str, int], int] | None = None
        if durable and tick is not None and durable_position < horizon:
            side = self.before_horizon(txn)
            with side.store.read() as stxn:
                kept_before = {
                    (r.group, r.topic, r.queue_id): r.offset
                    for r in side.offsets_at(stxn, tick, group=group, topic=topic)
                }
        cur = txn.cursor(db=self.history_db)
        rows = []
        for prefix, t, g, q in self._queue_prefixes(txn, group, topic):
            found = _latest(cur, prefix, position)
            if found is None or self._removed(txn, found[0]):
                continue  # the queue got its first offset after `at`, or had left the table by then
            seq = U64.unpack(found[0][-8:])[0]
            _, _, new, cause, requester = msgpack.unpackb(found[1])
            top = self.queue_max_at(txn, t, q, position)
            extra: dict[str, Any] = {}
            if durable and kept_before is not None:
                value = kept_before.get((g, t, q), -1)
                extra = {"durable": value, "durable_lag": top - value if value >= 0 else None}
            elif durable:
                kept = _latest(cur, prefix, durable_position) if durable_position else None
                value = (
                    msgpack.unpackb(kept[1])[2] if kept and not self._removed(txn, kept[0]) else -1
                )
                extra = {"durable": value, "durable_lag": top - value if value >= 0 else None}
            rows.append(
                QueueOffsetAt(
                    g,
                    t,
                    q,
                    new,
                    top,
                    top - new if new >= 0 else None,
                    seq,
                    self.time_of(txn, seq),
                    cause,
                    requester,
                    **extra,
                )
            )
        return rows

    def history(
        self,
        txn: lmdb.Transaction[bytes],
        group: str,
        *,
        topic: str | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> list[HistoryEntry]:
        """Every offset change of a group (and the records that explain them), oldest first."""
        lo = self.position_at(txn, since - 1) + 1 if since is not None else 1
        hi = self.position_at(txn, until) if until is not None else self.store.log.last_seq
        if hi < lo:
            return []
        return self.history_between(txn, group, topic, lo, hi)

    def history_between(
        self, txn: lmdb.Transaction[bytes], group: str, topic: str | None, lo: int, hi: int
    ) -> list[HistoryEntry]:
        """`history` between two positions (both included)."""
        out: list[HistoryEntry] = []
        horizon = self.horizon(txn)
        if lo <= horizon:  # the part up to the horizon, from the archive index
            side = self.before_horizon(txn)
            with side.store.read() as stxn:
                out = side.history_between(stxn, group, topic, lo, min(hi, horizon))
            lo = horizon + 1
            if hi < lo:
                return out
        streams = [
            self._changes(txn, prefix, t, g, q, lo, hi)
            for prefix, t, g, q in self._queue_prefixes(txn, group, topic)
        ]
        streams.append(self._events(txn, group, topic, lo, hi))
        merged = list(heapq.merge(*streams, key=_first))
        times = self._times_of(txn, [row[0] for row in merged])
        # positional: HistoryEntry's field order (seq, time, ts, group, topic, kind, queue_id,
        # old, new, cause, requester, detail); built once the times are known
        return out + [
            HistoryEntry(row[0], time, *row[1:]) for row, time in zip(merged, times, strict=True)
        ]

    def _changes(
        self,
        txn: lmdb.Transaction[bytes],
        prefix: bytes,
        topic: str,
        group: str,
        queue_id: int,
        lo: int,
        hi: int,
    ) -> Iterator[tuple[Any, ...]]:
        """A queue's offset changes between two positions, as HistoryEntry fields but the time."""
        start, stop = prefix + U64.pack(lo), prefix + U64.pack(hi + 1)
        # the removals among them (B-34, rare): one scan of the range, not a lookup per change
        removed = set(prefixed_keys(txn, self.index.removed_db, prefix, start=start, stop=stop))
        size = len(prefix) + 8
        unpack = msgpack.unpackb
        for key, raw in prefixed(txn, self.history_db, prefix, start=start, stop=stop):
            if len(key) != size:
                return
            ts, old, new, cause, requester = unpack(raw)
            kind = "offset_removed" if removed and key in removed else "offset_change"
            yield (
                U64.unpack(key[-8:])[0],
                ts,
                group,
                topic,
                kind,
                queue_id,
                old,
                new,
                cause,
                requester,
                {},
            )

    def _removed(self, txn: lmdb.Transaction[bytes], history_key: bytes) -> bool:
        """Whether an offset_history entry is a removal of the entry (B-34), not a change of its value."""
        return txn.get(bytes(history_key), db=self.index.removed_db) is not None

    def _events(
        self, txn: lmdb.Transaction[bytes], group: str, topic: str | None, lo: int, hi: int
    ) -> Iterator[tuple[Any, ...]]:
        """The records about the group between two positions, as HistoryEntry fields but the time."""
        prefix = group.encode() + b"\x00"
        for key, raw in prefixed(txn, self.index.events_db, prefix, start=prefix + U64.pack(lo)):
            if len(key) != len(prefix) + 8:
                return
            seq = U64.unpack(key[-8:])[0]
            if seq > hi:
                return
            record = records.unpack(raw)
            if topic is not None and topic not in _topics_for(record, group):
                continue
            detail = {
                k: v for k, v in record.items() if k not in ("type", "v", "ts", "group", "topic")
            }
            yield (
                seq,
                record["ts"],
                group,
                record.get("topic", ""),
                record["type"],
                record.get("queue_id"),
                None,
                None,
                record["type"],
                str(record.get("requester") or record.get("client") or ""),
                detail,
            )

    def _times_of(self, txn: lmdb.Transaction[bytes], seqs: list[int]) -> list[int]:
        """Effective times of ascending seqs: one seek each, skipped while a seq shares its predecessor's."""
        out = []
        cur = txn.cursor(db=self.index.seq_db)
        valid_until = -1  # seqs up to here have the time of the entry found last
        current = 0
        for seq in seqs:
            if seq > valid_until:
                found = cur.prev() if cur.set_range(U64.pack(seq + 1)) else cur.last()
                current = U64.unpack(cur.value())[0] if found else 0
                # the entry after the one found starts a later time: until then the time holds
                valid_until = (
                    (U64.unpack(cur.key())[0] - 1 if cur.next() else 2**64) if found else -1
                )
            out.append(current)
        return out


def _topics_for(record: Mapping[str, Any], group: str) -> set[str]:
    """The topics a group event is about (a retention pass names them in its losses)."""
    topics = {record["topic"]} if isinstance(record.get("topic"), str) else set()
    return topics | {x[1] for x in record.get("lost") or () if x[0] == group}


def _first(row: tuple[Any, ...]) -> int:
    seq: int = row[0]
    return seq


def _latest(cur: lmdb.Cursor[bytes], prefix: bytes, position: int) -> tuple[bytes, bytes] | None:
    """The entry of `prefix` with the largest seq <= position, or None."""
    if position <= 0:
        return None
    found = cur.prev() if cur.set_range(prefix + U64.pack(position + 1)) else cur.last()
    if not found:
        return None
    key = cur.key()
    if len(key) != len(prefix) + 8 or not key.startswith(prefix):
        return None
    return key, cur.value()


def persist_tick(start: int | None, at: int, interval: int) -> int | None:
    """ConsumerOffsetManager's last persist <= at: start + 10 s, then every `interval` (B-133)."""
    if start is None or at < start + FIRST_PERSIST_DELAY_MS:
        return None
    return (
        start
        + FIRST_PERSIST_DELAY_MS
        + (at - start - FIRST_PERSIST_DELAY_MS) // interval * interval
    )
