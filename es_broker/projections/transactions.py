"""Transactions: the half messages still open, and how every ended one ended (B-220..B-234).

A half message is a unit of RMQ_SYS_TRANS_HALF_TOPIC queue 0 (commit log and
consume queue projections); this projection holds what RocketMQ 4.9.8 keeps
in the op queue RMQ_SYS_TRANS_OP_HALF_TOPIC and the TRANSACTION_CHECK_TIMES
property of its re-put copies: per prepared message (keyed by its commit-log
offset) whether it is still open, how often it was checked, and, once ended,
whether it was committed, rolled back or discarded.

- `txn_open`: prepared physical offset -> msgpack map (producer group, real
  topic and queue, half queue offset, transaction id, born and store time,
  the message's CHECK_IMMUNITY_TIME_IN_SECONDS, checks so far, last check).
- `txn_ended`: prepared physical offset -> the ending state, as bytes.

Only record fields are read, never message bytes, so replay rebuilds it byte
for byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lmdb
import msgpack

from es_broker.log import Record
from es_broker.log.types import (
    MessagesStoredRecord,
    RecordType,
    TransactionChecked,
    TransactionEnded,
    TransactionState,
)
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import I64


def _pack(value: dict[str, Any]) -> bytes:
    raw: bytes = msgpack.packb(value, use_bin_type=True)
    return raw


def _unpack(raw: bytes | memoryview) -> dict[str, Any]:
    value: dict[str, Any] = msgpack.unpackb(raw, raw=False)
    return value


class TransactionProjection(Dispatching):
    name = "transactions"
    databases = ("txn_open", "txn_ended")

    def bind(self, log: Any) -> None:
        self.open_db = log.db("txn_open")
        self.ended_db = log.db("txn_ended")

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        tx = stored.get("transaction")
        if tx is None:
            return
        if tx["state"] == TransactionState.PREPARED:
            phy, _, _ = stored["units"][0]
            entry = {
                "producer_group": tx["producer_group"],
                "topic": tx["real_topic"],
                "queue_id": tx["real_queue_id"],
                "half_queue_offset": stored["queue_offset"],
                "transaction_id": tx["transaction_id"],
                "born_ts": tx["born_ts"],
                "store_ts": stored["ts"],
                "immunity_s": tx.get("immunity_s"),
                "checks": tx.get("checks", 0),  # an imported put-back copy's (B-524)
                "last_check_ts": None,
                "seq": seq,
            }
            txn.put(I64.pack(phy), _pack(entry), db=self.open_db)
        else:  # committed, or discarded into TRANS_CHECK_MAX_TIME_TOPIC
            self._end(txn, tx["prepared_phy"], tx["state"])

    def _checked(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        checked = TransactionChecked.from_record(record)
        key = I64.pack(checked.prepared_phy)
        raw = txn.get(key, db=self.open_db)
        if raw is not None:
            entry = _unpack(raw)
            entry["checks"] = checked.attempt
            entry["last_check_ts"] = record["ts"]
            txn.put(key, _pack(entry), db=self.open_db)

    def _ended(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        ended = TransactionEnded.from_record(record)
        self._end(txn, ended.prepared_phy, ended.state)

    def _end(self, txn: lmdb.Transaction[bytes], phy: int, state: str) -> None:
        key = I64.pack(phy)
        txn.delete(key, db=self.open_db)
        txn.put(key, state.encode(), db=self.ended_db)

    HANDLERS = handlers(
        {
            RecordType.MESSAGES_STORED: _stored,
            RecordType.TRANSACTION_CHECKED: _checked,
            RecordType.TRANSACTION_ENDED: _ended,
        }
    )

    # ------------------------------------------------------------------ reads
    def get_open(self, txn: lmdb.Transaction[bytes], phy: int) -> dict[str, Any] | None:
        """The open transaction of the half message at phy, or None."""
        raw = txn.get(I64.pack(phy), db=self.open_db)
        return _unpack(raw) if raw is not None else None

    def ended_state(self, txn: lmdb.Transaction[bytes], phy: int) -> str | None:
        """How the transaction of the half message at phy ended, or None if it has not."""
        raw = txn.get(I64.pack(phy), db=self.ended_db)
        return bytes(raw).decode() if raw is not None else None

    def open_transactions(
        self, txn: lmdb.Transaction[bytes]
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """(prepared physical offset, entry) of every open transaction, oldest first."""
        for key, raw in txn.cursor(db=self.open_db):
            yield I64.unpack(key)[0], _unpack(raw)
