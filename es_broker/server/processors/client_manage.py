"""Clients coming and going, and their queue locks (4.9.8's ClientManageProcessor).

HEART_BEAT, UNREGISTER_CLIENT and CHECK_CLIENT_CONFIG as in 4.9.8, and the
orderly consumers' LOCK_BATCH_MQ and UNLOCK_BATCH_MQ, which 4.9.8 serves in
AdminBrokerProcessor: here they sit with what else releases those locks (an
unregistered client, a closed connection, the expiry pass, B-142..B-147).
"""

from __future__ import annotations

from typing import Any

import trio

from es_broker.commands import names, sql92
from es_broker.commands.queue_locks import QueueLocks
from es_broker.config import BrokerRole
from es_broker.core.broker import Broker
from es_broker.net.channel import Channel
from es_broker.remoting import fastjson, requests
from es_broker.remoting.bodies import (
    CheckClientRequestBody,
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.headers import UnregisterClientRequestHeader
from es_broker.server.clients import ClientRegistry
from es_broker.server.edge.remoting_server import Handler
from es_broker.server.processors.common import BrokerSettings, Requester, TopicsChanged
from es_broker.server.processors.subscription import (
    compile_selector,
    is_tag_type,
    parse_subscription,
    property_filter_refusal,
    shortened,
)

LOCK_EXPIRY_PERIOD = 10.0  # s between passes releasing lapsed queue locks (at most lockMaxLiveTime)


def _consumer_dict(consumer: ConsumerData) -> dict[str, Any]:
    """A heartbeat's consumer as the client registry keeps it: Java's fields, enums by name."""
    data: dict[str, Any] = fastjson.loads(consumer.encode())
    for key, value, choices in (
        ("consumeFromWhere", consumer.consume_from_where, requests.CONSUME_FROM_WHERE),
        ("messageModel", consumer.message_model, requests.MESSAGE_MODEL),
        ("consumeType", consumer.consume_type, requests.CONSUME_TYPE),
    ):
        data[key] = requests.enum_name(value, choices) or value
    return data


class ClientManageProcessor(BrokerSettings):
    """Heartbeats register producers and consumers (creating a new group and its retry topic),
    and orderly consumers lock their queues.

    `locks`: the queue locks, in memory, owner changes recorded; `on_topics_changed`:
    told of a retry topic a heartbeat created (registered with the name servers).
    """

    def __init__(
        self,
        broker: Broker,
        clients: ClientRegistry,
        locks: QueueLocks,
        requester: Requester,
        on_topics_changed: TopicsChanged,
    ) -> None:
        self.broker = broker
        self.clients = clients
        self.locks = locks
        self.requester = requester
        self.on_topics_changed = on_topics_changed
        self.is_slave = broker.config.brokerRole == BrokerRole.SLAVE

    def handlers(self) -> dict[int, Handler]:
        C = RequestCode
        return {
            C.HEART_BEAT: self.heartbeat,
            C.UNREGISTER_CLIENT: self.unregister_client,
            C.CHECK_CLIENT_CONFIG: self.check_client_config,
            C.LOCK_BATCH_MQ: self.lock_batch,
            C.UNLOCK_BATCH_MQ: self.unlock_batch,
        }

    async def heartbeat(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        # shape checked at the edge
        data = HeartbeatData.decode(req.body) if req.body else HeartbeatData()
        client_id = data.client_id or channel.remote_addr
        language = req.language.name
        for consumer in data.consumer_data_set:
            group = names.check_group_name(consumer.group_name)
            group_config = await self.broker.ensure_group(group, requester=client_id)
            created = await self.broker.ensure_retry_topic(
                group, group_config.retry_queue_nums, requester=client_id
            )
            if created:
                self.on_topics_changed([names.retry_topic(group)])
            self.clients.register_consumer(
                channel, client_id, language, req.version, _consumer_dict(consumer)
            )
        for producer in data.producer_data_set:
            self.clients.register_producer(
                channel, client_id, language, req.version, producer.group_name
            )
        return response_to(req, ResponseCode.SUCCESS)

    async def unregister_client(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.of(req)
        group = h.consumer_group
        self.clients.unregister(channel, group, h.producer_group)
        if group and not self.is_slave:  # its queue locks of the group go too (B-145)
            await self.locks.release_client(group, h.client_id or self.requester(channel))
        return response_to(req, ResponseCode.SUCCESS)

    async def check_client_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: a Java consumer's SQL92 subscription is compiled at start (B-214, B-215)."""
        data = CheckClientRequestBody.decode(req.body) if req.body else CheckClientRequestBody()
        sub = data.subscription_data
        if sub is None or is_tag_type(sub.expression_type):
            return response_to(req, ResponseCode.SUCCESS)
        if not self.config.enablePropertyFilter:
            raise property_filter_refusal(sub.expression_type)
        if sub.expression_type != sql92.SQL92:
            parse_subscription(sub.sub_string, sub.expression_type)  # refuses the type
        try:
            await compile_selector(sub.sub_string)
        except sql92.SelectorError as exc:
            return response_to(
                req,
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"Invalid MessageSelector [{shortened(sub.sub_string)}]: {exc}",
            )
        return response_to(req, ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ queue locks
    async def lock_batch(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """LOCK_BATCH_MQ (B-142, B-143): answers only the queues the client holds after the call."""
        data = LockBatchRequestBody.decode(req.body)  # shape checked at the edge
        # a slave records nothing of its own; orderly consumers lock at the master
        if self.is_slave:
            return response_to(req, ResponseCode.SUCCESS, body=LockBatchResponseBody().encode())
        group = names.check_group_name(data.consumer_group)
        client_id = data.client_id or self.requester(channel)  # RocketMQ takes the body's clientId
        wanted = {(mq.topic, mq.broker_name, mq.queue_id): mq for mq in data.mq_set}
        held = await self.locks.lock_batch(group, client_id, list(wanted), holder=channel)
        body = LockBatchResponseBody(tuple(wanted[q] for q in held))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def unlock_batch(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """UNLOCK_BATCH_MQ (B-144): releases the client's own queues; others' are left as they are."""
        data = UnlockBatchRequestBody.decode(req.body) if req.body else UnlockBatchRequestBody()
        if self.is_slave or not data.mq_set:
            return response_to(req, ResponseCode.SUCCESS)
        group = names.check_group_name(data.consumer_group)
        client_id = data.client_id or self.requester(channel)
        if not await self.locks.unlock_batch(
            group, client_id, [(mq.topic, mq.broker_name, mq.queue_id) for mq in data.mq_set]
        ):
            raise self.broker.disk_full_refusal()  # kept until it expires; the release is not recorded
        return response_to(req, ResponseCode.SUCCESS)

    async def channel_closed(self, channel: Channel) -> None:
        """A connection closed: its queue locks are released (B-145), unless queueLockReleaseOnClose=false."""
        if self.config.queueLockReleaseOnClose and not self.is_slave:
            await self.locks.release_holder(channel)

    async def lock_expiry_loop(self) -> None:
        """Release lapsed queue locks, so the history shows when they ended (B-146)."""
        if self.is_slave:
            return
        while True:
            await trio.sleep(min(self.locks.max_live_ms / 1000, LOCK_EXPIRY_PERIOD))
            await self.locks.expire()
