"""Topic configs (TopicConfigManager): name, queue numbers, perm, flags (B-20..B-26)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lmdb
import msgpack

from es_broker.log import Record, RecordLog
from es_broker.log.types import RecordType, TopicDeleted, TopicPermChanged, TopicUpdated
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import MAX_KEY

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


class TopicConfigProjection(Dispatching):
    name = "topics"
    databases = ("topics",)

    def bind(self, log: RecordLog) -> None:
        self.db = log.db("topics")

    def _updated(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        updated = TopicUpdated.from_record(record)
        config = dict(updated.config, dataVersion=seq)
        txn.put(updated.topic.encode(), msgpack.packb(config), db=self.db)

    def _perm_changed(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        changed = TopicPermChanged.from_record(record)
        current = self.get(txn, changed.topic)
        if current is not None:
            current.update(perm=changed.perm, dataVersion=seq)
            txn.put(changed.topic.encode(), msgpack.packb(current), db=self.db)

    def _deleted(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        txn.delete(TopicDeleted.from_record(record).topic.encode(), db=self.db)

    HANDLERS = handlers(
        {
            RecordType.TOPIC_UPDATED: _updated,
            RecordType.TOPIC_PERM_CHANGED: _perm_changed,
            RecordType.TOPIC_DELETED: _deleted,
        }
    )

    def get(self, txn: lmdb.Transaction[bytes], topic: str) -> dict[str, Any] | None:
        key = topic.encode()
        if not 0 < len(key) <= MAX_KEY:  # no such name can exist; LMDB refuses such keys
            return None
        raw = txn.get(key, db=self.db)
        return msgpack.unpackb(raw) if raw else None

    def all(self, txn: lmdb.Transaction[bytes]) -> Iterator[dict[str, Any]]:
        for _, raw in txn.cursor(db=self.db):
            yield msgpack.unpackb(raw)
