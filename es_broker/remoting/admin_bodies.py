"""es-broker's own answer bodies (codes 9101..9281), typed like the Java ones of `bodies.py`.

The broker writes each of these classes and `es_broker.client.admin` reads
them back. Most are fastjson text as a Java body would be (fields sorted,
nulls omitted); the re-drive answer has always been Python's own JSON
(fields in declared order, nulls kept, ", " and ": " separators), and
`RedriveBody.encode` keeps those bytes as they were.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .bean import Bean


def _python_json(bean: Bean) -> bytes:
    """`bean` as Python's json module writes it: declared field order, nulls as null."""
    return json.dumps(bean, default=_fields_in_order).encode("utf-8")


def _fields_in_order(value: Any) -> Any:
    if isinstance(value, Bean):
        return value.__fastjson__()  # every field, declared order, None kept (json writes null)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


# -- OPEN_TRANSACTIONS (B-232) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenTransaction(Bean):
    """A half message not yet committed or rolled back."""

    producer_group: str = ""
    topic: str = ""
    queue_id: int = 0
    transaction_id: str | None = None
    offset_msg_id: str = ""
    commit_log_offset: int = 0
    tran_state_table_offset: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    checks: int = 0
    last_check_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class OpenTransactionsBody(Bean):
    """OPEN_TRANSACTIONS answer."""

    transactions: tuple[OpenTransaction, ...] = ()


# -- RESET_OFFSET (S-2) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueResetRow(Bean):
    """One queue of a reset: where it was, what was asked, where it is now."""

    queue_id: int = 0
    current: int = 0
    target: int = 0
    final: int = 0
    outcome: str = ""


@dataclass(frozen=True, slots=True)
class ResetOffsetResult(Bean):
    """RESET_OFFSET answer of one broker; `seq` is None for a dry run."""

    group: str = ""
    topic: str = ""
    broker_name: str = ""
    kind: str = ""
    value: int = 0
    mode: str = ""
    dry_run: bool = False
    seq: int | None = None
    outcome: str = ""
    queues: tuple[QueueResetRow, ...] = ()


# -- DELETE_EXPIRED_COMMITLOG (B-264) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanPassResult(Bean):
    """Manual clean passes: their trigger (None when none held), the files they deleted, and
    `running` True when they had not ended as the broker answered (B-677) and go on (None, not
    written, when they had: the body ended passes always had)."""

    reason: str | None = None
    deleted_files: tuple[int, ...] = ()
    phy_min: int = 0
    seq: int | None = None
    running: bool | None = None


# -- REDRIVE_DLQ (S-9) -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RedriveItem(Bean):
    """One dead letter, and where it went (or would go, or why it stays)."""

    dlq_queue_offset: int = 0
    dlq_msg_id: str = ""
    physical_offset: int = 0
    original_topic: str | None = None
    target_topic: str | None = None
    target_queue_id: int | None = None
    new_msg_id: str | None = None
    skipped: str | None = None


@dataclass(frozen=True, slots=True)
class RedriveBody(Bean):
    """REDRIVE_DLQ answer; `more` tells that dead letters are left for another request."""

    group: str = ""
    target: str = ""
    dry_run: bool = False
    more: bool = False
    items: tuple[RedriveItem, ...] = ()

    def encode(self, *, standard_json: bool = False) -> bytes:
        """Python's JSON, as this answer always was (`standard_json` changes nothing)."""
        return _python_json(self)
