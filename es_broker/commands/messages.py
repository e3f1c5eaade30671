"""Storing messages (send, batch send) and reading them back (pull), B-08..B-13, B-58..B-62.

The store path also parks delayed messages in SCHEDULE_TOPIC_XXXX (B-96) and
diverts sends to `%RETRY%G` past the retry limit to `%DLQ%G` (B-95).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from enum import Enum
from typing import Final, NamedTuple

import lmdb

from es_broker import compiled
from es_broker.commands import delay, names, retry, timer, transaction
from es_broker.commands.errors import (
    IllegalRequest,
    MessageIllegal,
    NoPermission,
    ServiceNotAvailable,
    TopicNotExist,
)

# _speedups.pyx reads MessageIn from this module
from es_broker.commands.placement import MessageIn, PutResult, encode_message, place
from es_broker.commands.topics import auto_create_topic, find_or_create_group
from es_broker.config import BrokerRole
from es_broker.log import AppendContext
from es_broker.log.types import Cause
from es_broker.projections.consume_queue import UNITS_PER_FILE
from es_broker.projections.topics import PERM_INHERIT, PERM_READ, PERM_WRITE
from es_broker.remoting import message as wire
from es_broker.remoting.bodies import SubscriptionGroupConfig, TopicConfig
from es_broker.store import Store


class PutRequest(NamedTuple):
    """A send to store, as the send path carries it from the wire's header to the writer's job.

    `queue_id` < 0 lets the broker pick a write queue; `default_topic` and
    `default_topic_queue_nums` are the template a new topic is created from
    (B-25); `max_reconsume_times` is the SEND header's limit for a `%RETRY%`
    topic (B-95), None for the group's. `messages` is not changed once built. A named tuple:
    built per send on the hot path, where a frozen dataclass sets each field by a call.
    """

    topic: str
    queue_id: int
    messages: list[MessageIn]
    requester: str = ""
    producer_group: str = ""
    default_topic: str | None = None
    default_topic_queue_nums: int = 4
    max_reconsume_times: int | None = None


class _Prepared(NamedTuple):
    """A checked send and its encoded messages (per send, so a named tuple as PutRequest)."""

    request: PutRequest
    encoded: tuple[bytes, ...]
    tags_codes: tuple[int, ...]
    delay_level: int = 0
    half: bool = False  # a transactional half message (TRAN_MSG=true), B-220
    timer: timer.Timer | None = None  # RocketMQ 5's delivery at a time (B-589)


def prepare_put(store: Store, request: PutRequest) -> _Prepared:
    """Validate a send and encode its messages; the offsets are filled in at append."""
    topic, queue_id, messages = request.topic, request.queue_id, request.messages
    names.check_topic_name(topic)
    names.check_sendable(topic)
    config = store.config  # read once: a property of the store
    if config.brokerRole == BrokerRole.SLAVE:
        raise ServiceNotAvailable("service not available now. the broker is a slave")
    if not messages:
        raise MessageIllegal("the batch holds no message")
    if not isinstance(queue_id, int):
        raise IllegalRequest(f"queueId must be an integer, got {queue_id!r}")
    store_host = (config.brokerIP1, config.listenPort)
    levels = [delay.requested_level(m.properties) for m in messages]
    if len(messages) > 1 and any(level > 0 for level in levels):
        # as CommitLog#asyncPutMessages
        raise MessageIllegal("a batch message cannot be delayed (DELAY > 0)")
    # a single message with TRAN_MSG=true is a half message; 4.9.8's batch path knows no transactions
    half = len(messages) == 1 and transaction.is_half(messages[0].properties)
    if half:
        transaction.check_accepted(store)
    timers = [timer.requested(m.properties) for m in messages]
    if len(messages) > 1 and any(timers):
        raise MessageIllegal("a batch message cannot be delivered at a time (TIMER_DELIVER_MS)")
    encoded, codes = encode_batch(
        topic,
        queue_id,
        messages,
        config.brokerClusterName,
        store_host,
        config.maxMessageSize,
        config.mappedFileSizeCommitLog,
    )
    return _Prepared(request, tuple(encoded), tuple(codes), max(levels), half, timers[0])


def encode_batch(
    topic: str,
    queue_id: int,
    messages: list[MessageIn],
    cluster: str,
    store_host: tuple[str, int],
    max_body: int,
    file_size: int,
) -> tuple[list[bytes], list[int]]:
    """The messages of a send in the stored encoding with placeholder offsets, and their tags codes.

    Each keeps the producer's properties but WAIT, plus CLUSTER (`stored_properties`); a body
    over `max_body` (maxMessageSize), or a message larger than a commit-log file of
    `file_size` bytes, is refused.
    """
    encoded, codes = [], []
    for msg in messages:
        if len(msg.body) > max_body:
            raise MessageIllegal(
                f"the message body size {len(msg.body)} exceeds maxMessageSize {max_body}"
            )
        if len(msg.body) + wire.FIXED_SIZE + len(topic) > file_size:
            raise MessageIllegal(
                "the message is larger than a commit-log file (mappedFileSizeCommitLog)"
            )
        raw, code = encode_message(
            topic, queue_id, msg, stored_properties(msg.properties, cluster), store_host
        )
        encoded.append(raw)
        codes.append(code)
    return encoded, codes


def stored_properties(properties: dict[str, str], cluster: str) -> dict[str, str]:
    """What the send path stores: the producer's properties without WAIT, plus CLUSTER (docs/protocol.md §7.2.1 step 6)."""
    props = {k: v for k, v in properties.items() if k != delay.PROPERTY_WAIT}
    props["CLUSTER"] = cluster
    return props


