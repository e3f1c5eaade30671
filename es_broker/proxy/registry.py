"""The 5.x clients as the brokers see them: one 4.x client registration per live 5.x client.

A 5.x client's Heartbeat is answered by the proxy; so that the brokers, and
the 4.x admin tools and dashboard that ask them (consumerConnection,
consumerStatus, producerConnection), know the client too, the proxy opens a
client instance of its own per 5.x client, under the 5.x client's id
(B-650). It sends the brokers HEART_BEAT naming the client's consumer group
and subscription, or for a producer one producer group per topic it
publishes (RocketMQ 5's ClientActivity registers a 5.x producer so), and
keeps sending it every heartbeat period while the 5.x client heartbeats.
NotifyClientTermination, or no heartbeat for EXPIRE_S (`--client-expiry`), ends the instance
after UNREGISTER_CLIENT. Each instance has connections of its own: the
brokers key a group's clients by connection (4.9.8's ConsumerGroupInfo), so
two 5.x clients of one group through one connection would be one client.

The consume type is RocketMQ 5's ClientActivity's: CONSUME_ACTIVELY for a
SimpleConsumer, CONSUME_PASSIVELY for a PushConsumer (4.9.8 has no
CONSUME_POP); the message model CLUSTERING, from the last offset. The
brokers' NOTIFY_CONSUMER_IDS_CHANGED is ignored (the brokers pop for these
groups: nothing is rebalanced). GET_CONSUMER_RUNNING_INFO is answered with
what the proxy knows: the subscription, the consume type, the client's
Settings, and its thread stacks when the client answers a
PrintThreadStackTraceCommand within STACKS_WAIT_S (B-651).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from google.protobuf import json_format
from rocketmq.grpc_protocol import definition_pb2 as pb

from es_broker.acl.plain import Account
from es_broker.acl.signing import Credentials
from es_broker.client.instance import ClientInstance
from es_broker.client.message_selector import SQL92, TAG, MessageSelector
from es_broker.client.subscription import build_subscription
from es_broker.net.tasks import TaskSpawner
from es_broker.proxy.cluster import Cluster, client_config
from es_broker.proxy.sessions import Sessions
from es_broker.remoting.bodies import (
    ConsumerData,
    ConsumerRunningInfo,
    MessageQueue,
    SubscriptionData,
    TopicRouteData,
)
from es_broker.remoting.codes import LanguageCode

log = logging.getLogger(__name__)

EXPIRE_S = 120.0  # RocketMQ 5 proxy's channelExpiredTimeout: a client silent so long is gone
STACKS_WAIT_S = 3.0  # s a client has to answer a PrintThreadStackTraceCommand
CONSUME_TYPES = {
    pb.ClientType.SIMPLE_CONSUMER: "CONSUME_ACTIVELY",
    pb.ClientType.PUSH_CONSUMER: "CONSUME_PASSIVELY",
}
NO_STACKS = "not available: the client did not answer a PrintThreadStackTraceCommand"


def _selector(entry: Any) -> MessageSelector:
    kind = SQL92 if entry.expression.type == pb.FilterType.SQL else TAG
    return MessageSelector(kind, entry.expression.expression or "*")


@dataclass(eq=False)
class ProxiedConsumer:
    """A 5.x consumer, as a member of its client instance (instance.py's ConsumerMember)."""

    group: str
    client_type: int
    settings: Any  # the client's Settings
    sessions: Sessions
    client_id: str

    @property
    def consume_type(self) -> str:
        return CONSUME_TYPES.get(self.client_type, "CONSUME_ACTIVELY")

    def subscriptions(self) -> tuple[SubscriptionData, ...]:
        return tuple(
            build_subscription(e.topic.name, _selector(e))
            for e in self.settings.subscription.subscriptions
        )

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=self.consume_type,
            subscription_data_set=self.subscriptions(),
        )

    def subscribed_topics(self) -> Iterable[str]:
        return [e.topic.name for e in self.settings.subscription.subscriptions]

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        pass

    def rebalance_now(self) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED: nothing to rebalance, the brokers pop for this group."""

    async def reset_offset(self, topic: str, table: Mapping[MessageQueue, int]) -> None:
        log.info("reset offset of %s/%s: a 5.x consumer holds no offsets", self.group, topic)

    def running_info(self) -> ConsumerRunningInfo:
        return ConsumerRunningInfo(
            properties={
                "PROP_CONSUME_TYPE": self.consume_type,
                "consumeType": self.consume_type,
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "clientId": self.client_id,
                "clientType": pb.ClientType.Name(self.client_type),
                "settings": json_format.MessageToJson(self.settings, indent=None),
                "via": "the gRPC proxy: the brokers pop for this consumer, no queue is held",
            },
            subscription_set=self.subscriptions(),
        )

    async def running_info_now(self, jstack: bool) -> ConsumerRunningInfo:
        info = self.running_info()
        if not jstack:
            return info
        stacks = await self.sessions.thread_stacks(self.client_id, STACKS_WAIT_S)
        if stacks is None:
            info.properties["jstack"] = f"{NO_STACKS} within {STACKS_WAIT_S:g} s"
            return info
        return ConsumerRunningInfo(
            properties=info.properties, subscription_set=info.subscription_set, jstack=stacks
        )


@dataclass(eq=False)
class ProxiedProducer:
    """A 5.x producer's topic, as a producer group of its client instance."""

    group: str

    def published_topics(self) -> Iterable[str]:
        return (self.group,)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        pass


