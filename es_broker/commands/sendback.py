"""CONSUMER_SEND_MSG_BACK, the broker side: retry later or dead-letter (B-90..B-94, S-10).

A consumer that failed a message asks the broker to store a new copy of it:
in `%RETRY%G`, parked for a delay level first (B-92, B-96), or in `%DLQ%G`
once it has been retried enough (B-91). The job decides the outcome, the
random retry queue and the store time; the copy goes through the ordinary
store path (`messages_stored`) and a `message_sent_back` record links the
original (physical offset, msg id) to the copy with the decision, in the
same transaction.

Topics and groups created on the way stay created even when the send-back
is then refused (RocketMQ creates them before it reads the message), so
those refusals are returned as values and raised after the commit.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from es_broker.commands import delay, messages, names, placement, retry
from es_broker.commands.errors import BrokerError, IllegalRequest, NoPermission, ServiceNotAvailable
from es_broker.commands.placement import PutResult
from es_broker.commands.topics import find_or_create_group
from es_broker.config import BrokerRole
from es_broker.log import AppendContext
from es_broker.log.types import Cause, MessageSentBack, SendBackDecision
from es_broker.projections.topics import PERM_WRITE
from es_broker.remoting import message as wire
from es_broker.store import Store


@dataclass(frozen=True, slots=True)
class SendBackResult:
    decision: str  # a SendBackDecision, or refused
    reason: str
    target_topic: str | None  # %RETRY%G or %DLQ%G; None when dropped
    target_queue_id: int | None
    delay_level: int  # 0 for a dead letter
    reconsume_times: int  # of the new message
    stored: PutResult | None  # where the new message went (SCHEDULE_TOPIC_XXXX for a delayed retry)
    created_topics: tuple[str, ...] = ()
    seq: int | None = None  # the message_sent_back record
    error: BrokerError | None = None  # refused after something was created


def _check_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise IllegalRequest(f"{name} {value!r} must be an integer")
    return value


def send_back_job(
    store: Store,
    group: str,
    offset: int,
    delay_level: int = 0,
    *,
    max_reconsume_times: int | None = None,
    origin_msg_id: str | None = None,
    origin_topic: str | None = None,
    requester: str = "",
) -> Callable[[AppendContext], SendBackResult]:
    """The job of one send-back, in SendMessageProcessor#asyncConsumerSendMsgBack's order (B-90)."""
    names.check_group_name(group)
    # a slave stores nothing, send-backs included (B-120)
    if store.config.brokerRole == BrokerRole.SLAVE:
        raise ServiceNotAvailable("service not available now. the broker is a slave")
    _check_int("offset", offset)
    _check_int("delayLevel", delay_level)
    if max_reconsume_times is not None:
        _check_int("maxReconsumeTimes", max_reconsume_times)
    request = _SendBack(
        group, offset, delay_level, max_reconsume_times, origin_msg_id, origin_topic, requester
    )
    return lambda ctx: _send_back(store, request, ctx)


@dataclass(frozen=True, slots=True)
class _SendBack:
    """The fields of one CONSUMER_SEND_MSG_BACK request, checked."""

    group: str
    offset: int  # the failed message's physical offset
    delay_level: int  # as the consumer asked: 0 lets the broker choose, below 0 dead-letters
    max_reconsume_times: int | None
    origin_msg_id: str | None  # as the client sent them, recorded
    origin_topic: str | None
    requester: str


