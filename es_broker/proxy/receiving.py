"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue over pop.

A SimpleConsumer's ReceiveMessage becomes the brokers' POP_MESSAGE (RocketMQ 5's
pop consumption: no client rebalance, each message invisible to the group for
the invisible duration), held up to the long-polling time; each popped message
goes to the client with the broker's own receipt handle (its POP_CK property:
RocketMQ 5's fields and the broker's MAC), which the proxy passes through as it
is: AckMessage and ChangeInvisibleDuration give it back to the broker named in
it (ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME), which refuses one it did not
make for that group. A topic whose `message.type` is FIFO is popped in order
(one message group in flight per consumer group).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from es_broker.client.send_tries import BrokerRefused, ClientError
from es_broker.net.remoting_client import RemotingError
from es_broker.proxy.cluster import Side
from es_broker.proxy.convert import POP_CK, RETRY_TOPIC, to_v5
from es_broker.proxy.renewal import FIRST_MS, Renewals
from es_broker.proxy.status import Abort, Code, Refused, status, translate
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.headers import ConsumerSendMsgBackRequestHeader
from es_broker.remoting.message import MessageDecodeError, decode_all
from es_broker.remoting.pop_headers import (
    INIT_MODE_MAX,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    ReceiptHandle,
)

log = logging.getLogger(__name__)

MAX_BATCH = 32  # a pop's maxMsgNums
MAX_POLL_MS = 30_000  # the longest long poll taken (RocketMQ 5's grpcClientConsumerMaxLongPollingTimeoutMillis)
MIN_INVISIBLE_MS = 10_000  # RocketMQ 5's minInvisibleTimeMillsForRecv
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # and maxInvisibleTimeMills
MARGIN = 1.0  # s of the call's deadline kept for the answer
NOT_FOUND = frozenset(
    {ResponseCode.PULL_NOT_FOUND, 207, ResponseCode.NO_MESSAGE}
)  # POLLING_TIMEOUT
EXP_TYPES = {
    pb.FilterType.TAG: "TAG",
    pb.FilterType.SQL: "SQL92",
    pb.FilterType.FILTER_TYPE_UNSPECIFIED: "TAG",
}


def _ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def _invisible_ms(duration: Any) -> int:
    ms = _ms(duration)
    if not MIN_INVISIBLE_MS <= ms <= MAX_INVISIBLE_MS:
        raise Refused(
            Code.ILLEGAL_INVISIBLE_TIME,
            f"the invisible duration {ms} ms is outside [{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}]",
        )
    return ms


def _pop_header(request: Any, order: bool, poll_ms: int, client_id: str) -> PopMessageRequestHeader:
    group = request.group.name
    if not group:
        raise Refused(Code.ILLEGAL_CONSUMER_GROUP, "ReceiveMessage names no group")
    if not 0 < request.batch_size <= MAX_BATCH:
        raise Refused(
            Code.BAD_REQUEST, f"the batch size must be 1..{MAX_BATCH}, not {request.batch_size}"
        )
    # a PushConsumer's receive: the proxy keeps its messages invisible until it acks (renewal.py)
    invisible = FIRST_MS if request.auto_renew else _invisible_ms(request.invisible_duration)
    exp_type = EXP_TYPES.get(request.filter_expression.type)
    if exp_type is None:
        raise Refused(
            Code.ILLEGAL_FILTER_EXPRESSION, f"unknown filter type {request.filter_expression.type}"
        )
    return PopMessageRequestHeader(
        consumer_group=group,
        topic=request.message_queue.topic.name,
        queue_id=-1,
        max_msg_nums=request.batch_size,
        invisible_time=invisible,
        poll_time=poll_ms,
        born_time=None,
        # as RocketMQ 5's proxy asks: a new group starts at the queue's last message, or at its
        # first while that is still in memory (the broker's initPopOffsetByCheckMsgInMem)
        init_mode=INIT_MODE_MAX,
        exp_type=exp_type,
        exp=request.filter_expression.expression or "*",
        order=order,
        attempt_id=request.attempt_id or None,
        for_client=client_id or None,
    )


def _handle(text: str) -> ReceiptHandle:
    try:
        return ReceiptHandle.decode(text)
    except ValueError as exc:
        raise Refused(
            Code.INVALID_RECEIPT_HANDLE, f"the receipt handle is not valid: {exc}"
        ) from None


