"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): store a reply, push it to its requester.

4.9.8's ReplyMessageProcessor pushes, then stores (storeReplyMessageEnable);
here the reply is stored first, so the decision has a recorded time to read
(commands/reply.py), then pushed with PUSH_REPLY_MESSAGE_TO_CLIENT (326) on
the channel the requester registered its producer from (ProducerManager's
findChannel), and the outcome recorded in one `reply_pushed` record before
the replier is answered: SUCCESS when the requester took it, else
SYSTEM_ERROR with the reason (B-325..B-334).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from es_broker.commands import reply
from es_broker.commands.messages import PutRequest
from es_broker.commands.placement import MessageIn, PutResult
from es_broker.core.broker import Broker
from es_broker.log.types import ReplyPushed
from es_broker.net.channel import Channel, ChannelClosed
from es_broker.remoting import message as wire
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request, response_to
from es_broker.remoting.errors import MissingField
from es_broker.remoting.headers import SendMessageRequestHeader
from es_broker.remoting.reply_properties import (
    CORRELATION_ID,
    PUSH_REPLY_TIME,
    REPLY_TO_CLIENT,
    TTL,
)
from es_broker.remoting.response_headers import SendMessageResponseHeader
from es_broker.server.clients import ClientRegistry
from es_broker.server.edge.remoting_server import Handler
from es_broker.server.processors.common import ipv4

log = logging.getLogger(__name__)

PUSH_TIMEOUT = 10.0  # s: Broker2Client#callClient's timeout


class ReplyProcessors:
    def __init__(
        self,
        broker: Broker,
        clients: ClientRegistry,
        requester: Callable[[Channel], str],
        on_stored: Callable[[PutResult], None],
    ) -> None:
        self.broker = broker
        self.clients = clients
        self.requester = requester
        self.on_stored = on_stored
        self.requests = reply.RequestTable()

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.SEND_REPLY_MESSAGE: self.send_reply,
            RequestCode.SEND_REPLY_MESSAGE_V2: self.send_reply,
        }

    def note_sent(self, batch: list[MessageIn], result: PutResult) -> None:
        """The send path's hook: remember a stored request for its reply."""
        self.requests.note(batch, result)

    def channel_of(self, client_id: str) -> Channel | None:
        """The open channel a producer of that client id registered from (findChannel)."""
        for members in self.clients.producers.values():
            for channel, info in members.items():
                if info.client_id == client_id and not channel.closed:
                    return channel
        return None

    async def send_reply(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = SendMessageRequestHeader.of(req)
        if h.flag is None:
            raise MissingField("flag")
        props = wire.decode_properties(h.properties or "")
        born_host = ipv4(channel.remote)
        message = MessageIn(
            req.body, props, h.flag, h.sys_flag, h.born_timestamp, born_host, h.reconsume_times or 0
        )
        requester = self.requester(channel)
        group = h.producer_group or ""
        result = await self.broker.put(
            PutRequest(
                h.topic,
                h.queue_id,
                [message],
                requester,
                group,
                h.default_topic,
                h.default_topic_queue_nums or 4,
            )
        )
        self.on_stored(result)
        correlation_id = props.get(CORRELATION_ID, "")
        reply_to = props.get(REPLY_TO_CLIENT, "")
        ttl = reply.parse_ttl(props.get(TTL))
        found = self.requests.take(correlation_id) if correlation_id else None
        born = found.born if found is not None else h.born_timestamp
        stored_at = result.store_timestamp
        deadline, reason = reply.judge(reply_to, ttl, born, stored_at)
        push_code: int | None = None
        push_remark: str | None = None
        pushed_at: int | None = None
        if reason is None:
            target = self.channel_of(reply_to)
            if target is None:
                reason = reply.CLIENT_GONE
            else:
                pushed_at = self.broker.store.clock.now_ms()
                push_code, push_remark = await self._push(
                    target, req, h, props, born_host, stored_at, pushed_at
                )
                if push_code != ResponseCode.SUCCESS:
                    reason = reply.PUSH_FAILED
        record = ReplyPushed(
            correlation_id=correlation_id,
            reply_to=reply_to,
            reply_topic=result.topic,
            reply_queue_id=result.queue_id,
            reply_phy=result.physical_offsets[0],
            reply_msg_id=result.msg_ids[0],
            reply_stored_at=stored_at,
            ttl_ms=ttl,
            request_phy=found.phy if found is not None else None,
            request_msg_id=found.msg_id if found is not None else None,
            deadline=deadline,
            outcome=reply.PUSHED if reason is None else reply.UNDELIVERABLE,
            reason=reason,
            push_code=push_code,
            push_remark=push_remark,
            pushed_at=pushed_at,
            producer_group=group,
            requester=requester,
        )
        await self.broker.submit(reply.record_job(self.broker.store, record))
        code, text = ResponseCode.SUCCESS, None
        if reason is not None:
            code, text = (
                ResponseCode.SYSTEM_ERROR,
                reply.remark(reason, reply_to, deadline, stored_at),
            )
            log.warning("reply %s: %s", correlation_id, text)
        header = SendMessageResponseHeader.stored(
            result.msg_ids[0], result.answer_queue_id, result.queue_offset
        )
        return response_to(req, code, text, header)

    async def _push(
        self,
        target: Channel,
        req: RemotingCommand,
        h: SendMessageRequestHeader,
        props: dict[str, str],
        born_host: tuple[str, int],
        stored_at: int,
        pushed_at: int,
    ) -> tuple[int | None, str | None]:
        """PUSH_REPLY_MESSAGE_TO_CLIENT with the reply as sent (body and properties, PUSH_REPLY_TIME
        added); the client's answer code and remark, (None, reason) when it gave none."""
        config = self.broker.config
        header = reply.push_header(
            h,
            wire.encode_properties({**props, PUSH_REPLY_TIME: str(pushed_at)}).decode(),
            born_host,
            (config.brokerIP1, config.listenPort),
            stored_at,
        )
        command = request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, header, req.body)
        try:
            answer = await target.invoke(command, timeout=PUSH_TIMEOUT)
        except TimeoutError:
            return None, f"no answer in {PUSH_TIMEOUT:g} s"
        except (ChannelClosed, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            return None, f"the channel closed: {type(exc).__name__}"
        return answer.code, answer.remark
