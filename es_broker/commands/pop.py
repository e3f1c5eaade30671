"""POP_MESSAGE: hand a group's messages out for an invisible time, one record per queue (B-580..B-585).

RocketMQ 5's pop keeps, per group and queue, a pop cursor (the next message never
handed out) and the handles out; here they are the pop projection
(projections/pop.py), moved only by records. One pop is one writer job: it
decides the pop time (the broker's clock), which queue to start with when any
will do, which messages go out, and the group's offset that results, and
writes all of it into a `messages_popped` record per queue it took messages
from. Messages whose invisible time passed come back first, in offset order,
then new ones from the cursor; a FIFO pop (`order`) takes nothing from a queue
while a handle of the group is out on it, so a message group's next message
waits for the previous to be acked (B-584).

The group's committed offset (the 4.x offset table) is its lowest message of the
queue not acked: every record that moves it says so (`commit`), so offsets, lag,
`explain` and `history` show pop groups as they show 4.x ones (B-585). When the
table moved under a queue's pop state (a reset, a 4.x client's commit), the
next pop drops the queue's handles and starts again from the table's offset.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import lmdb

from es_broker.commands import messages, names
from es_broker.commands.errors import IllegalRequest, NoPermission, ServiceNotAvailable
from es_broker.commands.messages import GetResult, GetStatus
from es_broker.config import BrokerRole
from es_broker.log import AppendContext
from es_broker.log.types import MessagesPopped
from es_broker.projections.pop import Lease
from es_broker.remoting.bodies import SubscriptionGroupConfig, TopicConfig
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.pop_headers import INIT_MODE_MIN
from es_broker.store import Store

MAX_MSG_NUMS = 32  # RocketMQ 5's broker refuses a pop of more (INVALID_PARAMETER)


@dataclass(frozen=True, slots=True)
class PopRequest:
    """A pop as the processor checked it; `queue_id` < 0: any read queue of the topic."""

    group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    invisible_time: int
    order: bool
    init_mode: int
    client: str
    tags_codes: frozenset[int] | None = None
    message_filter: Callable[[bytes], bool] | None = None
    for_client: str | None = None  # the client a proxy pops for


@dataclass(frozen=True, slots=True)
class Handed:
    """One message handed out: where it is, how often it was handed out, its stored bytes."""

    topic: str
    queue_id: int
    queue_offset: int
    times: int
    raw: bytes
    start_offset: int  # the first offset this pop handed out of the queue (RocketMQ's ck offset)


@dataclass(frozen=True, slots=True)
class PopResult:
    pop_time: int
    invisible_time: int
    handed: tuple[Handed, ...]
    rest: int  # messages of the queues looked at still to hand out (restNum)
    queues: tuple[int, ...]  # the queues looked at, in order


def check(store: Store, txn: lmdb.Transaction[bytes], request: PopRequest) -> TopicConfig:
    """The pop's refusals, in PopMessageProcessor's order, before anything is recorded; the
    topic's config."""
    if store.config.brokerRole == BrokerRole.SLAVE:
        raise ServiceNotAvailable("service not available now. the broker is a slave")
    if not 0 < request.max_msg_nums <= MAX_MSG_NUMS:
        raise IllegalRequest(
            f"the broker[{store.config.brokerIP1}] pop message's num must be in [1, "
            f"{MAX_MSG_NUMS}], got {request.max_msg_nums}",
            ResponseCode.INVALID_PARAMETER,
        )
    # any queue (-1) asks for a topic with a read queue
    queue_id = max(request.queue_id, 0)
    return messages.check_readable(store, txn, request.topic, queue_id)


def check_group(group_config: SubscriptionGroupConfig) -> None:
    if not group_config.consume_enable:
        raise NoPermission(f"subscription group no permission, {group_config.group_name}")


def pop_job(store: Store, request: PopRequest) -> Callable[[AppendContext], PopResult]:
    """The writer job of one pop: every queue it looks at, in one transaction."""
    names.check_group_name(request.group)

    def job(ctx: AppendContext) -> PopResult:
        txn = ctx.txn
        now = store.clock.now_ms()
        config = check(store, txn, request)  # the topic may have gone since the processor looked
        if request.queue_id >= 0:
            queues = [request.queue_id]
        else:  # any queue: start at a random one (decided here; the records say which gave)
            n = config.read_queue_nums
            first = random.randrange(n) if n > 0 else 0
            queues = [(first + i) % n for i in range(n)]
        handed: list[Handed] = []
        rest = 0
        for queue_id in queues:
            want = request.max_msg_nums - len(handed)
            taken, left = _pop_queue(store, ctx, request, queue_id, want, now)
            handed.extend(taken)
            rest += left
        return PopResult(now, request.invisible_time, tuple(handed), rest, tuple(queues))

    return job


@dataclass(frozen=True, slots=True)
class _QueueState:
    """Where a pop of one queue starts: the cursor, the handles, and what the start changed."""

    cursor: int
    leases: list[Lease]
    table: int  # the offset table's value before this pop (-1: none)
    resynced: int | None


