"""Topics, groups, offsets and the broker's settings administered (4.9.8's AdminBrokerProcessor).

Topic and group changes are answered once the name-server registration that
carries them is done (`registered`), so a client that routes right after the
answer finds them. Reads an ACL account makes are filtered to what it may
see (B-350, B-351).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from es_broker.acl.plain import group_resource
from es_broker.commands import resets
from es_broker.core.broker import Broker
from es_broker.log.vocabulary import ResetMode
from es_broker.net.channel import Channel, ChannelClosed
from es_broker.remoting import fastjson
from es_broker.remoting import message as wire
from es_broker.remoting.admin_bodies import QueueResetRow, ResetOffsetResult
from es_broker.remoting.bodies import (
    ClientConnection,
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    ConsumeStats,
    DataVersion,
    KVTable,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ResetOffsetBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicOffset,
    TopicStatsTable,
)
from es_broker.remoting.codes import EsRequestCode, LanguageCode, RequestCode, ResponseCode, Version
from es_broker.remoting.command import RemotingCommand, request, response_to
from es_broker.remoting.es_headers import ResetOffsetsRequestHeader
from es_broker.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerGroupRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    TopicRequestHeader,
)
from es_broker.remoting.response_headers import (
    GetBrokerConfigResponseHeader,
    GetEarliestMsgStoretimeResponseHeader,
    OffsetResponseHeader,
)
from es_broker.server.clients import ClientInfo, ClientRegistry
from es_broker.server.edge.remoting_server import Handler
from es_broker.server.processors.common import (
    BrokerSettings,
    ClientNotices,
    ReadScope,
    Requester,
)


class Registered(Protocol):
    """Registers with the name servers now and returns once they were told (BrokerServer.registered):
    `topics` the changed ones alone, None every topic."""

    async def __call__(self, topics: Iterable[str] | None = None) -> None: ...


def topic_configs_of(broker: Broker, topics: Iterable[str]) -> tuple[dict[str, TopicConfig], int]:
    """The configs of those of `topics` that exist, as registered (B-23), and their newest change."""
    configs, version = broker.topic_configs(topics)
    return _as_registered(broker, configs), version


def _offset_answer(req: RemotingCommand, offset: int) -> RemotingCommand:
    """GET_MIN_OFFSET, GET_MAX_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP's answer: one offset."""
    return response_to(
        req, ResponseCode.SUCCESS, None, OffsetResponseHeader(offset=offset).to_fields()
    )


def topic_config_wrapper(broker: Broker) -> TopicConfigSerializeWrapper:
    """Every topic as registered (B-23), with the newest change as the data version: of a topic,
    or of the broker's permission, which every topic shows (a 4.9.8 name server takes a
    master's topics only when their data version changed, B-530)."""
    table, version = broker.topic_table()
    version = max(version, broker.permission_version)
    configs = _as_registered(broker, table)
    return TopicConfigSerializeWrapper(configs, DataVersion(timestamp=version, counter=version))


def _as_registered(broker: Broker, configs: dict[str, TopicConfig]) -> dict[str, TopicConfig]:
    """A read-only or write-only broker shows its perm on every topic (B-23)."""
    perm = broker.config.brokerPermission
    if perm & 4 and perm & 2:
        return configs
    return {name: dataclasses.replace(c, perm=perm) for name, c in configs.items()}


