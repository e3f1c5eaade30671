"""Typed records: one frozen, slotted class per record type and schema version.

A class holds what was decided; `to_record(ts)` stamps it with the broker time and
gives the record exactly as the log has always stored it (same keys, same order,
hence the same msgpack bytes), checked by `records.check`. `parse(record)` turns a
record read from the log (already upcast to the current version) back into its class.

Field rules, read by `_generate`:
- every field is keyword-only, in the order the record stores it;
- a field whose default is None is left out of the record while it is None (a record
  that never held that key reads back as None); a field without a default is always
  written, None included;
- `ORDERS` lists other key orders some writers have always used for a set of keys:
  when the keys present are exactly one of them, the record takes that order.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, ClassVar, TypedDict, TypeVar, get_type_hints

from es_broker.log.records import Record, check


class RecordType(enum.StrEnum):
    """Every record type the log holds."""

    ACCESS_DENIED = "access_denied"
    ACL_LOADED = "acl_loaded"
    BROKER_CONFIG_UPDATED = "broker_config_updated"
    COMMITLOG_EXPIRED = "commitlog_expired"
    CONSUMER_GROUP_CHANGED = "consumer_group_changed"
    DEAD_LETTER_REDRIVEN = "dead_letter_redriven"
    DELAYED_MESSAGE_SKIPPED = "delayed_message_skipped"
    DELIVERIES_UNRECORDED = "deliveries_unrecorded"
    HA_PROMOTED = "ha_promoted"
    HA_RECORDS_SET_ASIDE = "ha_records_set_aside"
    HISTORY_ARCHIVED = "history_archived"
    MESSAGE_SENT_BACK = "message_sent_back"
    MESSAGES_DELIVERED = "messages_delivered"
    MESSAGES_STORED = "messages_stored"
    OFFSET_COMMIT_IGNORED = "offset_commit_ignored"
    OFFSET_COMMITTED = "offset_committed"
    OFFSET_QUERIED = "offset_queried"
    OFFSETS_REMOVED = "offsets_removed"
    PULL_OFFSET_MOVED = "pull_offset_moved"
    QUEUE_LOCKS_CHANGED = "queue_locks_changed"
    REPLY_PUSHED = "reply_pushed"
    RESET_REQUESTED = "reset_requested"
    SLAVE_CAUGHT_UP = "slave_caught_up"
    SLAVE_OFFSETS_MERGED = "slave_offsets_merged"
    STORE_UPGRADED = "store_upgraded"
    SUBGROUP_DELETED = "subgroup_deleted"
    SUBGROUP_UPDATED = "subgroup_updated"
    TOPIC_DELETED = "topic_deleted"
    TOPIC_PERM_CHANGED = "topic_perm_changed"
    TOPIC_UPDATED = "topic_updated"
    TRANSACTION_CHECKED = "transaction_checked"
    TRANSACTION_ENDED = "transaction_ended"


class Cause(enum.StrEnum):
    """Why a record's change happened (the `cause` field)."""

    # offset_committed / offsets_removed
    CLIENT_COMMIT = "client_commit"  # UPDATE_CONSUMER_OFFSET
    PULL_COMMIT = "pull_commit"  # the commit offset piggybacked on PULL_MESSAGE
    ADMIN = "admin"  # an admin tool set the offset
    RESET = "reset"  # a reset's target, applied by the broker or by the client
    CLONE = "clone"  # CLONE_GROUP_OFFSET
    GROUP_DELETED = "group_deleted"  # DELETE_SUBSCRIPTIONGROUP with its offsets
    # topic_updated / subgroup_updated
    UPDATE = "update"  # UPDATE_AND_CREATE_TOPIC / _SUBSCRIPTIONGROUP
    AUTO_CREATE = "auto_create"  # created by the broker on first use
    # messages_stored
    SEND_BACK = "send_back"  # CONSUMER_SEND_MSG_BACK
    REDRIVE = "redrive"  # a dead letter re-sent
    # queue_locks_changed
    LOCK = "lock"  # LOCK_BATCH_MQ: the queue was free, or its lock had expired
    UNLOCK = "unlock"  # UNLOCK_BATCH_MQ
    CHANNEL_CLOSED = "channel_closed"  # the holder's connection closed
    UNREGISTERED = "unregistered"  # UNREGISTER_CLIENT of the group
    EXPIRED = "expired"  # not renewed for more than lockMaxLiveTime


