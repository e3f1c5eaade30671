"""The SQL read model (SQLAlchemy 2): one table per record family, a generic records table, checkpoints.

Rows are keyed by (source, seq, n): `source` names the log they come from
(the broker name of its data directory, so several brokers can share one
database), `seq` the record, `n` the row's place among the rows the record
made in that table. The schema is owned by the Alembic migrations in
`migrations/`; `tests/test_readmodel_migrations.py` checks that the
migrated schema equals these models and that the tables carry the columns of
the families in `families.py`.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Checkpoint(Base):
    """How far the follower got in a source's log; written in the same transaction as the rows."""

    __tablename__ = "readmodel_checkpoints"

    source: Mapped[str] = mapped_column(String(200), primary_key=True)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    # the running effective time (families.RunningTime)
    max_ts: Mapped[int] = mapped_column(BigInteger)
    start_time: Mapped[int | None] = mapped_column(BigInteger)  # effective time of seq 1


class FailureRow(Base):
    """A record the read model could not store (its rows raised a data error): quarantined and skipped.

    The checkpoint moved past it in the same transaction; a newer es-broker
    tries it again (`version` is the one that failed), and so does
    `es-broker readmodel retry`. `time` is the record's effective time, so a
    retry stores the rows an uninterrupted run would have.
    """

    __tablename__ = "readmodel_failures"

    source: Mapped[str] = mapped_column(String(200), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    type: Mapped[str] = mapped_column(String(100))
    time: Mapped[int] = mapped_column(BigInteger)
    error: Mapped[str] = mapped_column(Text)
    version: Mapped[str] = mapped_column(String(50))  # the es-broker version that failed last
    first_failed_at: Mapped[int] = mapped_column(BigInteger)  # epoch millis
    last_failed_at: Mapped[int] = mapped_column(BigInteger)
    attempts: Mapped[int] = mapped_column(Integer)


class _Row:
    """Columns every record row has (families.COMMON), keyed by (source, seq, n)."""

    source: Mapped[str] = mapped_column(String(200), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    n: Mapped[int] = mapped_column(Integer, primary_key=True)
    ts: Mapped[int] = mapped_column(BigInteger)
    time: Mapped[int] = mapped_column(BigInteger)
    type: Mapped[str] = mapped_column(String(100))
    broker: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(50))
    extra: Mapped[str | None] = mapped_column(Text)


class RecordRow(_Row, Base):
    """Every record as JSON, whatever its type (types added later included)."""

    __tablename__ = "records"
    __table_args__ = (Index(None, "source", "type", "seq"), Index(None, "source", "time"))

    v: Mapped[int] = mapped_column(Integer)
    body: Mapped[str] = mapped_column(Text)


class OffsetChangeRow(_Row, Base):
    __tablename__ = "offset_changes"
    __table_args__ = (
        Index(None, "source", "group", "topic", "queue_id", "seq"),
        Index(None, "source", "time"),
    )

    group: Mapped[str] = mapped_column(String(255))
    topic: Mapped[str] = mapped_column(String(255))
    queue_id: Mapped[int] = mapped_column(Integer)
    old: Mapped[int] = mapped_column(BigInteger)
    new: Mapped[int] = mapped_column(BigInteger)
    removed: Mapped[bool] = mapped_column(Boolean)  # the entry left the table (B-34); new is -1
    cause: Mapped[str | None] = mapped_column(String(100))
    requester: Mapped[str | None] = mapped_column(Text)


class QueueAppendRow(_Row, Base):
    """messages_stored: the queue's max after the append is queue_offset + count."""

    __tablename__ = "queue_appends"
    __table_args__ = (Index(None, "source", "topic", "queue_id", "seq"),)

    topic: Mapped[str] = mapped_column(String(255))
    queue_id: Mapped[int] = mapped_column(Integer)
    queue_offset: Mapped[int] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(BigInteger)
    first_physical_offset: Mapped[int | None] = mapped_column(BigInteger)
    producer_group: Mapped[str | None] = mapped_column(Text)
    requester: Mapped[str | None] = mapped_column(Text)


class ResetRow(_Row, Base):
    __tablename__ = "resets"
    __table_args__ = (Index(None, "source", "group", "topic", "seq"),)

    group: Mapped[str] = mapped_column(String(255))
    topic: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(50))
    value: Mapped[int | None] = mapped_column(BigInteger)
    timestamp: Mapped[int | None] = mapped_column(BigInteger)
    force: Mapped[bool | None] = mapped_column(Boolean)
    mode: Mapped[str | None] = mapped_column(String(50))
    scope: Mapped[str | None] = mapped_column(String(50))
    requester: Mapped[str | None] = mapped_column(Text)
    outcome: Mapped[str | None] = mapped_column(String(100))
    notified: Mapped[str | None] = mapped_column(Text)  # JSON list of client ids


