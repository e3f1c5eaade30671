"""Subscription group configs (SubscriptionGroupManager, B-03)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lmdb
import msgpack

from es_broker.log import Record, RecordLog
from es_broker.log.types import RecordType, SubgroupDeleted, SubgroupUpdated
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import MAX_KEY


def default_group_config(group: str) -> dict[str, Any]:
    """The config a group gets when created implicitly (B-03)."""
    return {
        "groupName": group,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True,
        "retryQueueNums": 1,
        "retryMaxTimes": 16,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }


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

    def get(self, txn: lmdb.Transaction[bytes], group: str) -> dict[str, Any] | None:
        key = group.encode()
        if not 0 < len(key) <= MAX_KEY:  # no such name can exist; LMDB refuses such keys
            return None
        raw = txn.get(key, db=self.db)
        return msgpack.unpackb(raw) if raw else None

    def all(self, txn: lmdb.Transaction[bytes]) -> Iterator[dict[str, Any]]:
        for _, raw in txn.cursor(db=self.db):
            yield msgpack.unpackb(raw)
