"""What every consumer of a group is to its client instance (Java MQConsumerInner).

The push consumers and the lite pull consumer share their identity (group,
message model, where to start, client instance), their subscriptions and the
routes' queues, the offset store, the rebalance timer and the answers the
instance gives for them (heartbeat data, running info). Each one keeps its own
table of held queues and says how it pulls and consumes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar, TypedDict, Unpack

import anyio

from es_broker.acl.signing import Credentials
from es_broker.client.config import ClientConfig, default_consume_timestamp
from es_broker.client.instance import ClientInstance
from es_broker.client.message_selector import MessageSelector
from es_broker.client.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from es_broker.client.process_queue import ProcessQueue
from es_broker.client.pulling import query_offset
from es_broker.client.rebalance import allocate_queues, compute_pull_from_where
from es_broker.client.route import subscribe_queues
from es_broker.client.subscription import (
    ConsumeFromWhere,
    MessageModel,
    build_subscription,
    parse_consume_timestamp,
)
from es_broker.net.tasks import Service, TaskGroup, TaskSpawner
from es_broker.remoting.bodies import (
    ConsumerData,
    ConsumerRunningInfo,
    MessageQueue,
    ProcessQueueInfo,
    SubscriptionData,
    TopicRouteData,
)


class GroupConsumerOptions(TypedDict, total=False):
    """The keywords every consumer takes besides its own: its group's ways and its client instance."""

    message_model: MessageModel  # CLUSTERING by default
    consume_from_where: ConsumeFromWhere  # CONSUME_FROM_LAST_OFFSET by default
    consume_timestamp: str | None  # yyyyMMddHHmmss; half an hour ago by default
    instance_name: str | None
    client_ip: str | None
    client_config: ClientConfig | None
    instance: ClientInstance | None  # share a client instance (its credentials must match)
    credentials: Credentials | None  # sign every request of the client instance


