"""The bodies of the message-count requests: 4.9.8's BrokerStatsData and GroupList, and
es-broker's STATS_HISTORY (9208) answer.

BrokerStatsData and GroupList are fastjson text as 4.9.8 writes them (fields sorted); the
history answer is fastjson too, its rows under camelCase names like a Java body's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bean import Bean

# -- VIEW_BROKER_STATS_DATA (315) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerStatsItem(Bean):
    """One window of a stats item: 4.9.8's BrokerStatsItem {long sum, double tps, double avgpt}."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


@dataclass(frozen=True, slots=True)
class BrokerStatsData(Bean):
    """VIEW_BROKER_STATS_DATA answer: the last minute, hour and day of one stats item."""

    stats_minute: BrokerStatsItem | None = None
    stats_hour: BrokerStatsItem | None = None
    stats_day: BrokerStatsItem | None = None


# -- QUERY_TOPIC_CONSUME_BY_WHO (300) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupList(Bean):
    """QUERY_TOPIC_CONSUME_BY_WHO answer: the groups that consume a topic (a Java HashSet)."""

    group_list: tuple[str, ...] = ()


# -- STATS_HISTORY (9208) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThroughputSeries(Bean):
    """Messages in and out per interval: `in_messages[i]` counts the interval starting at
    `since + i * step` (broker time, millis)."""

    topic: str = ""  # "" for the whole broker
    in_messages: tuple[int, ...] = ()
    out_messages: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StatsHistoryBody(Bean):
    """STATS_HISTORY answer: the broker's and each topic's messages in and out per interval."""

    broker_name: str = ""
    since: int = 0
    until: int = 0
    step: int = 0  # millis, a whole number of minutes
    broker: ThroughputSeries | None = None
    topics: tuple[ThroughputSeries, ...] = ()
