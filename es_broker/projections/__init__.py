"""State derived from the record log, applied in the log's own write transaction."""

from es_broker.projections.audit import AuditProjection
from es_broker.projections.broker_settings import BrokerSettingsProjection
from es_broker.projections.commitlog import CommitLogProjection
from es_broker.projections.consume_queue import ConsumeQueueProjection
from es_broker.projections.delivery_schedule import DeliveryScheduleProjection
from es_broker.projections.history import HistoryProjection
from es_broker.projections.key_index import KeyIndexProjection
from es_broker.projections.message_trace import MessageTraceProjection
from es_broker.projections.offsets import OffsetTableProjection
from es_broker.projections.pop import PopProjection
from es_broker.projections.stats import StatsProjection
from es_broker.projections.store_format import StoreFormatProjection
from es_broker.projections.subscription_groups import SubscriptionGroupProjection
from es_broker.projections.time_index import TimeIndexProjection
from es_broker.projections.timer import TimerProjection
from es_broker.projections.topics import TopicConfigProjection
from es_broker.projections.transactions import TransactionProjection


def all_projections() -> tuple[
    KeyIndexProjection,
    CommitLogProjection,
    ConsumeQueueProjection,
    OffsetTableProjection,
    TopicConfigProjection,
    SubscriptionGroupProjection,
    DeliveryScheduleProjection,
    MessageTraceProjection,
    TimeIndexProjection,
    TransactionProjection,
    BrokerSettingsProjection,
    StatsProjection,
    HistoryProjection,
    AuditProjection,
    PopProjection,
    TimerProjection,
    StoreFormatProjection,
]:
    """Every LMDB projection, in the order they are applied and in the order of Store's fields."""
    return (
        # before the commit log: retention deletes the entries of the bytes it is about to delete
        KeyIndexProjection(),
        CommitLogProjection(),
        ConsumeQueueProjection(),
        OffsetTableProjection(),
        TopicConfigProjection(),
        SubscriptionGroupProjection(),
        DeliveryScheduleProjection(),
        MessageTraceProjection(),
        TimeIndexProjection(),
        TransactionProjection(),
        BrokerSettingsProjection(),
        StatsProjection(),  # after the consume queue: it reads delivered messages' sizes
        HistoryProjection(),
        AuditProjection(),  # after the time index: it reads effective times
        PopProjection(),  # RocketMQ 5's pop consumption: cursors and handles (B-580..B-599)
        TimerProjection(),  # RocketMQ 5's timer messages waiting for their time (B-589)
        StoreFormatProjection(),
    )


__all__ = [
    "AuditProjection",
    "BrokerSettingsProjection",
    "CommitLogProjection",
    "ConsumeQueueProjection",
    "DeliveryScheduleProjection",
    "HistoryProjection",
    "KeyIndexProjection",
    "MessageTraceProjection",
    "OffsetTableProjection",
    "PopProjection",
    "StatsProjection",
    "StoreFormatProjection",
    "SubscriptionGroupProjection",
    "TimeIndexProjection",
    "TimerProjection",
    "TopicConfigProjection",
    "TransactionProjection",
    "all_projections",
]
