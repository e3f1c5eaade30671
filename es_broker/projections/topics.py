"""Topic configs (TopicConfigManager): name, queue numbers, perm, flags (B-20..B-26).

Stored as the records' camelCase maps plus `dataVersion`, read as `TopicConfig` (configs.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import lmdb
import msgpack

from es_broker.log import Record, RecordLog
from es_broker.log.types import RecordType, TopicDeleted, TopicPermChanged, TopicUpdated
from es_broker.projections.configs import Versioned, stored_topic
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import MAX_KEY
from es_broker.remoting.bodies import TopicConfig

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
KEPT_TOPICS = 4096  # the most topics' configs the writer keeps (`writer_get`)


class TopicConfigProjection(Dispatching):
    name = "topics"
    databases = ("topics",)

    def bind(self, log: RecordLog) -> None:
        self.db = log.db("topics")
        self.log = log
        # the configs the writer's transaction `_txn` read (`writer_get`), by topic: kept for the
        # next write transaction when it follows `_txn`'s commit (RecordLog.follows); any write
        # to the topics forgets them
        self._txn: lmdb.Transaction[bytes] | None = None
        self._kept: dict[str, TopicConfig | None] = {}

    def _forget(self) -> None:
        self._txn = None
        self._kept.clear()

    def _updated(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._forget()
        updated = TopicUpdated.from_record(record)
        config = dict(updated.config, dataVersion=seq)
        txn.put(updated.topic.encode(), msgpack.packb(config), db=self.db)

    def _perm_changed(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._forget()
        changed = TopicPermChanged.from_record(record)
        raw = self._raw(txn, changed.topic)
        if raw is not None:  # the stored map itself, so its other keys keep their bytes
            current = msgpack.unpackb(raw)
            current.update(perm=changed.perm, dataVersion=seq)
            txn.put(changed.topic.encode(), msgpack.packb(current), db=self.db)

    def _deleted(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._forget()
        txn.delete(TopicDeleted.from_record(record).topic.encode(), db=self.db)

    HANDLERS = handlers(
        {
            RecordType.TOPIC_UPDATED: _updated,
            RecordType.TOPIC_PERM_CHANGED: _perm_changed,
            RecordType.TOPIC_DELETED: _deleted,
        }
    )

    def _raw(self, txn: lmdb.Transaction[bytes], topic: str) -> bytes | None:
        key = topic.encode()
        if not 0 < len(key) <= MAX_KEY:  # no such name can exist; LMDB refuses such keys
            return None
        raw: bytes | None = txn.get(key, db=self.db)
        return raw

    def get(self, txn: lmdb.Transaction[bytes], topic: str) -> TopicConfig | None:
        """The topic's config, or None when there is no such topic."""
        key = topic.encode()  # `_raw`'s look-up, inline: a send and a pull read a config each
        if not 0 < len(key) <= MAX_KEY:
            return None
        raw = txn.get(key, None, self.db)
        return None if raw is None else stored_topic(bytes(raw)).config

    def writer_get(self, txn: lmdb.Transaction[bytes], topic: str) -> TopicConfig | None:
        """`get` in the writer's transaction `txn` (a send's job): kept for the transaction's
        next sends, and the next transaction's when it follows this one's commit."""
        if txn is not self._txn:
            if len(self._kept) > KEPT_TOPICS or not self.log.follows(self._txn, txn):
                self._kept.clear()
            self._txn = txn
        kept = self._kept
        if topic in kept:
            return kept[topic]
        config = kept[topic] = self.get(txn, topic)
        return config

    def versioned(self, txn: lmdb.Transaction[bytes], topic: str) -> Versioned[TopicConfig] | None:
        """The topic's config with its dataVersion, or None when there is no such topic."""
        raw = self._raw(txn, topic)
        return None if raw is None else stored_topic(bytes(raw))

    def all(self, txn: lmdb.Transaction[bytes]) -> Iterator[Versioned[TopicConfig]]:
        """Every topic's config with its dataVersion, by name."""
        for _, raw in txn.cursor(db=self.db):
            yield stored_topic(bytes(raw))
