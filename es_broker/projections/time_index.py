"""The time index: broker time -> log position, each queue's max per position, group events.

A record carries the broker time it was decided at (`ts`). A broker clock can
step back (NTP), so time travel uses a record's *effective time*: the largest
`ts` of that record and every record before it. Effective time never
decreases along the log, so "the state at time t" is the state after a
prefix of the log, a state that really existed, and it is plain `ts` while
the clock only moves forward (B-132). The SQL read model, the Parquet export
and Spark use the same rule (`es_broker.schema.families.RunningTime`).

Offset values themselves are not copied: the offset table's history
(`offset_history`, keyed by queue then seq) already holds every change,
whatever record made it, so "the offset at time t" is a seek in it at the
position of t.

Databases (U64/I64 big-endian):

| database  | key                               | value                                  |
|-----------|-----------------------------------|----------------------------------------|
| tt_time   | effective time                    | first seq that reached it              |
| tt_seq    | seq where the effective time grew | that effective time                    |
| tt_qmax   | queue_key(topic, queue) + seq     | the queue's max after that record      |
| tt_events | group NUL seq                     | the record, for records about a group that explain its offsets (resets, corrections, ...) |
| tt_removed | offset_key(topic, group, queue) + seq | empty: the offset_history entry of that key and seq is a removal (B-34) |
"""

from __future__ import annotations

import lmdb

from es_broker import compiled
from es_broker.log import Record, RecordLog, records
from es_broker.log.types import MessagesStoredRecord, RecordType
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import I64, U64, offset_key, queue_key
from es_broker.projections.offset_rule import offset_changes

# records that name a group but do not explain an offset change: deliveries and the
# group's own config are audited elsewhere, and offset_committed is the change itself
QUIET_GROUP_RECORDS = frozenset(
    {
        RecordType.OFFSET_COMMITTED,
        RecordType.MESSAGES_DELIVERED,
        RecordType.OFFSET_QUERIED,
        RecordType.SUBGROUP_UPDATED,
        RecordType.SUBGROUP_DELETED,
        RecordType.CONSUMER_GROUP_CHANGED,
        RecordType.OFFSETS_REMOVED,
        RecordType.DELIVERIES_UNRECORDED,
        RecordType.QUEUE_LOCKS_CHANGED,
    }
)


def groups_named(record: Record) -> list[str]:
    """The groups a record is about: its `group`, and the groups of a retention pass's losses."""
    groups = {record["group"]} if isinstance(record.get("group"), str) else set()
    for entry in record.get("lost") or ():
        if isinstance(entry, list | tuple) and entry and isinstance(entry[0], str):
            groups.add(entry[0])  # commitlog_expired: [group, topic, queue, offset, lost]
    return sorted(groups)


def event_key(group: str, seq: int) -> bytes:
    return group.encode() + b"\x00" + U64.pack(seq)


class TimeIndexProjection(Dispatching):
    name = "timeindex"
    databases = ("tt_time", "tt_seq", "tt_qmax", "tt_events", "tt_removed")

    def bind(self, log: RecordLog) -> None:
        self.time_db = log.db("tt_time")
        self.seq_db = log.db("tt_seq")
        self.qmax_db = log.db("tt_qmax")
        self.events_db = log.db("tt_events")
        self.removed_db = log.db("tt_removed")
        # the last effective time in tt_time as the write transaction `_txn` left it (only `apply`
        # adds to tt_time, at its end), so that a transaction's records after its first do not
        # seek it
        self._txn: lmdb.Transaction[bytes] | None = None
        self._time = 0

    def is_built(self, txn: lmdb.Transaction[bytes], last_seq: int) -> bool:
        """False for a log written before this index existed (seq 1 always has a tt_seq entry)."""
        if last_seq == 0:
            return True
        return self.seq_db is not None and txn.get(U64.pack(1), db=self.seq_db) is not None

    def apply(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        ts = record.get("ts")
        if type(ts) is not int or ts < 0:  # none, or before the epoch: as 0
            ts = max(int(ts or 0), 0)
        if txn is self._txn:
            grew = self._time < ts
        else:
            cur = txn.cursor(db=self.time_db)
            grew = not cur.last() or U64.unpack(cur.key())[0] < ts
            self._txn, self._time = txn, ts if grew else U64.unpack(cur.key())[0]
        if grew:
            # the effective time grew: one entry each way, both keys ascending
            txn.put(U64.pack(ts), U64.pack(seq), True, True, True, self.time_db)
            txn.put(U64.pack(seq), U64.pack(ts), True, True, True, self.seq_db)
            self._time = ts
        handler = self.HANDLERS.get(record["type"])
        if handler is not None:
            handler(self, txn, seq, record)
        elif record["type"] not in QUIET_GROUP_RECORDS:
            for group in groups_named(record):
                txn.put(event_key(group, seq), records.pack(record), db=self.events_db)

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        top = stored["queue_offset"] + len(stored["units"])
        txn.put(
            queue_key(stored["topic"], stored["queue_id"]) + U64.pack(seq),
            I64.pack(top),
            db=self.qmax_db,
        )

    def _removed(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        # the offset projection writes a history entry with new = -1; only this tells it from a
        # commit of -1. `offsets_removed`, or a group deleted with its offsets (B-431)
        for change in offset_changes(record):
            if not change.removed:
                continue
            key = offset_key(change.topic, change.group, change.queue_id)
            txn.put(key + U64.pack(seq), b"", db=self.removed_db)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_STORED: _stored,
            RecordType.OFFSETS_REMOVED: _removed,
            RecordType.SUBGROUP_DELETED: _removed,
        }
    )

    def ensure_built(self, log: RecordLog) -> bool:
        """Index a log written before this projection existed; True if it had to.

        The whole rebuild is one write transaction, so a crash leaves either
        no index or a complete one (seq 1 always has an entry in tt_seq).
        """
        with log.env.begin() as txn:
            if self.is_built(txn, log.last_seq):
                return False
        while True:
            try:
                with log.env.begin(write=True) as txn:
                    for db in (
                        self.time_db,
                        self.seq_db,
                        self.qmax_db,
                        self.events_db,
                        self.removed_db,
                    ):
                        txn.drop(db, delete=False)
                    for key, raw in txn.cursor(db=log.log_db):
                        self.apply(txn, records.key_seq(key), records.unpack(raw))
                return True
            except lmdb.MapFullError:
                log.grow()


# the applier every record pays, with a compiled twin (es_broker/projections/_speedups.pyx): the same
# steps, each record's call and look-ups in C. The class takes it when it is built.
time_index_apply = TimeIndexProjection.apply
REFERENCE = {"time_index_apply": time_index_apply}
if compiled.install(globals(), "es_broker.projections._speedups", "time_index_apply"):
    TimeIndexProjection.apply = time_index_apply  # type: ignore[method-assign]
