"""Message counts from the records: totals since the log began, and per minute of broker time.

What RocketMQ counts in memory (4.9.8's BrokerStatsManager, 5.x's BrokerMetricsManager)
es-broker counts from the records the writer applies, in the same write transaction, so a
restart continues from the log's totals and the minute buckets answer for any past window
(B-355..B-358).

Which records count:

- TOPIC_PUT (kind `P`): a `messages_stored` record a client sent: no `cause` (send-back,
  redrive), no `delivery` (the delay schedule's re-put), no transaction end (commit or
  discard re-puts the half message). A half message and a delayed message count on their
  real topic, with message type `transaction` or `delay` (else `normal`).
- GROUP_GET (kind `G`, name `topic@group`): a `messages_delivered` record: its offsets are the
  messages, their sizes read from the consume queue applied before this projection.
  A `messages_popped` record (RocketMQ 5's pop) counts its messages handed out the same way.
- SNDBCK_PUT (kind `S`, name `topic@group`): a `message_sent_back` record that stored a copy
  (retry or dead letter), on the message's original topic.
- BROKER_PUT / BROKER_GET (kinds `p`, `g`, name ``): the sums of the two above.

Databases (U64 big-endian):

| database     | key                                  | value                        |
|--------------|--------------------------------------|------------------------------|
| stats_total  | kind + name [+ NUL + message type]   | messages, bytes, records     |
| stats_minute | kind + name + NUL + minute           | messages, bytes, records     |
| stats_total  | H + topic NUL type NUL bucket         | messages, bytes, records     |
| stats_total  | D + reason                           | refused requests, 0, records |
| stats_total  | b"\\x00built"                         | empty: written at seq 1      |
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lmdb

from es_broker import compiled
from es_broker.log import Record, RecordLog, records
from es_broker.log.scan import prefixed
from es_broker.log.types import (
    MessagesDeliveredRecord,
    MessagesStoredRecord,
    RecordType,
)
from es_broker.projections.consume_queue import ConsumeQueueProjection
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import U64

VALUE = struct.Struct(">QQQ")
BUILT = b"\x00built"
MINUTE_MS = 60_000
KEPT_COUNTS = 4096  # the most counts a commit hands the next write transaction (`settle`)

TOPIC_PUT = b"P"
GROUP_GET = b"G"
SNDBCK_PUT = b"S"
BROKER_PUT = b"p"
BROKER_GET = b"g"
SIZE_BUCKETS = b"H"  # totals only: topic NUL message type NUL bucket index
ACL_DENIED = b"D"  # totals only: the reason of refused requests (access_denied summaries)
# RocketMQ 5's rocketmq_message_size buckets (BrokerMetricsManager), bytes
MESSAGE_SIZE_BOUNDS = (1024, 4 * 1024, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)

# 4.9.8 BrokerStatsManager's stats names -> (kind, value index: 0 messages, 1 bytes)
STATS_NAMES = {
    "TOPIC_PUT_NUMS": (TOPIC_PUT, 0),
    "TOPIC_PUT_SIZE": (TOPIC_PUT, 1),
    "GROUP_GET_NUMS": (GROUP_GET, 0),
    "GROUP_GET_SIZE": (GROUP_GET, 1),
    "SNDBCK_PUT_NUMS": (SNDBCK_PUT, 0),
    "BROKER_PUT_NUMS": (BROKER_PUT, 0),
    "BROKER_GET_NUMS": (BROKER_GET, 0),
}
ENDED = frozenset({"committed", "discarded"})
# 4.9.8's BROKER_PUT_NUMS / BROKER_GET_NUMS add to the value only, never to the times
VALUE_ONLY = frozenset({BROKER_PUT, BROKER_GET})
# BrokerStatsData's three windows in minutes: statsMinute, statsHour, statsDay
WINDOWS = (1, 60, 24 * 60)


@dataclass(frozen=True, slots=True)
class Counts:
    messages: int = 0
    size: int = 0
    records: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """StatsItem.computeStatsData's answer over one window: sum, per second, sum per record."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


def put_of(record: MessagesStoredRecord) -> tuple[str, str] | None:
    """(topic, message type) of a stored record a client sent; None for the broker's own re-puts."""
    if "cause" in record or "delivery" in record:
        return None
    tx = record.get("transaction")
    if tx is not None:
        if tx.get("state") in ENDED:
            return None
        return str(tx.get("real_topic") or record["topic"]), "transaction"
    delay = record.get("delay")
    if delay is not None:
        return str(delay.get("real_topic") or record["topic"]), "delay"
    return record["topic"], "normal"


