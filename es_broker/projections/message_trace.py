"""An index of the records that make up a message's journey (messageTrace).

Built only from record fields, never from message bytes (retention may
remove those), so a replay rebuilds it byte for byte:

- `trace_stored`: first physical offset of each store record -> its seq; the
  record that stored the message at physical offset X is the entry with the
  greatest key <= X (store records never overlap and grow with seq).
- `trace_links`: (physical offset, seq) -> b"from" | b"to" for the records that
  turn one stored message into another: a send-back (`message_sent_back`), a
  delayed delivery (a store record with `delivery`), a re-drive
  (`dead_letter_redriven`), a skipped delayed message, and a half message's
  commit or discard (a store record with `transaction`); a half message's
  checks and its rollback (`transaction_checked`, `transaction_ended`) link
  from it only; a reply (`reply_pushed`) links from its request, when the
  broker stored the request, to the reply stored in the reply topic.
- `trace_deliveries`: (topic, queue, queue offset, seq) for every message a
  `messages_delivered` record handed to a consumer.
"""

from __future__ import annotations

from collections.abc import Iterator

import lmdb

from es_broker.log import Record, RecordLog
from es_broker.log.scan import prefixed, prefixed_keys
from es_broker.log.types import (
    DeadLetterRedriven,
    DelayedMessageSkipped,
    MessageSentBack,
    RecordType,
    ReplyPushed,
    TransactionChecked,
    TransactionEnded,
    as_view,
)
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import I64, U64, queue_key, unit_key

FROM = b"from"
TO = b"to"


class MessageTraceProjection(Dispatching):
    name = "message_trace"
    databases = ("trace_stored", "trace_links", "trace_deliveries")

    def bind(self, log: RecordLog) -> None:
        self.stored = log.db("trace_stored")
        self.links = log.db("trace_links")
        self.deliveries = log.db("trace_deliveries")

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        stored = as_view(record, RecordType.MESSAGES_STORED)
        first = stored["units"][0][0]
        txn.put(I64.pack(first), U64.pack(seq), db=self.stored)
        delivery = stored.get("delivery")
        if delivery is not None:
            self._link(txn, delivery["schedule_phy"], seq, FROM)
            self._link(txn, first, seq, TO)
        tx = stored.get("transaction")
        if tx is not None and "prepared_phy" in tx:  # a commit or a discard of a half message
            self._link(txn, tx["prepared_phy"], seq, FROM)
            self._link(txn, first, seq, TO)

    def _delivered(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        delivered = as_view(record, RecordType.MESSAGES_DELIVERED)
        prefix, suffix, pack_offset = (
            queue_key(delivered["topic"], delivered["queue_id"]),
            U64.pack(seq),
            U64.pack,
        )
        txn.cursor(db=self.deliveries).putmulti(
            [(prefix + pack_offset(offset) + suffix, b"") for offset in delivered["offsets"]]
        )

    def _sent_back(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        kind = record["type"]  # a send-back or a re-drive of a dead letter
        back = (
            MessageSentBack.from_record(record)
            if kind == RecordType.MESSAGE_SENT_BACK
            else DeadLetterRedriven.from_record(record)
        )
        self._link(txn, back.offset, seq, FROM)
        if back.stored_phy is not None:
            self._link(txn, back.stored_phy, seq, TO)

    def _skipped(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._link(txn, DelayedMessageSkipped.from_record(record).schedule_phy, seq, FROM)

    def _checked(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._link(txn, TransactionChecked.from_record(record).prepared_phy, seq, FROM)

    def _ended(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._link(txn, TransactionEnded.from_record(record).prepared_phy, seq, FROM)

    def _reply_pushed(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        reply = ReplyPushed.from_record(record)
        if reply.request_phy is not None:
            self._link(txn, reply.request_phy, seq, FROM)
            self._link(txn, reply.reply_phy, seq, TO)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_STORED: _stored,
            RecordType.MESSAGES_DELIVERED: _delivered,
            RecordType.MESSAGE_SENT_BACK: _sent_back,
            RecordType.DEAD_LETTER_REDRIVEN: _sent_back,
            RecordType.DELAYED_MESSAGE_SKIPPED: _skipped,
            RecordType.TRANSACTION_CHECKED: _checked,
            RecordType.TRANSACTION_ENDED: _ended,
            RecordType.REPLY_PUSHED: _reply_pushed,
        }
    )

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
        """Seqs of the `messages_delivered` records that handed out (topic, queue, offset)."""
        prefix = unit_key(topic, queue_id, offset)
        for key in prefixed_keys(txn, self.deliveries, prefix):
            if len(key) != len(prefix) + 8:
                return
            yield U64.unpack(key[-8:])[0]
