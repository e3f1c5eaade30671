"""The proxy's side of the cluster: 4.x clients of the brokers, one per account it acts for.

RocketMQ 5's proxy in cluster mode is a client of its brokers; so is this one,
built on the project's own client (es_broker/client). Without ACL there is one
`Side`, unsigned; with ACL each account a 5.x client signed as gets its own
client instance signing with that account's keys, so the brokers check every
request the way they check a 4.x client's (docs/protocol.md §15.5).

A transactional 5.x send goes out as a half message of the producer group
`PROXY_TX_<topic>`, which the proxy's client instance registers with the
brokers; the brokers' CHECK_TRANSACTION_STATE for it comes back here and is
handed to `on_check`, which forwards it to a 5.x producer over Telemetry.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio

from es_broker.acl.plain import Account
from es_broker.acl.signing import Credentials
from es_broker.client.config import ClientConfig
from es_broker.client.instance import ClientInstance
from es_broker.client.messages import Message, SendResult
from es_broker.client.producer import Producer
from es_broker.client.selectors import by_queue_id
from es_broker.client.send_tries import BrokerRefused, ClientError
from es_broker.net.tasks import TaskSpawner
from es_broker.net.tls import TlsClientSettings
from es_broker.remoting.bodies import (
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.headers import EndTransactionRequestHeader
from es_broker.remoting.message import StoredMessage, parse_offset_msg_id
from es_broker.remoting.response_headers import CheckTransactionStateRequestHeader

log = logging.getLogger(__name__)

SEND_GROUP = "PROXY_SEND_GROUP"
TX_GROUP_PREFIX = "PROXY_TX_"
TYPE_TTL = 3.0  # s a topic's message.type is kept before it is read again
GROUP_TTL = 3.0  # s a group's retryMaxTimes is kept before it is read again
COMMIT = 0x8  # MessageSysFlag.TRANSACTION_COMMIT_TYPE
ROLLBACK = 0xC  # MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TransactionId:
    """Where a half message lies: what END_TRANSACTION needs; the 5.x transaction id is its text."""

    broker_name: str
    commit_log_offset: int
    queue_offset: int

    def text(self) -> str:
        return f"{self.broker_name}:{self.commit_log_offset}:{self.queue_offset}"

    @classmethod
    def parse(cls, text: str) -> TransactionId:
        """Raises ValueError for a text no `text()` made."""
        name, offset, queue_offset = text.rsplit(":", 2)
        if not name or not offset.isdigit() or not queue_offset.isdigit():
            raise ValueError(f"not a transaction id of this proxy: {text!r}")
        return cls(name, int(offset), int(queue_offset))


@dataclass(frozen=True, slots=True)
class Check:
    """A broker's transaction check, as the proxy forwards it to a 5.x producer."""

    side: Side
    topic: str
    stored: StoredMessage
    transaction_id: TransactionId


OnCheck = Callable[[Check], Awaitable[None]]


class TxProducer(Producer):
    """The half messages of one topic (group PROXY_TX_<topic>); its checks go to `on_check`."""

    def __init__(self, side: Side, topic: str) -> None:
        super().__init__(
            ";".join(side.instance.namesrv_addrs), TX_GROUP_PREFIX + topic, instance=side.instance
        )
        self.side = side
        self.topic = topic

    async def check_transaction_state(
        self, addr: str, stored: StoredMessage, command: RemotingCommand
    ) -> None:
        check = CheckTransactionStateRequestHeader.of(command)
        name = self.side.broker_name_of(addr)
        if name is None:
            log.warning("a transaction check from %s, a broker no route names", addr)
            return
        txid = TransactionId(
            name,
            check.commit_log_offset or stored.physical_offset,
            check.tran_state_table_offset or stored.queue_offset,
        )
        await self.side.on_check(Check(self.side, self.topic, stored, txid))