class StatsProjection(Dispatching):
    name = "stats"
    databases = ("stats_total", "stats_minute")

    def bind(self, log: RecordLog) -> None:
        self.total_db = log.db("stats_total")
        self.minute_db = log.db("stats_minute")
        # the counts the records of the write transaction `_txn` add, by (database, key), written
        # once by `settle` before it commits: a group commit of many sends to one topic reads and
        # writes each count once, not once a record. The sums are those the records add one by one.
        self._txn: lmdb.Transaction[bytes] | None = None
        self._pending: dict[tuple[Any, bytes], list[int]] = {}
        # the counts a record added to, by what decides them (`_again`): the next such record of
        # the transaction adds to them without building their keys
        self._same: dict[tuple[Any, ...], list[list[int]]] = {}
        # the consume queue, applied before: the delivered messages' sizes
        self.cq = next(p for p in log.projections if isinstance(p, ConsumeQueueProjection))
        # the counts `settle` wrote in `_written_txn`, by (database, key): the next write
        # transaction adds to them without reading them back when it follows that one's commit
        # (RecordLog.follows)
        self.log = log
        self._written_txn: lmdb.Transaction[bytes] | None = None
        self._written: dict[tuple[Any, bytes], tuple[int, int, int]] = {}

    def is_built(self, txn: lmdb.Transaction[bytes], last_seq: int) -> bool:
        """False for a log written before these counts existed (seq 1 always writes BUILT)."""
        return last_seq == 0 or txn.get(BUILT, db=self.total_db) is not None

    def mark_built(self, txn: lmdb.Transaction[bytes]) -> None:
        txn.put(BUILT, b"", db=self.total_db)

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        put = put_of(stored)
        if put is None:
            return
        topic, message_type = put
        units = stored["units"]
        if len(units) == 1:  # a single message: its size's bucket, as size_buckets finds it
            n, size = 1, units[0][1]
            buckets = [(bisect.bisect_left(MESSAGE_SIZE_BOUNDS, size), (1, size))]
        else:
            sizes = [u[1] for u in units]
            n, size = len(sizes), sum(sizes)
            buckets = size_buckets(sizes)
        minute = stored["ts"] // MINUTE_MS
        # the records of a group commit to one topic bump the same counts: found once a commit
        same = (
            (TOPIC_PUT, topic, message_type, minute, buckets[0][0]) if len(buckets) == 1 else None
        )
        if same is not None and self._again(txn, same, n, size):
            return
        counts = [
            *self._add(txn, TOPIC_PUT + f"{topic}\x00{message_type}".encode(), minute, n, size),
            *self._add(txn, TOPIC_PUT + topic.encode(), minute, n, size, total=False),
            *self._add(txn, BROKER_PUT, minute, n, size),
        ]
        for which, (k, s) in buckets:
            key = SIZE_BUCKETS + f"{topic}\x00{message_type}\x00{which}".encode()
            counts.append(self._bump(txn, key, self.total_db, k, s))
        if same is not None:
            self._same[same] = counts

    def _delivered(
        self, txn: lmdb.Transaction[bytes], seq: int, delivered: MessagesDeliveredRecord
    ) -> None:
        topic, qid = delivered["topic"], delivered["queue_id"]
        size = self.cq.sizes(txn, topic, qid, delivered["offsets"])
        n, minute = len(delivered["offsets"]), delivered["ts"] // MINUTE_MS
        same = (GROUP_GET, topic, delivered["group"], minute)
        if self._again(txn, same, n, size):
            return
        name = f"{topic}@{delivered['group']}".encode()
        counts = self._add(txn, GROUP_GET + name, minute, n, size)
        self._same[same] = counts + self._add(txn, BROKER_GET, minute, n, size)

    def _popped(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        # RocketMQ 5's pops are messages out to the group as a pull's are (B-580)
        offsets = [offset for offset, _ in record["offsets"]]
        if not offsets:
            return
        topic, qid = record["topic"], record["queue_id"]
        size = self.cq.sizes(txn, topic, qid, offsets)
        minute = int(record["ts"]) // MINUTE_MS
        name = f"{topic}@{record['group']}".encode()
        self._add(txn, GROUP_GET + name, minute, len(offsets), size)
        self._add(txn, BROKER_GET, minute, len(offsets), size)

    def _sent_back(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        if record.get("decision") not in ("retry", "dlq") or not record.get("topic"):
            return
        name = f"{record['topic']}@{record['group']}".encode()
        self._add(txn, SNDBCK_PUT + name, int(record["ts"]) // MINUTE_MS, 1, 0)

    def _denied(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        named = 0
        for entry in record.get("reasons") or ():  # [who, host, code, reason, n] (B-347, B-510)
            self._bump(txn, ACL_DENIED + str(entry[3]).encode(), self.total_db, int(entry[4]), 0)
            named += int(entry[4])
        rest = int(record.get("requests") or 0) - named  # summaries written before B-510
        if rest > 0:
            self._bump(txn, ACL_DENIED + b"unknown", self.total_db, rest, 0)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_STORED: _stored,
            RecordType.MESSAGES_DELIVERED: _delivered,
            RecordType.MESSAGE_SENT_BACK: _sent_back,
            RecordType.ACCESS_DENIED: _denied,
            RecordType.MESSAGES_POPPED: _popped,
        }
    )

    def _add(
        self,
        txn: lmdb.Transaction[bytes],
        key: bytes,
        minute: int,
        n: int,
        size: int,
        *,
        total: bool = True,
    ) -> list[list[int]]:
        """Add to the counts of `key` (its total, its minute); returns the counts it added to."""
        counts = []
        if total:
            counts.append(self._bump(txn, key, self.total_db, n, size))
        # the per-type total's minute is kept under the topic alone. `find`, not `in`: `bytes in
        # bytes` first tries the needle as an int and raises and clears a TypeError (~1.8k
        # instructions a test)
        if key.find(b"\x00") >= 0:
            return counts
        minute_key = key + b"\x00" + U64.pack(max(minute, 0))
        counts.append(self._bump(txn, minute_key, self.minute_db, n, size))
        return counts

    def _bump(
        self, txn: lmdb.Transaction[bytes], key: bytes, db: Any, n: int, size: int
    ) -> list[int]:
        """Add a record's n messages of `size` bytes to a count, kept until `settle`; returns the
        count kept ([messages, bytes, records])."""
        if txn is not self._txn:  # a new transaction: what an aborted one kept is dropped
            self._txn = txn
            self._pending.clear()
            self._same.clear()
        pending = self._pending.get((db, key))
        if pending is None:
            pending = self._pending[(db, key)] = [n, size, 1]
        else:
            pending[0] += n
            pending[1] += size
            pending[2] += 1
        return pending

    def _again(
        self, txn: lmdb.Transaction[bytes], same: tuple[Any, ...], n: int, size: int
    ) -> bool:
        """Add n messages of `size` bytes, one record, to the counts an earlier record of `txn`
        with the same `same` (kind, names, minute) added to; False when none did."""
        counts = self._same.get(same) if txn is self._txn else None
        if counts is None:
            return False
        for pending in counts:
            pending[0] += n
            pending[1] += size
            pending[2] += 1
        return True

    def settle(self, txn: lmdb.Transaction[bytes]) -> None:
        """Write the counts `txn`'s records added (before it commits)."""
        if txn is self._txn:
            written = self._written
            if len(written) > KEPT_COUNTS or not self.log.follows(self._written_txn, txn):
                written.clear()
            # `txn`'s from now on: should it not commit, the next transaction forgets them
            self._written_txn = txn
            for count, (n, size, recs) in self._pending.items():
                db, key = count
                known = written.get(count)
                if known is None:
                    raw = txn.get(key, None, db)
                    known = VALUE.unpack(raw) if raw is not None else (0, 0, 0)
                value = written[count] = (known[0] + n, known[1] + size, known[2] + recs)
                txn.put(key, VALUE.pack(*value), True, True, False, db)
        self._txn = None
        self._pending.clear()
        self._same.clear()

    # ------------------------------------------------------------------ reads
    def totals(self, txn: lmdb.Transaction[bytes], kind: bytes) -> Iterator[tuple[str, Counts]]:
        """(name, totals) of one kind: TOPIC_PUT names are `topic NUL message type`."""
        if self.total_db is None:  # a read-only view of a log written before the counts
            return
        for key, raw in prefixed(txn, self.total_db, kind):
            if key != BUILT:
                yield key[len(kind) :].decode(), Counts(*VALUE.unpack(raw))

    def window(
        self, txn: lmdb.Transaction[bytes], kind: bytes, name: str, first: int, end: int
    ) -> Counts:
        """The counts of `name` in the minutes [first, end) (minute numbers of broker time)."""
        messages = size = recs = 0
        for _, (m, s, r) in self.minutes(txn, kind, name, first, end):
            messages, size, recs = messages + m, size + s, recs + r
        return Counts(messages, size, recs)

    def minutes(
        self, txn: lmdb.Transaction[bytes], kind: bytes, name: str, first: int, end: int
    ) -> Iterator[tuple[int, tuple[int, int, int]]]:
        """(minute, (messages, bytes, records)) of `name` for each minute in [first, end) with any."""
        if self.minute_db is None:
            return
        prefix = kind + name.encode() + b"\x00"
        start, stop = prefix + U64.pack(max(first, 0)), prefix + U64.pack(max(end, 0))
        for key, raw in prefixed(txn, self.minute_db, prefix, start=start, stop=stop):
            yield U64.unpack(key[len(prefix) :])[0], VALUE.unpack(raw)

    def counted_by(self, txn: lmdb.Transaction[bytes], kind: bytes, name: str, end: int) -> bool:
        """True when `name` has counts in a minute before `end`: 4.9.8's stats item exists then."""
        return any(True for _ in self.minutes(txn, kind, name, 0, end))

    def snapshots(
        self, txn: lmdb.Transaction[bytes], kind: bytes, name: str, index: int, at_ms: int
    ) -> tuple[Snapshot, Snapshot, Snapshot]:
        """BrokerStatsData's minute, hour and day at `at_ms` (B-364).

        Each window is the whole minutes of broker time before the minute of `at_ms`: the last
        1, 60 and 1440 (4.9.8 samples every 10 s, 10 min and hour and answers the snapshots
        taken, so the minute in progress is not in its answer either). `index` picks the
        value: 0 messages, 1 bytes. tps is the sum per second of the window, avgpt the sum
        per record (0 for BROKER_*, whose times 4.9.8 never counts).
        """
        end = at_ms // MINUTE_MS
        rows = list(self.minutes(txn, kind, name, end - WINDOWS[-1], end))
        out = []
        for span in WINDOWS:
            total = recs = 0
            for minute, value in rows:
                if minute >= end - span:
                    total, recs = total + value[index], recs + value[2]
            tps = total * 1000.0 / (span * MINUTE_MS)
            avgpt = total / recs if recs and kind not in VALUE_ONLY else 0.0
            out.append(Snapshot(total, tps, avgpt))
        return out[0], out[1], out[2]

    def names(self, txn: lmdb.Transaction[bytes], kind: bytes) -> list[str]:
        """The names with minute counts of one kind (topics, or `topic@group`)."""
        out: set[str] = set()
        if self.minute_db is None:
            return []
        for key, _ in prefixed(txn, self.minute_db, kind):
            out.add(key[len(kind) : -9].decode())
        return sorted(out)

    def ensure_built(self, log: RecordLog) -> bool:
        """Count a log written before this projection existed; True if it had to (one transaction)."""
        with log.env.begin() as txn:
            if self.is_built(txn, log.last_seq):
                return False
        while True:
            try:
                with log.env.begin(write=True) as txn:
                    for db in (self.total_db, self.minute_db):
                        txn.drop(db, delete=False)
                    self._written_txn = None  # what a commit wrote is gone
                    self._written.clear()
                    for key, raw in txn.cursor(db=log.log_db):
                        self.apply(txn, records.key_seq(key), records.unpack(raw))
                    self.settle(txn)
                return True
            except lmdb.MapFullError:
                log.grow()


def size_buckets(sizes: list[int]) -> list[tuple[int, tuple[int, int]]]:
    """(bucket index, (messages, bytes)) of message sizes, by MESSAGE_SIZE_BOUNDS, in bucket order.

    A send's messages mostly share one bucket: found by its smallest and largest size alone.
    """
    if not sizes:
        return []
    low = bisect.bisect_left(MESSAGE_SIZE_BOUNDS, min(sizes))
    if low == bisect.bisect_left(MESSAGE_SIZE_BOUNDS, max(sizes)):
        return [(low, (len(sizes), sum(sizes)))]
    buckets: dict[int, list[int]] = {}
    for size in sizes:
        acc = buckets.setdefault(bisect.bisect_left(MESSAGE_SIZE_BOUNDS, size), [0, 0])
        acc[0] += 1
        acc[1] += size
    return [(which, (k, s)) for which, (k, s) in sorted(buckets.items())]


# the appliers every message pays (a send's record, a pull's) that have compiled twins
# (es_broker/projections/_speedups.pyx): the same steps on the projection's own attributes, with
# `_again`, `_add` and `_bump` as C calls. `HANDLERS` takes them when they are built.
count_stored = StatsProjection._stored
count_delivered = StatsProjection._delivered
REFERENCE = {"count_stored": count_stored, "count_delivered": count_delivered}
if compiled.install(
    globals(), "es_broker.projections._speedups", "count_stored", "count_delivered"
):
    StatsProjection.HANDLERS = {
        **StatsProjection.HANDLERS,
        RecordType.MESSAGES_STORED.value: count_stored,
        RecordType.MESSAGES_DELIVERED.value: count_delivered,
    }
