"""Request-reply on the client (Java 4.9.8 RequestFutureTable, RequestResponseFuture, MessageUtil).

`Producer.request` sends a message carrying CORRELATION_ID (a fresh UUID),
REPLY_TO_CLIENT (this client id) and TTL (the timeout in ms) and waits for
the reply the broker pushes with PUSH_REPLY_MESSAGE_TO_CLIENT; the client
instance's `ReplyTable` completes the waiting request by CORRELATION_ID.
A request whose time ran out leaves the table when its waiter gives up, and
any left behind are dropped when the table is next used (Java's
scanExpiredRequest, without a task of its own).

The answering side: `reply(request, body)` builds the reply as
MessageUtil.createReplyMessage does, and `Producer.send_reply` sends it with
SEND_REPLY_MESSAGE_V2.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import anyio

from es_broker.client.messages import Message, ReceivedMessage, SendResult
from es_broker.remoting.bodies import MessageQueue
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.errors import CommandError
from es_broker.remoting.message import FLAG_COMPRESSED, decode_properties
from es_broker.remoting.reply_properties import (
    ARRIVE_TIME,
    CLUSTER,
    CORRELATION_ID,
    MSG_TYPE,
    REPLY_FLAG,
    REPLY_TO_CLIENT,
    TTL,
    reply_topic,
)
from es_broker.remoting.response_headers import ReplyMessageRequestHeader

log = logging.getLogger(__name__)

SCAN_SLACK = 1.0  # s past its timeout before a forgotten request is dropped (scanExpiredRequest)


class RequestError(Exception):
    """A request that got no reply (Java RequestTimeoutException)."""


class RequestTimeout(RequestError):
    pass


class SendHandle(Protocol):
    """The send of a request's message: async_send.py's `SendHandle`, which the producer
    (above both modules) hands to the request."""

    async def result(self) -> SendResult: ...


class RequestHandle:
    """One request under way: `await handle.result()` gives the reply, or raises.

    `correlation_id` is known at once; `sent()` gives the request's SendResult;
    a failed send raises its error from `result()` too.
    """

    __slots__ = (
        "correlation_id",
        "topic",
        "timeout",
        "deadline",
        "_send",
        "_table",
        "_done",
        "_reply",
    )

    def __init__(self, table: ReplyTable, correlation_id: str, topic: str, timeout: float) -> None:
        self.correlation_id = correlation_id
        self.topic = topic
        self.timeout = timeout
        self.deadline = anyio.current_time() + timeout
        self._table = table
        self._send: SendHandle | None = None
        self._done = anyio.Event()
        self._reply: ReceivedMessage | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    async def sent(self) -> SendResult:
        """The SendResult of the request message."""
        assert self._send is not None
        try:
            return await self._send.result()
        except BaseException:
            self._table.forget(self.correlation_id)
            raise

    async def result(self) -> ReceivedMessage:
        """The reply; RequestTimeout when none came within the timeout."""
        with anyio.move_on_after(max(self.deadline - anyio.current_time(), 0)):
            await self.sent()
            await self._done.wait()
        if self._reply is None:
            self._table.forget(self.correlation_id)
            raise RequestTimeout(
                f"send request message to <{self.topic}> OK, but wait reply message timeout, "
                f"{int(self.timeout * 1000)} ms."
            )
        return self._reply

    def _complete(self, reply: ReceivedMessage) -> None:
        self._reply = reply
        self._done.set()


class ReplyTable:
    """Correlation id -> the request waiting for its reply (RequestFutureTable), per client instance."""

    def __init__(self) -> None:
        self._waiting: dict[str, RequestHandle] = {}
        self.unmatched = 0  # replies that found no request waiting

    def __len__(self) -> int:
        return len(self._waiting)

    def open(self, correlation_id: str, topic: str, timeout: float) -> RequestHandle:
        self._scan()
        handle = RequestHandle(self, correlation_id, topic, timeout)
        self._waiting[correlation_id] = handle
        return handle

    def forget(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    def _scan(self) -> None:
        now = anyio.current_time()
        for cid, handle in list(self._waiting.items()):
            if handle.deadline + SCAN_SLACK <= now:
                del self._waiting[cid]

    def receive(self, command: RemotingCommand) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT (ClientRemotingProcessor#receiveReplyMessage): SUCCESS, also
        for a reply no request waits for (logged); SYSTEM_ERROR for one that cannot be read."""
        try:
            message = reply_from_push(command, int(time.time() * 1000))
        except (CommandError, ValueError, zlib.error) as exc:
            log.warning("unknown err when receiveReplyMsg: %s", exc)
            return response_to(command, ResponseCode.SYSTEM_ERROR, "process reply message fail")
        cid = message.properties.get(CORRELATION_ID, "")
        handle = self._waiting.pop(cid, None)
        if handle is None:
            self.unmatched += 1
            log.warning(
                "receive reply message, but not matched any request, CorrelationId: %s , "
                "reply from host: %s",
                cid,
                message.born_host[0],
            )
        else:
            handle._complete(message)
        self._scan()
        return response_to(command, ResponseCode.SUCCESS)


def _host(text: str | None) -> tuple[str, int]:
    """`/ip:port` (or `name/ip:port`) as the broker writes bornHost and storeHost."""
    if not text:
        return ("0.0.0.0", 0)
    host, _, port = text.rpartition("/")[2].rpartition(":")
    return (host, int(port))


def reply_from_push(command: RemotingCommand, received_at: int) -> ReceivedMessage:
    """The reply a PUSH_REPLY_MESSAGE_TO_CLIENT carries (ReplyMessageRequestHeader), ARRIVE_TIME added."""
    h = ReplyMessageRequestHeader.of(command)
    topic, sys_flag = h.topic, h.sys_flag
    body = command.body
    if sys_flag & FLAG_COMPRESSED:
        body = zlib.decompress(body)
    properties = decode_properties(h.properties or "")
    properties[ARRIVE_TIME] = str(received_at)
    return ReceivedMessage(
        topic=topic,
        body=body,
        properties=properties,
        queue=MessageQueue(topic, "", h.queue_id),
        queue_offset=0,
        commit_log_offset=0,
        offset_msg_id="",
        reconsume_times=h.reconsume_times or 0,
        flag=h.flag,
        sys_flag=sys_flag,
        born_timestamp=h.born_timestamp,
        store_timestamp=h.store_timestamp,
        born_host=_host(h.born_host),
        store_host=_host(h.store_host),
    )


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply to send with `Producer.send_reply`: its topic and message."""

    topic: str
    message: Message

    @property
    def properties(self) -> Mapping[str, str]:
        return self.message.properties


def reply(request: ReceivedMessage, body: bytes) -> Reply:
    """The reply to a request, as MessageUtil.createReplyMessage builds it.

    The topic is the request's cluster's reply topic (its CLUSTER property, set
    by the broker that stored it); CORRELATION_ID, REPLY_TO_CLIENT and TTL are
    copied, MSG_TYPE is `reply`. ValueError when the request has no CLUSTER.
    """
    cluster = request.properties.get(CLUSTER)
    if cluster is None:
        raise ValueError(
            f"create reply message fail, requestMessage error, property[{CLUSTER}] is null."
        )
    props = {MSG_TYPE: REPLY_FLAG}
    for name in (CORRELATION_ID, REPLY_TO_CLIENT, TTL):
        value = request.properties.get(name)
        if value is not None:
            props[name] = value
    return Reply(reply_topic(cluster), Message(body, properties=props))
