"""Typed records: one frozen, slotted class per record type and schema version.

How a class becomes its record and back is `typed.py`; the enums records use are
`vocabulary.py`; the dict views of the hot path are `views.py`. This module holds
the classes and is where the rest of the code imports all of them from.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from es_broker.log.pop_types import MessagesPopped, PopAcked, PopExpired, PopInvisibleChanged
from es_broker.log.typed import TypedRecord, parse, typed, unregistered_types
from es_broker.log.views import (
    MessagesDeliveredRecord,
    MessagesStoredRecord,
    OffsetCommittedRecord,
    as_view,
)
from es_broker.log.vocabulary import (
    Cause,
    RecordType,
    ResetMode,
    ResetOutcome,
    ResetScope,
    SendBackDecision,
    SlaveMergeOutcome,
    SlaveMergePolicy,
    TransactionState,
)

# ---------------------------------------------------------------------- messages


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MessagesStored(TypedRecord):
    """Messages placed at the commit-log end and in one consume queue (SEND_MESSAGE and all that stores)."""

    TYPE = RecordType.MESSAGES_STORED
    topic: str
    queue_id: int
    queue_offset: int
    units: list[list[int]]  # [physical offset, size, tags code] per message
    producer_group: str
    requester: str
    diverted_from: str | None = None  # a send to %RETRY%G dead-lettered on the way (B-95)
    delay: dict[str, Any] | None = None  # parked in SCHEDULE_TOPIC_XXXX (B-96)
    cause: Cause | None = None  # SEND_BACK, REDRIVE
    delivery: dict[str, Any] | None = None  # delivered from the delay schedule (B-97)
    transaction: dict[str, Any] | None = None  # a half message, its commit or its discard


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MessagesDelivered(TypedRecord):
    TYPE = RecordType.MESSAGES_DELIVERED
    group: str
    topic: str
    queue_id: int
    offset: int
    offsets: list[int]
    next_offset: int
    client: str
    served_by: dict[str, Any] | None = None  # answered by a slave (S-5)


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PullOffsetMoved(TypedRecord):
    TYPE = RecordType.PULL_OFFSET_MOVED
    group: str
    topic: str
    queue_id: int
    offset: int
    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    client: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeliveriesUnrecorded(TypedRecord):
    TYPE = RecordType.DELIVERIES_UNRECORDED
    group: str
    topic: str
    queue_id: int
    first_offset: int
    last_offset: int
    next_offset: int
    pulls: int
    messages: int
    clients: list[str]
    first_ts: int
    last_ts: int
    reason: str
    disk_full_since: int | None


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CommitlogExpired(TypedRecord):
    TYPE = RecordType.COMMITLOG_EXPIRED
    reason: str
    files: list[int]
    phy_min: int
    file_reserved_hours: int
    queues: list[Any]
    lost: list[Any]


# ---------------------------------------------------------------------- offsets


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitted(TypedRecord):
    TYPE = RecordType.OFFSET_COMMITTED
    group: str
    topic: str
    queue_id: int
    offset: int
    old: int
    cause: Cause
    requester: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitIgnored(TypedRecord):
    TYPE = RecordType.OFFSET_COMMIT_IGNORED
    group: str
    topic: str
    queue_id: int
    offset: int
    current: int
    reason: str
    reset_seq: int
    target: int
    requester: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OffsetQueried(TypedRecord):
    TYPE = RecordType.OFFSET_QUERIED
    group: str
    topic: str
    queue_id: int
    row: int
    offset: int
    code: int
    min_offset: int
    head_in_memory: bool | None
    phy_max: int
    requester: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsRemoved(TypedRecord):
    TYPE = RecordType.OFFSETS_REMOVED
    group: str
    entries: list[list[Any]]  # [topic, queue id, offset]
    cause: Cause
    requester: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResetRequested(TypedRecord):
    TYPE = RecordType.RESET_REQUESTED
    group: str
    topic: str
    kind: str
    value: int
    timestamp: int
    force: bool
    mode: ResetMode
    scope: ResetScope
    requester: str
    notified: list[str]
    outcome: str
    queues: list[list[Any]]  # [queue id, current, target, final, ResetOutcome]


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SlaveOffsetsMerged(TypedRecord):
    TYPE = RecordType.SLAVE_OFFSETS_MERGED
    broker_id: int
    slave_addr: str
    policy: SlaveMergePolicy
    journal_upto: int
    commits: list[list[Any]]
    queues: list[list[Any]]  # [topic, group, queue id, old, new, SlaveMergeOutcome, requester]
    deliveries: int
    requester: str
    promotion: bool | None = None  # only written (True) for a promoted slave's own journal


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SlaveCaughtUp(TypedRecord):
    TYPE = RecordType.SLAVE_CAUGHT_UP
    broker_id: int
    slave_addr: str
    seq: int
    connected_at: int
    records_shipped: int


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HaPromoted(TypedRecord):
    """A node took its group's leader key in etcd (B-370..B-389): the first record of its epoch."""

    TYPE = RecordType.HA_PROMOTED
    epoch: int
    node: str
    addr: str
    role: str  # SYNC_MASTER | ASYNC_MASTER
    old_leader: str  # "" for the group's first leader
    old_acked_seq: int  # the acknowledged sequence the old leader published (SYNC_MASTER), else 0
    last_seq: int  # this node's last record when it took the key: the common point of both epochs
    reason: str  # elected | switch_over


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HaRecordsSetAside(TypedRecord):
    """A former leader (or follower) rejoined holding records the new history lacks (B-370..B-389)."""

    TYPE = RecordType.HA_RECORDS_SET_ASIDE
    node: str
    epoch: int  # the epoch that node knew
    common_seq: int  # it was truncated to this record
    first_seq: int
    last_seq: int
    messages: int  # messages among the records set aside
    msg_ids: list[str]
    export: str  # where the node wrote them (its data directory), export format with the reason
    reason: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupChanged(TypedRecord):
    TYPE = RecordType.CONSUMER_GROUP_CHANGED
    group: str
    clients: list[str]
    consume_from_where: str
    message_model: str
    subscriptions: dict[str, str]


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueueLocksChanged(TypedRecord):
    TYPE = RecordType.QUEUE_LOCKS_CHANGED
    group: str
    client: str
    cause: Cause
    max_live_ms: int
    changes: list[list[Any]]  # [topic, broker, queue id, new owner, old owner, old last update]


