"""Run-time changes of the broker's settings (UPDATE_BROKER_CONFIG), recorded (B-270..B-274).

A change is a `broker_config_updated` record: the broker (name and id) it
applies to, each changed key with its old and new value as broker.conf text,
and who asked. No projection reads it; the log is where the history is, so
`export` and the read model's `records` table answer who changed what, when.

RocketMQ 4.9.8 writes an updateBrokerConfig into the broker's config file, so
the change outlives a restart. es-broker keeps broker.conf as the operator
wrote it and instead re-applies, at start, the recorded changes addressed to
this broker (`recorded_changes`), in log order, over what broker.conf says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from es_broker.commands.errors import IllegalRequest
from es_broker.commands.store import Store
from es_broker.config import RUNTIME_KEYS, BrokerConfig, ConfigOwner, coerce
from es_broker.log import AppendContext, Record, make, unpack

UPDATED = "broker_config_updated"
_MARK = UPDATED.encode()


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
            make(
                UPDATED,
                store.clock.now_ms(),
                broker_name=now.brokerName,
                broker_id=now.brokerId,
                changes=[
                    {"key": key, "old": as_text(getattr(now, key)), "new": as_text(value)}
                    for key, value in sorted(values.items())
                ],
                requester=requester,
            )
        )

    return job


def _ours(record: Record, config: BrokerConfig) -> bool:
    return (
        record.get("type") == UPDATED
        and record.get("broker_name") == config.brokerName
        and record.get("broker_id") == config.brokerId
    )


def recorded_changes(
    raw_records: Iterable[tuple[int, bytes]], config: BrokerConfig
) -> dict[str, Any]:
    """The settings the log's `broker_config_updated` records addressed to this broker leave in force.

    Later records win; keys no longer changeable at run time are skipped.
    """
    values: dict[str, Any] = {}
    for _seq, raw in raw_records:
        if _MARK not in raw:  # most records: skip the decoding
            continue
        record = unpack(raw)
        if not _ours(record, config):
            continue
        for change in record["changes"]:
            key = change["key"]
            if key in RUNTIME_KEYS:
                values[key] = coerce(key, change["new"], type(getattr(config, key)))
    return values
