"""Request-reply (RocketMQ 4.6+; 4.9.8 ReplyMessageProcessor, MessageUtil, B-325..B-334).

A request is a message like any other: the requesting client sets
CORRELATION_ID, REPLY_TO_CLIENT (its client id) and TTL (its timeout in ms)
and sends it normally. The replier sends the reply (MSG_TYPE=reply, the three
properties copied) with SEND_REPLY_MESSAGE(_V2) to `<cluster>_REPLY_TOPIC`.
The broker stores the reply (a `messages_stored` record), then decides what
becomes of it and pushes it to the requester's channel with
PUSH_REPLY_MESSAGE_TO_CLIENT; one `reply_pushed` record holds the decision,
the requester's answer, and the link to the request.

The decision reads only recorded times: the reply's store time against its
deadline (the request's born time plus TTL when this broker stored the
request, else the reply's own born time plus TTL). A replay applies the
record; it never decides again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from es_broker.commands.placement import MessageIn, PutResult
from es_broker.log import AppendContext
from es_broker.log.types import ReplyPushed
from es_broker.remoting.headers import SendMessageRequestHeader
from es_broker.remoting.reply_properties import (
    CORRELATION_ID,
    MSG_TYPE,
    REPLY_FLAG,
    REPLY_TO_CLIENT,
    TTL,
)
from es_broker.remoting.response_headers import ReplyMessageRequestHeader
from es_broker.store import Store

PUSHED = "pushed"
UNDELIVERABLE = "undeliverable"
# why a reply was not handed to its requester
NO_REPLY_TO = "no_reply_to"  # the reply names no REPLY_TO_CLIENT
EXPIRED = "ttl"  # stored after its deadline
CLIENT_GONE = "client_gone"  # no producer channel of that client id
PUSH_FAILED = "push_failed"  # the client answered an error, or did not answer

MAX_OPEN_REQUESTS = 65536  # requests remembered for their replies; the oldest go first


def parse_ttl(text: str | None) -> int | None:
    """TTL as a number of ms; None when absent or not a non-negative integer."""
    if text is None:
        return None
    try:
        ttl = int(text)
    except ValueError:
        return None
    return ttl if ttl >= 0 else None


def is_request(properties: Mapping[str, str]) -> bool:
    """A request: CORRELATION_ID and REPLY_TO_CLIENT, and not itself a reply."""
    return (
        CORRELATION_ID in properties
        and REPLY_TO_CLIENT in properties
        and properties.get(MSG_TYPE) != REPLY_FLAG
    )


@dataclass(frozen=True, slots=True)
class OpenRequest:
    """A request this broker stored: where, and when it was born."""

    phy: int
    msg_id: str
    born: int
    ttl: int | None


class RequestTable:
    """Correlation id -> the request this broker stored, in memory (the broker-side RequestFutureTable).

    Only a link and a born time for the reply's record: a reply whose request
    is not here (stored by another broker, or before a restart) is judged by
    its own born time and recorded without the link.
    """

    def __init__(self, limit: int = MAX_OPEN_REQUESTS) -> None:
        self.limit = limit
        self._open: dict[str, OpenRequest] = {}

    def __len__(self) -> int:
        return len(self._open)

    def note(self, batch: list[MessageIn], result: PutResult) -> None:
        """Remember a stored request (a single message carrying the request properties)."""
        if len(batch) != 1 or result.real_topic is not None:
            return
        props = batch[0].properties
        if not is_request(props):
            return
        while len(self._open) >= self.limit:
            del self._open[next(iter(self._open))]
        msg = batch[0]
        self._open[props[CORRELATION_ID]] = OpenRequest(
            result.physical_offsets[0],
            result.msg_ids[0],
            msg.born_timestamp,
            parse_ttl(props.get(TTL)),
        )

    def take(self, correlation_id: str) -> OpenRequest | None:
        return self._open.pop(correlation_id, None)


def judge(
    reply_to: str, ttl: int | None, born: int, stored_at: int
) -> tuple[int | None, str | None]:
    """(deadline, reason it cannot be pushed or None) from recorded values only."""
    deadline = born + ttl if ttl is not None else None
    if not reply_to:
        return deadline, NO_REPLY_TO
    if deadline is not None and stored_at > deadline:
        return deadline, EXPIRED
    return deadline, None


def remark(reason: str, reply_to: str, deadline: int | None, stored_at: int) -> str:
    """The SYSTEM_ERROR remark the replier gets (4.9.8's words where 4.9.8 has the case)."""
    if reason == NO_REPLY_TO:
        return f"reply message properties[{REPLY_TO_CLIENT}] is null"
    if reason == CLIENT_GONE:
        return f"push reply message fail, channel of <{reply_to}> not found."
    if reason == EXPIRED:
        return (
            f"push reply message to <{reply_to}> fail: its request's TTL ran out at {deadline}, "
            f"the reply was stored at {stored_at}"
        )
    return f"push reply message to {reply_to}fail."


def socket_text(host: tuple[str, int]) -> str:
    """An address as Java's InetSocketAddress#toString writes an unresolved-name literal: /ip:port."""
    return f"/{host[0]}:{host[1]}"


def push_header(
    h: SendMessageRequestHeader,
    properties: str,
    born_host: tuple[str, int],
    store_host: tuple[str, int],
    store_timestamp: int,
) -> dict[str, str]:
    """The PUSH_REPLY_MESSAGE_TO_CLIENT extFields: ReplyMessageRequestHeader's fields, in its order.

    A null field is left out, as RemotingCommand#makeCustomHeaderToNet does;
    unitMode and storeTimestamp are primitives, always written.
    """
    return ReplyMessageRequestHeader(
        producer_group=h.producer_group,
        topic=h.topic,
        default_topic=h.default_topic,
        default_topic_queue_nums=h.default_topic_queue_nums,
        queue_id=h.queue_id,
        sys_flag=h.sys_flag,
        born_timestamp=h.born_timestamp,
        flag=h.flag or 0,
        properties=properties,
        reconsume_times=h.reconsume_times,
        unit_mode=bool(h.unit_mode),
        born_host=socket_text(born_host),
        store_host=socket_text(store_host),
        store_timestamp=store_timestamp,
    ).to_fields()


def record_job(store: Store, reply: ReplyPushed) -> Callable[[AppendContext], int]:
    """The writer job appending a `reply_pushed` record at broker time; its seq."""

    def job(ctx: AppendContext) -> int:
        return ctx.append(reply.to_record(store.clock.now_ms()))

    return job
