"""One send's attempts and the answer they end with, shared by every producer.

The async Producer (`producer.py`), its pipelined sends (`async_send.py`) and the
blocking SyncProducer (`sync.py`) all send through these: which failures are
worth another queue (Java's DefaultMQProducerImpl#sendDefaultImpl), the error
once none is left, and the SendResult of a broker's answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from es_broker.client.config import ProducerConfig
from es_broker.client.messages import SendResult, SendStatus
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.bodies import MessageQueue
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.response_headers import SendMessageResponseHeader


class SelectsQueues(Protocol):
    """What SendTries needs of its producer: its settings and its queue choice."""

    config: ProducerConfig

    def select_queue(
        self, topic: str, queues: Sequence[MessageQueue], last_broker: str | None
    ) -> MessageQueue: ...


QueueSelector = Callable[[Sequence[MessageQueue]], MessageQueue]

# Broker refusals Java retries on another queue (DefaultMQProducerImpl#sendDefaultImpl).
RETRY_RESPONSE_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
    }
)
#: the send answers that mean stored, and the SendStatus each is (MQClientAPIImpl#processSendResponse)
STORED_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


class ClientError(Exception):
    """The client could not do what was asked (no route, no broker, bad argument)."""


class BrokerRefused(ClientError):
    """A broker answered a request with an error code (Java MQBrokerException)."""

    def __init__(self, code: int, remark: str | None, addr: str = "") -> None:
        super().__init__(f"CODE: {code} DESC: {remark} BROKER: {addr}")
        self.code = code
        self.remark = remark


def worth_another_try(exc: Exception) -> bool:
    """Whether a failed attempt is tried again on another queue (DefaultMQProducerImpl#sendDefaultImpl).

    A connection failure or timeout, a refusal Java retries on, or a client-side
    failure such as the broker's address vanishing from the route.
    """
    if isinstance(exc, BrokerRefused):
        return exc.code in RETRY_RESPONSE_CODES
    return isinstance(exc, RemotingError | ClientError)


def send_failed(attempts: int, topic: str, last_error: Exception | None) -> ClientError:
    """The error of a send whose every attempt failed (raise it `from last_error`)."""
    return ClientError(f"Send [{attempts}] times, still failed, topic {topic}: {last_error}")


class SendTries:
    """One send's attempts, for the async Producer and the blocking SyncProducer alike.

    How many (1 + retryTimesWhenSendFailed, one for a oneway send), which queue
    each goes to (round robin, another broker after a failure), which failures
    are worth another try, and the error once none is left.
    """

    def __init__(
        self,
        producer: SelectsQueues,
        topic: str,
        queues: Sequence[MessageQueue],
        oneway: bool,
        select_lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.queues = queues
        self.attempts = 1 if oneway else 1 + producer.config.retry_times_when_send_failed
        self.made = 0
        self.mq: MessageQueue | None = None
        self.last_error: Exception | None = None
        self._select_lock = select_lock or contextlib.nullcontext()

    def next_queue(self, expired: bool) -> MessageQueue | None:
        """The queue of the next attempt; None once the attempts, the time or the queues are used up.

        `queues` may be replaced between attempts by the route read again (B-540).
        """
        if expired or self.made >= self.attempts or not self.queues:
            return None
        self.made += 1
        last_broker = self.mq.broker_name if self.mq else None
        with self._select_lock:
            self.mq = self.producer.select_queue(self.topic, self.queues, last_broker)
        return self.mq

    def keep_going(self, exc: Exception) -> bool:
        """An attempt failed with exc: True if another is worth it (exc is kept for the end)."""
        if not worth_another_try(exc):
            return False
        self.last_error = exc
        return True

    def exhausted(self) -> ClientError:
        """The error of a send whose every attempt failed (raise it `from last_error`)."""
        if not self.queues:  # the route read again after a failure has no writable queue
            return ClientError(
                f"No route info of this topic: {self.topic}, after: {self.last_error}"
            )
        return send_failed(self.attempts, self.topic, self.last_error)


def send_result(mq: MessageQueue, response: RemotingCommand, addr: str, msg_id: str) -> SendResult:
    """The SendResult of a broker's answer; BrokerRefused unless it stored the message."""
    status = STORED_STATUS.get(response.code)
    if status is None:
        raise BrokerRefused(response.code, response.remark, addr)
    stored = SendMessageResponseHeader.of(response)
    queue_id = mq.queue_id if stored.queue_id is None else stored.queue_id
    return SendResult(
        status=status,
        msg_id=msg_id,
        offset_msg_id=stored.msg_id or "",
        queue=MessageQueue(mq.topic, mq.broker_name, queue_id or 0),
        queue_offset=stored.queue_offset or 0,
        region_id=stored.msg_region,
    )
