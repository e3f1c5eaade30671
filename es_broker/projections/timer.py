"""Timer messages waiting for their time (RocketMQ 5's TimerMessageStore, B-589).

- `timer_due`: (due time, queue offset in rmq_sys_wheel_timer) -> physical offset, for every
  parked timer message not delivered yet: what the timer pass reads, earliest first;
- `timer_parked`: queue offset -> due time, so the record that ends a wait (a delivery, a
  skip) finds its entry by the offset it names.

A timer message is parked by a `messages_stored` record of rmq_sys_wheel_timer (its due time
is the unit's tagsCode) and leaves with the store record of its copy (`delivery` with
`timer`) or a `delayed_message_skipped` of level 0.
"""

from __future__ import annotations

import lmdb

from es_broker.log import Record, RecordLog
from es_broker.log.types import DelayedMessageSkipped, MessagesStoredRecord, RecordType
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import U64

TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC
DATABASES = ("timer_due", "timer_parked")


class TimerProjection(Dispatching):
    name = "timers"
    databases = DATABASES

    def bind(self, log: RecordLog) -> None:
        self.due_db = log.db("timer_due")
        self.parked = log.db("timer_parked")

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        if stored["topic"] == TIMER_TOPIC:
            first = stored["queue_offset"]
            for i, (phy, _, due) in enumerate(stored["units"]):
                offset = U64.pack(first + i)
                txn.put(U64.pack(due) + offset, U64.pack(phy), db=self.due_db)
                txn.put(offset, U64.pack(due), db=self.parked)
            return
        delivery = stored.get("delivery")
        if delivery is not None and delivery.get("timer"):
            self._done(txn, delivery["schedule_offset"])

    def _skipped(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        skipped = DelayedMessageSkipped.from_record(record)
        if skipped.level == 0:
            self._done(txn, skipped.schedule_offset)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_STORED: _stored,
            RecordType.DELAYED_MESSAGE_SKIPPED: _skipped,
        }
    )

    def _done(self, txn: lmdb.Transaction[bytes], offset: int) -> None:
        key = U64.pack(offset)
        due = txn.pop(key, db=self.parked)
        if due is not None:
            txn.delete(due + key, db=self.due_db)

    # ------------------------------------------------------------------ reads
    def due(self, txn: lmdb.Transaction[bytes], now: int, limit: int) -> list[tuple[int, int, int]]:
        """(due time, queue offset, physical offset) of up to `limit` messages due by `now`."""
        out: list[tuple[int, int, int]] = []
        for key, phy in txn.cursor(db=self.due_db):
            due = U64.unpack(key[:8])[0]
            if due > now or len(out) >= limit:
                break
            out.append((due, U64.unpack(key[8:])[0], U64.unpack(phy)[0]))
        return out

    def next_due(self, txn: lmdb.Transaction[bytes]) -> int | None:
        """The earliest due time of the messages waiting; None when none waits."""
        cur = txn.cursor(db=self.due_db)
        return U64.unpack(cur.key()[:8])[0] if cur.first() else None
