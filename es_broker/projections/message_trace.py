"""An index of the records that make up a message's journey (messageTrace).

Built only from record fields, never from message bytes (retention may
remove those), so a replay rebuilds it byte for byte:

- `trace_stored`: first physical offset of each store record -> its seq; the
  record that stored the message at physical offset X is the entry with the
  greatest key <= X (store records never overlap and grow with seq). A
  sealing removes the entries of the records it archived (B-465, `seal_stored`):
  they are kept in the archive index (es_broker/history/horizon.py), which
  answers an offset below the first entry left.
- `trace_links`: (physical offset, seq) -> b"from" | b"to" for the records that
  turn one stored message into another: a send-back (`message_sent_back`), a
  delayed delivery (a store record with `delivery`), a re-drive
  (`dead_letter_redriven`), a skipped delayed message, and a half message's
  commit or discard (a store record with `transaction`); a half message's
  checks and its rollback (`transaction_checked`, `transaction_ended`) link
  from it only; a reply (`reply_pushed`) links from its request, when the
  broker stored the request, to the reply stored in the reply topic.
- `trace_pulls`: one entry per `messages_delivered` record (B-472): key
  (topic, queue, first offset, seq), value the number of messages when the
  offsets it handed out are contiguous (4 bytes), else each offset's distance
  from the first; and per queue (topic, queue) -> the widest span of offsets
  one record covered. A lookup by offset reads the entries whose first offset
  lies within that span before it: at most one pull's span, not one entry per
  message per group. Retention drops the entries whose every offset is below
  the queue's new minimum (the records stay in the log).

A directory in store format 2 or older kept `trace_deliveries`, an entry per
message per delivery; the upgrade to format 3 groups its entries by record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import lmdb

from es_broker.log import Record, RecordLog
from es_broker.log.scan import prefixed
from es_broker.log.types import (
    DeadLetterRedriven,
    DelayedMessageSkipped,
    MessagesDeliveredRecord,
    MessageSentBack,
    MessagesStoredRecord,
    RecordType,
    ReplyPushed,
    TransactionChecked,
    TransactionEnded,
)
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import I64, U32, U64, queue_key

FROM = b"from"
TO = b"to"
LEGACY_DATABASES = ("trace_deliveries",)  # store format 2 and before
KEPT_QUEUES = 4096  # the most queues whose widest delivery a commit hands the next transaction
_FIRST_SEQ = struct.Struct(">QQ")  # a trace_pulls key after its queue: first offset, seq


class MessageTraceProjection(Dispatching):
    name = "message_trace"
    databases = ("trace_stored", "trace_links", "trace_pulls")

    def bind(self, log: RecordLog) -> None:
        self.stored = log.db("trace_stored")
        self.links = log.db("trace_links")
        self.pulls = log.db(
            "trace_pulls"
        )  # None in the archive index (es_broker/history/horizon.py)
        self.log = log
        # the widest span of each queue's deliveries as the write transaction `_txn` read or
        # wrote it (`_record_delivery`), by queue key: kept for the next write transaction when
        # it follows `_txn`'s commit (RecordLog.follows)
        self._txn: lmdb.Transaction[bytes] | None = None
        self._widest: dict[bytes, int] = {}

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        first = stored["units"][0][0]
        key, value = I64.pack(first), U64.pack(seq)
        # the keys grow with the commit log: appended without a B-tree search; a key that is not
        # the largest, which LMDB refuses to append, is put in its place
        if not txn.put(key, value, True, True, True, self.stored):
            txn.put(key, value, True, True, False, self.stored)
        delivery = stored.get("delivery")
        if delivery is not None:
            self._link(txn, delivery["schedule_phy"], seq, FROM)
            self._link(txn, first, seq, TO)
        tx = stored.get("transaction")
        if tx is not None and "prepared_phy" in tx:  # a commit or a discard of a half message
            self._link(txn, tx["prepared_phy"], seq, FROM)
            self._link(txn, first, seq, TO)

    def _delivered(
        self, txn: lmdb.Transaction[bytes], seq: int, delivered: MessagesDeliveredRecord
    ) -> None:
        if self.pulls is None:  # the archive index keeps no deliveries
            return
        offsets = delivered["offsets"]
        if offsets:
            key = queue_key(delivered["topic"], delivered["queue_id"])
            if len(offsets) > 1:  # one offset (a pull finding one message) is already in order
                offsets = sorted(set(offsets))
            self._record_delivery(txn, key, offsets, seq)

    def _sent_back(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        back = MessageSentBack.from_record(record)
        self._copied(txn, seq, back.offset, back.stored_phy)

    def _redriven(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        redriven = DeadLetterRedriven.from_record(record)
        self._copied(txn, seq, redriven.offset, redriven.stored_phy)

    def _skipped(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._link(txn, DelayedMessageSkipped.from_record(record).schedule_phy, seq, FROM)

    def _checked(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._link(txn, TransactionChecked.from_record(record).prepared_phy, seq, FROM)

    def _ended(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._link(txn, TransactionEnded.from_record(record).prepared_phy, seq, FROM)

    def _reply(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        reply = ReplyPushed.from_record(record)
        if reply.request_phy is not None:
            self._link(txn, reply.request_phy, seq, FROM)
            self._link(txn, reply.reply_phy, seq, TO)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_STORED: _stored,
            RecordType.MESSAGES_DELIVERED: _delivered,
            RecordType.MESSAGE_SENT_BACK: _sent_back,
            RecordType.DEAD_LETTER_REDRIVEN: _redriven,
            RecordType.DELAYED_MESSAGE_SKIPPED: _skipped,
            RecordType.TRANSACTION_CHECKED: _checked,
            RecordType.TRANSACTION_ENDED: _ended,
            RecordType.REPLY_PUSHED: _reply,
        }
    )

    def _copied(
        self, txn: lmdb.Transaction[bytes], seq: int, offset: int, stored_phy: int | None
    ) -> None:
        """Link a message sent back or re-driven (at `offset`) to its copy, when one was stored."""
        self._link(txn, offset, seq, FROM)
        if stored_phy is not None:
            self._link(txn, stored_phy, seq, TO)

    def _record_delivery(
        self, txn: lmdb.Transaction[bytes], queue: bytes, offsets: list[int], seq: int
    ) -> None:
        """The entry of a delivery of `offsets` (ascending, distinct) of a queue, and its span."""
        first, span = offsets[0], offsets[-1] - offsets[0]
        txn.put(
            queue + _FIRST_SEQ.pack(first, seq),
            delivered_value(offsets),
            True,
            True,
            False,
            self.pulls,
        )
        if txn is not self._txn:
            if len(self._widest) > KEPT_QUEUES or not self.log.follows(self._txn, txn):
                self._widest.clear()
            self._txn = txn
        widest = self._widest.get(queue)
        if widest is None:
            raw = txn.get(queue, None, self.pulls)
            widest = -1 if raw is None else U64.unpack(raw)[0]
        if widest < span:
            txn.put(queue, U64.pack(span), True, True, False, self.pulls)
            widest = span
        self._widest[queue] = widest

    def convert(self, txn: lmdb.Transaction[bytes], legacy: Any) -> None:
        """Write trace_pulls from an older directory's trace_deliveries (grouped by record)."""
        self._txn = None
        self._widest.clear()
        txn.drop(self.pulls, delete=False)
        grouped: dict[tuple[bytes, int], list[int]] = {}
        for key in txn.cursor(db=legacy).iternext(keys=True, values=False):
            queue, offset, seq = key[:-16], U64.unpack(key[-16:-8])[0], U64.unpack(key[-8:])[0]
            grouped.setdefault((bytes(queue), seq), []).append(offset)
        for (queue, seq), offsets in sorted(grouped.items(), key=lambda item: item[0][1]):
            self._record_delivery(txn, queue, sorted(offsets), seq)

    def _link(self, txn: lmdb.Transaction[bytes], phy: int, seq: int, role: bytes) -> None:
        txn.put(I64.pack(phy) + U64.pack(seq), role, db=self.links)

    # ------------------------------------------------------------------ reads
    def store_seq(self, txn: lmdb.Transaction[bytes], physical_offset: int) -> int | None:
        """Seq of the store record whose messages begin at or before physical_offset."""
        cur = txn.cursor(db=self.stored)
        found = cur.prev() if cur.set_range(I64.pack(physical_offset + 1)) else cur.last()
        return U64.unpack(cur.value())[0] if found else None

    def links_of(
        self, txn: lmdb.Transaction[bytes], physical_offset: int
    ) -> Iterator[tuple[int, bytes]]:
        """(seq, role) of every linking record that names physical_offset, oldest first."""
        for key, role in prefixed(txn, self.links, I64.pack(physical_offset)):
            yield U64.unpack(key[8:])[0], bytes(role)

    def deliveries_of(
        self, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offset: int
    ) -> Iterator[int]:
        """Seqs of the `messages_delivered` records that handed out (topic, queue, offset), in order."""
        if self.pulls is None:  # a read-only view of a directory in an older store format
            return
        queue = queue_key(topic, queue_id)
        widest = txn.get(queue, db=self.pulls)
        if widest is None or offset < 0:
            return
        qlen, start = len(queue), max(offset - U64.unpack(widest)[0], 0)
        found = []
        for key, value in prefixed(
            txn, self.pulls, queue, start=queue + U64.pack(start), stop=queue + U64.pack(offset + 1)
        ):
            if len(key) == qlen + 16 and offset - U64.unpack_from(key, qlen)[
                0
            ] in delivered_offsets(value):
                found.append(U64.unpack_from(key, qlen + 8)[0])
        yield from sorted(found)


