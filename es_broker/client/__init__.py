"""A RocketMQ 4.x client in trio, over the wire protocol only.

`Producer` and `PushConsumer` are the Java client's DefaultMQProducer and
DefaultMQPushConsumer; `SyncProducer` blocks for scripts; `admin.Admin` is
what mqadmin does. `Credentials(access_key, secret_key)` given to any of them
signs every request they send (RocketMQ's ACL).
"""

from es_broker.acl.signing import Credentials
from es_broker.client.config import ClientConfig, ProducerConfig, PushConsumerConfig
from es_broker.client.consumer import ConsumeFromWhere, ConsumeResult, MessageModel, PushConsumer
from es_broker.client.instance import ClientInstance
from es_broker.client.messages import Message, ReceivedMessage, SendResult, SendStatus
from es_broker.client.producer import BrokerRefused, ClientError, Producer
from es_broker.client.selector import MessageSelector
from es_broker.client.sync import SyncProducer
from es_broker.remoting.bodies import MessageQueue

__all__ = [
    "BrokerRefused",
    "ClientConfig",
    "ClientError",
    "ClientInstance",
    "ConsumeFromWhere",
    "ConsumeResult",
    "Credentials",
    "Message",
    "MessageModel",
    "MessageSelector",
    "MessageQueue",
    "ProducerConfig",
    "Producer",
    "PushConsumer",
    "PushConsumerConfig",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "SyncProducer",
]