def _poll_ms(request: Any, context: Any) -> int:
    poll = _ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
    if poll < 0 or poll > MAX_POLL_MS:
        raise Refused(
            Code.ILLEGAL_POLLING_TIME,
            f"the long-polling timeout {poll} ms is outside [0, {MAX_POLL_MS}]",
        )
    remaining = context.time_remaining()
    if remaining is not None:
        poll = max(0, min(poll, int((remaining - MARGIN) * 1000)))
    return poll


async def receive(
    side: Side, request: Any, context: Any, renewals: Renewals, client_id: str
) -> AsyncIterator[Any]:
    """ReceiveMessage: one POP_MESSAGE, its messages streamed, then the status."""
    try:
        async for response in _receive(side, request, context, renewals, client_id):
            yield response
    except Refused as refused:
        yield spb.ReceiveMessageResponse(status=status(refused.code, refused.message))
    except (BrokerRefused, ClientError, RemotingError) as exc:
        failure = translate(exc, "ReceiveMessage")
        if isinstance(failure, Abort):
            await context.abort(failure.code, failure.message)
        yield spb.ReceiveMessageResponse(status=status(failure.code, failure.message))


async def _receive(
    side: Side, request: Any, context: Any, renewals: Renewals, client_id: str
) -> AsyncIterator[Any]:
    topic = request.message_queue.topic.name
    if not topic:
        raise Refused(Code.ILLEGAL_TOPIC, "ReceiveMessage names no topic")
    route = await side.known_route(topic)
    if route is None or not route.queue_datas:
        raise Refused(Code.TOPIC_NOT_FOUND, f"the topic {topic} does not exist")
    order = await side.message_type(topic, route) == "FIFO"
    header = _pop_header(request, order, _poll_ms(request, context), client_id)
    broker = request.message_queue.broker.name or route.queue_datas[0].broker_name
    addr = side.master(broker)
    command = side.instance.request(RequestCode.POP_MESSAGE, header)
    answer = await side.instance.invoke(addr, command, header.poll_time / 1000 + 10)

    async def renew(group: str, topic: str, handle: str, invisible_ms: int) -> str:
        return await _change(side, group, topic, handle, invisible_ms, client_id)

    if answer.code in NOT_FOUND:
        yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        return
    if answer.code != ResponseCode.SUCCESS:
        raise BrokerRefused(answer.code, answer.remark, addr)
    try:
        messages = decode_all(answer.body)
    except MessageDecodeError as exc:
        raise Refused(
            Code.INTERNAL_ERROR, f"the broker's pop answer is unreadable: {exc}"
        ) from None
    delivered = spb.ReceiveMessageResponse()
    delivered.delivery_timestamp.GetCurrentTime()  # when the proxy hands them over (5.x's metric)
    yield delivered
    for stored in messages:
        handle = stored.properties.get(POP_CK)
        if handle is None:
            log.warning("a popped message without its receipt handle: %s", stored.msg_id)
            continue
        real = stored.properties.get(RETRY_TOPIC, topic)
        message = to_v5(stored, real, receipt=handle)
        message.system_properties.invisible_duration.FromMilliseconds(header.invisible_time)
        if request.auto_renew:
            renewals.hold(renew, client_id, header.consumer_group, topic, handle)
        yield spb.ReceiveMessageResponse(message=message)
    yield spb.ReceiveMessageResponse(status=status(Code.OK))


async def _ack_one(
    side: Side, group: str, topic: str, entry: Any, renewals: Renewals, client_id: str
) -> Any:
    result = spb.AckMessageResultEntry(
        message_id=entry.message_id, receipt_handle=entry.receipt_handle
    )
    try:
        _handle(entry.receipt_handle)
        current = await renewals.take(group, entry.receipt_handle)
        handle = _handle(current)
        header = AckMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=handle.queue_id,
            extra_info=current,
            offset=handle.queue_offset,
            for_client=client_id or None,
        )
        addr = side.master(handle.broker_name)
        answer = await side.instance.invoke(
            addr, side.instance.request(RequestCode.ACK_MESSAGE, header)
        )
        if answer.code == ResponseCode.INVALID_PARAMETER:
            raise Refused(
                Code.INVALID_RECEIPT_HANDLE,
                f"the broker refused the receipt handle: {answer.remark}",
            )
        if answer.code != ResponseCode.SUCCESS:
            raise BrokerRefused(answer.code, answer.remark, addr)
        result.status.CopyFrom(status(Code.OK))
    except Refused as refused:
        result.status.CopyFrom(status(refused.code, refused.message))
    except (BrokerRefused, ClientError, RemotingError) as exc:
        failure = translate(exc, "AckMessage")
        if isinstance(failure, Abort):
            raise failure from None
        result.status.CopyFrom(status(failure.code, failure.message))
    return result


