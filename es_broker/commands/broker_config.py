"""Run-time changes of the broker's settings (UPDATE_BROKER_CONFIG), recorded (B-270..B-273).

A change is a `broker_config_updated` record: the broker (name and id) it
applies to, each changed key with its old and new value as broker.conf text,
and who asked. The log is where the history is, so `export` and the read
model's `records` table answer who changed what, when.

RocketMQ 4.9.8 writes an updateBrokerConfig into the broker's config file, so
the change outlives a restart. es-broker keeps broker.conf as the operator
wrote it and instead re-applies, at start, the changes in force for this
broker (the `broker_settings` projection, `recorded_changes`) over what
broker.conf says: a few reads, however long the log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from es_broker.commands.errors import IllegalRequest
from es_broker.config import RUNTIME_KEYS, BrokerConfig, ConfigOwner, coerce
from es_broker.log import AppendContext
from es_broker.log.types import BrokerConfigUpdated
from es_broker.store import Store


def as_text(value: object) -> str:
    """A setting as broker.conf and GET_BROKER_CONFIG write it (booleans lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_changes(settings: ConfigOwner, changes: Mapping[str, str]) -> dict[str, object]:
    """The typed values of a change; IllegalRequest (SYSTEM_ERROR) names a key or value refused."""
    try:
        return settings.runtime_values(changes)
    except ValueError as exc:
        raise IllegalRequest(str(exc)) from None


def update_job(
    store: Store, values: Mapping[str, object], requester: str
) -> Callable[[AppendContext], int]:
    """Record a change of run-time settings; the caller applies it once the record is written."""

    def job(ctx: AppendContext) -> int:
        now = store.config
        return ctx.append(
            BrokerConfigUpdated(
                broker_name=now.brokerName,
                broker_id=now.brokerId,
                changes=[
                    {"key": key, "old": as_text(getattr(now, key)), "new": as_text(value)}
                    for key, value in sorted(values.items())
                ],
                requester=requester,
            ).to_record(store.clock.now_ms())
        )

    return job


def recorded_changes(store: Store, config: BrokerConfig) -> dict[str, Any]:
    """The settings the log's `broker_config_updated` records left in force for this broker.

    Keys no longer changeable at run time are skipped.
    """
    with store.read() as txn:
        changes = list(
            store.broker_settings.changes_in_force(txn, config.brokerName, config.brokerId)
        )
    return {
        key: coerce(key, text, type(getattr(config, key)))
        for key, text in changes
        if key in RUNTIME_KEYS
    }