def _state(
    store: Store, txn: lmdb.Transaction[bytes], request: PopRequest, queue_id: int
) -> _QueueState:
    """The queue's pop state, started (first pop) or started again (the table moved) as needed."""
    group, topic = request.group, request.topic
    table = store.offsets.query(txn, topic, group, queue_id)
    cursor = store.pop.cursor(txn, group, topic, queue_id)
    if cursor is None:
        start = table if table >= 0 else _init_offset(store, txn, request, queue_id)
        return _QueueState(start, [], table, None)
    leases = list(store.pop.leases_of(txn, group, topic, queue_id))
    low = leases[0].offset if leases else cursor
    if table == low:
        return _QueueState(cursor, leases, table, None)
    # the offset table moved under the pop state: its handles are dropped (B-585)
    start = table if table >= 0 else _init_offset(store, txn, request, queue_id)
    return _QueueState(start, [], table, cursor)


def _init_offset(
    store: Store, txn: lmdb.Transaction[bytes], request: PopRequest, queue_id: int
) -> int:
    """Where a group's first pop of a queue starts (PopMessageProcessor#getInitOffset): the
    queue's min for ConsumeInitMode.MIN, else its last message, or 0 while the queue's first
    message is still in memory (initPopOffsetByCheckMsgInMem)."""
    lo, hi = store.cq.bounds(txn, request.topic, queue_id)
    if request.init_mode == INIT_MODE_MIN or request.topic.startswith(names.RETRY_PREFIX):
        return lo
    if lo <= 0 < hi:
        first = store.cq.unit(txn, request.topic, queue_id, 0)
        phy_max = store.commitlog.phy_max(txn)
        if (
            first is not None
            and phy_max - first.physical_offset <= store.config.in_memory_threshold
        ):
            return 0
    return max(hi - 1, 0)


def _pop_queue(
    store: Store,
    ctx: AppendContext,
    request: PopRequest,
    queue_id: int,
    want: int,
    now: int,
) -> tuple[list[Handed], int]:
    """Hand out up to `want` messages of one queue and record it; (handed, rest of the queue)."""
    txn = ctx.txn
    topic = request.topic
    state = _state(store, txn, request, queue_id)
    blocked = request.order and any(not lease.ready for lease in state.leases)
    picked: list[tuple[int, int, bytes]] = []  # (offset, times, raw)
    gone: list[int] = []
    ready = [lease for lease in state.leases if lease.ready]
    if want > 0 and not blocked:
        for lease in ready[:want]:
            raw = _message(store, txn, topic, queue_id, lease.offset)
            if raw is None:
                gone.append(lease.offset)  # retention removed it while it waited
            else:
                picked.append((lease.offset, lease.times + 1, raw))
    ready_left = len(ready) - len(picked) - len(gone)
    next_cursor = state.cursor
    if want > len(picked) and not blocked:
        result = messages.read_messages(
            store,
            txn,
            topic,
            queue_id,
            state.cursor,
            want - len(picked),
            request.tags_codes,
            request.message_filter,
        )
        next_cursor = _next_cursor(result, state.cursor)
        fresh = zip(result.offsets, result.messages, strict=True)
        picked.extend((offset, 1, raw) for offset, raw in fresh)
    kept = [lease.offset for lease in state.leases if lease.offset not in gone]
    low = min(kept + [offset for offset, _, _ in picked], default=next_cursor)
    commit = [state.table, low] if low != state.table else None
    _, hi = store.cq.bounds(txn, topic, queue_id)
    rest = max(hi - next_cursor, 0) + ready_left
    stored = store.pop.cursor(txn, request.group, topic, queue_id)
    moved = stored is not None and stored != next_cursor
    if not (picked or gone or commit or moved or state.resynced is not None):
        return [], rest  # nothing changed (a first look that found nothing starts nothing)
    picked.sort()
    ctx.append(
        MessagesPopped(
            group=request.group,
            topic=topic,
            queue_id=queue_id,
            client=request.client,
            pop_time=now,
            invisible_time=request.invisible_time,
            invisible_until=now + request.invisible_time,
            order=request.order,
            offsets=[[offset, times] for offset, times, _ in picked],
            cursor=state.cursor,
            next_cursor=next_cursor,
            commit=commit,
            resynced=state.resynced,
            gone=gone or None,
            for_client=request.for_client,
        ).to_record(now)
    )
    start = picked[0][0] if picked else next_cursor
    return [Handed(topic, queue_id, o, t, raw, start) for o, t, raw in picked], rest


def _next_cursor(result: GetResult, cursor: int) -> int:
    """The pop cursor after a read from `cursor`: past what was read or filtered out, up to the
    queue's min when retention passed the cursor, back to the queue's max when it lay beyond."""
    status = result.status
    if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE):
        return cursor
    if status == GetStatus.OFFSET_OVERFLOW_BADLY:
        return result.max_offset
    return result.next_begin_offset


def _message(
    store: Store, txn: lmdb.Transaction[bytes], topic: str, queue_id: int, offset: int
) -> bytes | None:
    """The stored bytes of a queue's message, None when retention removed them."""
    unit = store.cq.unit(txn, topic, queue_id, offset)
    if unit is None or unit.physical_offset < store.commitlog.phy_min(txn):
        return None
    return store.log.payload(txn, unit.physical_offset)