def _stored_properties(store: Store, msg: MessageIn) -> dict[str, str]:
    return stored_properties(msg.properties, store.config.brokerClusterName)


# the pure-Python function that has a compiled twin (es_broker/commands/_speedups.pyx)
REFERENCE = {"encode_batch": encode_batch}


def put_job(store: Store, prepared: _Prepared) -> Callable[[AppendContext], PutResult]:
    """The group-commit job that places prepared messages and records them."""
    request = prepared.request
    requester, producer_group = request.requester, request.producer_group

    def job(ctx: AppendContext) -> PutResult:
        config = store.topics.writer_get(ctx.txn, request.topic)
        if config is not None:
            return put(ctx, config)
        created = put(ctx, _auto_create(store, ctx, request))
        return created._replace(created_topic=True)

    def put(ctx: AppendContext, config: TopicConfig) -> PutResult:
        topic = request.topic
        write_nums, read_nums = config.write_queue_nums, config.read_queue_nums
        queue_id = request.queue_id
        if queue_id < 0:
            if write_nums <= 0:
                raise IllegalRequest(
                    f"topic[{topic}] has no write queue (writeQueueNums {write_nums}), "
                    "so a send with queueId -1 has no queue to go to"
                )
            queue_id = random.randrange(write_nums)  # decided here, recorded below
        elif queue_id >= max(write_nums, read_nums):
            raise IllegalRequest(f"request queueId[{queue_id}] is illegal, topic:{topic} ...")
        ts = store.clock.now_ms()
        settings = store.config
        host = (settings.brokerIP1, settings.listenPort)
        if prepared.half:  # invisible until END_TRANSACTION commits it (B-220); DELAY is ignored
            (msg,) = request.messages
            return transaction.store_half(
                store,
                ctx,
                topic,
                queue_id,
                msg,
                _stored_properties(store, msg),
                ts=ts,
                host=host,
                producer_group=producer_group,
                requester=requester,
            )
        if topic.startswith(names.RETRY_PREFIX):
            dlq = _dead_letter_target(store, ctx, request)
            if dlq is not None:
                # diverted, with the delay cleared (B-95): re-encode for the DLQ topic
                props = [
                    dict(_stored_properties(store, m), **{delay.PROPERTY_DELAY: "0"})
                    for m in request.messages
                ]
                pairs = [
                    encode_message(dlq, 0, m, p, host)
                    for m, p in zip(request.messages, props, strict=True)
                ]
                return place(
                    store,
                    ctx,
                    dlq,
                    0,
                    [r for r, _ in pairs],
                    [c for _, c in pairs],
                    ts=ts,
                    host=host,
                    producer_group=producer_group,
                    requester=requester,
                    diverted_from=topic,
                )
        if prepared.delay_level > 0:
            (msg,) = request.messages
            return park(
                store,
                ctx,
                topic,
                queue_id,
                msg,
                _stored_properties(store, msg),
                prepared.delay_level,
                ts=ts,
                host=host,
                producer_group=producer_group,
                requester=requester,
            )
        if prepared.timer is not None:  # a DELAY level won above, as in 5.x (B-589)
            due = timer.park_due(prepared.timer, ts, store.config.timerMaxDelaySec)
            if due is not None:
                (msg,) = request.messages
                return timer.park(
                    store,
                    ctx,
                    topic,
                    queue_id,
                    msg,
                    _stored_properties(store, msg),
                    prepared.timer,
                    due,
                    ts=ts,
                    host=host,
                    producer_group=producer_group,
                    requester=requester,
                )
        return place(
            store,
            ctx,
            topic,
            queue_id,
            prepared.encoded,
            prepared.tags_codes,
            ts=ts,
            host=host,
            producer_group=producer_group,
            requester=requester,
        )

    return job


