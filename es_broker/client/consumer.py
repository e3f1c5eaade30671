"""The push consumer (Java DefaultMQPushConsumer with a concurrent listener).

Per subscribed topic it rebalances (B-50..B-56), per assigned queue it runs
one pull loop that long-polls the broker (B-63, B-65..B-67, B-117) and hands
the messages to the handler; consumed offsets advance by the sliding window
of the process queue (B-42) and reach the broker through the offset store
(B-41) or a local file in BROADCASTING mode (B-43). Failed messages are sent
back (B-88, B-89), and a broker's reset request is applied in the order of B-78.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from enum import Enum
from typing import Unpack

import anyio

from es_broker.client import trace
from es_broker.client.config import (
    CLIENT_INNER_PRODUCER_GROUP,
    PushConsumerConfig,
)
from es_broker.client.consumer_base import GroupConsumer, GroupConsumerOptions
from es_broker.client.message_selector import TAG, MessageSelector
from es_broker.client.messages import (
    MAX_RECONSUME_TIMES,
    ORIGIN_MESSAGE_ID,
    RECONSUME_TIME,
    RETRY_TOPIC,
    TRAN_MSG,
    Message,
    ReceivedMessage,
    retry_topic,
)
from es_broker.client.offset_store import OffsetStore, ReadOffsetType
from es_broker.client.process_queue import ProcessQueue
from es_broker.client.producer import Producer, start_trace_dispatcher, stop_trace_dispatcher
from es_broker.client.pulling import (
    PullRequest,
    PullResult,
    PullStatus,
    pull_message,
    pull_retry_delay,
)
from es_broker.client.send_tries import BrokerRefused, ClientError
from es_broker.client.subscription import (
    ConsumeFromWhere,
    MessageModel,
    build_subscription,
    parse_consume_timestamp,
)
from es_broker.client.trace import TraceDispatcher
from es_broker.net.remoting_client import RemotingError
from es_broker.net.tasks import TaskSpawner
from es_broker.remoting.bodies import (
    CheckClientRequestBody,
    MessageQueue,
    SubscriptionData,
)
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.headers import ConsumerSendMsgBackRequestHeader
from es_broker.remoting.pull_flags import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND
from es_broker.remoting.trace_data import TraceContext

__all__ = [
    "ConsumeFromWhere",
    "ConsumeRequest",
    "ConsumeResult",
    "Handler",
    "MessageModel",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "build_subscription",
    "parse_consume_timestamp",
]

log = logging.getLogger(__name__)

# a worker takes at most this many queued consume requests before it lets the scheduler run others
_TAKEN_WITHOUT_YIELDING = 32
# ConsumeReturnType's ordinals, a SubAfter context's contextCode
CONSUME_SUCCESS_CODE, CONSUME_EXCEPTION_CODE, CONSUME_NULL_CODE, CONSUME_FAILED_CODE = 0, 2, 3, 4


class ConsumeResult(Enum):
    """What a handler returns for its batch (B-87)."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Handler = Callable[[list[ReceivedMessage]], Awaitable[ConsumeResult]]
# Java's ConsumeRequest: messages of one queue for one handler call.
ConsumeRequest = tuple[list[ReceivedMessage], ProcessQueue, MessageQueue]