# ---------------------------------------------------------------------- retry, delay, dead letters


_SENT_BACK_DROPPED = (
    "group",
    "offset",
    "decision",
    "reason",
    "header_delay_level",
    "client_origin_msg_id",
    "client_origin_topic",
    "requester",
)


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MessageSentBack(TypedRecord):
    """CONSUMER_SEND_MSG_BACK; a dropped send-back (retryQueueNums 0) holds only the request's fields."""

    TYPE = RecordType.MESSAGE_SENT_BACK
    ORDERS = (_SENT_BACK_DROPPED,)
    group: str
    offset: int
    msg_id: str | None = None
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    reconsume_times: int | None = None
    max_reconsume_times: int | None = None
    header_delay_level: int
    decision: SendBackDecision
    reason: str
    delay_level: int | None = None
    delay_ms: int | None = None
    deliver_at: int | None = None
    target_topic: str | None = None
    target_queue_id: int | None = None
    stored_phy: int | None = None
    stored_msg_id: str | None = None
    stored_seq: int | None = None
    origin_msg_id: str | None = None
    retry_topic: str | None = None
    client_origin_msg_id: str | None
    client_origin_topic: str | None
    requester: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DelayedMessageSkipped(TypedRecord):
    TYPE = RecordType.DELAYED_MESSAGE_SKIPPED
    level: int
    schedule_offset: int
    schedule_phy: int
    next_cursor: int
    reason: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterRedriven(TypedRecord):
    TYPE = RecordType.DEAD_LETTER_REDRIVEN
    group: str
    offset: int
    msg_id: str
    dlq_queue_offset: int
    reconsume_times: int
    original_topic: str | None
    target: str
    target_topic: str
    target_queue_id: int
    stored_phy: int
    stored_msg_id: str
    stored_seq: int
    requester: str


# ---------------------------------------------------------------------- transactions