class Kept(Generic[T]):
    """Values read from the brokers by name, each kept `ttl` seconds before it is read again."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._values: dict[str, tuple[float, T]] = {}

    async def get(self, name: str, read: Callable[[], Awaitable[T]]) -> T:
        now = time.monotonic()
        kept = self._values.get(name)
        if kept is not None and now - kept[0] < self.ttl:
            return kept[1]
        value = await read()
        self._values[name] = (now, value)
        return value


class Side:
    """One client instance of the cluster and the producers the proxy sends with."""

    def __init__(
        self,
        namesrv: str,
        credentials: Credentials | None,
        on_check: OnCheck,
        client_ip: str,
        tls: TlsClientSettings | None = None,
    ) -> None:
        self.instance = ClientInstance(
            namesrv, credentials=credentials, client_ip=client_ip, config=client_config(tls)
        )
        self.on_check = on_check
        self.producer = Producer(namesrv, SEND_GROUP, instance=self.instance)
        self.tx_producers: dict[str, TxProducer] = {}
        self._types: Kept[str | None] = Kept(TYPE_TTL)
        self._groups: Kept[int | None] = Kept(GROUP_TTL)
        self._nursery: TaskSpawner | None = None
        self._tx_lock = anyio.Lock()

    async def start(self, nursery: TaskSpawner) -> None:
        self._nursery = nursery
        await self.producer.start(nursery)

    async def stop(self) -> None:
        for producer in list(self.tx_producers.values()):
            await producer.shutdown()
        await self.producer.shutdown()

    # ------------------------------------------------------------------ routes and topics
    async def route(self, topic: str) -> TopicRouteData | None:
        """The topic's route read now from the name server (QueryRoute, a client's every 30 s)."""
        return await self.instance.update_route(topic)

    async def known_route(self, topic: str) -> TopicRouteData | None:
        """The route the client instance holds (its poll keeps it fresh), else read now."""
        route = self.instance.routes.get(topic)
        return route if route is not None else await self.route(topic)

    def broker_name_of(self, addr: str) -> str | None:
        for name, addrs in self.instance.broker_addrs.items():
            if addr in addrs.values():
                return name
        return None

    def master(self, broker_name: str) -> str:
        addr = self.instance.find_broker_address_in_publish(broker_name)
        if addr is None:
            raise ClientError(f"the broker {broker_name} has no master in the route")
        return addr

    async def message_type(self, topic: str, route: TopicRouteData) -> str | None:
        """The topic's `message.type` attribute on its brokers (None: not set), kept TYPE_TTL s."""

        async def read() -> str | None:
            body = await self._ask_first_master(route, RequestCode.GET_ALL_TOPIC_CONFIG)
            if body is None:
                return None
            config = TopicConfigSerializeWrapper.decode(body).topic_config_table.get(topic)
            return config.message_type() if config is not None else None

        return await self._types.get(topic, read)

    async def retry_max_times(self, group: str, route: TopicRouteData) -> int | None:
        """The subscription group's retryMaxTimes on the first master of `route` (None: the
        broker has no such group), kept GROUP_TTL s (RocketMQ 5's subscription group cache)."""

        async def read() -> int | None:
            body = await self._ask_first_master(route, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            if body is None:
                return None
            config = SubscriptionGroupWrapper.decode(body).subscription_group_table.get(group)
            return config.retry_max_times if config is not None else None

        return await self._groups.get(group, read)

    async def _ask_first_master(self, route: TopicRouteData, code: int) -> bytes | None:
        """The body of `code` answered by the first master `route` lists (None: it lists none)."""
        for data in route.broker_datas:
            addr = data.broker_addrs.get(0)
            if addr is None:
                continue
            answer = await self.instance.invoke(addr, self.instance.request(code))
            if answer.code != ResponseCode.SUCCESS:
                raise BrokerRefused(answer.code, answer.remark, addr)
            return answer.body
        return None

    # ------------------------------------------------------------------ sending
    async def send(
        self, topic: str, message: Message, queue_id: int | None, broker: str | None
    ) -> SendResult:
        if queue_id is None:
            return await self.producer.send_message(topic, message)
        return await self.producer.send_message(
            topic, message, queue_selector=by_queue_id(queue_id, broker)
        )

    async def tx_producer(self, topic: str) -> TxProducer:
        async with self._tx_lock:
            producer = self.tx_producers.get(topic)
            if producer is None:
                assert self._nursery is not None, "the side is not started"
                producer = TxProducer(self, topic)
                await producer.start(self._nursery)
                self.tx_producers[topic] = producer
            return producer

    async def send_half(self, topic: str, message: Message) -> tuple[SendResult, TransactionId]:
        producer = await self.tx_producer(topic)
        props = dict(message.properties)
        props["TRAN_MSG"] = "true"
        props["PGROUP"] = producer.group
        result = await producer.send_message(topic, dataclasses.replace(message, properties=props))
        _, offset = parse_offset_msg_id(result.offset_msg_id)
        return result, TransactionId(result.queue.broker_name, offset, result.queue_offset)

    async def end_transaction(
        self, topic: str, msg_id: str, txid: TransactionId, commit: bool, from_check: bool
    ) -> None:
        """END_TRANSACTION, one way, to the master holding the half message."""
        header = EndTransactionRequestHeader(
            producer_group=TX_GROUP_PREFIX + topic,
            tran_state_table_offset=txid.queue_offset,
            commit_log_offset=txid.commit_log_offset,
            commit_or_rollback=COMMIT if commit else ROLLBACK,
            from_transaction_check=from_check,
            msg_id=msg_id,
            transaction_id=msg_id,
        )
        command = self.instance.request(RequestCode.END_TRANSACTION, header, oneway=True)
        await self.instance.invoke_oneway(self.master(txid.broker_name), command)


def client_config(tls: TlsClientSettings | None) -> ClientConfig:
    """The proxy's client settings toward the brokers: TLS when the brokers ask for it."""
    if tls is None:
        return ClientConfig()
    return ClientConfig(use_tls=True, tls_ca_file=tls.ca_file, tls_test_mode=tls.test_mode)


def _credentials(account: Account | None) -> Credentials | None:
    return None if account is None else Credentials(account.access_key, account.secret_key)


class Cluster:
    """The sides the proxy has opened, by account (None: no ACL)."""

    def __init__(
        self, namesrv: str, on_check: OnCheck, client_ip: str, tls: TlsClientSettings | None = None
    ) -> None:
        self.namesrv = namesrv
        self.on_check = on_check
        self.client_ip = client_ip
        self.tls = tls
        self._sides: dict[str | None, Side] = {}
        self._lock = anyio.Lock()
        self._nursery: TaskSpawner | None = None

    async def start(self, nursery: TaskSpawner, *, unsigned: bool = True) -> None:
        """Open the unsigned side now unless every call is signed (ACL): sides open on first use."""
        self._nursery = nursery
        if unsigned:
            await self.side(None)

    async def side(self, account: Account | None) -> Side:
        key = None if account is None else account.access_key
        async with self._lock:
            side = self._sides.get(key)
            if side is not None and _credentials(account) != side.instance.config.credentials:
                await side.stop()  # the account's secret changed in the ACL files
                side = None
            if side is None:
                assert self._nursery is not None, "the cluster is not started"
                side = Side(
                    self.namesrv, _credentials(account), self.on_check, self.client_ip, self.tls
                )
                await side.start(self._nursery)
                self._sides[key] = side
            return side

    def existing(self, access_key: str | None) -> Side | None:
        """The side already open for an account (None: the unsigned one)."""
        return self._sides.get(access_key)

    async def stop(self) -> None:
        for side in list(self._sides.values()):
            with anyio.CancelScope(shield=True):
                await side.stop()
        self._sides.clear()
