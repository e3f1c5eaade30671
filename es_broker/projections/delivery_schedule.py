"""The delivery schedule: one cursor per delay level into SCHEDULE_TOPIC_XXXX (B-97, B-98).

The delayed messages themselves are units of SCHEDULE_TOPIC_XXXX queue L-1
(consume-queue projection), each with its due time as tagsCode (B-96). This
projection holds what ScheduleMessageService keeps in delayOffset.json: per
level, the queue offset of the next message to deliver. A cursor moves only
with the record that delivers the message (a `messages_stored` record with a
`delivery` map) or skips it (`delayed_message_skipped`), so a delayed message
is delivered exactly once, across restarts and replays; an `imported` record
sets the cursors a RocketMQ store had (B-523).
"""

from __future__ import annotations

from collections.abc import Iterator

import lmdb

from es_broker.log import Record, RecordLog
from es_broker.log.types import (
    DelayedMessageSkipped,
    Imported,
    MessagesStoredRecord,
    RecordType,
)
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import I64, U32


class DeliveryScheduleProjection(Dispatching):
    name = "delivery_schedule"
    databases = ("delay_cursors",)

    def bind(self, log: RecordLog) -> None:
        self.db = log.db("delay_cursors")

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        delivery = stored.get("delivery")
        # level 0: a timer message's delivery, the timer projection's (B-589)
        if delivery is not None and delivery["level"] > 0:
            txn.put(U32.pack(delivery["level"]), I64.pack(delivery["next_cursor"]), db=self.db)

    def _skipped(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        skipped = DelayedMessageSkipped.from_record(record)
        if skipped.level == 0:  # a timer message's, the timer projection's
            return
        txn.put(U32.pack(skipped.level), I64.pack(skipped.next_cursor), db=self.db)

    def _imported(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        # the cursors of delayOffset.json, carried by an import (B-523)
        for level, cursor in Imported.from_record(record).delay_offsets:
            txn.put(U32.pack(level), I64.pack(cursor), db=self.db)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_STORED: _stored,
            RecordType.DELAYED_MESSAGE_SKIPPED: _skipped,
            RecordType.IMPORTED: _imported,
        }
    )

    # ------------------------------------------------------------------ reads
    def cursor(self, txn: lmdb.Transaction[bytes], level: int) -> int | None:
        """The next schedule-queue offset to deliver for a level; None before its first delivery."""
        raw = txn.get(U32.pack(level), db=self.db)
        return I64.unpack(raw)[0] if raw else None

    def cursors(self, txn: lmdb.Transaction[bytes]) -> Iterator[tuple[int, int]]:
        """(level, cursor) of every level that has delivered: delayOffset.json's offsetTable."""
        for key, raw in txn.cursor(db=self.db):
            yield U32.unpack(key)[0], I64.unpack(raw)[0]
