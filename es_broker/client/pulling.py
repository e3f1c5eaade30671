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
from es_broker.remoting.pull_flags import PULL_COMMIT_OFFSET


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
    fields = {
        "consumerGroup": request.group,
        "topic": mq.topic,
        "queueId": mq.queue_id,
        "queueOffset": request.offset,
        "maxMsgNums": settings.pull_batch_size,
        "sysFlag": sys_flag,
        "commitOffset": request.commit_offset,
        "suspendTimeoutMillis": settings.broker_suspend_max_time_millis,
        "subscription": request.expression,
        "subVersion": sub.sub_version,
        "expressionType": sub.expression_type,
    }
    response = await instance.invoke(
        found.addr,
        instance.request(RequestCode.PULL_MESSAGE, fields),
        settings.consumer_timeout_when_suspend,
    )
    status = PULL_STATUS.get(response.code)
    if status is None:
        raise BrokerRefused(response.code, response.remark, found.addr)
    min_offset, max_offset = (
        response.require_long("minOffset"),
        response.require_long("maxOffset"),
    )
    messages: tuple[ReceivedMessage, ...] = ()
    if status == PullStatus.FOUND:
        messages = tuple(
            decode_pull_body(response.body, mq, frozenset(sub.tags_set), min_offset, max_offset)
        )
    return PullResult(
        status,
        response.require_long("nextBeginOffset"),
        min_offset,
        max_offset,
        response.get_long("suggestWhichBrokerId", 0) or 0,
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
    extra: dict[str, object],
    timeout: float,
) -> int:
    """GET_MIN_OFFSET, GET_MAX_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP, from the master only (B-49)."""
    addr = instance.find_broker_address_in_publish(mq.broker_name)
    if addr is None:
        await instance.update_route(mq.topic)
        addr = instance.find_broker_address_in_publish(mq.broker_name)
    if addr is None:
        raise ClientError(f"The broker[{mq.broker_name}] not exist")
    fields = {"topic": mq.topic, "queueId": mq.queue_id, **extra}
    response = await instance.invoke(addr, instance.request(code, fields), timeout)
    if response.code != ResponseCode.SUCCESS:
        raise BrokerRefused(response.code, response.remark, addr)
    return response.require_long("offset")
