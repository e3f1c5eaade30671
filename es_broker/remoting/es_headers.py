"""The request headers of es-broker's own request codes (EsRequestCode), declared as headers.py
declares RocketMQ's: one frozen class per shape, each field's rule next to it."""

from __future__ import annotations

from dataclasses import dataclass

from .header_fields import CustomHeader, boolean, i32, i64, text

# What RESET_OFFSET's `kind` and `mode` take on the wire (`mode`: the values of the reset record's
# ResetMode, es_broker/log/vocabulary.py; an unknown mode is refused by the reset itself).
RESET_KINDS = ("time", "offset", "shift", "earliest", "latest")
RESET_MODES = ("compat", "server_side")

# -- offsets and dead letters (es_broker/server/processors/time_travel.py, retry.py) ---------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetOffsetsRequestHeader(CustomHeader):
    """RESET_OFFSET: a group's offsets moved by time, to an offset, by a shift, or to an end."""

    topic: str = text(True)
    group: str = text(True)
    kind: str = text(True, choices=frozenset(RESET_KINDS))
    value: int | None = i64()
    is_force: bool | None = boolean()
    dry_run: bool | None = boolean()
    mode: str | None = text()
    scope: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class RedriveDlqRequestHeader(CustomHeader):
    """REDRIVE_DLQ: a group's dead letters sent again, to its retry topic or their own."""

    group: str = text(True)
    topic: str | None = text()
    target: str | None = text(choices=frozenset({"retry", "original"}))
    max_count: int | None = i32(min=0)
    dry_run: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageTraceRequestHeader(CustomHeader):
    """MESSAGE_TRACE: a message's journey, by id."""

    msg_id: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryArchiveRequestHeader(CustomHeader):
    """HISTORY_ARCHIVE: seal the log's segments older than `before` (B-411)."""

    before: int = i64(True)


# -- time travel (es_broker/server/processors/time_travel.py) -----------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsAtRequestHeader(CustomHeader):
    """OFFSETS_AT: a group's offset table at a moment."""

    group: str = text(True)
    topic: str | None = text()
    at: int = i64(True)
    durable: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetHistoryRequestHeader(CustomHeader):
    """OFFSET_HISTORY: a group's newest offset changes and the records that explain them."""

    group: str = text(True)
    topic: str | None = text()
    since: int | None = i64()
    until: int | None = i64()
    max_entries: int | None = i32(min=1, max=10_000)
    changes_only: bool | None = boolean()


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetTimelineRequestHeader(CustomHeader):
    """OFFSET_TIMELINE: a group's offsets and lag sampled over a window, and its events."""

    group: str = text(True)
    topic: str | None = text()
    since: int | None = i64()
    until: int | None = i64()
    points: int | None = i32(min=2, max=1_000)
    max_events: int | None = i32(min=1, max=10_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplainGroupRequestHeader(CustomHeader):
    """EXPLAIN_GROUP: why a group started where it did on a topic."""

    group: str = text(True)
    topic: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountScopeRequestHeader(CustomHeader):
    """ACCOUNT_SCOPE: the topics and groups the calling account may see, optionally one of each."""

    topic: str | None = text()
    group: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenTransactionsRequestHeader(CustomHeader):
    """OPEN_TRANSACTIONS: the open half messages, of one producer group or all."""

    producer_group: str | None = text()


@dataclass(frozen=True, slots=True, kw_only=True)
class StatsHistoryRequestHeader(CustomHeader):
    """STATS_HISTORY: messages in and out per interval, the broker's or a topic's."""

    since: int = i64(True, min=0)
    until: int = i64(True, min=0)
    step_minutes: int | None = i32(min=1, max=24 * 60)
    topic: str | None = text()


# -- replication (es_broker/ha/protocol.py) -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HaFetchRecordsRequestHeader(CustomHeader):
    """HA_FETCH_RECORDS: a slave's fetch of records from `fromSeq`, long-polled on the master."""

    slave_id: int = i32(True, min=0)
    slave_addr: str = text(True)
    from_seq: int = i64(True, min=0)
    last_record_crc: int = i64(True)
    slave_phy_max: int = i64(True)
    max_wait_millis: int = i32(True, min=0)
    max_bytes: int | None = i32(min=1)
    epoch: int | None = i32()  # the fail-over epoch the slave follows (B-375); absent: none


@dataclass(frozen=True, slots=True, kw_only=True)
class HaMergeSlaveOffsetsRequestHeader(CustomHeader):
    """HA_MERGE_SLAVE_OFFSETS: the offsets a slave took alone, merged into its master's."""

    slave_id: int = i32(True, min=0)
    slave_addr: str = text(True)
    journal_upto: int = i64(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class HaSwitchRequestHeader(CustomHeader):
    """HA_SWITCH (B-386): the leader hands its key to follower node `to`."""

    to: str = text(True)


# -- responses ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HaFetchRecordsResponseHeader(CustomHeader):
    """HA_FETCH_RECORDS' answer: where the records of the body start and the master's ends."""

    first_seq: int = i64(True)
    count: int = i32(True, min=0)
    master_last_seq: int = i64(True)
    master_phy_max: int = i64(True)
    epoch: int | None = i32()  # the master's fail-over epoch; absent or -1: no coordinator


@dataclass(frozen=True, slots=True, kw_only=True)
class HaMergeSlaveOffsetsResponseHeader(CustomHeader):
    """HA_MERGE_SLAVE_OFFSETS' answer: the merge record, the policy applied, deliveries appended."""

    seq: int | None = i64()
    policy: str | None = text()
    deliveries: int | None = i32(min=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class HaSwitchResponseHeader(CustomHeader):
    """HA_SWITCH's answer: the node that led, and the one that leads now."""

    from_node: str = text(True, name="from")
    to: str = text(True)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordSeqResponseHeader(CustomHeader):
    """The answer of a request that appended one record (HA_REPORT_SET_ASIDE): its sequence."""

    seq: int = i64(True)
