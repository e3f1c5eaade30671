"""Rebalance (Java RebalanceImpl): which queues of a topic this client takes, and where it starts.

Shared by the push consumers and the lite pull consumer; each keeps its own
table of held queues and applies the allocation to it (B-44, B-45, B-50..B-56).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from es_broker.client.allocate import allocate_averagely
from es_broker.client.instance import ClientInstance
from es_broker.client.messages import RETRY_PREFIX
from es_broker.client.offset_store import OffsetStore, ReadOffsetType
from es_broker.client.subscription import ConsumeFromWhere, MessageModel, parse_consume_timestamp
from es_broker.remoting.bodies import MessageQueue
from es_broker.remoting.codes import RequestCode

log = logging.getLogger(__name__)

# GET_MAX_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP of a queue at its master
# GET_MIN/MAX_OFFSET, or SEARCH_OFFSET_BY_TIMESTAMP at a timestamp (None for the others)
PositionQuery = Callable[[MessageQueue, int, int | None], Awaitable[int]]


async def allocate_queues(
    instance: ClientInstance,
    group: str,
    message_model: MessageModel,
    topic: str,
    subscribe_info: Mapping[str, frozenset[MessageQueue]],
) -> set[MessageQueue] | None:
    """The topic's queues this client takes now, or None to keep the current allocation (B-50).

    BROADCASTING takes every queue; CLUSTERING divides them averagely over the
    group's clients. The route is fetched first if no queue of the topic is known
    (e.g. %RETRY%G, created by the client's first heartbeat).
    """
    mq_set = subscribe_info.get(topic)
    if not mq_set:
        await instance.update_route(topic)
        mq_set = subscribe_info.get(topic)
    if mq_set is None:
        return None
    if message_model == MessageModel.BROADCASTING:
        return set(mq_set)
    cid_all = await instance.find_consumer_id_list(topic, group)
    if cid_all is None:
        return None
    try:
        return set(allocate_averagely(instance.client_id, sorted(mq_set), sorted(cid_all)))
    except ValueError as exc:
        log.info("rebalance of %s for %s skipped: %s", topic, group, exc)
        return None


async def compute_pull_from_where(
    offset_store: OffsetStore,
    mq: MessageQueue,
    where: ConsumeFromWhere,
    consume_timestamp: str,
    position: PositionQuery,
    *,
    read_type: ReadOffsetType,
    retry_at_timestamp_from_max: bool = True,
) -> int:
    """The B-45 table: the stored offset, else where the group starts; -1 means skip for now.

    `retry_at_timestamp_from_max`: a retry topic of a CONSUME_FROM_TIMESTAMP
    group starts at its max offset (RebalancePushImpl), else at 0.
    """
    last = await offset_store.read_offset(mq, read_type)
    if last >= 0:
        return last
    if last != -1:
        return -1
    is_retry = mq.topic.startswith(RETRY_PREFIX)
    if where == ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return 0
    if where == ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        if not is_retry:
            return await position(
                mq,
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                parse_consume_timestamp(consume_timestamp),
            )
        if retry_at_timestamp_from_max:
            return await position(mq, RequestCode.GET_MAX_OFFSET, None)
    return 0 if is_retry else await position(mq, RequestCode.GET_MAX_OFFSET, None)
