"""Reset offsets: RocketMQ's reset by time (B-72..B-77, S-12) and es-broker's controls (S-2, S-3, S-13).

The broker computes a target per queue and tells the online clients. In
compat mode it changes no offset itself (B-77): the clients' commits that
follow do, and a commit equal to a pending reset target is recorded with
cause `reset`. With `reset_mode=server_side` the reset record itself moves
the offsets. Targets: a time (RocketMQ's lookup, or lower/upper bound),
an offset, a shift, the earliest or the latest offset (Kafka's vocabulary).
The request, its computed table, who was notified and each queue's outcome
are one record; a dry run records nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import lmdb

from es_broker.commands import names, offsets
from es_broker.commands.errors import BrokerError, IllegalRequest
from es_broker.log import AppendContext
from es_broker.log.records import INT64_MAX
from es_broker.log.types import ResetMode, ResetOutcome, ResetRequested, ResetScope
from es_broker.remoting.codes import ResponseCode
from es_broker.store import Store

TARGET_KINDS = ("time", "offset", "shift", "earliest", "latest")


@dataclass(frozen=True, slots=True)
class QueueReset:
    queue_id: int
    current: int
    target: int
    final: int

    @property
    def outcome(self) -> ResetOutcome:
        if self.current < 0:
            return ResetOutcome.CREATED
        if self.final == self.current:
            if self.target == self.current:
                return ResetOutcome.ALREADY_THERE
            return ResetOutcome.UNCHANGED_NOT_FORCE
        return ResetOutcome.MOVED


@dataclass(frozen=True, slots=True)
class ResetPlan:
    group: str
    topic: str
    kind: str
    value: int
    force: bool
    mode: ResetMode
    queues: tuple[QueueReset, ...]
    seq: int | None  # None for a dry run

    @property
    def timestamp(self) -> int:
        return self.value if self.kind == "time" else -1

    def table(self) -> dict[int, int]:
        """queue id -> the offset clients are told to use."""
        return {q.queue_id: q.final for q in self.queues}


def _target(
    store: Store,
    txn: lmdb.Transaction[bytes],
    topic: str,
    qid: int,
    kind: str,
    value: int,
    current: int,
) -> int:
    lo, hi = store.cq.bounds(txn, topic, qid)
    if kind == "time":
        return hi if value == -1 else offsets.search_offset(store, txn, topic, qid, value)
    if kind == "offset":
        return value
    if kind == "shift":
        # saturating: a shift beyond the range of a long lands at its end, never past it (B-137)
        return min(max(current, 0) + value, INT64_MAX)
    if kind == "earliest":
        return lo
    return hi  # latest


def reset_job(
    store: Store,
    group: str,
    topic: str,
    value: int,
    force: bool,
    *,
    requester: str,
    notified: list[str],
    kind: str = "time",
    mode: str | None = None,
    scope: str | None = None,
    dry_run: bool = False,
) -> Callable[[AppendContext], ResetPlan]:
    """Compute the reset table (B-74, B-75, S-13) and, unless a dry run, record it."""
    names.check_group_name(group)
    names.check_topic_name(topic)
    if kind not in TARGET_KINDS:
        raise IllegalRequest(f"reset target {kind!r} is not one of {', '.join(TARGET_KINDS)}")
    if not isinstance(value, int):
        raise IllegalRequest(f"reset value {value!r} must be an integer")
    try:
        reset_mode = ResetMode(mode or store.config.reset_mode)
        reset_scope = ResetScope(scope or store.config.reset_scope)
    except ValueError:
        raise IllegalRequest(f"reset_mode {mode!r} / reset_scope {scope!r} unknown") from None

    def job(ctx: AppendContext) -> ResetPlan:
        txn = ctx.txn
        config = store.topics.get(txn, topic)
        if config is None:
            raise IllegalRequest(
                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
            )
        read_queues = reset_scope == ResetScope.READ_QUEUES
        nums = config.read_queue_nums if read_queues else config.write_queue_nums
        plan = []
        for q in range(nums):
            current = store.offsets.query(txn, topic, group, q)
            if current == -1 and not read_queues:
                raise IllegalRequest(f"THe consumer group <{group}> not exist")
            target = max(_target(store, txn, topic, q, kind, value, current), 0)
            final = target if force or target < current or current < 0 else current
            plan.append(QueueReset(q, current, target, final))
        if dry_run:
            return ResetPlan(group, topic, kind, value, force, reset_mode, tuple(plan), None)
        outcome = "notified" if notified else "consumer_not_online"
        seq = ctx.append(
            ResetRequested(
                group=group,
                topic=topic,
                kind=kind,
                value=value,
                timestamp=value if kind == "time" else -1,
                force=force,
                mode=reset_mode,
                scope=reset_scope,
                requester=requester,
                notified=list(notified),
                outcome=outcome,
                queues=[[q.queue_id, q.current, q.target, q.final, q.outcome] for q in plan],
            ).to_record(store.clock.now_ms())
        )
        return ResetPlan(group, topic, kind, value, force, reset_mode, tuple(plan), seq)

    return job


def not_online(group: str, topic: str, timestamp: int) -> BrokerError:
    return BrokerError(
        f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
        f"Timestamp: {timestamp}",
        ResponseCode.CONSUMER_NOT_ONLINE,
    )
