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

from es_broker.commands import delay, messages, names, retry
from es_broker.commands.errors import BrokerError, IllegalRequest, NoPermission, ServiceNotAvailable
from es_broker.commands.messages import PutResult
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
    config = store.config

    def job(ctx: AppendContext) -> SendBackResult:
        txn = ctx.txn
        created: list[str] = []

        def refused(error: BrokerError) -> SendBackResult:
            return SendBackResult(
                "refused", error.remark, None, None, 0, 0, None, tuple(created), None, error
            )

        # 1. the group, auto-created when allowed (B-03); refused before anything is written otherwise
        group_config = find_or_create_group(store, ctx, group, requester)
        # 2. broker perm
        if not config.brokerPermission & PERM_WRITE:
            return refused(
                NoPermission(f"the broker[{config.brokerIP1}] sending message is forbidden")
            )
        retry_queues = group_config.retry_queue_nums
        strict = config.strict_retry_config
        # 3. no retry queues: the failed message is dropped (B-94), or dead-lettered (S-10)
        if retry_queues <= 0 and not strict:
            seq = ctx.append(
                MessageSentBack(
                    group=group,
                    offset=offset,
                    decision=SendBackDecision.DROPPED,
                    reason="retry_queue_nums_0",
                    header_delay_level=delay_level,
                    client_origin_msg_id=origin_msg_id,
                    client_origin_topic=origin_topic,
                    requester=requester,
                ).to_record(store.clock.now_ms())
            )
            return SendBackResult(
                SendBackDecision.DROPPED, "retry_queue_nums_0", None, None, 0, 0, None, (), seq
            )
        # 4. %RETRY%G with the group's queue count and perm 6 (B-25)
        retry_topic = names.retry_topic(group)
        if retry_queues > 0:
            retry_config, made = retry.ensure_topic(
                store, ctx, retry_topic, retry_queues, retry.RETRY_PERM, requester
            )
            if made:
                created.append(retry_topic)
            if not retry_config.perm & PERM_WRITE:
                return refused(
                    NoPermission(f"the topic[{retry_topic}] sending message is forbidden")
                )
        # 5. the failed message
        raw = store.message_at(txn, offset) if offset >= store.commitlog.phy_min(txn) else None
        if raw is None:
            return refused(BrokerError(f"look message by offset failed, {offset}"))
        original = wire.decode_one(raw)[0]
        # 6. RETRY_TOPIC the first time, WAIT=false, ORIGIN_MESSAGE_ID (B-93)
        props = dict(original.properties)
        props.setdefault(retry.PROPERTY_RETRY_TOPIC, original.topic)
        props[delay.PROPERTY_WAIT] = "false"
        props[retry.PROPERTY_ORIGIN_MESSAGE_ID] = (
            props.get(retry.PROPERTY_ORIGIN_MESSAGE_ID, "").strip() or original.msg_id
        )
        # 7. retry or dead letter (B-91, B-92), and the queue, decided here and recorded
        limit = retry.max_reconsume_times(group_config, max_reconsume_times)
        if retry_queues <= 0:
            decision, reason = (
                SendBackDecision.DLQ,
                "no_retry_queues",
            )  # strict_retry_config: no silent drop (S-10)
        elif original.reconsume_times >= limit:
            decision, reason = SendBackDecision.DLQ, "max_reconsume_times"
        elif delay_level < 0:
            decision, reason = SendBackDecision.DLQ, "delay_level_negative"
        else:
            decision, reason = (
                SendBackDecision.RETRY,
                "delay_level" if delay_level > 0 else "3_plus_reconsume_times",
            )
        copy = messages.MessageIn(
            original.body,
            {},
            original.flag,
            original.sys_flag,
            original.born_timestamp,
            original.born_host,
            original.reconsume_times + 1,
        )
        ts = store.clock.now_ms()
        host = original.store_host  # copied from the original, and so is its id's host part (B-93)
        # 8. store the new message through the normal path
        if decision == SendBackDecision.RETRY:
            target, queue_id = retry_topic, random.randrange(retry_queues)
            level = delay_level if delay_level > 0 else 3 + original.reconsume_times
            stored = messages.park(
                store,
                ctx,
                target,
                queue_id,
                copy,
                props,
                level,
                ts=ts,
                host=host,
                requester=requester,
                cause=Cause.SEND_BACK,
            )
            level = stored.delay_level  # clamped to the highest level (B-06)
        else:
            dlq_config, made = retry.ensure_dlq_topic(store, ctx, group, requester)
            if made:
                created.append(names.dlq_topic(group))
            # random mod DLQ_NUMS_PER_GROUP = 0
            target, queue_id, level = (
                names.dlq_topic(group),
                0,
                0,
            )
            props[delay.PROPERTY_DELAY] = "0"
            encoded, code = messages.encode_message(target, queue_id, copy, props, host)
            stored = messages.place(
                store,
                ctx,
                target,
                queue_id,
                [encoded],
                [code],
                ts=ts,
                host=host,
                requester=requester,
                cause=Cause.SEND_BACK,
            )
        levels = config.delay_levels_ms()
        seq = ctx.append(
            MessageSentBack(
                group=group,
                offset=offset,
                msg_id=original.msg_id,
                topic=original.topic,
                queue_id=original.queue_id,
                queue_offset=original.queue_offset,
                reconsume_times=original.reconsume_times,
                max_reconsume_times=limit,
                header_delay_level=delay_level,
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
                client_origin_msg_id=origin_msg_id,
                client_origin_topic=origin_topic,
                requester=requester,
            ).to_record(ts)
        )
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

    return job