def _dead_letter_target(store: Store, ctx: AppendContext, request: PutRequest) -> str | None:
    """SEND to `%RETRY%G`: the DLQ topic when reconsumeTimes reached the limit, else None (docs/protocol.md §7.2.1 step 5)."""
    group = retry.group_of_retry_topic(request.topic)
    group_config = find_or_create_group(store, ctx, group, request.requester)
    limit = retry.max_reconsume_times(group_config, request.max_reconsume_times)
    if not retry.send_path_dead_letters(store, request.messages[0].reconsume_times, limit):
        return None
    retry.ensure_dlq_topic(store, ctx, group, request.requester)
    return names.dlq_topic(group)


def park(
    store: Store,
    ctx: AppendContext,
    topic: str,
    queue_id: int,
    msg: MessageIn,
    properties: dict[str, str],
    level: int,
    *,
    ts: int,
    host: tuple[str, int],
    producer_group: str = "",
    requester: str = "",
    cause: Cause | None = None,
) -> PutResult:
    """Store a delayed message in SCHEDULE_TOPIC_XXXX queue L-1, due at store time + delay(L) (B-96)."""
    levels = store.config.delay_levels_ms()
    level = delay.clamp_level(level, levels)
    due = delay.deliver_at(ts, level, levels)
    props = delay.parked_properties(properties, topic, queue_id, level)
    raw, _ = encode_message(names.SCHEDULE_TOPIC, delay.schedule_queue(level), msg, props, host)
    result = place(
        store,
        ctx,
        names.SCHEDULE_TOPIC,
        delay.schedule_queue(level),
        [raw],
        [due],
        ts=ts,
        host=host,
        producer_group=producer_group,
        requester=requester,
        delay={"level": level, "deliver_at": due, "real_topic": topic, "real_queue_id": queue_id},
        cause=cause,
    )
    return result._replace(
        real_topic=topic, real_queue_id=queue_id, delay_level=level, deliver_at=due
    )


def _auto_create(store: Store, ctx: AppendContext, request: PutRequest) -> TopicConfig:
    """Create a topic on first send when RocketMQ would (docs/protocol.md §7.2.1 step 3, B-25)."""
    topic = request.topic
    if topic.startswith(names.RETRY_PREFIX):
        config = TopicConfig(topic, 1, 1, PERM_READ | PERM_WRITE)
    else:
        template = (
            store.topics.get(ctx.txn, request.default_topic) if request.default_topic else None
        )
        if template is None or not template.perm & PERM_INHERIT:
            raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
        nums = max(1, min(request.default_topic_queue_nums, template.write_queue_nums))
        config = TopicConfig(topic, nums, nums, template.perm & ~PERM_INHERIT)
    return auto_create_topic(store, ctx, config, request.requester)


# ---------------------------------------------------------------------- pull