def _send_back(store: Store, request: _SendBack, ctx: AppendContext) -> SendBackResult:
    """The steps of asyncConsumerSendMsgBack, each refusal returned after what it created."""
    config = store.config
    created: list[str] = []
    # 1. the group, auto-created when allowed (B-03); refused before anything is written otherwise
    group_config = find_or_create_group(store, ctx, request.group, request.requester)
    # 2. broker perm
    if not config.brokerPermission & PERM_WRITE:
        error = NoPermission(f"the broker[{config.brokerIP1}] sending message is forbidden")
        return _refused(error, created)
    retry_queues = group_config.retry_queue_nums
    # 3. no retry queues: the failed message is dropped (B-94), or dead-lettered (S-10)
    if retry_queues <= 0 and not config.strict_retry_config:
        return _dropped(store, request, ctx)
    # 4. %RETRY%G with the group's queue count and perm 6 (B-25)
    retry_topic = names.retry_topic(request.group)
    if retry_queues > 0:
        retry_config, made = retry.ensure_topic(
            store, ctx, retry_topic, retry_queues, retry.RETRY_PERM, request.requester
        )
        if made:
            created.append(retry_topic)
        if not retry_config.perm & PERM_WRITE:
            error = NoPermission(f"the topic[{retry_topic}] sending message is forbidden")
            return _refused(error, created)
    # 5. the failed message
    txn = ctx.txn
    offset = request.offset
    raw = store.message_at(txn, offset) if offset >= store.commitlog.phy_min(txn) else None
    if raw is None:
        return _refused(BrokerError(f"look message by offset failed, {offset}"), created)
    original = wire.decode_one(raw)[0]
    props = _retry_properties(original)
    # 7. retry or dead letter (B-91, B-92), and the queue, decided here and recorded
    limit = retry.max_reconsume_times(group_config, request.max_reconsume_times)
    decision, reason = _decision(request.delay_level, retry_queues, original, limit)
    copy = placement.MessageIn(
        original.body,
        {},
        original.flag,
        original.sys_flag,
        original.born_timestamp,
        original.born_host,
        original.reconsume_times + 1,
    )
    ts = store.clock.now_ms()
    # 8. store the new message through the normal path
    if decision == SendBackDecision.RETRY:
        placed = _park_retry(
            store, ctx, request, retry_topic, retry_queues, original, copy, props, ts
        )
    else:
        placed = _dead_letter(store, ctx, request, copy, props, ts, original.store_host, created)
    seq = ctx.append(
        _sent_back(store, request, original, limit, decision, reason, placed, props).to_record(ts)
    )
    target, queue_id, level, stored = placed
    return SendBackResult(
        decision,
        reason,
        target,
        queue_id,
        level,
        copy.reconsume_times,
        stored,
        tuple(created),
        seq,
    )


def _refused(error: BrokerError, created: list[str]) -> SendBackResult:
    return SendBackResult(
        "refused", error.remark, None, None, 0, 0, None, tuple(created), None, error
    )


def _dropped(store: Store, request: _SendBack, ctx: AppendContext) -> SendBackResult:
    """A group without retry queues drops the failed message (B-94): only the record says so."""
    seq = ctx.append(
        MessageSentBack(
            group=request.group,
            offset=request.offset,
            decision=SendBackDecision.DROPPED,
            reason="retry_queue_nums_0",
            header_delay_level=request.delay_level,
            client_origin_msg_id=request.origin_msg_id,
            client_origin_topic=request.origin_topic,
            requester=request.requester,
        ).to_record(store.clock.now_ms())
    )
    return SendBackResult(
        SendBackDecision.DROPPED, "retry_queue_nums_0", None, None, 0, 0, None, (), seq
    )


def _retry_properties(original: wire.StoredMessage) -> dict[str, str]:
    """6. The copy's properties: RETRY_TOPIC the first time, WAIT=false, ORIGIN_MESSAGE_ID (B-93)."""
    props = dict(original.properties)
    props.setdefault(retry.PROPERTY_RETRY_TOPIC, original.topic)
    props[delay.PROPERTY_WAIT] = "false"
    props[retry.PROPERTY_ORIGIN_MESSAGE_ID] = (
        props.get(retry.PROPERTY_ORIGIN_MESSAGE_ID, "").strip() or original.msg_id
    )
    return props


