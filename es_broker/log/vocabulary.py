"""The words records are written in: record types and the enums of their fields.

Every enum is a StrEnum, so a record holds its value as text (the same bytes
whether a live write or a replay made it) and compares equal to that text.
"""

from __future__ import annotations

import enum


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
    IMPORTED = "imported"
    MESSAGE_SENT_BACK = "message_sent_back"
    MESSAGES_DELIVERED = "messages_delivered"
    MESSAGES_STORED = "messages_stored"
    OFFSET_COMMIT_IGNORED = "offset_commit_ignored"
    OFFSET_COMMITTED = "offset_committed"
    OFFSET_QUERIED = "offset_queried"
    OFFSETS_REMOVED = "offsets_removed"
    # RocketMQ 5's pop consumption (es_broker/log/pop_types.py)
    MESSAGES_POPPED = "messages_popped"
    POP_ACKED = "pop_acked"
    POP_EXPIRED = "pop_expired"
    POP_INVISIBLE_CHANGED = "pop_invisible_changed"
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
    # the offset history of a queue a slave_offsets_merged record moved
    SLAVE_MERGE = "slave_merge"  # a slave's commit, merged back by the master (S-5)
    # every record `es-broker import rocketmq` writes: messages, topics, groups, offsets (B-520)
    IMPORT = "import"
    # the offset a pop group's records move to its lowest message not acked (B-580..B-599)
    POP = "pop"  # messages_popped: the group's first pop of a queue, or messages filtered out
    POP_ACK = "pop_ack"  # pop_acked
    POP_DEAD_LETTER = "pop_dead_letter"  # pop_expired: dead-lettered; also its copy in %DLQ%G


class TransactionState(enum.StrEnum):
    """Where a transactional message stands: the `state` of a stored record's `transaction` map
    and of `transaction_ended` (B-220..B-234)."""

    PREPARED = "prepared"  # a half message, stored in RMQ_SYS_TRANS_HALF_TOPIC
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    DISCARDED = "discarded"  # checked too often: moved to TRANS_CHECK_MAX_TIME_TOPIC


class SendBackDecision(enum.StrEnum):
    """Where a consumer's send-back went (`message_sent_back.decision`, B-90..B-95)."""

    RETRY = "retry"  # to %RETRY%G, after a delay level
    DLQ = "dlq"  # to %DLQ%G
    DROPPED = "dropped"  # retryQueueNums <= 0 (B-94)


class ResetMode(enum.StrEnum):
    """Who moves the offsets a reset computes (`reset_mode`, S-2)."""

    COMPAT = "compat"  # the consumers, by committing the targets they are told (RocketMQ)
    SERVER_SIDE = "server_side"  # the reset record itself


class ResetScope(enum.StrEnum):
    """Which queues a reset covers (`reset_scope`, S-13)."""

    COMPAT = "compat"  # the write queues, every one with an offset (RocketMQ)
    READ_QUEUES = "read_queues"  # every read queue, creating the offsets missing


class ResetOutcome(enum.StrEnum):
    """What a reset did to one queue (each entry of `reset_requested.queues`)."""

    MOVED = "moved"
    UNCHANGED_NOT_FORCE = "unchanged_not_force"  # a forward target without force (B-75)
    ALREADY_THERE = "already_there"
    CREATED = "created"  # reset_scope=read_queues on a queue without an offset (S-13)


class SlaveMergePolicy(enum.StrEnum):
    """How a master merges the commits a slave took while it was away (`slave_offset_merge`, S-5)."""

    LATEST_WINS = "latest_wins"
    COMPAT_OVERWRITE = "compat_overwrite"  # RocketMQ's: the master's offsets win (B-123)


class SlaveMergeOutcome(enum.StrEnum):
    """What became of one queue's slave commit (each entry of `slave_offsets_merged.queues`)."""

    APPLIED = "applied"  # the slave's commit was later: the master's offset moves to it
    KEPT_MASTER = "kept_master"  # the master's own latest change was later (or equal, larger)
    DISCARDED = "discarded"  # compat_overwrite: the slave's commit is lost, as in RocketMQ
