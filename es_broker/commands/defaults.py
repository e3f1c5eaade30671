"""The topics and subscription groups a master holds from its first start, as 4.9.8's do (B-481, B-482).

RocketMQ's TopicConfigManager and SubscriptionGroupManager put these in their tables
whenever the broker starts, before the stored tables are read over them: a stored
change of one wins, and one deleted comes back at the next start. es-broker records
each one that is missing when a master starts (`topic_updated` / `subgroup_updated`,
requester `system`), so a replay rebuilds them from the log like any other change.
"""

from __future__ import annotations

from es_broker.commands.names import (
    AUTO_CREATE_TEMPLATE,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
)
from es_broker.config import BrokerConfig
from es_broker.remoting.bodies import SubscriptionGroupConfig, TopicConfig
from es_broker.remoting.reply_properties import reply_topic

PERM_INHERIT, PERM_RW = 1, 6

# SubscriptionGroupManager's groups (MixAll's names), each with SubscriptionGroupConfig's defaults
DEFAULT_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)


def _own_topic_perm(enabled: bool) -> int:
    """The cluster's and the broker's own topic: inherit only, or readable and writable too."""
    return PERM_INHERIT | PERM_RW if enabled else PERM_INHERIT


def system_topics(cfg: BrokerConfig) -> list[TopicConfig]:
    """The topics a master holds from its first start, in TopicConfigManager's order."""
    levels = len(cfg.delay_levels_ms())  # 18 with the default levels, as 4.9.8's fixed 18
    wanted = [TopicConfig(SELF_TEST_TOPIC, 1, 1)]
    if cfg.autoCreateTopicEnable:
        n = cfg.defaultTopicQueueNums
        wanted.append(TopicConfig(AUTO_CREATE_TEMPLATE, n, n, PERM_INHERIT | PERM_RW))
    wanted += [
        TopicConfig(BENCHMARK_TOPIC, 1024, 1024),
        TopicConfig(cfg.brokerClusterName, 16, 16, _own_topic_perm(cfg.clusterTopicEnable)),
        TopicConfig(cfg.brokerName, 1, 1, _own_topic_perm(cfg.brokerTopicEnable)),
        TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
        TopicConfig(SCHEDULE_TOPIC, levels, levels),
    ]
    if cfg.traceTopicEnable:
        wanted.append(TopicConfig(cfg.msgTraceTopicName, 1, 1))
    wanted.append(TopicConfig(reply_topic(cfg.brokerClusterName), 1, 1))
    return wanted


def default_groups() -> list[SubscriptionGroupConfig]:
    """SubscriptionGroupManager's groups, with the defaults of B-03."""
    return [SubscriptionGroupConfig(group) for group in DEFAULT_GROUPS]
