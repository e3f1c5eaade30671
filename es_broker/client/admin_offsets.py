"""The admin client's consumer requests: progress, connections and offset resets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from es_broker.client.admin_base import AdminError, offset_lookup
from es_broker.client.admin_topics import TopicAdmin
from es_broker.remoting import fastjson
from es_broker.remoting.admin_bodies import ResetOffsetResult
from es_broker.remoting.bodies import (
    ConsumerConnection,
    ConsumeStats,
    ProducerConnection,
    ResetOffsetBody,
)
from es_broker.remoting.codes import EsRequestCode, LanguageCode, RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.es_headers import ResetOffsetsRequestHeader
from es_broker.remoting.headers import (
    ConsumerGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    ResetOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from es_broker.remoting.response_headers import OffsetResponseHeader


@dataclass(frozen=True, slots=True)
class QueueProgress:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset


def _plain(value: Any) -> Any:
    """fastjson's object keys (a MessageQueue in mqTable) as their JSON text: plain JSON."""
    if isinstance(value, dict):
        return {
            k
            if isinstance(k, str)
            else fastjson.dumps(k.as_dict() if isinstance(k, fastjson.ObjectKey) else k): _plain(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class OffsetAdmin(TopicAdmin):
    """Consumers and their offsets: progress, connections, running info, resets."""

    async def consumer_progress(self, group: str) -> list[QueueProgress]:
        """consumerProgress: per queue of every topic the group consumes, on every broker."""
        rows: list[QueueProgress] = []
        brokers = await self.broker_names()
        for _name, addrs in sorted(brokers.items()):
            addr = addrs.get(0) or next(iter(addrs.values()))
            r = await self._ok(
                addr,
                f"consume stats of {group}",
                request(
                    RequestCode.GET_CONSUME_STATS,
                    GetConsumeStatsRequestHeader(consumer_group=group),
                ),
            )
            for mq, stats in ConsumeStats.decode(r.body).offset_table.items():
                rows.append(
                    QueueProgress(
                        mq.topic,
                        mq.broker_name,
                        mq.queue_id,
                        stats.broker_offset,
                        stats.consumer_offset,
                        stats.last_timestamp,
                    )
                )
        return sorted(rows, key=lambda q: (q.topic, q.broker_name, q.queue_id))

    async def consumer_connection(self, group: str) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST on the masters; the first that has the group online."""
        for addr in await self.master_addrs():
            r = await self.client.invoke(
                addr,
                request(
                    RequestCode.GET_CONSUMER_CONNECTION_LIST,
                    ConsumerGroupRequestHeader(consumer_group=group),
                ),
            )
            if r.code == ResponseCode.SUCCESS:
                return ConsumerConnection.decode(r.body)
        raise AdminError(f"consumer connection of {group}", r)

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp: int, force: bool, cpp: bool = False
    ) -> dict[str, Any]:
        """resetOffsetByTime: the broker path, or the old path when the group is offline (B-73, B-81)."""
        header = ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp, is_force=force
        )
        rows = []
        for _name, addr in await self.topic_brokers(topic):
            r = await self.client.invoke(
                addr,
                request(
                    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                    header,
                    language=LanguageCode.CPP if cpp else LanguageCode.JAVA,
                ),
            )
            if r.code == ResponseCode.CONSUMER_NOT_ONLINE:
                return {
                    "path": "old",
                    "queues": await self.reset_offset_old(group, topic, timestamp, force),
                }
            if r.code != ResponseCode.SUCCESS:
                raise AdminError(f"reset offset of {group} on {topic}", r)
            table = ResetOffsetBody.decode(r.body).offset_table  # either form (C++ or Java)
            rows += [
                {"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
                for mq, off in table.items()
            ]
        return {
            "path": "broker",
            "queues": sorted(rows, key=lambda r: (r["brokerName"], r["queueId"])),
        }

    async def reset_offset(
        self,
        group: str,
        topic: str,
        kind: str,
        value: int,
        *,
        force: bool = True,
        dry_run: bool = False,
        mode: str | None = None,
        scope: str | None = None,
    ) -> list[ResetOffsetResult]:
        """es-broker's reset on every broker of the topic (S-2): per-queue current/target/final/outcome.

        Each broker plans, records and tells its online consumers itself; this only asks.
        """
        header = ResetOffsetsRequestHeader(
            topic=topic,
            group=group,
            kind=kind,
            value=value,
            is_force=force,
            dry_run=dry_run,
            mode=mode,
            scope=scope,
        )
        out: list[ResetOffsetResult] = []
        for _name, addr in await self.topic_brokers(topic):
            r = await self._ok(
                addr,
                f"reset offset of {group} on {topic}",
                request(EsRequestCode.RESET_OFFSET, header),
            )
            out.append(ResetOffsetResult.decode(r.body))
        return out

    async def reset_offset_old(
        self, group: str, topic: str, timestamp: int, force: bool
    ) -> list[dict[str, Any]]:
        """resetOffsetByTimestampOld: the admin writes each queue's offset itself (B-81)."""
        rows = []
        stats_of_group = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        for name, addr in await self.topic_brokers(topic):
            r = await self._ok(
                addr,
                f"consume stats of {group}",
                request(RequestCode.GET_CONSUME_STATS, stats_of_group),
            )
            queues = {}
            for mq, stats in ConsumeStats.decode(r.body).offset_table.items():
                if mq.topic == topic:
                    queues[mq.queue_id] = (stats.broker_offset, stats.consumer_offset)
            if not queues:  # never consumed here: start from each queue's min (B-81)
                for row in await self.topic_status(topic):
                    if row["brokerName"] == name:
                        queues[row["queueId"]] = (row["maxOffset"], row["minOffset"])
            for qid, (broker_offset, consumer_offset) in sorted(queues.items()):
                lookup = offset_lookup(topic, qid, None if timestamp == -1 else timestamp)
                found = await self._ok(addr, "offset lookup", lookup)
                target = OffsetResponseHeader.of(found).offset
                rollback = target if force or target <= consumer_offset else consumer_offset
                if rollback == target:
                    await self._ok(
                        addr,
                        "update consumer offset",
                        request(
                            RequestCode.UPDATE_CONSUMER_OFFSET,
                            UpdateConsumerOffsetRequestHeader(
                                consumer_group=group,
                                topic=topic,
                                queue_id=qid,
                                commit_offset=target,
                            ),
                        ),
                    )
                rows.append(
                    {
                        "brokerName": name,
                        "queueId": qid,
                        "brokerOffset": broker_offset,
                        "consumerOffset": consumer_offset,
                        "timestampOffset": target,
                        "rollbackOffset": rollback,
                    }
                )
        return rows

    async def producer_connection(self, group: str, topic: str) -> ProducerConnection:
        """GET_PRODUCER_CONNECTION_LIST on the topic's brokers; the first that knows the group."""
        r: RemotingCommand | None = None
        for _, addr in await self.topic_brokers(topic):
            r = await self.client.invoke(
                addr,
                request(
                    RequestCode.GET_PRODUCER_CONNECTION_LIST,
                    GetProducerConnectionListRequestHeader(producer_group=group),
                ),
            )
            if r.code == ResponseCode.SUCCESS:
                return ProducerConnection.decode(r.body)
        if r is None:
            raise ValueError(f"topic {topic} has no broker")
        raise AdminError(f"producer connection of {group}", r)

    async def consumer_running_info(
        self, group: str, client_id: str, jstack: bool = False
    ) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO relayed by a broker the consumer is connected to."""
        header = GetConsumerRunningInfoRequestHeader(
            consumer_group=group, client_id=client_id, jstack_enable=jstack
        )
        r: RemotingCommand | None = None
        for addr in await self.master_addrs():
            r = await self.client.invoke(
                addr, request(RequestCode.GET_CONSUMER_RUNNING_INFO, header), timeout=15.0
            )
            if r.code == ResponseCode.SUCCESS:
                # the consumer's own document, relayed as it wrote it (a Java client's fields too)
                info: dict[str, Any] = _plain(fastjson.loads(r.body))
                return info
        if r is None:
            raise ValueError("no broker is registered with the name server")
        raise AdminError(f"running info of {client_id} in {group}", r)
