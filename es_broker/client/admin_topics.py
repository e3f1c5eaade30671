"""The admin client's topic and subscription-group requests."""

from __future__ import annotations

from typing import Any

from es_broker.client.admin_base import AdminBase
from es_broker.remoting import fastjson
from es_broker.remoting.bodies import (
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicStatsTable,
)
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from es_broker.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    TopicRequestHeader,
)


class TopicAdmin(AdminBase):
    """Topics and subscription groups: create, change, delete, list."""

    async def update_topic(
        self,
        addr: str,
        topic: str,
        read: int = 8,
        write: int = 8,
        perm: int = 6,
        order: bool = False,
        attributes: str | None = None,
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC; `attributes` is RocketMQ 5's `+key=value,-key` text."""
        await self._ok(
            addr,
            f"create topic {topic} on {addr}",
            request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                CreateTopicRequestHeader(
                    topic=topic,
                    default_topic="TBW102",
                    read_queue_nums=read,
                    write_queue_nums=write,
                    perm=perm,
                    topic_filter_type="SINGLE_TAG",
                    topic_sys_flag=0,
                    order=order,
                    attributes=attributes or None,
                ),
            ),
        )

    async def topic_configs(self, addr: str) -> dict[str, TopicConfig]:
        r = await self._ok(addr, "topic configs", request(RequestCode.GET_ALL_TOPIC_CONFIG))
        return TopicConfigSerializeWrapper.decode(r.body).topic_config_table

    async def update_topic_perm(self, addr: str, topic: str, perm: int) -> dict[str, Any]:
        config = (await self.topic_configs(addr)).get(topic)
        if config is None:
            raise ValueError(f"topic {topic} does not exist on {addr}")
        await self.update_topic(
            addr, topic, config.read_queue_nums, config.write_queue_nums, perm, config.order
        )
        return {"broker": addr, "topic": topic, "oldPerm": config.perm, "perm": perm}

    async def delete_topic(self, addrs: list[str], topic: str) -> None:
        header = TopicRequestHeader(topic=topic)
        for addr in addrs:
            await self._ok(
                addr,
                f"delete topic {topic}",
                request(RequestCode.DELETE_TOPIC_IN_BROKER, header),
            )
        for ns in self.namesrv_addrs:
            await self._ok(
                ns,
                f"delete topic {topic} in name server",
                request(RequestCode.DELETE_TOPIC_IN_NAMESRV, header),
            )

    async def topic_status(self, topic: str) -> list[dict[str, Any]]:
        rows = []
        for _name, addr in await self.topic_brokers(topic):
            r = await self._ok(
                addr,
                f"topic status of {topic}",
                request(RequestCode.GET_TOPIC_STATS_INFO, TopicRequestHeader(topic=topic)),
            )
            for mq, stats in TopicStatsTable.decode(r.body).offset_table.items():
                rows.append(
                    {
                        "brokerName": mq.broker_name,
                        "queueId": mq.queue_id,
                        "minOffset": stats.min_offset,
                        "maxOffset": stats.max_offset,
                        "lastUpdateTimestamp": stats.last_update_timestamp,
                    }
                )
        return sorted(rows, key=lambda r: (r["brokerName"], r["queueId"]))

    async def update_group(self, addr: str, config: dict[str, Any]) -> None:
        await self._ok(
            addr,
            f"update group {config['groupName']}",
            request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                body=fastjson.dumps(config).encode(),
            ),
        )

    async def delete_group(self, addr: str, group: str, remove_offset: bool = False) -> None:
        await self._ok(
            addr,
            f"delete group {group}",
            request(
                RequestCode.DELETE_SUBSCRIPTIONGROUP,
                DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offset),
            ),
        )

    async def clone_group_offset(
        self, addr: str, src: str, dest: str, topic: str, offline: bool
    ) -> None:
        """CLONE_GROUP_OFFSET (B-35) on one broker: dest's offsets of topic become src's."""
        await self._ok(
            addr,
            f"clone offsets of {src} to {dest}",
            request(
                RequestCode.CLONE_GROUP_OFFSET,
                CloneGroupOffsetRequestHeader(
                    src_group=src, dest_group=dest, topic=topic, offline=offline
                ),
            ),
        )

    async def group_config(self, addr: str, group: str) -> dict[str, Any] | None:
        """One subscription group's config from GET_ALL_SUBSCRIPTIONGROUP_CONFIG; None if absent."""
        r = await self._ok(
            addr, "subscription groups", request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        )
        table = SubscriptionGroupWrapper.decode(r.body).subscription_group_table
        config = table.get(group)
        return fastjson.loads(config.encode()) if config is not None else None