class PushConsumer(GroupConsumer):
    """Consumes the subscribed topics with `handler`, one batch of messages per call.

    `subscriptions` maps topic -> TAG expression (`*`, `TagA || TagB`). Use
    `await consumer.start(nursery)` / `await consumer.shutdown()`, or
    `async with PushConsumer(...) as consumer:`. With `credentials=Credentials(ak, sk)`
    every request of its client instance is signed: heartbeats, routes, pulls,
    offset commits, send-backs and its inner producer's re-sends.
    """

    def __init__(
        self,
        namesrv_addr: str,
        group: str,
        handler: Handler,
        *,
        subscriptions: Mapping[str, str | MessageSelector] | None = None,
        config: PushConsumerConfig | None = None,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
        **options: Unpack[GroupConsumerOptions],
    ) -> None:
        """`enable_msg_trace` (Java's enableMsgTrace): the SubBefore and SubAfter contexts of each
        consume go to `trace_topic` (RMQ_SYS_TRACE_TOPIC by default), 4.9.8's format (B-483)."""
        self.config = config or PushConsumerConfig()
        self._trace_wanted, self._trace_topic = enable_msg_trace, trace_topic
        self._trace: tuple[TraceDispatcher, Producer] | None = None
        super().__init__(
            namesrv_addr,
            group,
            self.config.offset_rpc_timeout,
            **options,
        )
        self.handler = handler
        for topic, expression in (subscriptions or {}).items():
            self._subscriptions[topic] = build_subscription(topic, expression)
        self._process_queues: dict[MessageQueue, ProcessQueue] = {}
        # per queue, the broker id the last pull suggested to pull from next (B-117)
        self._pull_from_which_node: dict[MessageQueue, int] = {}
        self._inner_producer: Producer | None = None
        self._owns_inner_producer = False
        self._paused = False
        self._resumed = anyio.Event()
        self._resumed.set()
        # Java's consume thread pool: consumeThreadMax workers take the consume requests in order.
        self._consume_requests, self._consume_queue = anyio.create_memory_object_stream[
            ConsumeRequest
        ](math.inf)

    consume_type = "CONSUME_PASSIVELY"
    # the pull loop's consumeConcurrentlyMaxSpan check (an orderly consumer skips it, as Java)
    _checks_span = True

    # ------------------------------------------------------------------ public view
    @property
    def offset_store(self) -> OffsetStore:
        if self._offset_store is None:
            raise RuntimeError("the consumer is not started")
        return self._offset_store

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Add or change a subscription (tags, or `MessageSelector.by_sql(...)`).

        A started consumer announces it and rebalances.
        """
        self._subscribe(topic, expression)

    def assigned_queues(self, topic: str | None = None) -> frozenset[MessageQueue]:
        """The queues this client holds now (not dropped), optionally of one topic."""
        return frozenset(
            mq
            for mq, pq in self._process_queues.items()
            if not pq.dropped and (topic is None or mq.topic == topic)
        )

    # ------------------------------------------------------------------ life cycle
    async def start(self, nursery: TaskSpawner) -> None:
        """Connect, announce the group, rebalance once; pulling and timers then run in `nursery`."""
        if self.message_model == MessageModel.CLUSTERING:
            # CLUSTERING also subscribes to %RETRY%G (B-55)
            self._subscriptions[retry_topic(self.group)] = build_subscription(
                retry_topic(self.group), "*"
            )
        await self._join_instance(nursery)
        try:
            store = self._open_offset_store(self.config.offset_store_dir)
            if self.message_model == MessageModel.CLUSTERING:
                # One inner producer per client instance (Java's CLIENT_INNER_PRODUCER), for send-back re-sends.
                shared = self.instance.producer(CLIENT_INNER_PRODUCER_GROUP)
                if isinstance(shared, Producer):
                    self._inner_producer = shared
                else:
                    self._inner_producer = Producer(
                        ";".join(self.instance.namesrv_addrs),
                        CLIENT_INNER_PRODUCER_GROUP,
                        instance=self.instance,
                    )
                    await self._inner_producer.start(nursery)
                    self._owns_inner_producer = True
            if self._trace_wanted:
                # the trace dispatcher's inner producer sends the contexts (Java's AsyncTraceDispatcher)
                self._trace = await start_trace_dispatcher(
                    self.instance, self.group, self._trace_topic, nursery
                )
            await store.load()
            await self._tasks.start(nursery)
            self._started = True
            for topic in list(self._subscriptions):
                await self.instance.update_route(topic)
            await self._check_client_in_broker()
            await self.instance.send_heartbeat_to_all_brokers()
            await self.do_rebalance()
        except BaseException:
            await self._stop()
            raise
        self._tasks.start_soon(self._rebalance_loop, self.config.rebalance_interval)
        self._tasks.start_soon(self._persist_loop)
        for _ in range(max(1, self.config.consume_thread_max)):
            self._tasks.start_soon(self._consume_worker)

    async def shutdown(self) -> None:
        """Stop pulling and consuming, persist offsets, unregister from the brokers (B-41)."""
        if self._started:
            await self._stop()

    async def _stop(self) -> None:
        if self._trace is not None:
            await stop_trace_dispatcher(*self._trace)
            self._trace = None
        await self._leave_instance()
        self._process_queues.clear()
        if self._inner_producer is not None and self._owns_inner_producer:
            await self._inner_producer.shutdown()
        await self.instance.release()

    async def _check_client_in_broker(self) -> None:
        """CHECK_CLIENT_CONFIG per non-TAG subscription, as Java's start does: a refusal fails start."""
        for sub in self._subscriptions.values():
            if sub.expression_type == TAG:
                continue
            addr = self.instance.find_broker_addr_by_topic(sub.topic)
            if addr is None:
                continue
            body = CheckClientRequestBody(
                client_id=self.client_id, group=self.group, subscription_data=sub
            ).encode()
            response = await self.instance.invoke(
                addr, self.instance.request(RequestCode.CHECK_CLIENT_CONFIG, None, body)
            )
            if response.code != ResponseCode.SUCCESS:
                raise BrokerRefused(response.code, response.remark, addr)

    def _held(self) -> Mapping[MessageQueue, ProcessQueue]:
        return self._process_queues

    # ------------------------------------------------------------------ rebalance
    async def do_rebalance(self) -> None:
        """One round over every subscribed topic, then drop queues of topics no longer subscribed."""
        async with self._rebalance_lock:
            for topic in list(self._subscriptions):
                await self._rebalance_by_topic(topic)
            for mq, pq in list(self._process_queues.items()):
                if mq.topic not in self._subscriptions:
                    pq.drop()
                    del self._process_queues[mq]
                    self._allocation_changed()

    async def _rebalance_by_topic(self, topic: str) -> None:
        allocated = await self._allocate(topic)
        if allocated is None:
            return
        changed, new_pulls = await self._update_process_queue_table(topic, allocated)
        if changed:
            # Java bumps the subscription version and heartbeats (B-54). It does so after
            # dispatching the new pulls, which then may meet SUBSCRIPTION_NOT_LATEST; we
            # heartbeat first.
            sub = self._subscriptions.get(topic)
            if sub is not None:
                self._subscriptions[topic] = dataclasses.replace(
                    sub, sub_version=int(time.time() * 1000)
                )
            await self.instance.send_heartbeat_to_all_brokers()
            self._allocation_changed()
        for mq, pq, offset in new_pulls:
            self._tasks.start_soon(self._pull_loop, mq, pq, offset)

    async def _update_process_queue_table(
        self, topic: str, allocated: set[MessageQueue]
    ) -> tuple[bool, list[tuple[MessageQueue, ProcessQueue, int]]]:
        changed = False
        for mq, pq in list(self._process_queues.items()):
            if mq.topic != topic:
                continue
            if mq not in allocated or pq.is_pull_expired(self.config.pull_max_idle_time):
                pq.drop()
                await self._remove_unnecessary_queue(mq)
                if self._process_queues.get(mq) is pq:
                    del self._process_queues[mq]
                changed = True
        new_pulls = []
        for mq in sorted(allocated):
            if mq in self._process_queues:
                continue
            self.offset_store.remove_offset(mq)  # a dirty offset from an earlier tenure (B-44)
            if not await self._claim(mq):
                continue  # the orderly consumer takes only queues it could lock
            try:
                offset = await self._compute_pull_from_where(mq)
            except (RemotingError, ClientError) as exc:
                log.warning("start offset of %s: %s", mq, exc)
                continue  # retried at the next round (B-45 "skip")
            if offset < 0:
                log.info("start offset of %s unknown, skipped this round", mq)
                continue
            pq = self._new_process_queue(mq)
            self._process_queues[mq] = pq
            new_pulls.append((mq, pq, offset))
            changed = True
        return changed, new_pulls

    async def _claim(self, mq: MessageQueue) -> bool:
        """Whether a newly allocated queue is taken now (always, for a concurrent listener)."""
        return True

    def _new_process_queue(self, mq: MessageQueue) -> ProcessQueue:
        return ProcessQueue()

    async def _remove_unnecessary_queue(self, mq: MessageQueue, oneway: bool = True) -> None:
        """Persist the queue's offset, then forget it (B-44)."""
        await self.offset_store.persist(mq, oneway)
        self.offset_store.remove_offset(mq)

    # ------------------------------------------------------------------ where to start
    # ------------------------------------------------------------------ pulling
    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        cfg = self.config
        with pq.pull_scope:
            while not pq.dropped:
                if self._paused:
                    await self._resumed.wait()
                    continue
                pq.last_pull_time = time.monotonic()
                if (
                    pq.msg_count > cfg.pull_threshold_for_queue
                    or pq.msg_size > cfg.pull_threshold_size_for_queue
                    or (self._checks_span and pq.max_span() > cfg.consume_concurrently_max_span)
                ):
                    # local flow control (B-42)
                    await anyio.sleep(cfg.pull_time_delay_when_flow_control)
                    continue
                gated = await self._pull_gate(mq, pq, next_offset)
                if gated is None:
                    continue
                next_offset = gated
                sub = self._subscriptions.get(mq.topic)
                if sub is None:
                    await anyio.sleep(cfg.pull_time_delay_when_exception)
                    continue
                try:
                    result = await self._pull(mq, sub, next_offset)
                except (RemotingError, ClientError) as exc:
                    log.info("pull %s at %d: %s", mq, next_offset, exc)
                    await anyio.sleep(pull_retry_delay(exc, cfg))
                    continue
                # every decoded pull answer's suggestion is followed (B-117)
                self._pull_from_which_node[mq] = result.suggest_which_broker_id
                next_offset = result.next_begin_offset
                if result.status == PullStatus.FOUND:
                    if result.messages and not pq.dropped:
                        pq.put_messages(result.messages)
                        self._submit_consume(list(result.messages), pq, mq)
                elif result.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
                    if pq.msg_count == 0:  # correctTagsOffset (B-66)
                        self.offset_store.update_offset(mq, next_offset, increase_only=True)
                else:  # OFFSET_ILLEGAL (B-67)
                    pq.drop()
                    self._tasks.start_soon(self._correct_offset_later, mq, pq, next_offset)
                    return

    async def _pull_gate(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> int | None:
        """The offset to pull from now, or None to look again (it waited). The orderly consumer pulls only locked queues."""
        return next_offset

    async def _pull(self, mq: MessageQueue, sub: SubscriptionData, offset: int) -> PullResult:
        """One PULL_MESSAGE as the Java push consumer sends it (docs/protocol.md §7.4.6)."""
        cfg = self.config
        sys_flag = PULL_SUSPEND
        commit_offset = 0
        if self.message_model == MessageModel.CLUSTERING:
            commit_offset = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
            if commit_offset > 0:  # B-31: only a positive in-memory offset is piggybacked
                sys_flag |= PULL_COMMIT_OFFSET
        expression = (
            sub.sub_string
            if cfg.post_subscription_when_pull and not sub.class_filter_mode
            else None
        )
        if expression is not None:
            sys_flag |= PULL_SUBSCRIPTION
        request = PullRequest(
            group=self.group,
            mq=mq,
            sub=sub,
            offset=offset,
            sys_flag=sys_flag,
            commit_offset=commit_offset,
            expression=expression,
            broker_id=self._pull_from_which_node.get(mq, 0),
        )
        return await pull_message(self.instance, request, cfg)

    async def _correct_offset_later(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        """B-67: after the delay, take the broker's corrected offset and let the next rebalance restart."""
        await anyio.sleep(self.config.offset_illegal_delay)
        self.offset_store.update_offset(mq, offset, increase_only=False)
        await self.offset_store.persist(mq)
        if self._process_queues.get(mq) is pq:
            del self._process_queues[mq]
            await self._remove_unnecessary_queue(mq)
            self._allocation_changed()

    # ------------------------------------------------------------------ consuming
    def _submit_consume(
        self, msgs: Sequence[ReceivedMessage], pq: ProcessQueue, mq: MessageQueue
    ) -> None:
        """One consume request per consumeMessageBatchMaxSize messages, to the workers' queue."""
        size = max(1, self.config.consume_message_batch_max_size)
        submit = self._consume_requests.send_nowait
        if size == 1:
            for msg in msgs:
                submit(([msg], pq, mq))
        else:
            for i in range(0, len(msgs), size):
                submit((list(msgs[i : i + size]), pq, mq))

    async def _consume_worker(self) -> None:
        """Consume requests as they come; those already queued are taken without a scheduler pass
        each (up to a pull's worth), while the other workers go on taking from the same queue."""
        queue = self._consume_queue
        async for request in queue:
            await self._consume(*request)
            for _ in range(_TAKEN_WITHOUT_YIELDING):
                try:
                    request = queue.receive_nowait()
                except anyio.WouldBlock:
                    break
                except anyio.EndOfStream:
                    return
                await self._consume(*request)

    async def _consume(
        self, msgs: list[ReceivedMessage], pq: ProcessQueue, mq: MessageQueue
    ) -> None:
        if pq.dropped:
            return
        msgs = [self._with_original_topic(m) for m in msgs]
        before = self._trace_before(msgs)
        code = CONSUME_SUCCESS_CODE
        try:
            result = await self.handler(list(msgs))
        except Exception:
            log.exception("handler of %s failed on %s", self.group, mq)
            result, code = ConsumeResult.RECONSUME_LATER, CONSUME_EXCEPTION_CODE
        if not isinstance(result, ConsumeResult):
            result, code = ConsumeResult.RECONSUME_LATER, CONSUME_NULL_CODE  # a failure (B-87)
        elif result == ConsumeResult.RECONSUME_LATER and code == CONSUME_SUCCESS_CODE:
            code = CONSUME_FAILED_CODE
        self._trace_after(before, result == ConsumeResult.SUCCESS, code)
        if pq.dropped:
            return  # results for a dropped queue are discarded (B-78, B-85)
        await self._process_consume_result(result, msgs, pq, mq)

    def _trace_before(self, msgs: list[ReceivedMessage]) -> list[TraceContext]:
        """SubBefore contexts of a consume call, queued when message trace is on."""
        if self._trace is None:
            return []
        dispatcher = self._trace[0]
        contexts = trace.sub_before(self.group, trace.traced(msgs))
        for ctx in contexts:
            dispatcher.append(ctx)
        return contexts

    def _trace_after(self, before: list[TraceContext], success: bool, code: int) -> None:
        if self._trace is not None:
            for ctx in trace.sub_after(before, success, code):
                self._trace[0].append(ctx)

    def _with_original_topic(self, msg: ReceivedMessage) -> ReceivedMessage:
        """A retry shows its original topic to the handler (B-99)."""
        original = msg.properties.get(RETRY_TOPIC)
        if original and msg.topic == retry_topic(self.group):
            return dataclasses.replace(msg, topic=original)
        return msg

    async def _process_consume_result(
        self, result: ConsumeResult, msgs: list[ReceivedMessage], pq: ProcessQueue, mq: MessageQueue
    ) -> None:
        failed = msgs if result == ConsumeResult.RECONSUME_LATER else []
        if failed and self.message_model == MessageModel.BROADCASTING:
            for msg in failed:
                # BROADCASTING drops a failed message: no send-back (B-87)
                log.warning("BROADCASTING, the message %s consume failed, drop it", msg.msg_id)
        elif failed:
            back_failed = []
            for msg in failed:
                if not await self._send_message_back(msg, 0, mq.broker_name):
                    back_failed.append(
                        dataclasses.replace(msg, reconsume_times=msg.reconsume_times + 1)
                    )
            if back_failed:
                # They stay held, so the committed offset waits for them (B-89).
                kept = {m.queue_offset for m in back_failed}
                msgs = [m for m in msgs if m.queue_offset not in kept]
                self._tasks.start_soon(self._consume_later, back_failed, pq, mq)
        offset = pq.remove_messages(msgs)
        if offset >= 0 and not pq.dropped:
            self.offset_store.update_offset(mq, offset, increase_only=True)

    async def _consume_later(
        self, msgs: list[ReceivedMessage], pq: ProcessQueue, mq: MessageQueue
    ) -> None:
        await anyio.sleep(self.config.consume_later_delay)
        self._submit_consume(msgs, pq, mq)

    async def _send_message_back(
        self, msg: ReceivedMessage, delay_level: int, broker_name: str | None
    ) -> bool:
        """CONSUMER_SEND_MSG_BACK (B-88); if refused, re-send to %RETRY%G as a producer (B-89)."""
        addr = (
            self.instance.find_broker_address_in_publish(broker_name)
            if broker_name
            else f"{msg.store_host[0]}:{msg.store_host[1]}"
        )
        if addr is not None:
            header = ConsumerSendMsgBackRequestHeader(
                group=self.group,
                offset=msg.commit_log_offset,
                delay_level=delay_level,
                origin_msg_id=msg.msg_id,
                origin_topic=msg.topic,
                max_reconsume_times=self.config.max_reconsume_times,
                unit_mode=False,
            )
            try:
                response = await self.instance.invoke(
                    addr,
                    self.instance.request(RequestCode.CONSUMER_SEND_MSG_BACK, header),
                    self.config.send_back_timeout,
                )
            except RemotingError as exc:
                log.info("send back %s failed: %s", msg.msg_id, exc)
            else:
                if response.code == ResponseCode.SUCCESS:
                    return True
                log.info("send back %s refused: %s %s", msg.msg_id, response.code, response.remark)
        return await self._send_to_retry_topic(
            msg, msg.reconsume_times + 1, self.config.max_reconsume_times
        )

    async def _send_to_retry_topic(
        self, msg: ReceivedMessage, reconsume_times: int, max_reconsume_times: int
    ) -> bool:
        """A plain send of `msg` to %RETRY%group by the inner producer, carrying its counts."""
        if self._inner_producer is None:
            return False
        props = {k: v for k, v in msg.properties.items() if k != TRAN_MSG}
        props[ORIGIN_MESSAGE_ID] = props.get(ORIGIN_MESSAGE_ID) or msg.msg_id
        props[RETRY_TOPIC] = msg.topic
        props[RECONSUME_TIME] = str(reconsume_times)
        props[MAX_RECONSUME_TIMES] = str(max_reconsume_times)
        retry = Message(
            msg.body, properties=props, flag=msg.flag, delay_level=3 + msg.reconsume_times
        )
        try:
            await self._inner_producer.send_message(retry_topic(self.group), retry)
        except (RemotingError, ClientError) as exc:
            log.warning("re-send of %s to %s failed: %s", msg.msg_id, retry_topic(self.group), exc)
            return False
        return True

    # ------------------------------------------------------------------ offsets
    async def _persist_loop(self) -> None:
        await anyio.sleep(self.config.persist_consumer_offset_delay)
        while True:
            await self.offset_store.persist_all(set(self._process_queues))
            await anyio.sleep(self.config.persist_consumer_offset_interval)

    async def reset_offset(self, topic: str, table: Mapping[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET in the order of B-78 (steps 2 to 6)."""
        self._pause()
        try:
            for mq, pq in list(self._process_queues.items()):
                if mq.topic == topic and mq in table:
                    pq.drop()
                    pq.clear()
            # In-flight consumption finishes meanwhile; its results are discarded.
            await anyio.sleep(self.config.reset_offset_wait)
            async with self._rebalance_lock:
                for mq in list(self._process_queues):
                    if mq.topic == topic and mq in table:
                        self.offset_store.update_offset(mq, table[mq], increase_only=False)
                        await self._remove_unnecessary_queue(
                            mq, oneway=self.config.reset_persist_oneway
                        )
                        del self._process_queues[mq]
                        self._allocation_changed()
        finally:
            self._resume()

    def _pause(self) -> None:
        if not self._paused:
            self._paused = True
            self._resumed = anyio.Event()

    def _resume(self) -> None:
        self._paused = False
        self._resumed.set()
        self.rebalance_now()