_ENDED_DISCARDED = (
    "state",
    "real_topic",
    "real_queue_id",
    "from_check",
    "requester",
    "prepared_phy",
    "half_queue_offset",
    "producer_group",
    "transaction_id",
    "checks",
    "reason",
)


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TransactionEnded(TypedRecord):
    """A rollback, or a discard whose half message was already removed (with its `reason`)."""

    TYPE = RecordType.TRANSACTION_ENDED
    ORDERS = (_ENDED_DISCARDED,)
    state: TransactionState
    real_topic: str
    real_queue_id: int
    requester: str
    prepared_phy: int
    half_queue_offset: int
    producer_group: str
    transaction_id: str
    from_check: bool
    checks: int
    reason: str | None = None


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TransactionChecked(TypedRecord):
    TYPE = RecordType.TRANSACTION_CHECKED
    prepared_phy: int
    attempt: int
    producer_group: str
    client: str
    real_topic: str
    real_queue_id: int
    transaction_id: str


# ---------------------------------------------------------------------- request-reply


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReplyPushed(TypedRecord):
    """A reply stored in the reply topic and what became of its push to the requester (B-325..B-334)."""

    TYPE = RecordType.REPLY_PUSHED
    correlation_id: str
    reply_to: str  # the requesting client id (REPLY_TO_CLIENT); "" when the reply has none
    reply_topic: str
    reply_queue_id: int
    reply_phy: int
    reply_msg_id: str
    reply_stored_at: int
    ttl_ms: int | None  # MESSAGE_TTL as the reply carries it
    request_phy: int | None = None  # the request, when this broker stored it
    request_msg_id: str | None = None
    deadline: int | None  # born time (the request's, else the reply's) + ttl
    outcome: str  # "pushed" or "undeliverable"
    reason: str | None = None  # no_reply_to, ttl, client_gone, push_failed
    push_code: int | None = None  # the requester's answer to PUSH_REPLY_MESSAGE_TO_CLIENT
    push_remark: str | None = None
    pushed_at: int | None = None  # PUSH_REPLY_TIME: broker time of the push
    producer_group: str
    requester: str


# ---------------------------------------------------------------------- topics, groups, settings


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopicUpdated(TypedRecord):
    TYPE = RecordType.TOPIC_UPDATED
    topic: str
    config: dict[str, Any]
    requester: str
    cause: Cause


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopicPermChanged(TypedRecord):
    TYPE = RecordType.TOPIC_PERM_CHANGED
    topic: str
    old_perm: int
    perm: int
    requester: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TopicDeleted(TypedRecord):
    TYPE = RecordType.TOPIC_DELETED
    topic: str
    requester: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubgroupUpdated(TypedRecord):
    TYPE = RecordType.SUBGROUP_UPDATED
    group: str
    config: dict[str, Any]
    requester: str
    cause: Cause


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SubgroupDeleted(TypedRecord):
    TYPE = RecordType.SUBGROUP_DELETED
    group: str
    requester: str
    # deleted with removeOffset: the group's offsets, gone in this same record (B-431);
    # [topic, queue id, offset] as `offsets_removed` holds them
    offsets: list[list[Any]] | None = None


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfigUpdated(TypedRecord):
    TYPE = RecordType.BROKER_CONFIG_UPDATED
    broker_name: str
    broker_id: int
    changes: list[dict[str, str]]  # {"key", "old", "new"}, by key
    requester: str


