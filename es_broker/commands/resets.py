"""Reset offset by time, the broker side (INVOKE_BROKER_TO_RESET_OFFSET, B-72..B-77, S-12).

The broker computes a target per write queue and tells the online clients;
in compat mode it changes no offset itself (B-77), the clients' commits that
follow do. The request, its computed table, who was notified and the
per-queue outcome are one record.
"""

from __future__ import annotations

from dataclasses import dataclass

from es_broker.commands import names, offsets
from es_broker.commands.errors import BrokerError, Code, IllegalRequest
from es_broker.commands.store import Store
from es_broker.log import AppendContext, make

MOVED = "moved"
UNCHANGED_NOT_FORCE = "unchanged_not_force"  # a forward target without force (B-75)
ALREADY_THERE = "already_there"


@dataclass(frozen=True, slots=True)
class QueueReset:
    queue_id: int
    current: int
    target: int
    final: int

    @property
    def outcome(self) -> str:
        if self.final == self.current:
            return ALREADY_THERE if self.target == self.current else UNCHANGED_NOT_FORCE
        return MOVED


@dataclass(frozen=True, slots=True)
class ResetPlan:
    group: str
    topic: str
    timestamp: int
    force: bool
    queues: tuple[QueueReset, ...]
    seq: int

    def table(self) -> dict[int, int]:
        """queue id -> the offset clients are told to use."""
        return {q.queue_id: q.final for q in self.queues}


def reset_job(store: Store, group: str, topic: str, timestamp: int, force: bool, *,
              requester: str, notified: list[str]):
    """Compute the reset table (B-74, B-75) and record it; raises when RocketMQ refuses."""
    names.check_group_name(group)
    names.check_topic_name(topic)
    if not isinstance(timestamp, int):
        raise IllegalRequest(f"timestamp {timestamp!r} must be an integer (ms), or -1 for the max offset")

    def job(ctx: AppendContext) -> ResetPlan:
        txn = ctx.txn
        config = store.topics.get(txn, topic)
        if config is None:
            raise IllegalRequest(f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
        plan = []
        for q in range(config["writeQueueNums"]):
            current = store.offsets.query(txn, topic, group, q)
            if current == -1:
                raise IllegalRequest(f"THe consumer group <{group}> not exist")
            if timestamp == -1:
                target = store.cq.bounds(txn, topic, q)[1]
            else:
                target = offsets.search_offset(store, txn, topic, q, timestamp)
            target = max(target, 0)
            final = target if force or target < current else current
            plan.append(QueueReset(q, current, target, final))
        outcome = "notified" if notified else "consumer_not_online"
        seq = ctx.append(make(
            "reset_requested", store.clock.now_ms(), group=group, topic=topic, timestamp=timestamp,
            force=force, mode="compat", requester=requester, notified=list(notified), outcome=outcome,
            queues=[[q.queue_id, q.current, q.target, q.final, q.outcome] for q in plan]))
        return ResetPlan(group, topic, timestamp, force, tuple(plan), seq)

    return job


def not_online(group: str, topic: str, timestamp: int) -> BrokerError:
    return BrokerError(f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                       f"Timestamp: {timestamp}", Code.CONSUMER_NOT_ONLINE)
