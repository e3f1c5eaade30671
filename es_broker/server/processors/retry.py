"""Request processors for retry, delay and dead letters, and es-broker's message journey.

RocketMQ codes: CONSUMER_SEND_MSG_BACK (36, docs/protocol.md §7.4.7) and
GET_ALL_DELAY_OFFSET (45). es-broker's own codes (EsRequestCode, JSON
bodies in standard JSON, answered REQUEST_CODE_NOT_SUPPORTED by RocketMQ):

- REDRIVE_DLQ (9201): header `group`, optional `topic` (only dead letters of
  that original topic), `target` (`retry`: to `%RETRY%G`, default;
  `original`: to the original topic), `maxCount`, `dryRun`. Body: the
  re-drives (or the plan, for a dry run) and `more` when dead letters are left.
- MESSAGE_TRACE (9202): header `msgId` (offset msg id or UNIQ_KEY). Body: the
  journey (`es_broker.commands.trace.journey`); QUERY_NOT_FOUND when this
  broker never stored it.
"""

from __future__ import annotations

from collections.abc import Callable

from es_broker.commands import names, retry
from es_broker.core.broker import Broker
from es_broker.net.channel import Channel
from es_broker.remoting import message as wire
from es_broker.remoting.admin_bodies import RedriveBody, RedriveItem
from es_broker.remoting.bodies import DelayOffsetSerializeWrapper
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode, Version
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.es_headers import MessageTraceRequestHeader, RedriveDlqRequestHeader
from es_broker.remoting.headers import ConsumerSendMsgBackRequestHeader
from es_broker.remoting.query_bodies import MessageTraceBody
from es_broker.server.clients import ClientRegistry
from es_broker.server.edge.remoting_server import Handler
from es_broker.server.longpoll import PullHoldService
from es_broker.server.processors.common import ReadScope


class RetryProcessors:
    def __init__(
        self,
        broker: Broker,
        holds: PullHoldService,
        requester: Callable[[Channel], str],
        on_topics_changed: Callable[[list[str]], object],
        scope: ReadScope | None = None,
        clients: ClientRegistry | None = None,
    ) -> None:
        self.broker = broker
        self.holds = holds
        self.requester = requester
        self.on_topics_changed = on_topics_changed
        self.scope = scope or ReadScope(None)  # what the caller may use under ACL (B-502)
        self.clients = clients

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.CONSUMER_SEND_MSG_BACK: self.consumer_send_msg_back,
            RequestCode.GET_ALL_DELAY_OFFSET: self.all_delay_offset,
            EsRequestCode.REDRIVE_DLQ: self.redrive_dlq,
            EsRequestCode.MESSAGE_TRACE: self.message_trace,
        }

    def _group_topics(self, group: str) -> tuple[bool, bool]:
        return (
            self.broker.topic_config(names.retry_topic(group)) is not None,
            self.broker.topic_config(names.dlq_topic(group)) is not None,
        )

    async def consumer_send_msg_back(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK (B-90): SUCCESS with no header, or the refusal's code and remark."""
        h = ConsumerSendMsgBackRequestHeader.of(req)
        group = h.group
        max_times = h.max_reconsume_times if req.version >= Version.V3_4_9 else None
        refused = self._send_back_refusal(channel, req, group, h.offset)
        if refused is not None:
            return refused
        before = self._group_topics(group)
        try:
            result = await self.broker.send_back(
                group,
                h.offset,
                h.delay_level,
                max_reconsume_times=max_times,
                origin_msg_id=h.origin_msg_id,
                origin_topic=h.origin_topic,
                requester=self.requester(channel),
            )
        finally:
            # %RETRY%G / %DLQ%G created on the way stay, refused or not (B-25): tell the name server
            if self._group_topics(group) != before:
                self.on_topics_changed([names.retry_topic(group), names.dlq_topic(group)])
        if result.stored is not None and result.stored.real_topic is None:
            # a dead letter, stored at once
            self.holds.notify(result.stored.topic, result.stored.queue_id)
        return response_to(req, ResponseCode.SUCCESS)

    def _send_back_refusal(
        self, channel: Channel, req: RemotingCommand, group: str, offset: int
    ) -> RemotingCommand | None:
        """Under ACL, a send-back names a stored message the caller must be able to read (B-502):
        SUB on its topic (a retry topic as its group) and on the topic it was first sent to (a
        retry message's RETRY_TOPIC), which must be one the group subscribes when the broker
        knows the group's subscriptions. None: go on."""
        scope = self.scope.limited(channel, req)
        if scope is None:
            return None
        raw = self.broker.message_at(offset) if isinstance(offset, int) and offset >= 0 else None
        if raw is None:
            return None  # the job answers "look message by offset failed", naming no topic
        message = wire.decode_one(raw)[0]
        topic = message.topic
        original = topic
        if topic.startswith((names.RETRY_PREFIX, names.DLQ_PREFIX)):
            original = message.properties.get(retry.PROPERTY_RETRY_TOPIC) or topic
        what = f"the message at offset {offset}"
        # the same answer whatever the topic: the refusal names neither it nor the message
        for resource in dict.fromkeys((topic, original)):
            if not scope.may_read(resource):
                return self.scope.refuse(channel, req, scope, what, action="send back")
        known = self.clients.consumer_group(group) if self.clients is not None else None
        subscribed = known.subscriptions if known is not None else None
        if subscribed and original not in subscribed and topic != names.retry_topic(group):
            return response_to(
                req,
                ResponseCode.NO_PERMISSION,
                f"No permission to send back {what}: its topic is none that group {group} "
                "subscribes",
            )
        return None

    async def all_delay_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET: delayOffset.json's content, `{"offsetTable":{level:offset}}`."""
        body = DelayOffsetSerializeWrapper(self.broker.delay_offsets()).encode()
        return response_to(req, ResponseCode.SUCCESS, body=body)

    async def redrive_dlq(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = RedriveDlqRequestHeader.of(req)
        result = await self.broker.redrive_dlq(
            h.group,
            topic=h.topic or None,
            target=h.target or "retry",
            max_count=h.max_count,
            dry_run=bool(h.dry_run),
            requester=self.requester(channel),
        )
        for item in result.items:
            if (
                item.new_msg_id is not None
                and item.target_topic is not None
                and item.target_queue_id is not None
            ):
                self.holds.notify(item.target_topic, item.target_queue_id)
        if result.created_topics:
            self.on_topics_changed(list(result.created_topics))
        body = RedriveBody(
            group=result.group,
            target=result.target,
            dry_run=result.dry_run,
            more=result.more,
            items=tuple(
                RedriveItem(
                    dlq_queue_offset=i.dlq_queue_offset,
                    dlq_msg_id=i.dlq_msg_id,
                    physical_offset=i.physical_offset,
                    original_topic=i.original_topic,
                    target_topic=i.target_topic,
                    target_queue_id=i.target_queue_id,
                    new_msg_id=i.new_msg_id,
                    skipped=i.skipped,
                )
                for i in result.items
            ),
        )
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def message_trace(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        msg_id = MessageTraceRequestHeader.of(req).msg_id
        journey = self.broker.message_journey(msg_id)
        if not journey["found"]:
            return response_to(
                req, ResponseCode.QUERY_NOT_FOUND, f"no message {msg_id} on this broker"
            )
        return response_to(
            req, ResponseCode.SUCCESS, body=MessageTraceBody.from_journey(journey).encode()
        )
