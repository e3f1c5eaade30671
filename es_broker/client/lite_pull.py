"""The lite pull consumer (Java DefaultLitePullConsumer, 4.9.8's DefaultLitePullConsumerImpl).

The application asks for messages: `await consumer.poll(timeout)`. Behind it,
one pull task per assigned queue long-polls the broker and puts what it found
in a shared cache, as far as the flow-control thresholds allow. Queues are
either assigned by the application (`assign`, no rebalance) or allocated by
rebalancing the subscribed topics over the group (`subscribe`, B-50..B-56);
the two are exclusive, as in Java. `seek`, `seek_to_begin`, `seek_to_end` and
`seek_to_time` move a queue's next pull; `pause`/`resume` stop and restart
pulling of queues. With auto-commit (the default) every poll first commits the
polled offsets once the commit interval has passed; `commit_sync` commits now
and waits for the broker. B-242..B-244.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Unpack

import anyio

from es_broker.client.consumer_base import GroupConsumer, GroupConsumerOptions
from es_broker.client.messages import ReceivedMessage
from es_broker.client.offset_store import (
    OffsetStore,
    ReadOffsetType,
)
from es_broker.client.process_queue import ProcessQueue
from es_broker.client.pulling import (
    PullRequest,
    PullResult,
    PullStatus,
    pull_message,
    pull_retry_delay,
)
from es_broker.client.route import subscribe_queues
from es_broker.client.send_tries import ClientError
from es_broker.client.subscription import build_subscription
from es_broker.net.remoting_client import RemotingError
from es_broker.net.tasks import TaskSpawner
from es_broker.remoting.bodies import (
    MessageQueue,
    SubscriptionData,
)
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.pull_flags import PullSysFlag

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LitePullConsumerConfig:
    """DefaultLitePullConsumer settings, Java's defaults; seconds where Java has milliseconds."""

    pull_batch_size: int = 10  # pullBatchSize
    pull_threshold_for_all: int = 10_000  # pullThresholdForAll (cached requests x batch size)
    pull_threshold_for_queue: int = 1000  # pullThresholdForQueue (messages)
    pull_threshold_size_for_queue: int = 100  # pullThresholdSizeForQueue (MiB)
    consume_max_span: int = 2000  # consumeMaxSpan
    poll_timeout: float = 5.0  # pollTimeoutMillis: poll() without a timeout
    auto_commit: bool = True  # autoCommit
    auto_commit_interval: float = 5.0  # autoCommitIntervalMillis
    broker_suspend_max_time_millis: int = 20_000  # brokerSuspendMaxTimeMillis
    consumer_timeout_when_suspend: float = 30.0  # consumerTimeoutMillisWhenSuspend
    pull_time_delay_when_exception: float = 1.0  # pullTimeDelayMillsWhenException
    pull_time_delay_when_pause: float = 1.0  # PULL_TIME_DELAY_MILLS_WHEN_PAUSE
    pull_time_delay_when_flow_control: float = 0.05  # ..._WHEN_CACHE_FLOW_CONTROL
    pull_time_delay_when_broker_flow_control: float = 0.02  # ..._WHEN_BROKER_FLOW_CONTROL
    rebalance_interval: float = 20.0  # rocketmq.client.rebalance.waitInterval
    persist_consumer_offset_interval: float = 5.0  # persistConsumerOffsetInterval
    offset_rpc_timeout: float = 5.0
    offset_store_dir: str | None = None  # BROADCASTING: rocketmq.client.localOffsetStoreDir

    def replace(self, **changes: object) -> LitePullConsumerConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


class SubscriptionType(Enum):
    NONE = "NONE"
    SUBSCRIBE = "SUBSCRIBE"
    ASSIGN = "ASSIGN"


@dataclass(slots=True)
class _Assigned:
    """One queue's state (Java AssignedMessageQueue's MessageQueueState)."""

    pq: ProcessQueue = field(default_factory=ProcessQueue)
    paused: bool = False
    seek_offset: int = -1
    pull_offset: int = -1
    consume_offset: int = -1
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    pulling: anyio.CancelScope | None = None  # the scope of the running pull task


_Request = tuple[list[ReceivedMessage], MessageQueue, ProcessQueue]