T = TypeVar("T", bound="TypedRecord")

_CLASSES: dict[str, type[TypedRecord]] = {}


class TypedRecord:
    """Base of the record classes; `to_record` and `from_record` are generated per class."""

    __slots__ = ()
    TYPE: ClassVar[RecordType]
    VERSION: ClassVar[int] = 1
    ORDERS: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def to_record(self, ts: int) -> Record:
        """The record as the log stores it, decided at broker time `ts` (ms); checked."""
        raise NotImplementedError

    @classmethod
    def from_record(cls: type[T], record: Record) -> T:
        """The typed form of a current-version record of this class' type."""
        raise NotImplementedError


def parse(record: Record) -> TypedRecord:
    """The typed form of a record read from the log (upcast already by `records.unpack`)."""
    kind = record["type"]
    cls = _CLASSES.get(kind)
    if cls is None:
        raise ValueError(f"unknown record type {kind!r}")
    if record["v"] != cls.VERSION:
        raise ValueError(f"record {kind} version {record['v']} has no upcaster to {cls.VERSION}")
    return cls.from_record(record)


def typed(cls: type[T]) -> type[T]:
    """Register a record class and generate its encoder and decoder."""
    if cls.TYPE in _CLASSES:
        raise TypeError(f"two classes for record type {cls.TYPE}")
    _generate(cls)
    _CLASSES[cls.TYPE] = cls
    return cls


