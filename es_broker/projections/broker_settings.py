"""The broker's run-time settings changes in force: what `broker_config_updated` records left (B-272).

- `broker_settings`: broker name NUL broker id NUL key -> the new value as
  broker.conf text, from the latest record that changed it.

A broker reads its own entries at start and applies them over broker.conf, so
a change made over the wire outlives a restart without a scan of the log.
Only record fields are read: replay rebuilds it byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lmdb

from es_broker.log import Record
from es_broker.log.scan import prefixed
from es_broker.log.types import BrokerConfigUpdated, RecordType
from es_broker.projections.dispatch import Dispatching, handlers


def _prefix(broker_name: str, broker_id: int) -> bytes:
    return f"{broker_name}\0{broker_id}\0".encode()


class BrokerSettingsProjection(Dispatching):
    name = "broker_settings"
    databases = ("broker_settings",)

    def bind(self, log: Any) -> None:
        self.db = log.db("broker_settings")

    def _updated(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        updated = BrokerConfigUpdated.from_record(record)
        prefix = _prefix(updated.broker_name, updated.broker_id)
        for change in updated.changes:
            txn.put(prefix + change["key"].encode(), change["new"].encode(), db=self.db)

    HANDLERS = handlers({RecordType.BROKER_CONFIG_UPDATED: _updated})

    def changes_in_force(
        self, txn: lmdb.Transaction[bytes], broker_name: str, broker_id: int
    ) -> Iterator[tuple[str, str]]:
        """(key, value as broker.conf text) of every setting the log changed for this broker."""
        prefix = _prefix(broker_name, broker_id)
        for key, value in prefixed(txn, self.db, prefix):
            yield key[len(prefix) :].decode(), bytes(value).decode()