def _decision(
    delay_level: int, retry_queues: int, original: wire.StoredMessage, limit: int
) -> tuple[SendBackDecision, str]:
    """Retry or dead letter, and why (B-91, B-92)."""
    if retry_queues <= 0:
        return SendBackDecision.DLQ, "no_retry_queues"  # strict_retry_config: no silent drop (S-10)
    if original.reconsume_times >= limit:
        return SendBackDecision.DLQ, "max_reconsume_times"
    if delay_level < 0:
        return SendBackDecision.DLQ, "delay_level_negative"
    return SendBackDecision.RETRY, "delay_level" if delay_level > 0 else "3_plus_reconsume_times"


#: where the copy went: its topic, queue, delay level (0 for a dead letter) and the put's result
_Placed = tuple[str, int, int, PutResult]


def _park_retry(
    store: Store,
    ctx: AppendContext,
    request: _SendBack,
    retry_topic: str,
    retry_queues: int,
    original: wire.StoredMessage,
    copy: placement.MessageIn,
    props: dict[str, str],
    ts: int,
) -> _Placed:
    """The copy parked for its delay level, then due in a random queue of %RETRY%G (B-92, B-96)."""
    queue_id = random.randrange(retry_queues)
    level = request.delay_level if request.delay_level > 0 else 3 + original.reconsume_times
    stored = messages.park(
        store,
        ctx,
        retry_topic,
        queue_id,
        copy,
        props,
        level,
        ts=ts,
        host=original.store_host,  # copied from the original, and so is its id's host part (B-93)
        requester=request.requester,
        cause=Cause.SEND_BACK,
    )
    return retry_topic, queue_id, stored.delay_level, stored  # clamped to the highest level (B-06)


def _dead_letter(
    store: Store,
    ctx: AppendContext,
    request: _SendBack,
    copy: placement.MessageIn,
    props: dict[str, str],
    ts: int,
    host: tuple[str, int],
    created: list[str],
) -> _Placed:
    """The copy stored in %DLQ%G's only queue (DLQ_NUMS_PER_GROUP is 1), undelayed (B-91)."""
    _, made = retry.ensure_dlq_topic(store, ctx, request.group, request.requester)
    target = names.dlq_topic(request.group)
    if made:
        created.append(target)
    props[delay.PROPERTY_DELAY] = "0"
    encoded, code = placement.encode_message(target, 0, copy, props, host)
    stored = placement.place(
        store,
        ctx,
        target,
        0,
        [encoded],
        [code],
        ts=ts,
        host=host,
        requester=request.requester,
        cause=Cause.SEND_BACK,
    )
    return target, 0, 0, stored


def _sent_back(
    store: Store,
    request: _SendBack,
    original: wire.StoredMessage,
    limit: int,
    decision: SendBackDecision,
    reason: str,
    placed: _Placed,
    props: dict[str, str],
) -> MessageSentBack:
    """The record linking the original (physical offset, msg id) to its copy, with the decision."""
    target, queue_id, level, stored = placed
    levels = store.config.delay_levels_ms()
    return MessageSentBack(
        group=request.group,
        offset=request.offset,
        msg_id=original.msg_id,
        topic=original.topic,
        queue_id=original.queue_id,
        queue_offset=original.queue_offset,
        reconsume_times=original.reconsume_times,
        max_reconsume_times=limit,
        header_delay_level=request.delay_level,
        decision=decision,
        reason=reason,
        delay_level=level,
        delay_ms=levels[level - 1] if level > 0 else 0,
        deliver_at=stored.deliver_at,
        target_topic=target,
        target_queue_id=queue_id,
        stored_phy=stored.physical_offsets[0],
        stored_msg_id=stored.msg_ids[0],
        stored_seq=stored.seq,
        origin_msg_id=props[retry.PROPERTY_ORIGIN_MESSAGE_ID],
        retry_topic=props[retry.PROPERTY_RETRY_TOPIC],
        client_origin_msg_id=request.origin_msg_id,
        client_origin_topic=request.origin_topic,
        requester=request.requester,
    )