class ResetQueueRow(Base):
    """One queue of a reset's computed table: current, target, final and the outcome (S-12)."""

    __tablename__ = "reset_queues"

    source: Mapped[str] = mapped_column(String(200), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    queue_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    current: Mapped[int] = mapped_column(BigInteger)
    target: Mapped[int] = mapped_column(BigInteger)
    final: Mapped[int] = mapped_column(BigInteger)
    outcome: Mapped[str] = mapped_column(String(100))


class TopicChangeRow(_Row, Base):
    """Topic created or updated, perm changed (old_perm -> perm), deleted."""

    __tablename__ = "topic_changes"
    __table_args__ = (Index(None, "source", "topic", "seq"),)

    topic: Mapped[str] = mapped_column(String(255))
    old_perm: Mapped[int | None] = mapped_column(Integer)
    perm: Mapped[int | None] = mapped_column(Integer)
    read_queue_nums: Mapped[int | None] = mapped_column(Integer)
    write_queue_nums: Mapped[int | None] = mapped_column(Integer)
    cause: Mapped[str | None] = mapped_column(String(100))
    requester: Mapped[str | None] = mapped_column(Text)
    config: Mapped[str | None] = mapped_column(Text)


class GroupChangeRow(_Row, Base):
    __tablename__ = "group_changes"
    __table_args__ = (Index(None, "source", "group", "seq"),)

    group: Mapped[str] = mapped_column(String(255))
    cause: Mapped[str | None] = mapped_column(String(100))
    requester: Mapped[str | None] = mapped_column(Text)
    config: Mapped[str | None] = mapped_column(Text)


class DeliveryRow(_Row, Base):
    __tablename__ = "deliveries"
    __table_args__ = (Index(None, "source", "group", "topic", "queue_id", "seq"),)

    group: Mapped[str] = mapped_column(String(255))
    topic: Mapped[str] = mapped_column(String(255))
    queue_id: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    next_offset: Mapped[int | None] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(Integer)
    client: Mapped[str | None] = mapped_column(Text)
    offsets: Mapped[str | None] = mapped_column(Text)  # JSON list


class OffsetQueryRow(_Row, Base):
    __tablename__ = "offset_queries"

    group: Mapped[str] = mapped_column(String(255))
    topic: Mapped[str] = mapped_column(String(255))
    queue_id: Mapped[int] = mapped_column(Integer)
    row: Mapped[int | None] = mapped_column(Integer)
    offset: Mapped[int | None] = mapped_column(BigInteger)
    code: Mapped[int | None] = mapped_column(Integer)
    min_offset: Mapped[int | None] = mapped_column(BigInteger)
    head_in_memory: Mapped[bool | None] = mapped_column(Boolean)
    phy_max: Mapped[int | None] = mapped_column(BigInteger)
    requester: Mapped[str | None] = mapped_column(Text)


class CorrectionRow(_Row, Base):
    """Offsets moved or held by the broker, queue minimums corrected, messages lost to retention."""

    __tablename__ = "corrections"
    __table_args__ = (Index(None, "source", "group", "seq"),)

    kind: Mapped[str] = mapped_column(String(100))
    group: Mapped[str | None] = mapped_column(String(255))
    topic: Mapped[str | None] = mapped_column(String(255))
    queue_id: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str | None] = mapped_column(String(100))
    offset: Mapped[int | None] = mapped_column(BigInteger)
    next_offset: Mapped[int | None] = mapped_column(BigInteger)
    min_offset: Mapped[int | None] = mapped_column(BigInteger)
    max_offset: Mapped[int | None] = mapped_column(BigInteger)
    lost: Mapped[int | None] = mapped_column(BigInteger)
    reason: Mapped[str | None] = mapped_column(String(100))
    requester: Mapped[str | None] = mapped_column(Text)


class SendBackRow(_Row, Base):
    __tablename__ = "send_backs"
    __table_args__ = (Index(None, "source", "group", "seq"),)

    group: Mapped[str | None] = mapped_column(String(255))
    topic: Mapped[str | None] = mapped_column(String(255))
    queue_id: Mapped[int | None] = mapped_column(Integer)
    decision: Mapped[str | None] = mapped_column(String(50))  # retry, dlq, dropped
    target_topic: Mapped[str | None] = mapped_column(String(255))
    dead_letter: Mapped[bool | None] = mapped_column(Boolean)
    reconsume_times: Mapped[int | None] = mapped_column(Integer)
    delay_level: Mapped[int | None] = mapped_column(Integer)
    msg_id: Mapped[str | None] = mapped_column(String(255))
    requester: Mapped[str | None] = mapped_column(Text)