class LitePullConsumer(GroupConsumer):
    """Pull consumption driven by `poll`: `assign` or `subscribe`, then `await consumer.poll(timeout)`."""

    consume_type = "CONSUME_ACTIVELY"
    _start_offset_read_type = ReadOffsetType.MEMORY_FIRST_THEN_STORE
    # RebalanceLitePullImpl starts such a retry topic at its max offset; this client at 0
    _retry_at_timestamp_from_max = False

    def __init__(
        self,
        namesrv_addr: str,
        group: str,
        *,
        config: LitePullConsumerConfig | None = None,
        **options: Unpack[GroupConsumerOptions],
    ) -> None:
        self.config = config or LitePullConsumerConfig()
        super().__init__(
            namesrv_addr,
            group,
            self.config.offset_rpc_timeout,
            **options,
        )
        self.subscription_type = SubscriptionType.NONE
        self._assign_expressions: dict[str, str] = {}  # setSubExpressionForAssign
        self._assigned: dict[MessageQueue, _Assigned] = {}
        self._cache: collections.deque[_Request] = collections.deque()
        self._arrived = anyio.Event()
        self._next_auto_commit = 0.0

    # ------------------------------------------------------------------ public view
    @property
    def offset_store(self) -> OffsetStore:
        if self._offset_store is None:
            raise ClientError("The consumer not running, please start it first.")
        return self._offset_store

    def assignment(self) -> frozenset[MessageQueue]:
        """The queues pulled now (assigned, or allocated by the last rebalance)."""
        return frozenset(self._assigned)

    # ------------------------------------------------------------------ subscribe / assign
    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume `topic` with queues allocated by rebalancing over the group (CLUSTERING)."""
        if self.subscription_type == SubscriptionType.ASSIGN:
            raise ClientError("Subscribe and assign are mutually exclusive.")
        self.subscription_type = SubscriptionType.SUBSCRIBE
        self._subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        if self._started:
            self._update_assigned(topic, set())

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no rebalance); replaces an earlier assignment."""
        if self.subscription_type == SubscriptionType.SUBSCRIBE:
            raise ClientError("Subscribe and assign are mutually exclusive.")
        self.subscription_type = SubscriptionType.ASSIGN
        wanted = set(queues)
        for mq in [mq for mq in self._assigned if mq not in wanted]:
            self._drop(mq)
        for mq in sorted(wanted):
            if mq not in self._assigned:
                self._assigned[mq] = _Assigned()
                if self._started:
                    self._start_pull(mq)
        self._allocation_changed()

    def set_sub_expression_for_assign(self, topic: str, expression: str) -> None:
        """The TAG expression pulls of assigned queues of `topic` carry (default `*`)."""
        self._assign_expressions[topic] = expression

    async def fetch_message_queues(self, topic: str) -> frozenset[MessageQueue]:
        """The topic's readable queues, from the name server."""
        route = await self.instance.update_route(topic)
        if route is None:
            raise ClientError(f"Can not find Message Queue for this topic, {topic}")
        return subscribe_queues(topic, route)

    # ------------------------------------------------------------------ life cycle
    async def start(self, nursery: TaskSpawner) -> None:
        await self._join_instance(nursery)
        try:
            await self._open_offset_store(self.config.offset_store_dir).load()
            await self._tasks.start(nursery)
            self._started = True
            self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval
            for topic in list(self._subscriptions):
                await self.instance.update_route(topic)
            await self.instance.send_heartbeat_to_all_brokers()
            if self.subscription_type == SubscriptionType.SUBSCRIBE:
                await self.do_rebalance()
        except BaseException:
            await self._stop()
            raise
        for mq in list(self._assigned):
            self._start_pull(mq)
        self._tasks.start_soon(self._rebalance_loop, self.config.rebalance_interval)
        self._tasks.start_soon(self._persist_loop)

    async def shutdown(self) -> None:
        """Commit (with auto-commit), persist the offsets and unregister."""
        if not self._started:
            return
        if self.config.auto_commit:
            self._commit_all()
        await self._stop()

    async def _stop(self) -> None:
        await self._leave_instance()
        await self.instance.release()

    def _held(self) -> Mapping[MessageQueue, ProcessQueue]:
        return {mq: state.pq for mq, state in self._assigned.items()}

    # ------------------------------------------------------------------ instance member
    def subscribed_topics(self) -> Iterable[str]:
        return sorted(set(self._subscriptions) | {mq.topic for mq in self._assigned})

    async def reset_offset(self, topic: str, table: Mapping[MessageQueue, int]) -> None:
        """An operator's reset: the assigned queues of `topic` in `table` are sought there (B-244)."""
        for mq, offset in table.items():
            state = self._assigned.get(mq)
            if mq.topic != topic or state is None:
                continue
            self.offset_store.update_offset(mq, offset, increase_only=False)
            self._seek_now(mq, offset)

    # ------------------------------------------------------------------ polling
    async def poll(self, timeout: float | None = None) -> list[ReceivedMessage]:
        """Messages of one pulled batch (one queue), or [] if none came within `timeout` s."""
        if not self._started:
            raise ClientError("The consumer not running, please start it first.")
        timeout = self.config.poll_timeout if timeout is None else timeout
        if timeout < 0:
            raise ValueError("Timeout must not be negative")
        if self.config.auto_commit and time.monotonic() >= self._next_auto_commit:
            self._commit_all()
            self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval
        with anyio.move_on_after(timeout):
            while True:
                while self._cache:
                    msgs, mq, pq = self._cache.popleft()
                    if pq.dropped:
                        continue
                    offset = pq.remove_messages(msgs)
                    state = self._assigned.get(mq)
                    if state is not None and state.pq is pq:
                        state.consume_offset = offset
                    return msgs
                await self._arrived.wait()
        return []

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stop pulling these queues (what is cached is still polled)."""
        for mq in queues:
            if (state := self._assigned.get(mq)) is not None:
                state.paused = True

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            if (state := self._assigned.get(mq)) is not None:
                state.paused = False

    def is_paused(self, mq: MessageQueue) -> bool:
        state = self._assigned.get(mq)
        return state is not None and state.paused

    # ------------------------------------------------------------------ seeking
    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Pull `mq` next from `offset` (between its min and max offset): its cached messages go."""
        if mq not in self._assigned:
            if self.subscription_type == SubscriptionType.SUBSCRIBE:
                raise ClientError(
                    f"The message queue is not in assigned list, may be rebalancing, message queue: {mq}"
                )
            raise ClientError(f"The message queue is not in assigned list, message queue: {mq}")
        low, high = await self.min_offset(mq), await self.max_offset(mq)
        if not low <= offset <= high:
            raise ClientError(
                f"Seek offset illegal, seek offset = {offset}, min offset = {low}, max offset = {high}"
            )
        self._seek_now(mq, offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.max_offset(mq))

    async def seek_to_time(self, mq: MessageQueue, timestamp_ms: int) -> None:
        """seek(mq, offsetForTimestamp(mq, timestamp_ms)): the first message stored at or after it."""
        await self.seek(mq, await self.offset_for_timestamp(mq, timestamp_ms))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP at the queue's master."""
        return await self._position(mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp_ms)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._position(mq, RequestCode.GET_MIN_OFFSET)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self._position(mq, RequestCode.GET_MAX_OFFSET)

    async def committed(self, mq: MessageQueue) -> int:
        """The committed offset: memory first, then the broker (-1: none)."""
        offset = await self.offset_store.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE)
        if offset == -2:
            raise ClientError("Fetch consume offset from broker exception")
        return offset

    def _seek_now(self, mq: MessageQueue, offset: int) -> None:
        state = self._assigned[mq]
        state.pq.clear()
        self._cache = collections.deque(r for r in self._cache if r[1] != mq)
        state.scope.cancel()  # the old pull task ends; a new one pulls from the seek offset
        state.scope = anyio.CancelScope()
        state.seek_offset = offset
        if self._started:
            self._start_pull(mq)

    # ------------------------------------------------------------------ committing
    def _commit_all(self) -> dict[MessageQueue, int]:
        committed = {}
        for mq, state in self._assigned.items():
            if state.consume_offset != -1 and not state.pq.dropped:
                self.offset_store.update_offset(mq, state.consume_offset, increase_only=False)
                committed[mq] = state.consume_offset
        return committed

    async def commit_sync(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit what was polled (or `offsets`) and wait until the broker stored it.

        Java's commitSync only updates the in-memory table that the 5 s persist
        sends; here the commit is also sent at once and awaited (B-243).
        """
        if offsets is None:
            committed: Collection[MessageQueue] = self._commit_all()
        else:
            for mq, offset in offsets.items():
                state = self._assigned.get(mq)
                if state is not None and not state.pq.dropped and offset != -1:
                    self.offset_store.update_offset(mq, offset, increase_only=False)
            committed = list(offsets)
        for mq in committed:
            await self.offset_store.persist(mq, oneway=False)

    async def _persist_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.persist_consumer_offset_interval)
            await self.offset_store.persist_all(set(self._assigned))

    # ------------------------------------------------------------------ rebalance
    async def do_rebalance(self) -> None:
        """RebalanceLitePullImpl: allocate each subscribed topic's queues, start and stop pull tasks."""
        if self.subscription_type != SubscriptionType.SUBSCRIBE:
            return  # assigned queues are not rebalanced
        async with self._rebalance_lock:
            for topic in list(self._subscriptions):
                allocated = await self._allocate(topic)
                if allocated is not None:
                    await self._rebalanced(topic, allocated)

    async def _rebalanced(self, topic: str, allocated: set[MessageQueue]) -> None:
        removed = [mq for mq in self._assigned if mq.topic == topic and mq not in allocated]
        added = [mq for mq in sorted(allocated) if mq not in self._assigned]
        for mq in removed:
            self._drop(mq)
            await self.offset_store.persist(mq, oneway=False)  # removeUnnecessaryMessageQueue
            self.offset_store.remove_offset(mq)
        for mq in added:
            self.offset_store.remove_offset(mq)  # a dirty offset from an earlier tenure
            self._assigned[mq] = _Assigned()
            self._start_pull(mq)
        if removed or added:
            self._allocation_changed()

    def _update_assigned(self, topic: str, allocated: set[MessageQueue]) -> None:
        for mq in [mq for mq in self._assigned if mq.topic == topic and mq not in allocated]:
            self._drop(mq)
        self._allocation_changed()

    def _drop(self, mq: MessageQueue) -> None:
        state = self._assigned.pop(mq)
        state.pq.drop()
        state.scope.cancel()
        if self.config.auto_commit and state.consume_offset != -1 and self._offset_store:
            self._offset_store.update_offset(mq, state.consume_offset, increase_only=False)

    # ------------------------------------------------------------------ pulling
    def _start_pull(self, mq: MessageQueue) -> None:
        """Start the queue's pull task unless one runs in its current scope (one per queue)."""
        state = self._assigned[mq]
        if state.pulling is state.scope:
            return
        state.pulling = state.scope
        self._tasks.start_soon(self._pull_task, mq, state, state.scope)

    async def _pull_task(
        self, mq: MessageQueue, state: _Assigned, scope: anyio.CancelScope
    ) -> None:
        cfg = self.config
        pq = state.pq
        with scope:
            # A seek cancels the scope; the task may still run on to its next checkpoint and
            # must neither take the new position's seek offset nor deliver its old answer.
            while not (pq.dropped or scope.cancel_called):
                if state.paused:
                    await anyio.sleep(cfg.pull_time_delay_when_pause)
                    continue
                if (
                    len(self._cache) * cfg.pull_batch_size > cfg.pull_threshold_for_all
                    or pq.msg_count > cfg.pull_threshold_for_queue
                    or pq.msg_size // (1024 * 1024) > cfg.pull_threshold_size_for_queue
                    or pq.max_span() > cfg.consume_max_span
                ):
                    await anyio.sleep(cfg.pull_time_delay_when_flow_control)
                    continue
                try:
                    offset = await self._next_pull_offset(mq, state)
                    if offset < 0:
                        raise ClientError(f"no start offset of {mq} yet")
                    result = await self._pull(mq, offset)
                except (RemotingError, ClientError) as exc:
                    log.info("pull %s: %s", mq, exc)
                    await anyio.sleep(pull_retry_delay(exc, cfg))
                    continue
                if pq.dropped or scope.cancel_called or state.seek_offset != -1:
                    continue  # a seek came meanwhile: this answer is of the old position
                next_begin = result.next_begin_offset
                if result.status == PullStatus.FOUND and result.messages:
                    msgs = list(result.messages)
                    pq.put_messages(msgs)
                    self._cache.append((msgs, mq, pq))
                    self._arrived.set()
                    self._arrived = anyio.Event()
                elif result.status == PullStatus.OFFSET_ILLEGAL:
                    log.warning("pull offset of %s illegal, next begin %d", mq, next_begin)
                state.pull_offset = next_begin

    async def _next_pull_offset(self, mq: MessageQueue, state: _Assigned) -> int:
        if state.seek_offset != -1:
            offset = state.seek_offset
            state.consume_offset = offset
            state.seek_offset = -1
            return offset
        if state.pull_offset != -1:
            return state.pull_offset
        return await self._compute_pull_from_where(mq)

    def _subscription(self, topic: str) -> SubscriptionData:
        if self.subscription_type == SubscriptionType.SUBSCRIBE and topic in self._subscriptions:
            return self._subscriptions[topic]
        return build_subscription(topic, self._assign_expressions.get(topic, "*"))

    async def _pull(self, mq: MessageQueue, offset: int) -> PullResult:
        """One PULL_MESSAGE as pullSyncImpl sends it: long-polled, subscription and lite flags set."""
        cfg = self.config
        sub = self._subscription(mq.topic)
        request = PullRequest(
            group=self.group,
            mq=mq,
            sub=sub,
            offset=offset,
            sys_flag=PullSysFlag.build(suspend=True, subscription=True, lite_pull=True),
            commit_offset=0,
            expression=sub.sub_string,
        )
        return await pull_message(self.instance, request, cfg)
