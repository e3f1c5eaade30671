"""Who is connected: consumer and producer groups registered by heartbeat (B-33, B-129).

A channel that sends no heartbeat for 120 s is dropped, as is a closed one;
either change tells the group's other channels to rebalance
(NOTIFY_CONSUMER_IDS_CHANGED), when the group allows it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from es_broker.net.channel import Channel

CHANNEL_EXPIRED_MS = 120_000


@dataclass(slots=True)
class ClientInfo:
    client_id: str
    language: str
    version: int
    last_update_ms: int


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)
    channels: dict[Channel, ClientInfo] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]


class ClientRegistry:
    """ConsumerManager and ProducerManager in one."""

    def __init__(
        self,
        notify_changed: Callable[[str, list[Channel]], None] | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[Channel, ClientInfo]] = {}
        self.notify_changed = notify_changed or (lambda group, channels: None)
        self.now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        # `client_id`'s answers, forgotten whenever a group's members change (a heartbeat, an
        # unregister, a close): each request asks it, a heartbeat comes every 30 s
        self._client_ids: dict[Channel, str] = {}

    def register_consumer(
        self, channel: Channel, client_id: str, language: str, version: int, data: dict[str, Any]
    ) -> bool:
        """Register or refresh a consumer; True if the group's membership or subscriptions changed."""
        group = data["groupName"]
        self._client_ids.clear()
        info = self.consumers.setdefault(group, ConsumerGroupInfo(group))
        info.consume_type = data.get("consumeType", info.consume_type)
        info.message_model = data.get("messageModel", info.message_model)
        info.consume_from_where = data.get("consumeFromWhere", info.consume_from_where)
        changed = channel not in info.channels
        info.channels[channel] = ClientInfo(client_id, language, version, self.now_ms())
        subs = {s["topic"]: s for s in data.get("subscriptionDataSet", []) or []}
        for topic, sub in subs.items():
            old = info.subscriptions.get(topic)
            if old is None or old.get("subString") != sub.get("subString"):
                changed = True
            if old is None or int(sub.get("subVersion", 0)) >= int(old.get("subVersion", 0)):
                info.subscriptions[topic] = sub
        for topic in list(info.subscriptions):
            if topic not in subs:
                del info.subscriptions[topic]
                changed = True
        if changed:
            self.notify_changed(group, list(info.channels))
        return changed

    def register_producer(
        self, channel: Channel, client_id: str, language: str, version: int, group: str
    ) -> None:
        self._client_ids.clear()
        self.producers.setdefault(group, {})[channel] = ClientInfo(
            client_id, language, version, self.now_ms()
        )

    def unregister(
        self, channel: Channel, consumer_group: str | None = None, producer_group: str | None = None
    ) -> None:
        self._client_ids.clear()
        if producer_group and producer_group in self.producers:
            self.producers[producer_group].pop(channel, None)
        if consumer_group and consumer_group in self.consumers:
            self._drop_consumer(consumer_group, channel)

    def channel_closed(self, channel: Channel) -> None:
        self._client_ids.clear()
        for producers in self.producers.values():
            producers.pop(channel, None)
        for group in list(self.consumers):
            self._drop_consumer(group, channel)

    def _drop_consumer(self, group: str, channel: Channel) -> None:
        info = self.consumers.get(group)
        if info is None or info.channels.pop(channel, None) is None:
            return
        if not info.channels:
            del self.consumers[group]
        self.notify_changed(group, list(info.channels))

    def scan_expired(self) -> list[Channel]:
        """Drop channels silent for 120 s; returns them."""
        deadline = self.now_ms() - CHANNEL_EXPIRED_MS
        expired = {
            ch
            for info in self.consumers.values()
            for ch, c in info.channels.items()
            if c.last_update_ms < deadline
        }
        expired |= {
            ch
            for group in self.producers.values()
            for ch, c in group.items()
            if c.last_update_ms < deadline
        }
        for channel in expired:
            self.channel_closed(channel)
        return list(expired)

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumers.get(group)

    def client_id(self, channel: Channel) -> str:
        """The client id a channel announced in its heartbeat, else its address."""
        known = self._client_ids.get(channel)
        if known is None:
            known = self._client_ids[channel] = self._find_client_id(channel)
        return known

    def _find_client_id(self, channel: Channel) -> str:
        for info in self.consumers.values():
            if channel in info.channels:
                return info.channels[channel].client_id
        for group in self.producers.values():
            if channel in group:
                return group[channel].client_id
        return channel.remote_addr
