"""Message counts over the wire, answered from the stats projection's minute counts.

- VIEW_BROKER_STATS_DATA (315), header {statsName, statsKey}: 4.9.8's BrokerStatsManager
  item as BrokerStatsData {statsMinute, statsHour, statsDay}, each {sum, tps, avgpt}
  (B-363, B-364). es-broker's extension field `at` (epoch millis) answers for a past
  moment; without it, the broker's now. An item never counted is SYSTEM_ERROR
  "The stats <NAME> <KEY> not exist", as 4.9.8.
- QUERY_TOPIC_CONSUME_BY_WHO (300), header {topic}: GroupList, the groups online with a
  subscription to the topic and the groups with offsets on it (B-365).
- STATS_HISTORY (9208), header {since, until, stepMinutes?, topic?}: messages in and out
  per interval of the broker and of each topic (B-368). A read: nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Callable

from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.net.channel import Channel
from es_broker.projections import stats
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.es_headers import StatsHistoryRequestHeader
from es_broker.remoting.headers import TopicRequestHeader, ViewBrokerStatsDataRequestHeader
from es_broker.remoting.stats_bodies import (
    BrokerStatsData,
    BrokerStatsItem,
    GroupList,
    StatsHistoryBody,
    ThroughputSeries,
)
from es_broker.server.clients import ClientRegistry
from es_broker.server.edge.remoting_server import Handler

MINUTE_MS = stats.MINUTE_MS
DEFAULT_POINTS = 120  # intervals when stepMinutes is not given
MAX_INTERVALS = 10_000  # an answer stays far below the frame bound


class StatsProcessors:
    def __init__(
        self, broker: Broker, config: Callable[[], BrokerConfig], clients: ClientRegistry
    ) -> None:
        self.broker = broker
        self.config = config
        self.clients = clients

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_broker_stats_data,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.topic_consumed_by,
            EsRequestCode.STATS_HISTORY: self.stats_history,
        }

    async def view_broker_stats_data(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.of(req)
        name, key = h.stats_name, h.stats_key
        store = self.broker.store
        at = store.clock.now_ms() if h.at is None else h.at
        kind_index = stats.STATS_NAMES.get(name)
        counted = None
        if kind_index is not None:
            kind, index = kind_index
            if kind in stats.VALUE_ONLY:  # BROKER_*: 4.9.8 keys them by the cluster's name
                counted = "" if key == self.config().brokerClusterName else None
            else:
                counted = key
        with store.read() as txn:
            if counted is None or not store.stats.counted_by(
                txn, kind, counted, at // MINUTE_MS + 1
            ):
                return response_to(
                    req, ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist"
                )
            minute, hour, day = store.stats.snapshots(txn, kind, counted, index, at)
        body = BrokerStatsData(
            stats_minute=BrokerStatsItem(minute.sum, minute.tps, minute.avgpt),
            stats_hour=BrokerStatsItem(hour.sum, hour.tps, hour.avgpt),
            stats_day=BrokerStatsItem(day.sum, day.tps, day.avgpt),
        )
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def topic_consumed_by(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """4.9.8: ConsumerManager.queryTopicConsumeByWho plus ConsumerOffsetManager.whichGroupByTopic."""
        topic = TopicRequestHeader.of(req).topic
        groups = {
            group for group, info in self.clients.consumers.items() if topic in info.subscriptions
        }
        groups.update(g for t, g, _, _ in self.broker.offset_table() if t == topic)
        body = GroupList(group_list=tuple(sorted(groups)))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def stats_history(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = StatsHistoryRequestHeader.of(req)
        since, until = h.since, h.until
        only = h.topic or None
        if until <= since:
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, f"until {until} is not after since {since}"
            )
        first = since // MINUTE_MS
        end = -(-until // MINUTE_MS)
        step = h.step_minutes or max(1, -(-(end - first) // DEFAULT_POINTS))
        n = -(-(end - first) // step)
        if n > MAX_INTERVALS:
            return response_to(
                req,
                ResponseCode.SYSTEM_ERROR,
                f"{n} intervals of {step} minutes: at most {MAX_INTERVALS}, ask a longer stepMinutes",
            )
        end = first + n * step
        projection = self.broker.store.stats

        def per_interval(txn: object, kind: bytes, names: list[str]) -> list[int]:
            out = [0] * n
            for name in names:
                for minute, value in projection.minutes(txn, kind, name, first, end):  # type: ignore[arg-type]
                    out[(minute - first) // step] += value[0]
            return out

        with self.broker.store.read() as txn:
            topics: dict[str, list[str]] = {}
            for name, _ in projection.totals(txn, stats.TOPIC_PUT):
                topics.setdefault(name.partition("\x00")[0], [])
            for name, _ in projection.totals(txn, stats.GROUP_GET):
                topics.setdefault(name.rpartition("@")[0], []).append(name)
            series = [
                ThroughputSeries(
                    topic=topic,
                    in_messages=tuple(per_interval(txn, stats.TOPIC_PUT, [topic])),
                    out_messages=tuple(per_interval(txn, stats.GROUP_GET, groups)),
                )
                for topic, groups in sorted(topics.items())
                if only is None or topic == only
            ]
            broker = ThroughputSeries(
                topic="",
                in_messages=tuple(per_interval(txn, stats.BROKER_PUT, [""])),
                out_messages=tuple(per_interval(txn, stats.BROKER_GET, [""])),
            )
        body = StatsHistoryBody(
            broker_name=self.config().brokerName,
            since=first * MINUTE_MS,
            until=end * MINUTE_MS,
            step=step * MINUTE_MS,
            broker=broker,
            topics=tuple(series),
        )
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())