def delivered_value(offsets: list[int]) -> bytes:
    """A trace_pulls value: the count of contiguous offsets, else a tag and each one's distance
    from the first (4 bytes each, or 8 when one is 2**32 or more)."""
    first, last = offsets[0], offsets[-1]
    if last - first + 1 == len(offsets):
        return U32.pack(len(offsets))
    if last - first < 1 << 32:
        return b"\x00" + b"".join(U32.pack(o - first) for o in offsets)
    return b"\x01" + b"".join(U64.pack(o - first) for o in offsets)


def delivered_offsets(value: bytes) -> range | list[int]:
    """The distances from the first offset that a trace_pulls value holds, ascending."""
    if len(value) == 4:
        return range(U32.unpack(value)[0])
    step = 4 if value[0] == 0 else 8
    return [int.from_bytes(value[i : i + step], "big") for i in range(1, len(value), step)]


def seal_stored(txn: lmdb.Transaction[bytes], stored: Any, horizon: int) -> int:
    """Drop the `trace_stored` entries of records at or before `horizon`, from the lowest key on,
    up to the first entry of a later record; how many went (B-465).

    What is left is every entry from some key K on, so the lookup of an offset
    >= K answers as before, and the lookup of an offset below K finds nothing
    here and asks the archive index, which holds every entry dropped."""
    cur = txn.cursor(db=stored)
    dropped = 0
    while cur.first() and U64.unpack(cur.value())[0] <= horizon:
        cur.delete()
        dropped += 1
    return dropped


def expire_pulls(
    txn: lmdb.Transaction[bytes], pulls: Any, queue: bytes, low: int, horizon: int
) -> None:
    """Drop a queue's delivery entries whose every offset is below `low` (its minimum, moved
    by retention) and whose record is at or before `horizon`: sealing calls it, so a message's
    deliveries leave the hot index only when the archive holds them (B-461, B-472)."""
    cur = txn.cursor(db=pulls)
    if not cur.set_range(queue + U64.pack(0)):
        return
    qlen = len(queue)
    while True:
        key = cur.key()
        if key[:qlen] != queue or len(key) != qlen + 16:
            return
        first = U64.unpack_from(key, qlen)[0]
        if first >= low:
            return
        seq = U64.unpack_from(key, qlen + 8)[0]
        if seq <= horizon and first + delivered_offsets(cur.value())[-1] < low:
            if not cur.delete():
                return
        elif not cur.next():
            return