class GetStatus(Enum):
    """DefaultMessageStore's read result (B-58)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class GetResult(NamedTuple):
    """What a read of a queue found (a named tuple: one a pull's read, on the hot path)."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: tuple[bytes, ...] = ()
    offsets: tuple[int, ...] = ()
    slow: bool = False  # the last unit read lies on disk (B-115)
    commit_seq: int = 0  # the record of the pull's piggybacked commit, 0: none recorded
    # a pull's: the pulling group's config as the pull read it (or created it), for the
    # broker its answer suggests; None for a read that is no group's
    group_config: SubscriptionGroupConfig | None = None

    @property
    def body(self) -> bytes:
        """The pull answer body: stored messages back to back (docs/protocol.md §8.2)."""
        return b"".join(self.messages)


# a pull's read sets these, kept here: an enum member read off its class costs a look-up
# through the enum's machinery a time
_FOUND: Final = GetStatus.FOUND
_NO_MATCHED: Final = GetStatus.NO_MATCHED_MESSAGE


def check_readable(
    store: Store, txn: lmdb.Transaction[bytes], topic: str, queue_id: int
) -> TopicConfig:
    """The pull pre-checks on the topic (B-21, B-13); returns the topic config."""
    if not store.config.brokerPermission & PERM_READ:
        raise NoPermission(f"the broker[{store.config.brokerIP1}] pulling message is forbidden")
    config = store.topics.get(txn, topic)
    if config is None:
        raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
    if not config.perm & PERM_READ:
        raise NoPermission(f"the topic[{topic}] pulling message is forbidden")
    if not isinstance(queue_id, int) or queue_id < 0 or queue_id >= config.read_queue_nums:
        raise IllegalRequest(
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
            f"[{config.read_queue_nums}] consumer:[...]"
        )
    return config


def check_pull_args(offset: object, max_msg_nums: object) -> None:
    if not isinstance(offset, int) or offset < 0:
        raise IllegalRequest(f"queueOffset {offset!r} is negative or not an integer")
    if not isinstance(max_msg_nums, int) or max_msg_nums <= 0:
        raise IllegalRequest(f"maxMsgNums {max_msg_nums!r} must be a positive integer")


def get_message(
    store: Store,
    txn: lmdb.Transaction[bytes],
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    tags_codes: frozenset[int] | None = None,
    message_filter: Callable[[bytes], bool] | None = None,
) -> GetResult:
    """Read up to max_msg_nums messages from offset, with RocketMQ's statuses (B-58..B-62).

    `message_filter` (a SQL92 subscription, B-216) is asked about each message
    read; one it refuses is skipped like a tag miss, and nextBeginOffset moves past it.
    """
    check_pull_args(offset, max_msg_nums)
    return read_messages(
        store, txn, topic, queue_id, offset, max_msg_nums, tags_codes, message_filter
    )


def read_messages(
    store: Store,
    txn: lmdb.Transaction[bytes],
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    tags_codes: frozenset[int] | None = None,
    message_filter: Callable[[bytes], bool] | None = None,
) -> GetResult:
    """`get_message` of arguments already checked (`check_pull_args`)."""
    config, cq = store.config, store.cq
    lo, hi = cq.bounds(txn, topic, queue_id)
    if hi == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
    if offset < lo:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
    if offset == hi:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
    if offset > hi:
        nxt = 0 if config.overflow_badly_next == "legacy" and lo == 0 else hi
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, nxt, lo, hi)

    phy_max = store.commitlog.phy_max(txn)
    phy_min = store.commitlog.phy_min(txn)
    threshold = config.in_memory_threshold
    # at most max(16000 bytes, maxMsgNums x 20) of consume queue, never past its file (B-58)
    scan = max(16000, max_msg_nums * 20) // 20
    file_end = (offset // UNITS_PER_FILE + 1) * UNITS_PER_FILE
    end = min(hi, offset + scan, file_end)
    status, found = _NO_MATCHED, _FOUND
    messages: list[bytes] = []
    offsets: list[int] = []
    total = 0
    next_offset = offset
    last_phy = -1
    seen = False
    # the batch caps (B-62), read once; the first message always fits
    mem_bytes, mem_count = (
        config.maxTransferBytesOnMessageInMemory,
        config.maxTransferCountOnMessageInMemory,
    )
    disk_bytes, disk_count = (
        config.maxTransferBytesOnMessageInDisk,
        config.maxTransferCountOnMessageInDisk,
    )
    read = store.log.payload_reader(txn)  # reads each chunk once for the batch
    for unit_offset, phy, size, tags_code in cq.unit_tuples(txn, topic, queue_id, offset, end):
        # the slow verdict looks at the last unit scanned, the one that fills the batch too (B-115)
        last_phy = phy
        count = len(messages)
        if count:
            if max_msg_nums <= count:
                break
            if phy_max - phy > threshold:  # on disk
                if total + size > disk_bytes or count > disk_count - 1:
                    break
            elif total + size > mem_bytes or count > mem_count - 1:
                break
        seen = True
        next_offset = unit_offset + 1
        if tags_codes is not None and tags_code not in tags_codes:
            continue
        raw = read(phy) if phy >= phy_min else None
        if raw is None:
            if not messages:
                status = GetStatus.MESSAGE_WAS_REMOVING
            continue
        if message_filter is not None and not message_filter(raw):
            if not messages:
                status = _NO_MATCHED
            continue
        messages.append(raw)
        offsets.append(unit_offset)
        total += len(raw)
        status = found
    else:
        next_offset = end
    if not seen:  # the units are gone: skip to the next consume-queue file
        return GetResult(GetStatus.OFFSET_FOUND_NULL, file_end, lo, hi)
    slow = last_phy >= 0 and phy_max - last_phy > threshold
    return GetResult(status, next_offset, lo, hi, tuple(messages), tuple(offsets), slow)


compiled.install(globals(), "es_broker.commands._speedups", "encode_batch")