# ---------------------------------------------------------------------- ACL


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AclLoaded(TypedRecord):
    """The ACL rules in force after a load (no secret among them)."""

    TYPE = RecordType.ACL_LOADED
    listener: str
    version: int
    cause: str  # es_broker.acl.access.LoadCause's value
    requester: str
    files: list[list[str]]
    data_version: list[int]
    global_white: list[str]
    fingerprint: str
    salt_id: str
    accounts: list[dict[str, Any]]


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HistoryArchived(TypedRecord):
    """A sealed segment of the log moved to the archive, and the snapshot that replaces it (B-401).

    Applying it removes the segment's records from the hot log; `snapshot_seq`
    is the last record the snapshot holds the state after.
    """

    TYPE = RecordType.HISTORY_ARCHIVED
    first_seq: int
    last_seq: int
    first_time: int
    last_time: int
    records: int
    raw_sha256: str  # of the records' bytes as the log stored them, in order
    manifest_sha256: str
    location: str  # the segment's folder in the archive
    snapshot_seq: int
    snapshot_sha256: str
    requester: str
    # [broker id, acknowledged seq] of every slave the sealing master knew (B-462): a restarted
    # master still never seals past what they have not fetched
    slaves: list[list[int]] | None = None


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StoreUpgraded(TypedRecord):
    """A start found the projections in an older layout and rebuilt them (B-470).

    Appended in the transaction that rebuilt them, so the history says when
    a directory's layout changed; applying it changes nothing.
    """

    TYPE = RecordType.STORE_UPGRADED
    from_format: int
    to_format: int
    counts: list[list[Any]]  # [database, entries] of each one rebuilt
    dropped: list[str]  # the older layout's databases, deleted


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Imported(TypedRecord):
    """A RocketMQ store imported into a new data directory (B-520..B-526): the last record of the
    import, after the `messages_stored`, `topic_updated`, `subgroup_updated` and
    `offset_committed` records (cause `import`) it wrote. Applying it sets the delay cursors."""

    TYPE = RecordType.IMPORTED
    source: str  # the store root it read
    kind: str  # "rocketmq-4.x"
    files: list[list[Any]]  # [path below the root, size, sha256] of every file read
    messages: int
    messages_per_topic: dict[str, int]
    commit_log: list[int]  # [first offset, end offset] of the messages carried
    topics: int
    groups: int
    offsets: int  # committed (topic@group, queue) entries
    delay_offsets: list[list[int]]  # [level, next schedule-queue offset] (delayOffset.json)
    open_transactions: int
    not_carried: dict[str, int]  # what the store held that no record carries, by kind
    checkpoint: list[int]  # StoreCheckpoint's three times
    requester: str


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AccessDenied(TypedRecord):
    TYPE = RecordType.ACCESS_DENIED
    listener: str
    window_from: int
    window_to: int
    interval_s: int
    acl_version: int
    requests: int
    rows: list[list[Any]]  # [who, host, code, count]
    # of those, the ones es-broker's signature checks refused: [who, host, code, reason, count] (B-347)
    reasons: list[list[Any]] | None = None


def _check_view(cls: type[TypedRecord], view: Any) -> None:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    optional = {f.name for f in fields if f.default is None}
    required = {"type", "v", "ts"} | {f.name for f in fields} - optional
    if view.__required_keys__ != required or view.__optional_keys__ != optional:
        raise TypeError(f"{view.__name__} does not hold the keys of {cls.__name__}")


DICT_VIEWS: dict[type[TypedRecord], Any] = {
    MessagesStored: MessagesStoredRecord,
    MessagesDelivered: MessagesDeliveredRecord,
    OffsetCommitted: OffsetCommittedRecord,
}
for _cls, _view in DICT_VIEWS.items():
    _check_view(_cls, _view)


missing = unregistered_types()
if missing:  # pragma: no cover - a type without its class fails at import
    raise TypeError(f"record types without a class: {sorted(missing)}")

# every record class, and the vocabulary, views and machinery the rest of the code imports from here
__all__ = [
    "AccessDenied",
    "AclLoaded",
    "BrokerConfigUpdated",
    "Cause",
    "CommitlogExpired",
    "ConsumerGroupChanged",
    "DICT_VIEWS",
    "DeadLetterRedriven",
    "DelayedMessageSkipped",
    "DeliveriesUnrecorded",
    "HaPromoted",
    "HaRecordsSetAside",
    "HistoryArchived",
    "Imported",
    "MessageSentBack",
    "MessagesDelivered",
    "MessagesPopped",
    "MessagesDeliveredRecord",
    "MessagesStored",
    "MessagesStoredRecord",
    "OffsetCommitIgnored",
    "OffsetCommitted",
    "OffsetCommittedRecord",
    "OffsetQueried",
    "OffsetsRemoved",
    "PopAcked",
    "PopExpired",
    "PopInvisibleChanged",
    "PullOffsetMoved",
    "QueueLocksChanged",
    "RecordType",
    "ReplyPushed",
    "ResetMode",
    "ResetOutcome",
    "ResetRequested",
    "ResetScope",
    "SendBackDecision",
    "SlaveCaughtUp",
    "SlaveMergeOutcome",
    "SlaveMergePolicy",
    "SlaveOffsetsMerged",
    "SubgroupDeleted",
    "SubgroupUpdated",
    "TopicDeleted",
    "TopicPermChanged",
    "TopicUpdated",
    "TransactionChecked",
    "TransactionEnded",
    "TransactionState",
    "TypedRecord",
    "as_view",
    "parse",
    "typed",
]
