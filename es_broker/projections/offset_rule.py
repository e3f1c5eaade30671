"""How a record changes the consumer offset table: the one rule, without storage.

The LMDB projection (`offsets.py`) and the SQL read model, the export and Spark
(`es_broker.schema.rows`) all learn from `offset_effects` what a record does
to the table, so a record type that moves offsets is taught here once:

- `offset_committed`: a client, pull, admin or clone commit sets one queue's
  offset; a commit caused by a reset settles that queue's pending reset.
- `reset_requested` with mode `server_side`: the reset record moves every
  queue itself (S-2); in mode `compat` it only leaves each queue a pending
  target that the consumers' commits will apply (B-74).
- `offsets_removed`: the offsets of a group deleted without a config (and, in a
  log written before B-431, of any deleted group), or a clone replacing a whole
  queue map (B-34, B-35); the entry leaves the table with its pending reset.
- `subgroup_deleted` holding `offsets`: a group deleted with its offsets in one
  record (B-431); each leaves the table as an `offsets_removed` entry does, with
  cause `group_deleted`.
- `slave_offsets_merged`: the commits a slave took while the master was away,
  where they won the merge (S-5).
- `messages_popped`, `pop_acked`, `pop_expired` holding `commit`: a pop group's
  offset moved to its lowest message not yet acked (B-585), causes `pop`,
  `pop_ack`, `pop_dead_letter`; the requester is the client (the pop revive
  service for a dead letter).

Every reader of offset changes learns them here: the offset history that
`history` reads, and the audit index `explain` reads (B-504), so the two
answers agree on every cause. A new cause (an import, say) is one entry of
`_RULES`.

Pure: a record in, effects out. Where they are stored is the caller's business.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple

from es_broker.log.records import Record
from es_broker.log.types import (
    Cause,
    OffsetCommittedRecord,
    RecordType,
    ResetMode,
    SlaveMergeOutcome,
)


class OffsetChange(NamedTuple):
    """One queue's committed offset moved (or, `removed`, left the table: `new` is -1 then).

    A named tuple: one is built per commit, on the writer's hot path, where a frozen
    dataclass sets each of its nine fields by a call."""

    group: str
    topic: str
    queue_id: int
    old: int
    new: int
    cause: str
    requester: str
    removed: bool = False  # the entry left the table (B-34), with its pending reset
    settles_reset: bool = False  # a commit of a compat reset's target: the reset is done


class ResetPending(NamedTuple):
    """A compat reset left this queue a target for the consumers to commit (B-74, S-2)."""

    group: str
    topic: str
    queue_id: int
    target: int


OffsetEffect = OffsetChange | ResetPending


# enum members read per commit, kept here: one read off its class goes through the enum's machinery
_RESET: Final = Cause.RESET


# a named tuple's own __new__ is a Python function: the one of a commit's change is built by
# tuple.__new__ from its nine fields in order, without that call
_new = tuple.__new__


def _committed(committed: OffsetCommittedRecord) -> list[OffsetEffect]:
    cause = committed["cause"]
    change: OffsetChange = _new(
        OffsetChange,
        (
            committed["group"],
            committed["topic"],
            committed["queue_id"],
            committed["old"],
            committed["offset"],
            cause,
            committed["requester"],
            False,
            cause == _RESET,  # settles_reset
        ),
    )
    return [change]


def _reset(record: Record) -> list[OffsetEffect]:
    group, topic, requester = record["group"], record["topic"], record["requester"]
    if record["mode"] == ResetMode.SERVER_SIDE:  # the reset record moves the offset itself (S-2)
        return [
            OffsetChange(group, topic, qid, current, final, Cause.RESET, requester)
            for qid, current, _, final, _ in record["queues"]
        ]
    # the clients' commits of these values will be recorded as caused by the reset
    return [ResetPending(group, topic, qid, final) for qid, _, _, final, _ in record["queues"]]


def _removed(record: Record) -> list[OffsetEffect]:
    group, cause, requester = record["group"], str(record["cause"]), record["requester"]
    return [
        OffsetChange(group, topic, qid, old, -1, cause, requester, removed=True)
        for topic, qid, old in record["entries"]
    ]


def _group_deleted(record: Record) -> list[OffsetEffect]:
    # the form B-431 writes; a log written before holds `offsets_removed` after the deletion
    group, requester = record["group"], record["requester"]
    return [
        OffsetChange(group, topic, qid, old, -1, Cause.GROUP_DELETED.value, requester, removed=True)
        for topic, qid, old in record.get("offsets") or ()
    ]


def _slave_merged(record: Record) -> list[OffsetEffect]:
    # commits a slave took while the master was away; only the queues where they won move (S-5)
    return [
        OffsetChange(group, topic, qid, old, new, Cause.SLAVE_MERGE, requester)
        for topic, group, qid, old, new, outcome, requester in record["queues"]
        if outcome == SlaveMergeOutcome.APPLIED
    ]


def _pop_moved(cause: Cause) -> Callable[[Record], list[OffsetEffect]]:
    # a pop group's records carry the move of its offset they decided, when there was one (B-585)
    def effects(record: Record) -> list[OffsetEffect]:
        commit = record.get("commit")
        if commit is None:
            return []
        old, new = commit
        requester = record.get("client", "pop_revive")
        return [
            OffsetChange(
                record["group"], record["topic"], record["queue_id"], old, new, cause, requester
            )
        ]

    return effects


def _none(record: Record) -> list[OffsetEffect]:
    return []


# a rule takes its record as Any: `_committed` reads its type's dict view (log/views.py)
_RULES: dict[str, Callable[[Any], list[OffsetEffect]]] = {
    RecordType.OFFSET_COMMITTED: _committed,
    RecordType.RESET_REQUESTED: _reset,
    RecordType.OFFSETS_REMOVED: _removed,
    RecordType.SUBGROUP_DELETED: _group_deleted,
    RecordType.SLAVE_OFFSETS_MERGED: _slave_merged,
    RecordType.MESSAGES_POPPED: _pop_moved(Cause.POP),
    RecordType.POP_ACKED: _pop_moved(Cause.POP_ACK),
    RecordType.POP_EXPIRED: _pop_moved(Cause.POP_DEAD_LETTER),
}

# the record types that change the offset table: every other type leaves it alone
OFFSET_RECORD_TYPES = frozenset(_RULES)


# the last record asked about and its (effects, changes): the offset table and the audit index
# apply the same record one after the other. Held by identity (the record is kept alive here, so
# no other record can have its id); one tuple, replaced whole, so threads never see half of it.
_last: tuple[Any, list[OffsetEffect], list[OffsetChange]] = (None, [], [])


def _learn(record: Record) -> tuple[Any, list[OffsetEffect], list[OffsetChange]]:
    global _last
    last = _last
    if last[0] is not record:
        effects = _RULES.get(record["type"], _none)(record)
        if len(effects) == 1 and type(effects[0]) is OffsetChange:  # a commit's one change
            changes: list[OffsetChange] = effects  # type: ignore[assignment]
        else:
            changes = [e for e in effects if isinstance(e, OffsetChange)]
        last = _last = (record, effects, changes)
    return last


def offset_effects(record: Record) -> list[OffsetEffect]:
    """What a record does to the offset table, in the order it does it (a list its callers
    share: read, never changed)."""
    return _learn(record)[1]


def offset_changes(record: Record) -> list[OffsetChange]:
    """The offsets a record moves or removes (a compat reset's pending targets left out; a
    shared list, as `offset_effects`')."""
    return _learn(record)[2]


def change_view(seq: int, ts: int, change: OffsetChange) -> dict[str, Any]:
    """One change as the audit answers show it (`explain`'s first and latest change; `history`
    stores the same fields): whatever record type made it, the rule above says what it did."""
    return {
        "seq": seq,
        "ts": ts,
        "old": change.old,
        "new": change.new,
        "cause": change.cause,
        "requester": change.requester,
    }