async def ack_message(side: Side, request: Any, renewals: Renewals, client_id: str) -> Any:
    """AckMessage: each entry's handle back to its broker; each entry its own status."""
    if not request.group.name:
        raise Refused(Code.ILLEGAL_CONSUMER_GROUP, "AckMessage names no group")
    if not request.topic.name:
        raise Refused(Code.ILLEGAL_TOPIC, "AckMessage names no topic")
    if not request.entries or len(request.entries) > 1024:
        raise Refused(Code.BAD_REQUEST, "AckMessage carries 1..1024 entries")
    entries = [
        await _ack_one(side, request.group.name, request.topic.name, e, renewals, client_id)
        for e in request.entries
    ]
    codes = {e.status.code for e in entries}
    head = (
        entries[0].status
        if len(codes) == 1
        else status(Code.MULTIPLE_RESULTS, "the entries have different results")
    )
    return spb.AckMessageResponse(status=head, entries=entries)


async def _change(
    side: Side, group: str, topic: str, text: str, invisible_ms: int, client_id: str
) -> str:
    """CHANGE_MESSAGE_INVISIBLETIME of the message `text` names: the broker's new handle."""
    handle = _handle(text)
    header = ChangeInvisibleTimeRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=handle.queue_id,
        extra_info=text,
        offset=handle.queue_offset,
        invisible_time=invisible_ms,
        for_client=client_id or None,
    )
    addr = side.master(handle.broker_name)
    command = side.instance.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header)
    answer = await side.instance.invoke(addr, command)
    if answer.code == ResponseCode.INVALID_PARAMETER:
        raise Refused(
            Code.INVALID_RECEIPT_HANDLE, f"the broker refused the receipt handle: {answer.remark}"
        )
    if answer.code != ResponseCode.SUCCESS:
        raise BrokerRefused(answer.code, answer.remark, addr)
    new = ChangeInvisibleTimeResponseHeader.of(answer).extra_info
    if not new:
        raise Refused(Code.INTERNAL_ERROR, "the broker answered no new receipt handle")
    return new


async def change_invisible_duration(
    side: Side, request: Any, renewals: Renewals, client_id: str
) -> Any:
    """ChangeInvisibleDuration: the message stays invisible that long from now; a new handle."""
    if not request.group.name:
        raise Refused(Code.ILLEGAL_CONSUMER_GROUP, "ChangeInvisibleDuration names no group")
    invisible = _invisible_ms(request.invisible_duration)
    _handle(request.receipt_handle)
    current = await renewals.take(request.group.name, request.receipt_handle)
    new = await _change(side, request.group.name, request.topic.name, current, invisible, client_id)
    return spb.ChangeInvisibleDurationResponse(status=status(Code.OK), receipt_handle=new)


async def forward_to_dlq(side: Side, request: Any, renewals: Renewals, client_id: str) -> Any:
    """ForwardMessageToDeadLetterQueue: the message to the group's DLQ, then its handle acked."""
    group = request.group.name
    if not group:
        raise Refused(Code.ILLEGAL_CONSUMER_GROUP, "ForwardMessageToDeadLetterQueue names no group")
    handle = _handle(request.receipt_handle)
    addr = side.master(handle.broker_name)
    back = ConsumerSendMsgBackRequestHeader(
        group=group,
        offset=handle.commit_log_offset,
        delay_level=-1,
        origin_msg_id=request.message_id or None,
        origin_topic=request.topic.name or None,
        max_reconsume_times=request.max_delivery_attempts or None,
    )
    answer = await side.instance.invoke(
        addr, side.instance.request(RequestCode.CONSUMER_SEND_MSG_BACK, back)
    )
    if answer.code != ResponseCode.SUCCESS:
        raise BrokerRefused(answer.code, answer.remark, addr)
    entry = spb.AckMessageEntry(
        message_id=request.message_id, receipt_handle=request.receipt_handle
    )
    acked = await _ack_one(side, group, request.topic.name, entry, renewals, client_id)
    if acked.status.code != Code.OK:
        raise Refused(
            acked.status.code, f"moved to the dead letter queue, but: {acked.status.message}"
        )
    return spb.ForwardMessageToDeadLetterQueueResponse(status=status(Code.OK))
