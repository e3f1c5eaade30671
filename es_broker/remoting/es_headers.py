"""The request headers of es-broker's own request codes (EsRequestCode), declared as headers.py
declares RocketMQ's: one frozen class per shape, each field's rule next to it."""

from __future__ import annotations

from dataclasses import dataclass

from .header_fields import RequestHeader, boolean, i32, i64, text

# -- offsets and dead letters (es_broker/server/query_processors.py, retry_processors.py) ------


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetOffsetsRequestHeader(RequestHeader):
    """RESET_OFFSET: a group's offsets moved by time, to an offset, by a shift, or to an end."""

    topic: str = text(True)
    group: str = text(True)
    kind: str = text(True, choices=frozenset({"time", "offset", "shift", "earliest", "latest"}))
    value: int | None = i64()
    is_force: bool | None = boolean()
    dry_run: bool | None = boolean()
    mode: str | None = text()
    scope: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class RedriveDlqRequestHeader(RequestHeader):
    """REDRIVE_DLQ: a group's dead letters sent again, to its retry topic or their own."""

    group: str = text(True)
    topic: str | None = text()
    target: str | None = text(choices=frozenset({"retry", "original"}))
    max_count: int | None = i32(min=0)
    dry_run: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageTraceRequestHeader(RequestHeader):
    """MESSAGE_TRACE: a message's journey, by id."""

    msg_id: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryArchiveRequestHeader(RequestHeader):
    """HISTORY_ARCHIVE: seal the log's segments older than `before` (B-411)."""

    before: int = i64(True)


# -- time travel (es_broker/server/query_processors.py) -----------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsAtRequestHeader(RequestHeader):
    """OFFSETS_AT: a group's offset table at a moment."""

    group: str = text(True)
    topic: str | None = text()
    at: int = i64(True)
    durable: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetHistoryRequestHeader(RequestHeader):
    """OFFSET_HISTORY: a group's newest offset changes and the records that explain them."""

    group: str = text(True)
    topic: str | None = text()
    since: int | None = i64()
    until: int | None = i64()
    max_entries: int | None = i32(min=1, max=10_000)
    changes_only: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetTimelineRequestHeader(RequestHeader):
    """OFFSET_TIMELINE: a group's offsets and lag sampled over a window, and its events."""

    group: str = text(True)
    topic: str | None = text()
    since: int | None = i64()
    until: int | None = i64()
    points: int | None = i32(min=2, max=1_000)
    max_events: int | None = i32(min=1, max=10_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplainGroupRequestHeader(RequestHeader):
    """EXPLAIN_GROUP: why a group started where it did on a topic."""

    group: str = text(True)
    topic: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountScopeRequestHeader(RequestHeader):
    """ACCOUNT_SCOPE: the topics and groups the calling account may see, optionally one of each."""

    topic: str | None = text()
    group: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenTransactionsRequestHeader(RequestHeader):
    """OPEN_TRANSACTIONS: the open half messages, of one producer group or all."""

    producer_group: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class StatsHistoryRequestHeader(RequestHeader):
    """STATS_HISTORY: messages in and out per interval, the broker's or a topic's."""

    since: int = i64(True, min=0)
    until: int = i64(True, min=0)
    step_minutes: int | None = i32(min=1, max=24 * 60)
    topic: str | None = text()


# -- replication (es_broker/ha/protocol.py) -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HaFetchRecordsRequestHeader(RequestHeader):
    """HA_FETCH_RECORDS: a slave's fetch of records from `fromSeq`, long-polled on the master."""

    slave_id: int = i32(True, min=0)
    slave_addr: str = text(True)
    from_seq: int = i64(True, min=0)
    last_record_crc: int = i64(True)
    slave_phy_max: int = i64(True)
    max_wait_millis: int = i32(True, min=0)
    max_bytes: int | None = i32(min=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class HaMergeSlaveOffsetsRequestHeader(RequestHeader):
    """HA_MERGE_SLAVE_OFFSETS: the offsets a slave took alone, merged into its master's."""

    slave_id: int = i32(True, min=0)
    slave_addr: str = text(True)
    journal_upto: int = i64(True)
