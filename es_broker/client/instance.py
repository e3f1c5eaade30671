"""One client process's connection to a cluster (Java MQClientInstance).

It owns the remoting connections, the name-server route cache and the broker
address table, sends the heartbeat of every producer and consumer registered
with it, and answers what brokers ask clients (NOTIFY_CONSUMER_IDS_CHANGED,
RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_RUNNING_INFO, CHECK_TRANSACTION_STATE,
PUSH_REPLY_MESSAGE_TO_CLIENT).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.abc

from es_broker.acl.signing import Credentials
from es_broker.client.broker_failures import BrokerFailures
from es_broker.client.config import (
    AUTO_CREATE_TOPIC_KEY,
    MASTER_ID,
    ClientConfig,
    client_config_with,
    client_tls,
)
from es_broker.client.request_reply import ReplyTable
from es_broker.client.route import from_default_route
from es_broker.net.channel import Channel
from es_broker.net.hosts import local_ip
from es_broker.net.remoting_client import PendingRequest, RemotingClient, RemotingError
from es_broker.net.tasks import TaskGroup, TaskSpawner
from es_broker.remoting.bodies import (
    ClusterInfo,
    ConsumerData,
    ConsumerRunningInfo,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    MessageQueue,
    ProducerData,
    ResetOffsetBody,
    TopicRouteData,
)
from es_broker.remoting.codes import LanguageCode, RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request, response_to
from es_broker.remoting.errors import BodyDecodeError, CommandError
from es_broker.remoting.header_fields import CustomHeader
from es_broker.remoting.headers import (
    ConsumerGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetRouteInfoRequestHeader,
    ResetOffsetRequestHeader,
    UnregisterClientRequestHeader,
)
from es_broker.remoting.message import MessageDecodeError, decode_one
from es_broker.remoting.peer_outcomes import PeerRequests

LOST_ROUTE_GAP = 0.05  # s between a lost broker connection and the route refresh it asks for

log = logging.getLogger(__name__)

LANGUAGE = LanguageCode.PYTHON


class ProducerMember(Protocol):
    """What the instance needs from a producer registered with it."""

    group: str

    def published_topics(self) -> Iterable[str]: ...

    def on_route(self, topic: str, route: TopicRouteData) -> None: ...


class ConsumerMember(Protocol):
    """What the instance needs from a consumer registered with it."""

    group: str

    def consumer_data(self) -> ConsumerData: ...

    def subscribed_topics(self) -> Iterable[str]: ...

    def on_route(self, topic: str, route: TopicRouteData) -> None: ...

    def rebalance_now(self) -> None: ...

    async def reset_offset(self, topic: str, table: Mapping[MessageQueue, int]) -> None: ...

    def running_info(self) -> ConsumerRunningInfo: ...


@dataclass(frozen=True, slots=True)
class FoundBroker:
    """An address picked for a pull or an offset request, and whether it is a slave."""

    addr: str
    slave: bool


def default_instance_name() -> str:
    """What Java 4.9 turns the instance name "DEFAULT" into: `<pid>#<nanotime>` (B-51)."""
    return f"{os.getpid()}#{time.monotonic_ns()}"


class ClientInstance:
    """Connections, routes and heartbeats shared by the producers and consumers of one client id.

    With `credentials` (or `config.credentials`) every request it sends is
    signed, as the Java client's AclClientRPCHook signs them.
    """

    def __init__(
        self,
        namesrv_addr: str,
        *,
        instance_name: str | None = None,
        client_ip: str | None = None,
        config: ClientConfig | None = None,
        credentials: Credentials | None = None,
        client_id: str | None = None,
        language: LanguageCode = LANGUAGE,
    ) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv_addr.split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise ValueError("no name server address given")
        self.config = client_config_with(config, credentials)
        self.client_ip = client_ip or local_ip()
        self.instance_name = instance_name or default_instance_name()
        # a client id given as it is (the gRPC proxy registers a 5.x client under its own id)
        self._given_client_id = client_id
        self.language = language  # what the heartbeat says the client is written in
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        # every broker the name server knows, for the producers' heartbeat (B-320)
        self.cluster_brokers: dict[str, dict[int, str]] = {}
        self._producers: dict[str, ProducerMember] = {}
        self._consumers: dict[str, ConsumerMember] = {}
        self._namesrv_index = random.randrange(len(self.namesrv_addrs))
        self._route_lock = anyio.Lock()
        self._heartbeat_lock = anyio.Lock()
        # how brokers answered the heartbeats and unregistrations: refusals are logged (B-317)
        self.heartbeats = PeerRequests("heartbeat to broker", log)
        self.unregistrations = PeerRequests("unregistration from broker", log)
        self._reset_lock = anyio.Lock()  # Java's synchronized resetOffset
        self._heartbeat_now = anyio.Event()
        self._routes_now = anyio.Event()  # a broker's connection was lost: refresh the routes now
        self.failures = BrokerFailures()  # brokers a request found dead (B-540, B-541)
        self._tasks = TaskGroup()
        self._users = 0
        self._remoting: RemotingClient | None = None
        self.replies = ReplyTable()  # requests waiting for their replies (RequestFutureTable)

    @property
    def client_id(self) -> str:
        """`ip@instanceName` (B-51), or the id the instance was given."""
        if self._given_client_id is not None:
            return self._given_client_id
        return f"{self.client_ip}@{self.instance_name}"

    def check_credentials(self, credentials: Credentials | None) -> None:
        """Refuse a member's own credentials when they are not this shared instance's."""
        if credentials is not None and credentials != self.config.credentials:
            raise ValueError(
                f"credentials belong to the client instance {self.client_id}: give them to "
                f"ClientInstance (credentials=...), not to one of its members"
            )

    # ------------------------------------------------------------------ life cycle
    async def acquire(self, nursery: TaskSpawner) -> None:
        """Start the instance for one more user (the first one starts it)."""
        self._users += 1
        if self._users > 1:
            return
        await self._tasks.start(nursery)
        self._remoting = await self._tasks.start_task(self._open_remoting)
        self._tasks.start_soon(self._poll_routes)
        self._tasks.start_soon(self._heartbeat_loop)

    async def release(self) -> None:
        """One user is done; the last one closes every connection and timer."""
        self._users -= 1
        if self._users <= 0:
            await self._tasks.stop()
            self._remoting = None

    async def _open_remoting(
        self, *, task_status: anyio.abc.TaskStatus[RemotingClient] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        # The connections' read loops live in a nursery of their own, so that
        # stopping the instance closes them after every other task is gone.
        async with anyio.create_task_group() as nursery:
            client = RemotingClient(
                nursery,
                on_request=self._on_request,
                credentials=self.config.credentials,
                tls=client_tls(self.config),
            )
            client.on_connection_lost = self._connection_lost
            task_status.started(client)
            try:
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):
                    await client.aclose()

    @property
    def remoting(self) -> RemotingClient:
        if self._remoting is None:
            raise RuntimeError("the client instance is not started")
        return self._remoting

    # ------------------------------------------------------------------ members
    def register_producer(self, member: ProducerMember) -> None:
        if member.group in self._producers:
            raise ValueError(
                f"producer group {member.group} is already registered in {self.client_id}"
            )
        self._producers[member.group] = member

    def register_consumer(self, member: ConsumerMember) -> None:
        if member.group in self._consumers:
            raise ValueError(
                f"consumer group {member.group} is already registered in {self.client_id}"
            )
        self._consumers[member.group] = member

    def producer(self, group: str) -> ProducerMember | None:
        """The registered producer of that group, if any."""
        return self._producers.get(group)

    async def unregister_producer(self, group: str) -> None:
        if self._producers.pop(group, None) is not None:
            await self._unregister_client(
                UnregisterClientRequestHeader(client_id=self.client_id, producer_group=group)
            )

    async def unregister_consumer(self, group: str) -> None:
        if self._consumers.pop(group, None) is not None:
            await self._unregister_client(
                UnregisterClientRequestHeader(client_id=self.client_id, consumer_group=group)
            )

    async def _unregister_client(self, header: UnregisterClientRequestHeader) -> None:
        """UNREGISTER_CLIENT to every broker address (docs/protocol.md §7.3.2)."""
        for addrs in list(self.broker_addrs.values()):
            for addr in addrs.values():
                try:
                    response = await self.invoke(
                        addr, self.request(RequestCode.UNREGISTER_CLIENT, header)
                    )
                except RemotingError as exc:
                    self.unregistrations.no_answer(addr, exc)
                    continue
                self.unregistrations.answered(addr, response)

    # ------------------------------------------------------------------ requests
    @staticmethod
    def request(
        code: int,
        header: CustomHeader | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        """A request as this client sends it: its header class's fields (their one-letter names
        where `code` uses those), and `body`."""
        return request(code, header, body, oneway=oneway, language=LANGUAGE)

    async def invoke(
        self, addr: str, command: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        """Send a request and wait for its answer; raises RemotingError."""
        try:
            response = await self.remoting.invoke(
                addr, command, self.config.rpc_timeout if timeout is None else timeout
            )
        except RemotingError:
            self.broker_failed(addr)
            raise
        if self.failures.failed:
            self.failures.answered(addr)
        return response

    async def invoke_oneway(self, addr: str, command: RemotingCommand) -> None:
        try:
            await self.remoting.invoke_oneway(addr, command)
        except RemotingError:
            self.broker_failed(addr)
            raise

    async def start_request(self, addr: str, command: RemotingCommand) -> PendingRequest:
        """Write a request now and return what waits for its answer (pipelined sends)."""
        try:
            return await self.remoting.start_request(addr, command)
        except RemotingError:
            self.broker_failed(addr)
            raise

    async def response(self, pending: PendingRequest, timeout: float) -> RemotingCommand:
        """The answer to a request start_request wrote; raises RemotingError."""
        try:
            response = await pending.response(timeout)
        except RemotingError:
            self.broker_failed(pending.addr)
            raise
        if self.failures.failed:
            self.failures.answered(pending.addr)
        return response

    def broker_failed(self, addr: str) -> None:
        """A request to broker `addr` found no connection or no answer (refused, reset, timed out).

        A route naming it is read again before the next send chooses a queue
        (B-540), producers prefer other brokers until it answers again (B-541),
        and the routes of every topic in use are refreshed now (B-385). Not a
        coroutine: the blocking producer calls it through its portal.
        """
        if any(addr in addrs.values() for addrs in tuple(self.broker_addrs.values())):
            self.failures.record(addr)  # a name server's address is not a broker's
            self._routes_now.set()

    def route_outdated(self, topic: str) -> bool:
        """Whether a broker the topic's route names failed after that route was read (B-540)."""
        return self.failures.outdated(topic, self.routes.get(topic))

    # ------------------------------------------------------------------ routes
    async def _ask_name_server(
        self, code: int, header: CustomHeader | None = None
    ) -> tuple[str, RemotingCommand] | None:
        """A request to the current name server, moving on when one fails; None if none answered."""
        for _ in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[self._namesrv_index]
            try:
                return addr, await self.invoke(addr, self.request(code, header))
            except RemotingError as exc:
                log.warning("name server %s: %s", addr, exc)
                self._namesrv_index = (self._namesrv_index + 1) % len(self.namesrv_addrs)
        return None

    async def _fetch_route(self, topic: str) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC from the current name server, moving on when one fails."""
        answered = await self._ask_name_server(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic)
        )
        if answered is None:
            return None
        addr, response = answered
        if response.code == ResponseCode.SUCCESS:
            try:
                return TopicRouteData.decode(response.body)
            except BodyDecodeError as exc:
                log.warning("route of %s from %s is unreadable: %s", topic, addr, exc)
                return None
        if response.code != ResponseCode.TOPIC_NOT_EXIST:
            log.warning("route of %s: code %s %s", topic, response.code, response.remark)
        return None

    async def update_cluster_brokers(self) -> bool:
        """Learn every broker of the name server (GET_BROKER_CLUSTER_INFO), for the heartbeat (B-320).

        A producer heartbeats them at its start and whenever this finds a new
        address, before it sends anything: a transactional producer that was
        restarted is then a live producer of its group for the broker's checks.
        False when no name server gave a readable answer (the brokers known stay).
        """
        answered = await self._ask_name_server(RequestCode.GET_BROKER_CLUSTER_INFO)
        if answered is None:
            return False
        addr, response = answered
        if response.code != ResponseCode.SUCCESS:
            log.warning("cluster info from %s: code %s %s", addr, response.code, response.remark)
            return False
        try:
            info = ClusterInfo.decode(response.body)
        except BodyDecodeError as exc:
            log.warning("cluster info from %s is unreadable: %s", addr, exc)
            return False
        self.cluster_brokers = {
            name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items()
        }
        for name, addrs in self.cluster_brokers.items():
            self._learn_broker(name, addrs)
        return True

    async def update_route(self, topic: str) -> TopicRouteData | None:
        """Refresh one topic's route (updateTopicRouteInfoFromNameServer); None if there is none."""
        async with self._route_lock:
            return await self._read_route(topic)

    async def reread_route(self, topic: str) -> None:
        """Read the topic's route again if it is outdated; sends asking at once make one read (B-540)."""
        async with self._route_lock:
            if self.route_outdated(topic):
                await self._read_route(topic)

    async def _read_route(self, topic: str) -> TopicRouteData | None:
        mark = self.failures.mark()
        route = await self._fetch_route(topic)
        if route is not None:
            self.failures.route_read(topic, mark)
            self._apply_route(topic, route, consumers=True)
        return route

    async def update_route_from_default(self, topic: str, queue_nums: int) -> TopicRouteData | None:
        """Use TBW102's route for a topic the name server does not know, so a send auto-creates it."""
        async with self._route_lock:
            mark = self.failures.mark()
            template = await self._fetch_route(AUTO_CREATE_TOPIC_KEY)
            if template is None:
                return None
            route = from_default_route(template, queue_nums)
            self.failures.route_read(topic, mark)
            self._apply_route(topic, route, consumers=False)
            return route

    def _apply_route(self, topic: str, route: TopicRouteData, consumers: bool) -> None:
        self.routes[topic] = route
        for data in route.broker_datas:
            self._learn_broker(data.broker_name, data.broker_addrs)
        for producer in list(self._producers.values()):
            producer.on_route(topic, route)
        if consumers:
            for consumer in list(self._consumers.values()):
                consumer.on_route(topic, route)

    def _learn_broker(self, name: str, addrs: Mapping[int, str]) -> None:
        known = self.broker_addrs.get(name, {})
        if set(addrs.values()) - set(known.values()):
            # A broker we never told about our groups: heartbeat now, not in 30 s,
            # or its pulls would fail with SUBSCRIPTION_NOT_EXIST meanwhile, and
            # its transaction checks would find no producer of the group (B-320).
            self._heartbeat_now.set()
        self.broker_addrs[name] = dict(addrs)

    def _topics_in_use(self) -> set[str]:
        topics: set[str] = set()
        for producer in self._producers.values():
            topics.update(producer.published_topics())
        for consumer in self._consumers.values():
            topics.update(consumer.subscribed_topics())
        return topics

    def _connection_lost(self, addr: str) -> None:
        """A broker's connection failed or closed: its routes are asked for now, not at the next poll (B-388)."""
        if any(addr in addrs.values() for addrs in self.broker_addrs.values()):
            self._routes_now.set()

    async def _poll_routes(self) -> None:
        while True:
            with anyio.move_on_after(self.config.poll_name_server_interval):
                await self._routes_now.wait()
                # pacing: many failing requests to one dead broker make one refresh, not one each
                await anyio.sleep(LOST_ROUTE_GAP)
            self._routes_now = anyio.Event()
            if self._producers:
                await self.update_cluster_brokers()
            for topic in sorted(self._topics_in_use()):
                await self.update_route(topic)
            self.clean_offline_brokers()

    def clean_offline_brokers(self) -> None:
        """Forget addresses no route lists any more, e.g. a master the name server dropped (B-112).

        Java's cleanOfflineBroker: without it, heartbeats would go on to a
        dead address, and a pull suggested to its broker id would go there too.
        """
        listed = {
            addr
            for route in self.routes.values()
            for data in route.broker_datas
            for addr in data.broker_addrs.values()
        }
        listed.update(addr for addrs in self.cluster_brokers.values() for addr in addrs.values())
        for name, addrs in list(self.broker_addrs.items()):
            alive = {broker_id: addr for broker_id, addr in addrs.items() if addr in listed}
            if alive:
                self.broker_addrs[name] = alive
            else:
                del self.broker_addrs[name]
        self.failures.keep_only(listed)

    # ------------------------------------------------------------------ broker addresses
    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        """The master's address, or None."""
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def find_broker_address_in_subscribe(
        self, broker_name: str, broker_id: int, only_this_broker: bool
    ) -> FoundBroker | None:
        """Java's findBrokerAddressInSubscribe: that id, else id + 1 for a slave, else any (B-117)."""
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        slave = broker_id != MASTER_ID
        if addr is None and slave:
            addr = addrs.get(broker_id + 1)
        if addr is None and not only_this_broker:
            first_id = min(addrs)  # Java's HashMap order: the lowest id
            addr, slave = addrs[first_id], first_id != MASTER_ID
        return FoundBroker(addr, slave) if addr is not None else None

    def find_broker_addr_by_topic(self, topic: str) -> str | None:
        """A random broker of the topic's route: its master, else a random slave (B-50)."""
        route = self.routes.get(topic)
        if route is None or not route.broker_datas:
            return None
        addrs = random.choice(route.broker_datas).broker_addrs
        if not addrs:
            return None
        return addrs.get(MASTER_ID) or random.choice(list(addrs.values()))

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str] | None:
        """GET_CONSUMER_LIST_BY_GROUP from one broker of the topic (B-50); None when unavailable."""
        addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            await self.update_route(topic)
            addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            return None
        try:
            response = await self.invoke(
                addr,
                self.request(
                    RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                    ConsumerGroupRequestHeader(consumer_group=group),
                ),
            )
        except RemotingError as exc:
            log.warning("consumer list of %s from %s: %s", group, addr, exc)
            return None
        if response.code != ResponseCode.SUCCESS:
            log.info("consumer list of %s from %s: %s", group, addr, response.remark)
            return None
        try:
            return list(GetConsumerListByGroupResponseBody.decode(response.body).consumer_id_list)
        except BodyDecodeError:
            return None

    # ------------------------------------------------------------------ heartbeat
    def heartbeat_now(self) -> None:
        """Send the heartbeat at once instead of at the next period."""
        self._heartbeat_now.set()

    async def send_heartbeat_to_all_brokers(self) -> None:
        """HEART_BEAT with every producer and consumer group (docs/protocol.md §7.3.1, §9.3).

        Producer-only clients tell masters only; with consumers, slaves too.
        """
        async with self._heartbeat_lock:
            if not self._producers and not self._consumers:
                return
            data = HeartbeatData(
                client_id=self.client_id,
                producer_data_set=tuple(ProducerData(group) for group in self._producers),
                consumer_data_set=tuple(c.consumer_data() for c in self._consumers.values()),
            )
            body = data.encode()
            for addrs in list(self.broker_addrs.values()):
                for broker_id, addr in list(addrs.items()):
                    if not self._consumers and broker_id != MASTER_ID:
                        continue
                    try:
                        response = await self.invoke(
                            addr,
                            request(RequestCode.HEART_BEAT, None, body, language=self.language),
                        )
                    except RemotingError as exc:
                        self.heartbeats.no_answer(addr, exc)
                        continue
                    self.heartbeats.answered(addr, response)

    async def _heartbeat_loop(self) -> None:
        while True:
            with anyio.move_on_after(self.config.heartbeat_broker_interval):
                await self._heartbeat_now.wait()
            self._heartbeat_now = anyio.Event()
            await self.send_heartbeat_to_all_brokers()

    # ------------------------------------------------------------------ broker -> client
    async def _on_request(
        self, channel: Channel, command: RemotingCommand
    ) -> RemotingCommand | None:
        """Requests a broker sends us (docs/protocol.md §7.7)."""
        code = command.code
        if code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            for member in list(self._consumers.values()):
                member.rebalance_now()
            return None
        if code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            self._reset_requested(command)
            return None
        if code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT:
            return self.replies.receive(command)
        if code == RequestCode.CHECK_TRANSACTION_STATE:
            self._check_transaction_state(channel, command)
            return None
        if code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return await self._running_info(command)
        if command.is_oneway:
            return None
        return response_to(
            command,
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f"The request code {code} is not supported by this client",
        )

    async def _running_info(self, command: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO: the group's member answers; one with `running_info_now`
        (the gRPC proxy's 5.x consumers) is awaited, with whether the thread stacks are asked."""
        try:
            header = GetConsumerRunningInfoRequestHeader.of(command)
            group: str | None = header.consumer_group
            jstack = bool(header.jstack_enable)
        except CommandError:
            group, jstack = None, False
        consumer = self._consumers.get(group or "")
        if consumer is None:
            return response_to(
                command,
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{group}> not exist in this consumer",
            )
        now = getattr(consumer, "running_info_now", None)
        info = await now(jstack) if now is not None else consumer.running_info()
        return response_to(command, ResponseCode.SUCCESS, body=info.encode())

    def _check_transaction_state(self, channel: Channel, command: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE: hand the half message to its group's transactional producer."""
        try:
            stored = decode_one(command.body)[0]
        except (MessageDecodeError, IndexError) as exc:
            log.warning("check transaction state: the message is unreadable: %s", exc)
            return
        producer = self._producers.get(stored.properties.get("PGROUP", ""))
        check = getattr(producer, "check_transaction_state", None)
        if check is None:
            log.debug("check transaction state: no transactional producer of that group here")
            return
        self._tasks.start_soon(check, channel.remote_addr, stored, command)

    def _reset_requested(self, command: RemotingCommand) -> None:
        try:
            notice = ResetOffsetRequestHeader.of(command)
        except CommandError as exc:
            log.info("reset offset notice without its group and topic: %s", exc)
            return  # B-78 step 1
        topic, group = notice.topic, notice.group
        consumer = self._consumers.get(group)
        if consumer is None or not topic:
            log.info("reset offset for %s/%s: no push consumer of that group here", group, topic)
            return  # B-78 step 1
        try:
            table = ResetOffsetBody.decode(command.body).offset_table if command.body else {}
        except BodyDecodeError as exc:
            log.warning("reset offset body from the broker is unreadable: %s", exc)
            return
        self._tasks.start_soon(self._reset_one_at_a_time, consumer, topic, table)

    async def _reset_one_at_a_time(
        self, consumer: ConsumerMember, topic: str, table: Mapping[MessageQueue, int]
    ) -> None:
        async with self._reset_lock:
            await consumer.reset_offset(topic, table)
