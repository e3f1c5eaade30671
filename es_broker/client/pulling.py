"""Pulling a queue: one PULL_MESSAGE and its answer (Java PullAPIWrapper), and offset queries.

Shared by the push consumers and the lite pull consumer: each decides what to
put in the request (flags, commit offset, expression, broker id); this module
finds the broker, sends the request, and reads the answer (B-65, B-117, B-118).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from es_broker.client.instance import ClientInstance
from es_broker.client.messages import ReceivedMessage, decode_pull_body
from es_broker.client.send_tries import BrokerRefused, ClientError
from es_broker.remoting.bodies import MessageQueue, SubscriptionData
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.header_fields import CustomHeader
from es_broker.remoting.headers import (
    PullMessageRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
)
from es_broker.remoting.pull_flags import PULL_COMMIT_OFFSET
from es_broker.remoting.response_headers import OffsetResponseHeader, PullMessageResponseHeader


class PullStatus(Enum):
    """The client's reading of a pull response code (B-65)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    messages: tuple[ReceivedMessage, ...] = ()


class PullSettings(Protocol):
    """The pull settings a consumer's config has (the push and lite pull configs both do)."""

    @property
    def pull_batch_size(self) -> int: ...  # pullBatchSize: maxMsgNums

    @property
    def broker_suspend_max_time_millis(self) -> int: ...  # how long the broker holds a pull

    @property
    def consumer_timeout_when_suspend(self) -> float: ...  # how long the client waits for it

    @property
    def pull_time_delay_when_exception(self) -> float: ...

    @property
    def pull_time_delay_when_broker_flow_control(self) -> float: ...


@dataclass(frozen=True, slots=True)
class PullRequest:
    """What one PULL_MESSAGE asks (PullMessageRequestHeader); the broker is found from the queue."""

    group: str
    mq: MessageQueue
    sub: SubscriptionData
    offset: int
    sys_flag: int
    expression: str | None
    commit_offset: int = 0
    broker_id: int = 0


async def pull_message(
    instance: ClientInstance, request: PullRequest, settings: PullSettings
) -> PullResult:
    """Send one PULL_MESSAGE to the queue's broker (refreshing the route once) and read the answer.

    A slave never stores a piggybacked commit offset, so the flag is cleared for one (B-118).
    """
    mq, sub = request.mq, request.sub
    found = instance.find_broker_address_in_subscribe(mq.broker_name, request.broker_id, False)
    if found is None:
        await instance.update_route(mq.topic)
        found = instance.find_broker_address_in_subscribe(mq.broker_name, request.broker_id, False)
    if found is None:
        raise ClientError(f"The broker[{mq.broker_name}] not exist")
    sys_flag = request.sys_flag
    if found.slave:
        sys_flag &= ~PULL_COMMIT_OFFSET
    header = PullMessageRequestHeader(
        consumer_group=request.group,
        topic=mq.topic,
        queue_id=mq.queue_id,
        queue_offset=request.offset,
        max_msg_nums=settings.pull_batch_size,
        sys_flag=sys_flag,
        commit_offset=request.commit_offset,
        suspend_timeout_millis=settings.broker_suspend_max_time_millis,
        subscription=request.expression,
        sub_version=sub.sub_version,
        expression_type=sub.expression_type,
    )
    response = await instance.invoke(
        found.addr,
        instance.request(RequestCode.PULL_MESSAGE, header),
        settings.consumer_timeout_when_suspend,
    )
    status = PULL_STATUS.get(response.code)
    if status is None:
        raise BrokerRefused(response.code, response.remark, found.addr)
    answer = PullMessageResponseHeader.of(response)
    min_offset, max_offset = answer.min_offset, answer.max_offset
    messages: tuple[ReceivedMessage, ...] = ()
    if status == PullStatus.FOUND:
        messages = tuple(
            decode_pull_body(response.body, mq, frozenset(sub.tags_set), min_offset, max_offset)
        )
    return PullResult(
        status,
        answer.next_begin_offset,
        min_offset,
        max_offset,
        answer.suggest_which_broker_id or 0,
        messages,
    )


def pull_retry_delay(exc: Exception, settings: PullSettings) -> float:
    """How long a pull task waits after a failed pull: shorter for the broker's flow control."""
    if isinstance(exc, BrokerRefused) and exc.code == ResponseCode.FLOW_CONTROL:
        return settings.pull_time_delay_when_broker_flow_control
    return settings.pull_time_delay_when_exception


async def query_offset(
    instance: ClientInstance,
    mq: MessageQueue,
    code: int,
    timestamp: int | None,
    timeout: float,
) -> int:
    """GET_MIN_OFFSET, GET_MAX_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP (at `timestamp`), from the
    master only (B-49)."""
    addr = instance.find_broker_address_in_publish(mq.broker_name)
    if addr is None:
        await instance.update_route(mq.topic)
        addr = instance.find_broker_address_in_publish(mq.broker_name)
    if addr is None:
        raise ClientError(f"The broker[{mq.broker_name}] not exist")
    header: CustomHeader = TopicQueueRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
    if timestamp is not None:
        header = SearchOffsetRequestHeader(
            topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp
        )
    response = await instance.invoke(addr, instance.request(code, header), timeout)
    if response.code != ResponseCode.SUCCESS:
        raise BrokerRefused(response.code, response.remark, addr)
    return OffsetResponseHeader.of(response).offset