class GroupConsumer(Service):
    """A consumer registered at its client instance under its group; subclasses pull and consume."""

    consume_type: ClassVar[str]  # CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)
    # how the start offset is read from the offset store (B-45)
    _start_offset_read_type: ClassVar[ReadOffsetType] = ReadOffsetType.READ_FROM_STORE
    # a retry topic of a CONSUME_FROM_TIMESTAMP group starts at its max offset, else at 0
    _retry_at_timestamp_from_max: ClassVar[bool] = True

    def __init__(
        self,
        namesrv_addr: str,
        group: str,
        offset_rpc_timeout: float,
        **options: Unpack[GroupConsumerOptions],
    ) -> None:
        unknown = options.keys() - GroupConsumerOptions.__optional_keys__
        if unknown:  # a misspelt keyword fails as it would in a plain signature
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        self.group = group
        self.message_model = options.get("message_model", MessageModel.CLUSTERING)
        self.consume_from_where = options.get(
            "consume_from_where", ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        )
        self.consume_timestamp = options.get("consume_timestamp") or default_consume_timestamp()
        # a bad one fails here, not at the first rebalance
        parse_consume_timestamp(self.consume_timestamp)
        self._offset_rpc_timeout = offset_rpc_timeout
        instance = options.get("instance")
        credentials = options.get("credentials")
        if instance is not None:
            instance.check_credentials(credentials)
        self.instance = instance or ClientInstance(
            namesrv_addr,
            instance_name=options.get("instance_name"),
            client_ip=options.get("client_ip"),
            config=options.get("client_config"),
            credentials=credentials,
        )
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._subscribe_info: dict[str, frozenset[MessageQueue]] = {}
        self._offset_store: OffsetStore | None = None
        self._tasks = TaskGroup()
        self._rebalance_wakeup = anyio.Event()
        self._rebalance_lock = anyio.Lock()
        self._allocation_event = anyio.Event()
        self._started = False

    # ------------------------------------------------------------------ public view
    @property
    def client_id(self) -> str:
        return self.instance.client_id

    @property
    def allocation_event(self) -> anyio.Event:
        """An event set at the next change of the held queues (take it, check, then wait)."""
        return self._allocation_event

    @property
    def offset_store(self) -> OffsetStore:
        raise NotImplementedError

    def _subscribe(self, topic: str, expression: str | MessageSelector) -> None:
        """Add or change a subscription; a started consumer announces it and rebalances."""
        self._subscriptions[topic] = build_subscription(topic, expression)
        if self._started:
            self.instance.heartbeat_now()
            self.rebalance_now()

    def _held(self) -> Mapping[MessageQueue, ProcessQueue]:
        """The process queue of every queue held now."""
        raise NotImplementedError

    # ------------------------------------------------------------------ life cycle
    async def _join_instance(self, nursery: TaskSpawner) -> None:
        """Register the group at the client instance and take a share of it (started if first)."""
        self.instance.register_consumer(self)
        try:
            await self.instance.acquire(nursery)
        except BaseException:
            await self.instance.unregister_consumer(self.group)
            raise

    def _open_offset_store(self, store_dir: str | None) -> OffsetStore:
        """The broker's offset table in CLUSTERING mode (B-41), a local file in BROADCASTING (B-43)."""
        if self.message_model == MessageModel.CLUSTERING:
            self._offset_store = RemoteBrokerOffsetStore(
                self.instance, self.group, self._offset_rpc_timeout
            )
        else:
            self._offset_store = LocalFileOffsetStore(store_dir, self.client_id, self.group)
        return self._offset_store

    async def _leave_instance(self) -> None:
        """Stop the tasks, persist the held queues' offsets and unregister the group."""
        self._started = False
        await self._tasks.stop()
        held = self._held()
        if self._offset_store is not None:
            await self._offset_store.persist_all(set(held))
        await self.instance.unregister_consumer(self.group)
        for pq in held.values():
            pq.drop()

    # ------------------------------------------------------------------ instance member
    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=self.consume_type,
            message_model=self.message_model.value,
            consume_from_where=self.consume_from_where.value,
            subscription_data_set=tuple(self._subscriptions.values()),
        )

    def subscribed_topics(self) -> Iterable[str]:
        return list(self._subscriptions)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        if topic in self._subscriptions:
            self._subscribe_info[topic] = subscribe_queues(topic, route)

    def rebalance_now(self) -> None:
        """Rebalance at once (NOTIFY_CONSUMER_IDS_CHANGED, resume, start: B-53)."""
        self._rebalance_wakeup.set()

    async def reset_offset(self, topic: str, table: Mapping[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET from a broker: start the queues of `topic` at `table`."""
        raise NotImplementedError

    def running_info(self) -> ConsumerRunningInfo:
        """The answer to GET_CONSUMER_RUNNING_INFO (docs/protocol.md §9.10), without statistics."""
        offsets = self._offset_store.offsets() if self._offset_store else {}
        return ConsumerRunningInfo(
            properties={
                "consumeType": self.consume_type,
                "messageModel": self.message_model.value,
                "consumeFromWhere": self.consume_from_where.value,
                "clientId": self.client_id,
            },
            subscription_set=tuple(self._subscriptions.values()),
            mq_table={
                mq: ProcessQueueInfo(
                    commit_offset=offsets.get(mq, -1),
                    cached_msg_count=pq.msg_count,
                    cached_msg_size_in_mi_b=pq.msg_size // (1024 * 1024),
                    droped=pq.dropped,
                )
                for mq, pq in self._held().items()
            },
        )

    # ------------------------------------------------------------------ rebalance
    async def _rebalance_loop(self, interval: float) -> None:
        """Rebalance every `interval` seconds, or at once when woken."""
        while True:
            with anyio.move_on_after(interval):
                await self._rebalance_wakeup.wait()
            self._rebalance_wakeup = anyio.Event()
            await self.do_rebalance()

    async def do_rebalance(self) -> None:
        raise NotImplementedError

    async def _allocate(self, topic: str) -> set[MessageQueue] | None:
        """The topic's queues this client takes now, or None to keep what it holds (B-50)."""
        return await allocate_queues(
            self.instance, self.group, self.message_model, topic, self._subscribe_info
        )

    async def _compute_pull_from_where(self, mq: MessageQueue) -> int:
        """The B-45 table; -1 means skip this queue for now."""
        return await compute_pull_from_where(
            self.offset_store,
            mq,
            self.consume_from_where,
            self.consume_timestamp,
            self._position,
            read_type=self._start_offset_read_type,
            retry_at_timestamp_from_max=self._retry_at_timestamp_from_max,
        )

    def _allocation_changed(self) -> None:
        self._allocation_event.set()
        self._allocation_event = anyio.Event()

    async def _position(self, mq: MessageQueue, code: int, timestamp: int | None = None) -> int:
        """GET_MIN/MAX_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP at the queue's master (B-49)."""
        return await query_offset(self.instance, mq, code, timestamp, self._offset_rpc_timeout)