def _generate(cls: type[TypedRecord]) -> None:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    hints = {n: _enum_of(h) for n, h in get_type_hints(cls).items()}
    names = [f.name for f in fields]
    optional = {f.name for f in fields if f.default is None}
    # an enum is written as its text, so a live projection sees what a replay will read
    value = {n: f"str(self.{n})" if _is_enum(hints[n]) else f"self.{n}" for n in names}
    # the keys up to the first optional one in a literal, then one statement per key
    first = min((names.index(n) for n in optional), default=len(names))
    lead = "".join(f'"{n}": {value[n]}, ' for n in names[:first])
    lines = [
        "def to_record(self, ts):",
        f'    r = {{"type": "{cls.TYPE.value}", "v": {cls.VERSION}, "ts": ts, {lead}}}',
    ]
    for n in names[first:]:
        if n in optional:
            lines.append(f"    if self.{n} is not None:")
            lines.append(f'        r["{n}"] = {value[n]}')
        else:
            lines.append(f'    r["{n}"] = {value[n]}')
    if cls.ORDERS:
        lines.append("    r = _reorder(r, ORDERS)")
    lines.append("    return check(r)")
    converters: dict[str, Any] = {}
    args = []
    for n in names:
        hint = hints[n]
        read = f'record.get("{n}")' if n in optional else f'record["{n}"]'
        if _is_enum(hint):
            converters[f"_{n}"] = hint
            read = f"_{n}({read})" if n not in optional else f"_opt(_{n}, {read})"
        args.append(f"{n}={read}")
    decoder = [
        "def from_record(cls, record):",
        "    extra = record.keys() - KNOWN",
        "    if extra:",
        "        raise ValueError(f\"record {record['type']} holds unknown fields {sorted(extra)}\")",
        f"    return cls({', '.join(args)})",
    ]
    # a frozen dataclass sets each field through object.__setattr__; the slots' own setters
    # do the same work in a fraction of the instructions, and records are built per request
    params = ", ".join(f"{n}=None" if n in optional else n for n in names)
    init = [f"def __init__(self, *, {params}):"]
    init += [f"    _set_{n}(self, {n})" for n in names] or ["    pass"]
    setters = {f"_set_{n}": cls.__dict__[n].__set__ for n in names}
    namespace: dict[str, Any] = {
        **setters,
        "check": check,
        "ORDERS": cls.ORDERS,
        "_reorder": _reorder,
        "_opt": _opt,
        "KNOWN": frozenset(["type", "v", "ts", *names]),
        **converters,
    }
    source = "\n\n".join("\n".join(part) for part in (lines, decoder, init))
    exec(source, namespace)  # noqa: S102 - generated from field names only
    namespace["to_record"].__qualname__ = f"{cls.__qualname__}.to_record"
    cls.to_record = namespace["to_record"]  # type: ignore[method-assign]
    namespace["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = namespace["__init__"]  # type: ignore[method-assign]
    cls.from_record = classmethod(namespace["from_record"])  # type: ignore[assignment]


def _enum_of(hint: Any) -> Any:
    """The enum class of `E` or `E | None`, else the hint itself."""
    for arg in typing.get_args(hint) or (hint,):
        if _is_enum(arg):
            return arg
    return hint


def _is_enum(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, enum.Enum)


def _opt(kind: type[enum.Enum], value: Any) -> Any:
    return None if value is None else kind(value)


def _reorder(record: Record, orders: tuple[tuple[str, ...], ...]) -> Record:
    keys = set(record) - {"type", "v", "ts"}
    for order in orders:
        if keys == set(order):
            out = {"type": record["type"], "v": record["v"], "ts": record["ts"]}
            for key in order:
                out[key] = record[key]
            return out
    return record


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
    mode: str
    scope: str
    requester: str
    notified: list[str]
    outcome: str
    queues: list[list[Any]]  # [queue id, current, target, final, outcome]


@typed
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SlaveOffsetsMerged(TypedRecord):
    TYPE = RecordType.SLAVE_OFFSETS_MERGED
    broker_id: int
    slave_addr: str
    policy: str
    journal_upto: int
    commits: list[list[Any]]
    queues: list[list[Any]]
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
    decision: str
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
    state: str
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


# ---------------------------------------------------------------------- the hot path's dict views
#
# A projection applies every stored message and every delivery; building the class there
# (`from_record`) costs more than the projection's own work. These TypedDicts are the same
# records as the log's dicts, so mypy checks each key read on that path at no run-time cost:
#     stored: MessagesStoredRecord = record  # type: ignore[assignment]
# Required keys are the class' fields without a default (and type, v, ts); the keys of the
# `total=False` half are the fields the record leaves out while None. `_check_view` holds
# both to the class at import, so a field added to one and not the other fails at once.


class _MessagesStoredKeys(TypedDict):
    type: str
    v: int
    ts: int
    topic: str
    queue_id: int
    queue_offset: int
    units: list[list[int]]
    producer_group: str
    requester: str


class MessagesStoredRecord(_MessagesStoredKeys, total=False):
    """A `messages_stored` record as the log's dict (see `MessagesStored`)."""

    diverted_from: str
    delay: dict[str, Any]
    cause: str
    delivery: dict[str, Any]
    transaction: dict[str, Any]


class _MessagesDeliveredKeys(TypedDict):
    type: str
    v: int
    ts: int
    group: str
    topic: str
    queue_id: int
    offset: int
    offsets: list[int]
    next_offset: int
    client: str


class MessagesDeliveredRecord(_MessagesDeliveredKeys, total=False):
    """A `messages_delivered` record as the log's dict (see `MessagesDelivered`)."""

    served_by: dict[str, Any]


class OffsetCommittedRecord(TypedDict):
    """An `offset_committed` record as the log's dict (see `OffsetCommitted`)."""

    type: str
    v: int
    ts: int
    group: str
    topic: str
    queue_id: int
    offset: int
    old: int
    cause: str
    requester: str


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


missing = set(RecordType) - set(_CLASSES)
if missing:  # pragma: no cover - a type without its class fails at import
    raise TypeError(f"record types without a class: {sorted(missing)}")
