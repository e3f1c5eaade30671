"""SendMessage and EndTransaction: a 5.x message into a broker's queue, as RocketMQ 5's proxy does.

The message's declared type must fit its properties (FIFO has a message group,
DELAY a delivery timestamp, TRANSACTION neither) and the topic's `message.type`
attribute (a topic without one, or MIXED, takes every type: topics made by 4.x
tools carry no attribute); otherwise MESSAGE_PROPERTY_CONFLICT_WITH_TYPE.
A FIFO message goes to the writable queue its message group hashes to (Java's
String#hashCode, as the 5.x proxy's SendMessageQueueSelector), so a group's
messages keep their order in one queue; a transactional one is a half message
whose transaction the client ends with EndTransaction (cluster.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from es_broker.client.messages import Message, SendResult, SendStatus
from es_broker.proxy.cluster import Side, TransactionId
from es_broker.proxy.convert import SHARDING_KEY, body_of, message_type_of, properties_of
from es_broker.proxy.sessions import MAX_BODY
from es_broker.proxy.status import Code, Refused, status
from es_broker.remoting.bodies import MessageQueue

TYPE_NAMES = {
    pb.MessageType.NORMAL: "NORMAL",
    pb.MessageType.FIFO: "FIFO",
    pb.MessageType.DELAY: "DELAY",
    pb.MessageType.TRANSACTION: "TRANSACTION",
}
MAX_BATCH = 1024
_STATUS = {
    SendStatus.SEND_OK: Code.OK,
    SendStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    SendStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    SendStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
}


def java_hash(text: str) -> int:
    """Java's String#hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def fifo_queue(queues: Sequence[MessageQueue], group: str) -> MessageQueue:
    """The queue a message group's messages go to."""
    ordered = sorted(queues, key=lambda q: (q.broker_name, q.queue_id))
    return ordered[abs(java_hash(group)) % len(ordered)]


def check_type(message: Any, declared: int, topic_type: str | None, topic: str) -> None:
    """The declared type against the message's properties and the topic's type."""
    sp = message.system_properties
    name = TYPE_NAMES.get(declared)
    if name is None:
        raise Refused(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"the message type {declared} is not served"
        )
    group, delay = sp.HasField("message_group"), sp.HasField("delivery_timestamp")
    fits = {
        "NORMAL": not group and not delay,
        "FIFO": group and not delay,
        "DELAY": delay and not group,
        "TRANSACTION": not group and not delay,
    }[name]
    if not fits:
        raise Refused(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"a {name} message cannot carry "
            + ("a message group" if group else "a delivery timestamp" if delay else "this shape"),
        )
    if topic_type not in (None, "MIXED", name):
        raise Refused(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"the topic {topic} takes {topic_type} messages, not {name}",
        )


async def send_one(side: Side, message: Any) -> Any:
    """One message of a SendMessage request: its SendResultEntry."""
    topic = message.topic.name
    if not topic:
        raise Refused(Code.ILLEGAL_TOPIC, "the message names no topic")
    route = await side.known_route(topic)
    if route is None or not route.queue_datas:
        raise Refused(Code.TOPIC_NOT_FOUND, f"the topic {topic} does not exist")
    declared = message_type_of(message)
    check_type(message, declared, await side.message_type(topic, route), topic)
    props = properties_of(message, int(time.time() * 1000))
    outgoing = Message(body_of(message, MAX_BODY), properties=props)
    txid: TransactionId | None = None
    if declared == pb.MessageType.TRANSACTION:
        result, txid = await side.send_half(topic, outgoing)
    elif declared == pb.MessageType.FIFO:
        queues = await side.producer.find_publish_queues(topic)
        if not queues:
            raise Refused(Code.TOPIC_NOT_FOUND, f"the topic {topic} has no writable queue")
        queue = fifo_queue(queues, props[SHARDING_KEY])
        result = await side.send(topic, outgoing, queue.queue_id, queue.broker_name)
    else:
        result = await side.send(topic, outgoing, None, None)
    return _entry(result, props, txid)


def _entry(result: SendResult, props: dict[str, str], txid: TransactionId | None) -> Any:
    code = _STATUS[result.status]
    entry = spb.SendResultEntry(
        status=status(code, "OK" if code == Code.OK else result.status.value),
        message_id=props["UNIQ_KEY"],
        offset=result.queue_offset,
    )
    if txid is not None:
        entry.transaction_id = txid.text()
    return entry


async def send_message(side: Side, request: Any) -> Any:
    """SendMessage: every message of the request, each its entry."""
    if not request.messages:
        raise Refused(Code.BAD_REQUEST, "SendMessage carries no message")
    if len(request.messages) > MAX_BATCH:
        raise Refused(Code.BAD_REQUEST, f"SendMessage carries over {MAX_BATCH} messages")
    entries = [await send_one(side, message) for message in request.messages]
    codes = {e.status.code for e in entries}
    head = (
        entries[0].status
        if len(codes) == 1
        else status(Code.MULTIPLE_RESULTS, "the messages have different results")
    )
    return spb.SendMessageResponse(status=head, entries=entries)


async def end_transaction(side: Side, request: Any) -> Any:
    """EndTransaction: commit or roll back a half message this proxy sent."""
    try:
        txid = TransactionId.parse(request.transaction_id)
    except ValueError:
        raise Refused(
            Code.INVALID_TRANSACTION_ID,
            f"the transaction id {request.transaction_id!r} is not one this proxy gave",
        ) from None
    if not request.message_id:
        raise Refused(Code.ILLEGAL_MESSAGE_ID, "EndTransaction names no message id")
    if not request.topic.name:
        raise Refused(Code.ILLEGAL_TOPIC, "EndTransaction names no topic")
    resolution = request.resolution
    if resolution not in (pb.TransactionResolution.COMMIT, pb.TransactionResolution.ROLLBACK):
        raise Refused(
            Code.BAD_REQUEST, f"the transaction resolution {resolution} is not COMMIT or ROLLBACK"
        )
    if request.source not in (
        pb.TransactionSource.SOURCE_UNSPECIFIED,
        pb.TransactionSource.SOURCE_CLIENT,
        pb.TransactionSource.SOURCE_SERVER_CHECK,
    ):
        raise Refused(Code.BAD_REQUEST, f"the transaction source {request.source} is unknown")
    await side.end_transaction(
        request.topic.name,
        request.message_id,
        txid,
        commit=resolution == pb.TransactionResolution.COMMIT,
        from_check=request.source == pb.TransactionSource.SOURCE_SERVER_CHECK,
    )
    return spb.EndTransactionResponse(status=status(Code.OK))
