"""The name server role (RouteInfoManager): broker registration and topic routes (docs/protocol.md §7.1).

State is in memory, as in RocketMQ: brokers re-register every 30 s, so a
restarted name server is whole again within one period. `NameServerRole` is
the role as `es-broker serve` runs it: the route table behind a listener of
its own, and the scan that drops brokers gone quiet.
"""

from __future__ import annotations

import functools
import logging
import zlib
from dataclasses import dataclass, field

import trio

from es_broker.acl.access import AccessControl
from es_broker.clock import Clock, SystemClock
from es_broker.net.channel import Channel
from es_broker.net.hosts import WILDCARDS
from es_broker.remoting.bodies import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.headers import (
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    KVConfigRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    RegisterBrokerRequestHeader,
    TopicRequestHeader,
    UnRegisterBrokerRequestHeader,
)
from es_broker.remoting.response_headers import (
    GetKVConfigResponseHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerResponseHeader,
)
from es_broker.server.edge.remoting_server import EdgeLimits, Handler, RemotingServer
from es_broker.server.edge.tls import ServerTls

log = logging.getLogger(__name__)

BROKER_CHANNEL_EXPIRED_MS = 120_000
SCAN_PERIOD = 10.0  # channel expiry scans, broker and name server
NO_ROUTE = "No topic route info in name server for the topic: {topic}"
STANDARD_JSON_VERSION = 401  # from this client version on, routes are standard JSON
# es-broker's extensions of REGISTER_BROKER's header (B-391; RegisterBrokerRequestHeader's
# topic_table_complete and deleted_topics), by their Java names
COMPLETE = "topicTableComplete"
DELETED = "deletedTopics"


@dataclass(slots=True)
class LiveBroker:
    addr: str
    channel: Channel | None
    last_update_ms: int
    data_version: DataVersion
    ha_server_addr: str


@dataclass(slots=True)
class RouteInfo:
    clusters: dict[str, set[str]] = field(default_factory=dict)
    # name -> its cluster and addresses by broker id (the addresses change in place)
    brokers: dict[str, BrokerData] = field(default_factory=dict)
    # topic -> name -> QueueData
    topic_queues: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    live: dict[str, LiveBroker] = field(default_factory=dict)
    kv: dict[str, dict[str, str]] = field(default_factory=dict)

    def register(
        self,
        cluster: str,
        name: str,
        addr: str,
        broker_id: int,
        ha_addr: str,
        topic_configs: dict[str, TopicConfig],
        data_version: DataVersion,
        channel: Channel | None,
        now_ms: int,
        *,
        complete: bool = True,
        deleted: tuple[str, ...] = (),
    ) -> tuple[str | None, str | None]:
        """RouteInfoManager.registerBroker: the body's topics are created or updated (B-391).

        As 4.9.8, topics not in the body stay, so an incremental registration (one changed
        topic) leaves the broker's others routed; `complete` (es-broker's full registration)
        also drops the broker's topics the body does not list, and `deleted` the named ones.
        """
        self.clusters.setdefault(cluster, set()).add(name)
        data = self.brokers.setdefault(name, BrokerData(cluster, name, {}))
        addrs = data.broker_addrs
        for other_id, other_addr in list(addrs.items()):  # one address per id, one id per address
            if other_addr == addr and other_id != broker_id:
                del addrs[other_id]
        addrs[broker_id] = addr
        self.live[addr] = LiveBroker(addr, channel, now_ms, data_version, ha_addr)
        if broker_id == 0:
            if complete:
                for topic in [t for t, queues in self.topic_queues.items() if name in queues]:
                    if topic not in topic_configs:
                        self._drop_queue_data(topic, name)
            for topic in deleted:
                if topic not in topic_configs:
                    self._drop_queue_data(topic, name)
            for topic, config in topic_configs.items():
                self.topic_queues.setdefault(topic, {})[name] = QueueData(
                    broker_name=name,
                    read_queue_nums=config.read_queue_nums,
                    write_queue_nums=config.write_queue_nums,
                    perm=config.perm,
                    topic_sys_flag=config.topic_sys_flag,
                )
            return None, None
        master = addrs.get(0)
        if master and master in self.live:
            return master, self.live[master].ha_server_addr
        return None, None

    def _drop_queue_data(self, topic: str, name: str) -> None:
        queues = self.topic_queues.get(topic, {})
        queues.pop(name, None)
        if not queues:
            self.topic_queues.pop(topic, None)

    def unregister(self, name: str, addr: str, broker_id: int) -> None:
        self.live.pop(addr, None)
        data = self.brokers.get(name)
        if data is None:
            return
        if data.broker_addrs.get(broker_id) == addr:
            del data.broker_addrs[broker_id]
        if not data.broker_addrs:
            del self.brokers[name]
            for members in self.clusters.values():
                members.discard(name)
            for topic in list(self.topic_queues):
                self._drop_queue_data(topic, name)

    def drop_addr(self, addr: str) -> None:
        for name, data in list(self.brokers.items()):
            for broker_id, a in list(data.broker_addrs.items()):
                if a == addr:
                    self.unregister(name, addr, broker_id)
        self.live.pop(addr, None)

    def route(self, topic: str) -> TopicRouteData | None:
        queues = self.topic_queues.get(topic)
        if not queues:
            return None
        names = sorted(queues)
        broker_datas = tuple(self.brokers[n] for n in names if n in self.brokers)
        if not broker_datas:
            return None
        return TopicRouteData(
            queue_datas=tuple(queues[n] for n in names), broker_datas=broker_datas
        )

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table=dict(self.brokers),
            cluster_addr_table={c: tuple(sorted(n)) for c, n in self.clusters.items()},
        )


LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True, slots=True)
class InProcessNameServer:
    """The name server of this process, which its own broker registers with without the wire (B-313).

    No wire peer can take this path: it is a Python reference, not an
    address, so a name server with ACL still refuses strangers' unsigned
    REGISTER_BROKER (B-176) while its own broker is registered.
    """

    namesrv: NameServer
    host: str  # what it listens on
    port: int

    def serves(self, addr: str, own_hosts: tuple[str, ...] = ()) -> bool:
        """True when `addr` (HOST:PORT of a broker's name-server list) is this listener."""
        host, sep, port = addr.rpartition(":")
        if not sep or port != str(self.port):
            return False
        if host == self.host:
            return True
        if self.host in WILDCARDS:  # listening on every interface: any of this host's addresses
            return host in LOOPBACK or host in own_hosts
        return host in LOOPBACK and self.host in LOOPBACK


class NameServer:
    """Request processors of the name server role."""

    def __init__(self, clock: Clock | None = None) -> None:
        """`clock`: the time registrations are stamped with and the 120 s expiry reads (the
        wall clock; a test gives a ManualClock to move it)."""
        self.routes = RouteInfo()
        self.clock = clock or SystemClock()

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.topics_by_cluster,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.PUT_KV_CONFIG: self.put_kv,
            RequestCode.GET_KV_CONFIG: self.get_kv,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.kv_list,
        }

    def channel_closed(self, channel: Channel) -> None:
        for addr, live in list(self.routes.live.items()):
            if live.channel is channel:
                self.routes.drop_addr(addr)

    def scan_not_active(self) -> list[str]:
        deadline = self.now_ms() - BROKER_CHANNEL_EXPIRED_MS
        dead = [a for a, live in self.routes.live.items() if live.last_update_ms < deadline]
        for addr in dead:
            self.routes.drop_addr(addr)
        return dead

    async def register_broker(
        self, channel: Channel | None, req: RemotingCommand
    ) -> RemotingCommand:
        body = req.body
        h = RegisterBrokerRequestHeader.of(req)
        crc = h.body_crc32
        if crc and (zlib.crc32(body) & 0x7FFFFFFF) != crc:
            return response_to(req, ResponseCode.SYSTEM_ERROR, "crc32 not match")
        wrapper = (
            RegisterBrokerBody.decode(body, compressed=bool(h.compressed))
            if body
            else RegisterBrokerBody()
        ).topic_config_serialize_wrapper
        return self.apply_registration(channel, req, wrapper)

    def apply_registration(
        self, channel: Channel | None, req: RemotingCommand, wrapper: TopicConfigSerializeWrapper
    ) -> RemotingCommand:
        """REGISTER_BROKER with its body decoded (this process's broker skips the encoding, B-313)."""
        h = RegisterBrokerRequestHeader.of(req)
        master, ha = self.routes.register(
            h.cluster_name,
            h.broker_name,
            h.broker_addr,
            h.broker_id,
            h.ha_server_addr or "",
            wrapper.topic_config_table,
            wrapper.data_version,
            channel,
            self.now_ms(),
            complete=bool(h.topic_table_complete),
            deleted=tuple(t for t in (h.deleted_topics or "").split(";") if t),
        )
        answer = RegisterBrokerResponseHeader(ha_server_addr=ha, master_addr=master)
        return response_to(req, ResponseCode.SUCCESS, None, answer.to_fields())

    async def unregister_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.of(req)
        self.routes.unregister(h.broker_name, h.broker_addr, h.broker_id)
        return response_to(req, ResponseCode.SUCCESS)

    async def get_route(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.of(req)
        topic = h.topic
        route = self.routes.route(topic)
        if route is None:
            return response_to(req, ResponseCode.TOPIC_NOT_EXIST, NO_ROUTE.format(topic=topic))
        standard = req.version >= STANDARD_JSON_VERSION or h.accept_standard_json_only
        return response_to(
            req,
            ResponseCode.SUCCESS,
            body=route.encode(standard_json=bool(standard)),
        )

    async def cluster_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return response_to(req, ResponseCode.SUCCESS, body=self.routes.cluster_info().encode())

    async def topic_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        body = TopicList(tuple(sorted(self.routes.topic_queues)))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def topics_by_cluster(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        names = self.routes.clusters.get(GetTopicsByClusterRequestHeader.of(req).cluster, set())
        topics = sorted(t for t, q in self.routes.topic_queues.items() if names & set(q))
        return response_to(req, ResponseCode.SUCCESS, body=TopicList(tuple(topics)).encode())

    async def query_data_version(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        live = self.routes.live.get(QueryDataVersionRequestHeader.of(req).broker_addr)
        theirs = DataVersion.decode(req.body) if req.body else None
        changed = live is None or live.data_version != theirs
        if live is not None:
            live.last_update_ms = self.now_ms()
        body = live.data_version.encode() if live else b""
        answer = QueryDataVersionResponseHeader(changed=changed)
        return response_to(req, ResponseCode.SUCCESS, None, answer.to_fields(), body)

    async def delete_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        self.routes.topic_queues.pop(TopicRequestHeader.of(req).topic, None)
        return response_to(req, ResponseCode.SUCCESS)

    async def put_kv(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = PutKVConfigRequestHeader.of(req)
        self.routes.kv.setdefault(h.namespace, {})[h.key] = h.value
        return response_to(req, ResponseCode.SUCCESS)

    async def get_kv(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = KVConfigRequestHeader.of(req)
        ns, key = h.namespace, h.key
        value = self.routes.kv.get(ns, {}).get(key)
        if value is None:
            return response_to(
                req, ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}"
            )
        answer = GetKVConfigResponseHeader(value=value)
        return response_to(req, ResponseCode.SUCCESS, None, answer.to_fields())

    async def delete_kv(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = KVConfigRequestHeader.of(req)
        self.routes.kv.get(h.namespace, {}).pop(h.key, None)
        return response_to(req, ResponseCode.SUCCESS)

    async def kv_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        ns = GetKVListByNamespaceRequestHeader.of(req).namespace
        table = self.routes.kv.get(ns)
        if not table:
            return response_to(
                req, ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}"
            )
        return response_to(req, ResponseCode.SUCCESS, body=KVTable(dict(table)).encode())


class NameServerRole:
    """The name server role of `es-broker serve`: its route table, its listener, its expiry scan."""

    def __init__(
        self,
        limits: EdgeLimits | None = None,
        access: AccessControl | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.tls = tls
        self.namesrv = NameServer()
        self.access = access  # B-176: registration needs an admin account when set
        self.remoting = RemotingServer(
            "namesrv",
            self.namesrv.handlers(),
            on_close=self.namesrv.channel_closed,
            limits=limits,
            guard=access,
        )

    async def run(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            if self.access is not None:
                nursery.start_soon(self.access.watch)
            bound = await nursery.start(
                functools.partial(self.remoting.serve, host, port, tls=self.tls)
            )
            nursery.start_soon(self._scan)
            task_status.started(bound)

    async def _scan(self) -> None:
        while True:
            await trio.sleep(SCAN_PERIOD)
            self.namesrv.scan_not_active()
