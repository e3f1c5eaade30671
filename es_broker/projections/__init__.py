"""State derived from the record log, applied in the log's own write transaction."""

from es_broker.projections.commitlog import CommitLogProjection
from es_broker.projections.consume_queue import ConsumeQueueProjection
from es_broker.projections.offsets import OffsetTableProjection
from es_broker.projections.subscription_groups import SubscriptionGroupProjection
from es_broker.projections.topics import TopicConfigProjection


def all_projections() -> list:
    """Every LMDB projection, in the order they are applied."""
    return [
        CommitLogProjection(),
        ConsumeQueueProjection(),
        OffsetTableProjection(),
        TopicConfigProjection(),
        SubscriptionGroupProjection(),
    ]


__all__ = [
    "CommitLogProjection",
    "ConsumeQueueProjection",
    "OffsetTableProjection",
    "SubscriptionGroupProjection",
    "TopicConfigProjection",
    "all_projections",
]