class DeadLetterRow(_Row, Base):
    __tablename__ = "dead_letters"
    __table_args__ = (Index(None, "source", "group", "seq"),)

    group: Mapped[str | None] = mapped_column(String(255))
    topic: Mapped[str] = mapped_column(String(255))
    queue_id: Mapped[int | None] = mapped_column(Integer)
    queue_offset: Mapped[int | None] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(Integer)
    origin_topic: Mapped[str | None] = mapped_column(String(255))
    requester: Mapped[str | None] = mapped_column(Text)


class QueueLockChangeRow(_Row, Base):
    """queue_locks_changed: a queue's new owner ('' when released) from `time` on (B-142..B-147)."""

    __tablename__ = "queue_lock_changes"
    __table_args__ = (
        Index(None, "source", "group", "topic", "queue_id", "seq"),
        Index(None, "source", "time"),
    )

    group: Mapped[str] = mapped_column(String(255))
    topic: Mapped[str] = mapped_column(String(255))
    broker_name: Mapped[str] = mapped_column(String(255))
    queue_id: Mapped[int] = mapped_column(Integer)
    owner: Mapped[str] = mapped_column(Text)
    previous_owner: Mapped[str] = mapped_column(Text)
    previous_renewed_at: Mapped[int] = mapped_column(BigInteger)
    cause: Mapped[str] = mapped_column(String(100))
    client: Mapped[str | None] = mapped_column(Text)
    max_live_ms: Mapped[int] = mapped_column(BigInteger)


class AclChangeRow(_Row, Base):
    """acl_loaded: one account of a load of the broker's ACL rules, in force from `time` (B-190)."""

    __tablename__ = "acl_changes"
    __table_args__ = (Index(None, "source", "time"),)

    listener: Mapped[str] = mapped_column(String(50))
    version: Mapped[int] = mapped_column(BigInteger)
    cause: Mapped[str] = mapped_column(String(100))
    requester: Mapped[str | None] = mapped_column(Text)
    files: Mapped[str] = mapped_column(Text)  # JSON [[path, sha256]]
    data_version_timestamp: Mapped[int | None] = mapped_column(BigInteger)
    data_version_counter: Mapped[int | None] = mapped_column(BigInteger)
    global_white: Mapped[str] = mapped_column(Text)  # JSON list of patterns
    accounts: Mapped[int] = mapped_column(Integer)
    access_key: Mapped[str | None] = mapped_column(Text)
    secret_fp: Mapped[str | None] = mapped_column(String(64))
    salt_id: Mapped[str | None] = mapped_column(String(64))
    admin: Mapped[bool | None] = mapped_column(Boolean)
    white_remote_address: Mapped[str | None] = mapped_column(Text)
    default_topic_perm: Mapped[str | None] = mapped_column(String(20))
    default_group_perm: Mapped[str | None] = mapped_column(String(20))
    topic_perms: Mapped[str | None] = mapped_column(Text)  # JSON [[topic, perm]]
    group_perms: Mapped[str | None] = mapped_column(Text)  # JSON [[group, perm]]


class AccessDenialRow(_Row, Base):
    """access_denied: refusals of one (who, host, code) summed over [window_from, window_to] (B-191)."""

    __tablename__ = "access_denials"
    __table_args__ = (Index(None, "source", "window_to"),)

    listener: Mapped[str] = mapped_column(String(50))
    window_from: Mapped[int] = mapped_column(BigInteger)
    window_to: Mapped[int] = mapped_column(BigInteger)
    interval_s: Mapped[int] = mapped_column(BigInteger)
    acl_version: Mapped[int] = mapped_column(BigInteger)
    who: Mapped[str] = mapped_column(Text)
    host: Mapped[str] = mapped_column(Text)
    code: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(BigInteger)


# family (families.FAMILIES) -> its table; `other` needs none, `records` holds every record
FAMILY_TABLES: dict[str, type[Base]] = {
    "offsets": OffsetChangeRow,
    "messages": QueueAppendRow,
    "resets": ResetRow,
    "topics": TopicChangeRow,
    "groups": GroupChangeRow,
    "deliveries": DeliveryRow,
    "queries": OffsetQueryRow,
    "corrections": CorrectionRow,
    "send_backs": SendBackRow,
    "dead_letters": DeadLetterRow,
    "queue_locks": QueueLockChangeRow,
    "acl_changes": AclChangeRow,
    "access_denials": AccessDenialRow,
}