@dataclass(eq=False)
class Registered:
    """One live 5.x client and the client instance that stands for it."""

    instance: ClientInstance
    settings: Any
    groups: tuple[str, ...]  # its consumer group, or the producer groups (its topics)
    consumer: bool
    last_heartbeat: float = field(default_factory=time.monotonic)


def _language(name: str) -> LanguageCode:
    return LanguageCode.__members__.get(name.upper(), LanguageCode.OTHER)


class Registry:
    """The registrations of the 5.x clients that heartbeat now, by client id."""

    def __init__(
        self,
        cluster: Cluster,
        sessions: Sessions,
        nursery: TaskSpawner,
        expire_s: float = EXPIRE_S,
    ) -> None:
        self.cluster = cluster  # its name server, address and TLS toward the brokers
        self.sessions = sessions
        self.expire_s = expire_s
        self.by_client: dict[str, Registered] = {}
        self._locks: dict[str, anyio.Lock] = {}  # one client's registration at a time
        self._nursery = nursery

    async def run(self) -> None:
        """Drop the clients that stopped heartbeating."""
        while True:
            await anyio.sleep(self.expire_s / 8)
            deadline = time.monotonic() - self.expire_s
            for client_id, entry in list(self.by_client.items()):
                if entry.last_heartbeat < deadline:
                    log.info(
                        "5.x client %s sent no heartbeat for %g s: unregistered",
                        client_id,
                        self.expire_s,
                    )
                    await self.forget(client_id, entry)

    def _same(self, entry: Registered, settings: Any, groups: tuple[str, ...]) -> bool:
        return entry.groups == groups and entry.settings == settings

    async def heartbeat(
        self, client_id: str, account: Account | None, group: str, language: str
    ) -> None:
        """A 5.x client's Heartbeat: register it with the brokers, or note that it lives."""
        session = self.sessions.by_client.get(client_id)
        if session is None or session.settings is None:
            entry = self.by_client.get(client_id)
            if entry is not None:  # its Telemetry stream is being opened again: it lives
                entry.last_heartbeat = time.monotonic()
            return  # no Settings yet: registered at its next heartbeat
        settings = session.settings
        consumer = settings.client_type in CONSUME_TYPES
        groups = (group,) if consumer else tuple(t.name for t in settings.publishing.topics)
        async with self._locks.setdefault(client_id, anyio.Lock()):
            entry = self.by_client.get(client_id)
            if entry is not None and self._same(entry, settings, groups):
                entry.last_heartbeat = time.monotonic()
                return
            if entry is not None:
                del self.by_client[client_id]
                await self._end(client_id, entry)
            if not groups:
                return
            try:
                self.by_client[client_id] = await self._register(
                    client_id, account, settings, groups, consumer, language
                )
            except Exception:  # the 5.x heartbeat is still answered; its next one tries again
                log.exception("5.x client %s could not be registered with the brokers", client_id)

    async def _register(
        self,
        client_id: str,
        account: Account | None,
        settings: Any,
        groups: tuple[str, ...],
        consumer: bool,
        language: str,
    ) -> Registered:
        credentials = (
            None if account is None else Credentials(account.access_key, account.secret_key)
        )
        instance = ClientInstance(
            self.cluster.namesrv,
            config=client_config(self.cluster.tls),
            credentials=credentials,
            client_ip=self.cluster.client_ip,
            client_id=client_id,
            language=_language(language),
        )
        if consumer:
            instance.register_consumer(
                ProxiedConsumer(groups[0], settings.client_type, settings, self.sessions, client_id)
            )
            topics = [e.topic.name for e in settings.subscription.subscriptions]
        else:
            for group in groups:
                instance.register_producer(ProxiedProducer(group))
            topics = list(groups)
        await instance.acquire(self._nursery)
        try:
            for topic in topics:
                try:
                    await instance.update_route(topic)
                except Exception as exc:  # the instance's route poll tries again
                    log.info("route of %s for 5.x client %s: %r", topic, client_id, exc)
            await instance.send_heartbeat_to_all_brokers()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await instance.release()
            raise
        return Registered(instance, settings, groups, consumer)

    async def _end(self, client_id: str, entry: Registered) -> None:
        with anyio.CancelScope(shield=True):
            try:
                for group in entry.groups:
                    if entry.consumer:
                        await entry.instance.unregister_consumer(group)
                    else:
                        await entry.instance.unregister_producer(group)
            except Exception as exc:  # the brokers drop it after their own expiry
                log.info("unregistering 5.x client %s: %r", client_id, exc)
            await entry.instance.release()

    async def forget(self, client_id: str, expired: Registered | None = None) -> None:
        """NotifyClientTermination, or no heartbeat for the expiry (`expired`, the entry that was
        found silent: one registered again meanwhile stays): UNREGISTER_CLIENT, then close."""
        lock = self._locks.setdefault(client_id, anyio.Lock())
        async with lock:
            entry = self.by_client.get(client_id)
            if entry is not None and expired in (None, entry):
                del self.by_client[client_id]
                await self._end(client_id, entry)
        if client_id not in self.by_client and not lock.statistics().tasks_waiting:
            self._locks.pop(client_id, None)  # nobody holds it now or waits for it

    async def stop(self) -> None:
        for client_id in list(self.by_client):
            await self.forget(client_id)
