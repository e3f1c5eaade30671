"""Retry and dead-letter topics and the dead-letter threshold (B-25, B-91, B-95, B-103, S-10).

Shared by the send path (a SEND to `%RETRY%G`, docs/protocol.md §7.2.1 step 5)
and the broker's send-back (B-90). Helpers that may create a topic run inside
a job and append the creation record themselves.
"""

from __future__ import annotations

from es_broker.commands import names, topics
from es_broker.log import AppendContext
from es_broker.projections.topics import PERM_READ, PERM_WRITE
from es_broker.remoting.bodies import SubscriptionGroupConfig, TopicConfig
from es_broker.store import Store

PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DLQ_NUMS_PER_GROUP = 1  # AbstractSendMessageProcessor.DLQ_NUMS_PER_GROUP (B-02)
RETRY_PERM = PERM_READ | PERM_WRITE


def group_of_retry_topic(topic: str) -> str:
    return topic[len(names.RETRY_PREFIX) :]


def ensure_topic(
    store: Store, ctx: AppendContext, topic: str, queue_nums: int, perm: int, requester: str
) -> tuple[TopicConfig, bool]:
    """createTopicInSendMessageBackMethod: the existing config (whatever its perm), else a new one, recorded.

    Returns (config, created).
    """
    config = store.topics.get(ctx.txn, topic)
    if config is not None:
        return config, False
    created = TopicConfig(topic, queue_nums, queue_nums, perm)
    return topics.auto_create_topic(store, ctx, created, requester), True


def ensure_dlq_topic(
    store: Store, ctx: AppendContext, group: str, requester: str
) -> tuple[TopicConfig, bool]:
    """`%DLQ%G`: 1 queue and perm `dlq_topic_perm` when created; an existing one keeps its perm (B-103)."""
    return ensure_topic(
        store,
        ctx,
        names.dlq_topic(group),
        DLQ_NUMS_PER_GROUP,
        store.config.dlq_topic_perm,
        requester,
    )


def max_reconsume_times(group_config: SubscriptionGroupConfig, from_header: int | None) -> int:
    """The header's value when the client sent one (version >= V3_4_9), else the group's retryMaxTimes (B-91)."""
    return group_config.retry_max_times if from_header is None else from_header


def send_path_dead_letters(store: Store, reconsume_times: int, max_times: int) -> bool:
    """Whether a SEND to `%RETRY%G` is diverted to `%DLQ%G` (B-95).

    RocketMQ tests the header's reconsumeTimes, which the client fallback already
    incremented, with >=; so the fallback dead-letters one delivery earlier than
    the broker path. strict_retry_config (S-10) uses one threshold for both
    paths: the incremented count must exceed max.
    """
    if store.config.strict_retry_config:
        return reconsume_times > max_times
    return reconsume_times >= max_times
