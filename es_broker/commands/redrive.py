"""Re-drive dead letters (S-9): what RocketMQ 4.x leaves to operators doing it by hand (B-106).

A dead letter of group G (a message in `%DLQ%G`) is re-sent, with its
reconsume times reset to 0, either to `%RETRY%G` (default: only G sees it
again, and the client shows it under its RETRY_TOPIC, B-99) or to its
original topic (every group subscribed to it sees it again). Each re-drive is
the new message's `messages_stored` record plus a `dead_letter_redriven`
record naming the dead letter, in one transaction; a dead letter is
re-driven at most once. It runs in the broker (request code REDRIVE_DLQ), so
it needs no read permission on the DLQ (perm 2 by default, B-103) and
nothing travels twice over the network. A dry run lists what would go and
records nothing.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lmdb

from es_broker.commands import delay, names, placement, retry
from es_broker.commands.errors import IllegalRequest, ServiceNotAvailable, TopicNotExist
from es_broker.commands.topics import find_or_create_group
from es_broker.commands.trace import record_at
from es_broker.config import BrokerRole
from es_broker.log import AppendContext
from es_broker.log.types import Cause, DeadLetterRedriven, RecordType
from es_broker.projections.message_trace import FROM
from es_broker.projections.topics import PERM_WRITE
from es_broker.remoting import message as wire
from es_broker.remoting.bodies import TopicConfig
from es_broker.store import Store

TO_RETRY = "retry"
TO_ORIGINAL = "original"
MAX_PER_REQUEST = 1000  # one write transaction stays short; the admin verb asks again for more
# properties of earlier hops that must not follow the message: it is due now, and its destination is new
DROPPED_PROPERTIES = (
    delay.PROPERTY_DELAY,
    delay.PROPERTY_REAL_TOPIC,
    delay.PROPERTY_REAL_QID,
    delay.PROPERTY_WAIT,
)


@dataclass(frozen=True, slots=True)
class Redrive:
    """One dead letter, and where it went (or would go, or why it stays)."""

    dlq_queue_offset: int
    dlq_msg_id: str
    physical_offset: int
    original_topic: str | None
    target_topic: str | None
    target_queue_id: int | None = None  # decided only when it is really sent
    new_msg_id: str | None = None
    skipped: str | None = None  # why it stays in the DLQ


@dataclass(frozen=True, slots=True)
class RedriveResult:
    group: str
    target: str
    dry_run: bool
    items: tuple[Redrive, ...]
    more: bool  # dead letters left that this request did not get to (MAX_PER_REQUEST)
    created_topics: tuple[str, ...] = ()


def check_args(group: str, target: str, max_count: int | None) -> None:
    names.check_group_name(group)
    if target not in (TO_RETRY, TO_ORIGINAL):
        raise IllegalRequest(f"re-drive target {target!r} is not one of {TO_RETRY}, {TO_ORIGINAL}")
    if max_count is not None and (not isinstance(max_count, int) or max_count <= 0):
        raise IllegalRequest(f"max {max_count!r} must be a positive integer")


def already_redriven(store: Store, txn: lmdb.Transaction[bytes], phy: int) -> bool:
    return any(
        role == FROM and record_at(store, txn, seq)["type"] == RecordType.DEAD_LETTER_REDRIVEN
        for seq, role in store.trace.links_of(txn, phy)
    )


def plan(
    store: Store,
    txn: lmdb.Transaction[bytes],
    group: str,
    *,
    topic: str | None = None,
    target: str = TO_RETRY,
    max_count: int | None = None,
) -> tuple[list[tuple[Redrive, wire.StoredMessage | None]], bool]:
    """The dead letters to re-drive, oldest first, with their decoded messages; and whether more are left."""
    check_args(group, target, max_count)
    dlq = names.dlq_topic(group)
    if store.topics.get(txn, dlq) is None:
        raise TopicNotExist(
            f"topic[{dlq}] not exist: group {group} has no dead letters on this broker"
        )
    limit = min(max_count or MAX_PER_REQUEST, MAX_PER_REQUEST)
    lo, hi = store.cq.bounds(txn, dlq, 0)
    phy_min = store.commitlog.phy_min(txn)
    out: list[tuple[Redrive, wire.StoredMessage | None]] = []
    for unit in store.cq.units(txn, dlq, 0, lo, hi):
        if already_redriven(store, txn, unit.physical_offset):
            continue
        raw = (
            store.log.payload(txn, unit.physical_offset)
            if unit.physical_offset >= phy_min
            else None
        )
        if raw is None:
            continue  # expired with the commit log (B-106): nothing left to send
        message = wire.decode_one(raw)[0]
        original = message.properties.get(retry.PROPERTY_RETRY_TOPIC)
        if topic is not None and original != topic:
            continue
        if len(out) == limit:
            return out, True  # a matching one is left (beyond --max, or beyond this request)
        destination = names.retry_topic(group) if target == TO_RETRY else original
        item = Redrive(
            unit.offset,
            message.msg_id,
            unit.physical_offset,
            original,
            destination,
            skipped=None if destination else "no RETRY_TOPIC property: original topic unknown",
        )
        out.append((item, message))
    return out, False


def redrive_job(
    store: Store,
    group: str,
    *,
    topic: str | None = None,
    target: str = TO_RETRY,
    max_count: int | None = None,
    requester: str = "",
) -> Callable[[AppendContext], RedriveResult]:
    """Re-send the planned dead letters and record each re-drive."""
    check_args(group, target, max_count)
    if store.config.brokerRole == BrokerRole.SLAVE:
        raise ServiceNotAvailable("service not available now. the broker is a slave")

    def job(ctx: AppendContext) -> RedriveResult:
        planned, more = plan(store, ctx.txn, group, topic=topic, target=target, max_count=max_count)
        done: list[Redrive] = []
        created: list[str] = []
        host = (store.config.brokerIP1, store.config.listenPort)
        for item, message in planned:
            if item.skipped or message is None or item.target_topic is None:
                done.append(item)
                continue
            config, skipped = _destination(
                store, ctx, group, item.target_topic, target, requester, created
            )
            if config is None:
                done.append(Redrive(**{**_fields(item), "skipped": skipped}))
                continue
            queue_id = random.randrange(config.write_queue_nums)  # decided here, recorded below
            props = {k: v for k, v in message.properties.items() if k not in DROPPED_PROPERTIES}
            # reconsume times reset
            copy = placement.MessageIn(
                message.body,
                {},
                message.flag,
                message.sys_flag,
                message.born_timestamp,
                message.born_host,
                0,
            )
            raw, code = placement.encode_message(item.target_topic, queue_id, copy, props, host)
            ts = store.clock.now_ms()
            stored = placement.place(
                store,
                ctx,
                item.target_topic,
                queue_id,
                [raw],
                [code],
                ts=ts,
                host=host,
                requester=requester,
                cause=Cause.REDRIVE,
            )
            ctx.append(
                DeadLetterRedriven(
                    group=group,
                    offset=item.physical_offset,
                    msg_id=item.dlq_msg_id,
                    dlq_queue_offset=item.dlq_queue_offset,
                    reconsume_times=message.reconsume_times,
                    original_topic=item.original_topic,
                    target=target,
                    target_topic=item.target_topic,
                    target_queue_id=queue_id,
                    stored_phy=stored.physical_offsets[0],
                    stored_msg_id=stored.msg_ids[0],
                    stored_seq=stored.seq,
                    requester=requester,
                ).to_record(ts)
            )
            done.append(
                Redrive(
                    **{
                        **_fields(item),
                        "target_queue_id": queue_id,
                        "new_msg_id": stored.msg_ids[0],
                    }
                )
            )
        return RedriveResult(group, target, False, tuple(done), more, tuple(created))

    return job


def _fields(item: Redrive) -> dict[str, Any]:
    return {f: getattr(item, f) for f in Redrive.__dataclass_fields__}


def _destination(
    store: Store,
    ctx: AppendContext,
    group: str,
    topic: str,
    target: str,
    requester: str,
    created: list[str],
) -> tuple[TopicConfig | None, str | None]:
    """The destination's config, creating `%RETRY%G` as a send-back would (B-25); None and why if unusable."""
    config: TopicConfig | None
    if target == TO_RETRY:
        queues = max(find_or_create_group(store, ctx, group, requester).retry_queue_nums, 1)
        config, made = retry.ensure_topic(store, ctx, topic, queues, retry.RETRY_PERM, requester)
        if made:
            created.append(topic)
    else:
        config = store.topics.get(ctx.txn, topic)
        if config is None:
            return None, f"topic[{topic}] not exist"
    if not config.perm & PERM_WRITE or config.write_queue_nums <= 0:
        return None, f"topic[{topic}] is not writable (perm {config.perm})"
    return config, None
