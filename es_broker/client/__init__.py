"""A RocketMQ 4.x client on anyio (asyncio or trio), over the wire protocol only.

`Producer` and `PushConsumer` are the Java client's DefaultMQProducer and
DefaultMQPushConsumer; `OrderlyPushConsumer` is the push consumer with a
MessageListenerOrderly; `LitePullConsumer` is DefaultLitePullConsumer;
`selectors.by_hash` is SelectMessageQueueByHash; `Producer.request` is
DefaultMQProducer#request and `reply(request, body)` MessageUtil.createReplyMessage
(send it with `Producer.send_reply`); `SyncProducer` blocks for
scripts; `admin.Admin` is what mqadmin does. `Credentials(access_key, secret_key)` given to any of them
signs every request they send (RocketMQ's ACL).
"""

from es_broker.acl.signing import Credentials
from es_broker.client.async_send import SendHandle
from es_broker.client.config import ClientConfig, ProducerConfig, PushConsumerConfig
from es_broker.client.consumer import ConsumeFromWhere, ConsumeResult, MessageModel, PushConsumer
from es_broker.client.instance import ClientInstance
from es_broker.client.lite_pull import LitePullConsumer, LitePullConsumerConfig
from es_broker.client.message_selector import MessageSelector
from es_broker.client.messages import Message, ReceivedMessage, SendResult, SendStatus
from es_broker.client.orderly import (
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    OrderlyConfig,
    OrderlyPushConsumer,
)
from es_broker.client.producer import Producer
from es_broker.client.request_reply import Reply, RequestHandle, RequestTimeout, reply
from es_broker.client.selectors import by_hash, by_queue_id
from es_broker.client.send_tries import BrokerRefused, ClientError
from es_broker.client.sync import SyncProducer
from es_broker.remoting.bodies import MessageQueue

__all__ = [
    "BrokerRefused",
    "ClientConfig",
    "ClientError",
    "ClientInstance",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeResult",
    "Credentials",
    "LitePullConsumer",
    "LitePullConsumerConfig",
    "Message",
    "MessageModel",
    "MessageSelector",
    "MessageQueue",
    "OrderlyConfig",
    "OrderlyPushConsumer",
    "ProducerConfig",
    "Producer",
    "PushConsumer",
    "PushConsumerConfig",
    "ReceivedMessage",
    "Reply",
    "RequestHandle",
    "RequestTimeout",
    "SendHandle",
    "SendResult",
    "SendStatus",
    "SyncProducer",
    "by_hash",
    "by_queue_id",
    "reply",
]