class AdminBrokerProcessor(BrokerSettings):
    """The admin's requests.

    `notices`: the one-way notices of offset resets to a group's clients;
    `scope`: what an ACL account may read; `registered`: waits for the
    registration carrying a change; `ha_status`: master/slave and fail-over
    state for GET_BROKER_RUNTIME_INFO (es_broker.ha).
    """

    def __init__(
        self,
        broker: Broker,
        clients: ClientRegistry,
        requester: Requester,
        notices: ClientNotices,
        scope: ReadScope,
        registered: Registered,
        ha_status: Callable[[], Mapping[str, object]],
    ) -> None:
        self.broker = broker
        self.clients = clients
        self.requester = requester
        self.notices = notices
        self.scope = scope
        self.registered = registered
        self.ha_status = ha_status

    def handlers(self) -> dict[int, Handler]:
        C = RequestCode
        return {
            C.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            C.GET_MAX_OFFSET: self.get_max_offset,
            C.GET_MIN_OFFSET: self.get_min_offset,
            C.GET_EARLIEST_MSG_STORETIME: self.earliest_store_time,
            C.UPDATE_AND_CREATE_TOPIC: self.update_topic,
            C.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            C.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
            C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_group_config,
            C.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            C.GET_TOPIC_STATS_INFO: self.topic_stats,
            C.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            C.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            C.GET_CONSUME_STATS: self.consume_stats,
            C.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offset,
            C.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            C.GET_BROKER_CONFIG: self.broker_config,
            C.INVOKE_BROKER_TO_RESET_OFFSET: self.invoke_reset_offset,
            EsRequestCode.RESET_OFFSET: self.reset_offset,
            C.CLONE_GROUP_OFFSET: self.clone_group_offset,
            C.UPDATE_BROKER_CONFIG: self.update_broker_config,
            C.GET_CONSUMER_RUNNING_INFO: self.forward_to_consumer,
            C.CONSUME_MESSAGE_DIRECTLY: self.forward_to_consumer,
        }

    def topic_configs_of(self, topics: Iterable[str]) -> tuple[dict[str, TopicConfig], int]:
        """`topic_configs_of` of this broker."""
        return topic_configs_of(self.broker, topics)

    def topic_config_wrapper(self) -> TopicConfigSerializeWrapper:
        """`topic_config_wrapper` of this broker."""
        return topic_config_wrapper(self.broker)

    # ------------------------------------------------------------------ queue offsets
    async def search_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.of(req)
        offset = self.broker.search_offset(h.topic, h.queue_id, h.timestamp)
        return _offset_answer(req, offset)

    async def get_max_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.of(req)
        offset = self.broker.max_offset(h.topic, h.queue_id)
        return _offset_answer(req, offset)

    async def get_min_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.of(req)
        offset = self.broker.min_offset(h.topic, h.queue_id)
        return _offset_answer(req, offset)

    async def earliest_store_time(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.of(req)
        ts = self.broker.earliest_msg_store_time(h.topic, h.queue_id)
        answer = GetEarliestMsgStoretimeResponseHeader(timestamp=ts)
        return response_to(req, ResponseCode.SUCCESS, None, answer.to_fields())

    # ------------------------------------------------------------------ offset resets
    def reset_body(self, plan: resets.ResetPlan, list_form: bool) -> bytes:
        """ResetOffsetBody (docs/protocol.md §9.6): MessageQueue-keyed map, or the list C++ clients take."""
        table = {message_queue(self.broker, plan.topic, q): off for q, off in plan.table().items()}
        return ResetOffsetBody(table).encode(for_cpp=list_form)

    async def invoke_reset_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: compute, record, notify online clients oneway (B-74..B-77)."""
        h = ResetOffsetRequestHeader.of(req)
        topic, group, timestamp = h.topic, h.group, h.timestamp
        force = True if h.is_force is None else h.is_force
        info = self.clients.consumer_group(group)
        members = list(info.channels.items()) if info else []
        supported = [(ch, c) for ch, c in members if c.version >= Version.V3_0_7_SNAPSHOT]
        plan = await self.broker.plan_reset(
            group,
            topic,
            timestamp,
            force,
            requester=self.requester(channel),
            notified=[c.client_id for _, c in supported],
        )
        if not members and plan.mode != ResetMode.SERVER_SIDE:
            raise resets.not_online(group, topic, timestamp)
        body = self.reset_body(plan, req.language == LanguageCode.CPP)
        notice = request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp, is_force=False),
            body,
            oneway=True,
        )
        for ch, _ in supported:
            await self.notices.send_oneway(ch, notice)
        if len(supported) < len(members):
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, "the client does not support this feature"
            )
        return response_to(req, ResponseCode.SUCCESS, body=body)

    async def clone_group_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """CLONE_GROUP_OFFSET (B-35)."""
        h = CloneGroupOffsetRequestHeader.of(req)
        src = h.src_group
        info = self.clients.consumer_group(src)
        online = None if h.offline or info is None else set(info.subscriptions)
        await self.broker.clone_group_offset(
            src,
            h.dest_group,
            h.topic or None,
            online_topics=online,
            requester=self.requester(channel),
        )
        return response_to(req, ResponseCode.SUCCESS)

    async def reset_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """es-broker's reset (S-2, S-13): any target, a dry run, or server-side; answers the per-queue table."""
        h = ResetOffsetsRequestHeader.of(req)
        topic, group, kind, value = h.topic, h.group, h.kind, h.value or 0
        dry_run = bool(h.dry_run)
        info = self.clients.consumer_group(group)
        members = list(info.channels.items()) if info else []
        plan = await self.broker.plan_reset(
            group,
            topic,
            value,
            True if h.is_force is None else h.is_force,
            requester=self.requester(channel),
            notified=[c.client_id for _, c in members],
            kind=kind,
            mode=h.mode,
            scope=h.scope,
            dry_run=dry_run,
        )
        if not dry_run and members:
            notice = request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                ResetOffsetRequestHeader(
                    topic=topic, group=group, timestamp=plan.timestamp, is_force=False
                ),
                self.reset_body(plan, False),
                oneway=True,
            )
            for ch, _ in members:
                await self.notices.send_oneway(ch, notice)
        if not dry_run and not members and plan.mode != ResetMode.SERVER_SIDE:
            outcome = (
                "consumer_not_online: nothing changes until a consumer of the group applies it"
            )
        else:
            outcome = (
                "dry run: nothing changed"
                if dry_run
                else f"{plan.mode}: notified {len(members)} client(s)"
            )
        body = ResetOffsetResult(
            group=group,
            topic=topic,
            broker_name=self.config.brokerName,
            kind=kind,
            value=value,
            mode=plan.mode,
            dry_run=bool(dry_run),
            seq=plan.seq,
            outcome=outcome,
            queues=tuple(
                QueueResetRow(q.queue_id, q.current, q.target, q.final, q.outcome)
                for q in plan.queues
            ),
        )
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def forward_to_consumer(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO / CONSUME_MESSAGE_DIRECTLY: relay to the client's channel, answer verbatim."""
        h = (
            ConsumeMessageDirectlyResultRequestHeader.of(req)
            if req.code == RequestCode.CONSUME_MESSAGE_DIRECTLY
            else GetConsumerRunningInfoRequestHeader.of(req)
        )
        group, client_id = h.consumer_group, h.client_id
        info = self.clients.consumer_group(group)
        target = next(
            (ch for ch, c in (info.channels.items() if info else ()) if c.client_id == client_id),
            None,
        )
        if target is None:
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        body = req.body
        if isinstance(h, ConsumeMessageDirectlyResultRequestHeader):
            # its form checked at the edge
            (_, phy) = wire.parse_offset_msg_id(h.msg_id)
            body = (self.broker.message_at(phy) if phy >= 0 else None) or b""
        forwarded = req.relayed(body)
        try:
            answer = await target.invoke(forwarded, timeout=10.0)
        except (TimeoutError, ChannelClosed):  # Channel.invoke times out with TimeoutError
            return response_to(
                req,
                ResponseCode.CONSUME_MSG_TIMEOUT,
                f"consumer <{group}> <{client_id}> did not answer in 10 s",
            )
        return req.relayed_answer(answer)

    async def update_broker_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG: only keys that are safe to change while running, recorded (B-270)."""
        changes: dict[str, str] = {}
        for line in req.body.decode("utf-8", errors="replace").splitlines():
            key, sep, value = line.strip().partition("=")
            if not sep or key.startswith("#"):
                continue
            changes[key.strip()] = value
        await self.broker.update_config(changes, self.requester(channel))
        if "brokerPermission" in changes:
            await self.registered()  # the route shows the broker's perm (B-23)
        return response_to(req, ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ topics and groups
    async def update_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.of(req)
        topic = h.topic
        config = {
            "topicName": topic,
            "readQueueNums": h.read_queue_nums,
            "writeQueueNums": h.write_queue_nums,
            "perm": h.perm,
            "topicFilterType": "SINGLE_TAG" if h.topic_filter_type is None else h.topic_filter_type,
            "topicSysFlag": 0 if h.topic_sys_flag is None else h.topic_sys_flag,
            "order": bool(h.order),
            "attributes": h.attributes,
        }
        await self.broker.update_topic(config, requester=self.requester(channel))
        await self.registered([topic])  # this topic alone (registerIncrementBrokerData, B-391)
        return response_to(req, ResponseCode.SUCCESS)

    async def delete_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = TopicRequestHeader.of(req).topic
        await self.broker.delete_topic(topic, requester=self.requester(channel))
        await self.registered([topic])  # the name server drops this broker's queues of it (B-391)
        return response_to(req, ResponseCode.SUCCESS)

    async def all_topic_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        wrapper = self.topic_config_wrapper()
        scope = self.scope.limited(channel, req)
        if scope is not None:  # the topics the account may PUB or SUB (B-351)
            wrapper = dataclasses.replace(
                wrapper,
                topic_config_table={
                    name: config
                    for name, config in wrapper.topic_config_table.items()
                    if scope.may_see(name)
                },
            )
        return response_to(req, ResponseCode.SUCCESS, body=wrapper.encode())

    async def update_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        sent = fastjson.loads(req.body)  # shape checked at the edge
        # Java's fields and types
        typed = fastjson.loads(SubscriptionGroupConfig.from_json(sent).encode())
        config = {key: value for key, value in typed.items() if key in sent}
        await self.broker.update_group(config, requester=self.requester(channel))
        return response_to(req, ResponseCode.SUCCESS)

    async def all_group_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        table, version = self.broker.group_table()
        scope = self.scope.limited(channel, req)
        if scope is not None:  # the groups the account may use (B-351)
            table = {name: c for name, c in table.items() if scope.may_see(group_resource(name))}
        body = SubscriptionGroupWrapper(table, DataVersion(timestamp=version, counter=version))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def delete_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.of(req)
        await self.broker.delete_group(
            h.group_name, requester=self.requester(channel), remove_offsets=bool(h.remove_offset)
        )
        return response_to(req, ResponseCode.SUCCESS)

    async def topic_stats(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = TopicRequestHeader.of(req).topic
        config = self.broker.topic_config(topic)
        if config is None:
            return response_to(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table = {}
        for q in range(config.write_queue_nums):
            lo, hi = self.broker.min_offset(topic, q), self.broker.max_offset(topic, q)
            last = self.broker.store_time_at(topic, q, hi - 1) if hi > 0 else 0
            table[message_queue(self.broker, topic, q)] = TopicOffset(lo, hi, last)
        return response_to(req, ResponseCode.SUCCESS, body=TopicStatsTable(table).encode())

    async def consume_stats(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.of(req)
        group, only = h.consumer_group, h.topic or None
        scope = self.scope.limited(channel, req)  # SUB on the group: the access rule (B-350)
        table = {}
        for topic, queue_id, offset in self.broker.group_offsets(group):
            if only and topic != only:
                continue
            if scope is not None and not scope.may_read(topic):
                continue
            consumer = max(offset, 0)
            last = self.broker.store_time_at(topic, queue_id, consumer - 1) if consumer > 0 else 0
            table[message_queue(self.broker, topic, queue_id)] = OffsetWrapper(
                self.broker.max_offset(topic, queue_id), consumer, last
            )
        return response_to(req, ResponseCode.SUCCESS, body=ConsumeStats(table, 0.0).encode())

    @staticmethod
    def _connection(info: tuple[Channel, ClientInfo]) -> ClientConnection:
        ch, client = info
        return ClientConnection(client.client_id, ch.remote_addr, client.language, client.version)

    async def consumer_connections(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = ConsumerGroupRequestHeader.of(req).consumer_group
        info = self.clients.consumer_group(group)
        if info is None or not info.channels:
            return response_to(
                req, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        body = ConsumerConnection(
            connection_set=tuple(self._connection(i) for i in info.channels.items()),
            subscription_table={
                topic: SubscriptionData.from_json(sub) for topic, sub in info.subscriptions.items()
            },
            consume_type=info.consume_type,
            message_model=info.message_model,
            consume_from_where=info.consume_from_where,
        )
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def producer_connections(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = GetProducerConnectionListRequestHeader.of(req).producer_group
        channels = self.clients.producers.get(group) or {}
        if not channels:
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        body = ProducerConnection(tuple(self._connection(i) for i in channels.items()))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def all_consumer_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        table: dict[str, dict[int, int]] = {}
        scope = self.scope.limited(channel, req)
        for topic, group, queue_id, offset in self.broker.offset_table():
            if scope is not None and not (
                scope.may_read(topic) and scope.may_read(group_resource(group))
            ):
                continue  # the offsets of a (topic, group) the account may not SUB (B-350)
            table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        body = ConsumerOffsetSerializeWrapper(table)
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def runtime_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        table = {k: str(v) for k, v in {**self.broker.runtime_info(), **self.ha_status()}.items()}
        # says whether ACL is on, so an open broker is seen to be open (B-353)
        table["aclEnable"] = "true" if self.config.aclEnable else "false"
        return response_to(req, ResponseCode.SUCCESS, body=KVTable(table).encode())

    async def broker_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        # the broker's own secret key never leaves it, nor its account's name; the ACL file's
        # path only to admins (B-352)
        scope = self.scope.limited(channel, req)
        text = "\n".join(
            f"{f.name}={getattr(self.config, f.name)}"
            for f in dataclasses.fields(self.config)
            if not f.metadata.get("secret")
            and not f.metadata.get("account")
            and not (scope is not None and f.metadata.get("admin_only"))
        )
        return response_to(
            req,
            ResponseCode.SUCCESS,
            None,
            GetBrokerConfigResponseHeader(version=DataVersion().encode().decode()).to_fields(),
            text.encode(),
        )


def message_queue(broker: Broker, topic: str, queue_id: int) -> MessageQueue:
    """A queue of this broker as the admin bodies name it."""
    return MessageQueue(topic, broker.config.brokerName, queue_id)
