"""Subscription group configs (SubscriptionGroupManager, B-03).

Stored as the records' camelCase maps plus `dataVersion`, read as `SubscriptionGroupConfig`
(configs.py), whose defaults are those a group created implicitly gets (B-03).
"""

from __future__ import annotations

from collections.abc import Iterator

import lmdb
import msgpack

from es_broker.log import Record, RecordLog
from es_broker.log.types import RecordType, SubgroupDeleted, SubgroupUpdated
from es_broker.projections.configs import Versioned, stored_group
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import MAX_KEY
from es_broker.remoting.bodies import SubscriptionGroupConfig


class SubscriptionGroupProjection(Dispatching):
    name = "subscription_groups"
    databases = ("subgroups",)

    def bind(self, log: RecordLog) -> None:
        self.db = log.db("subgroups")

    def _updated(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        updated = SubgroupUpdated.from_record(record)
        config = dict(updated.config, dataVersion=seq)
        txn.put(updated.group.encode(), msgpack.packb(config), db=self.db)

    def _deleted(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        txn.delete(SubgroupDeleted.from_record(record).group.encode(), db=self.db)

    HANDLERS = handlers(
        {RecordType.SUBGROUP_UPDATED: _updated, RecordType.SUBGROUP_DELETED: _deleted}
    )

    def _raw(self, txn: lmdb.Transaction[bytes], group: str) -> bytes | None:
        key = group.encode()
        if not 0 < len(key) <= MAX_KEY:  # no such name can exist; LMDB refuses such keys
            return None
        raw: bytes | None = txn.get(key, None, self.db)
        return raw

    def get(self, txn: lmdb.Transaction[bytes], group: str) -> SubscriptionGroupConfig | None:
        """The group's config, or None when there is no such group."""
        raw = self._raw(txn, group)
        return None if raw is None else stored_group(bytes(raw)).config

    def all(self, txn: lmdb.Transaction[bytes]) -> Iterator[Versioned[SubscriptionGroupConfig]]:
        """Every group's config with its dataVersion, by name."""
        for _, raw in txn.cursor(db=self.db):
            yield stored_group(bytes(raw))
