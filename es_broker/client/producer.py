"""The producer (Java DefaultMQProducer): route lookup, queue choice, retries, batches.

A send picks the next writable queue of the topic's route (round robin); when
the broker refuses with one of the codes Java retries on, or the connection
fails, it tries again on a queue of another broker, at most
retryTimesWhenSendFailed more times within sendMsgTimeout (docs/protocol.md §7.2.1).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence

import anyio

from es_broker.acl.signing import Credentials
from es_broker.client.async_send import AsyncSends, SendHandle
from es_broker.client.config import DEFAULT_PRODUCER_GROUP, ClientConfig, ProducerConfig
from es_broker.client.instance import ClientInstance
from es_broker.client.messages import (
    KEYS,
    MAX_RECONSUME_TIMES,
    RECONSUME_TIME,
    RETRY_PREFIX,
    TRAN_MSG,
    UNIQ_KEY,
    Message,
    ReceivedMessage,
    SendResult,
    SendStatus,
    UniqIdGenerator,
)
from es_broker.client.request_reply import Reply, RequestHandle
from es_broker.client.route import publish_queues
from es_broker.client.selectors import by_queue_id
from es_broker.client.send_tries import (
    ClientError,
    QueueSelector,
    SendTries,
    send_result,
)
from es_broker.client.trace import TraceDispatcher, message_type, pub_context
from es_broker.client.trace import now_ms as trace_now_ms
from es_broker.net.remoting_client import RemotingError
from es_broker.net.tasks import Service, TaskSpawner
from es_broker.remoting.bodies import MessageQueue, TopicRouteData
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.headers import SendMessageRequestHeader
from es_broker.remoting.message import (
    FLAG_COMPRESSED,
    FLAG_TRANSACTION_PREPARED,
    encode_batch,
    encode_properties,
)
from es_broker.remoting.reply_properties import (
    CORRELATION_ID,
    MSG_TYPE,
    REPLY_FLAG,
    REPLY_TO_CLIENT,
    TTL,
)
from es_broker.remoting.trace_data import TRACE_PRODUCER_PREFIX

log = logging.getLogger(__name__)

# A batch carries only WAIT itself; its messages carry their own properties.
BATCH_PROPERTIES = {"WAIT": "true"}


class Producer(Service):
    """Sends messages to a topic's brokers.

    Use `await producer.start(nursery)` / `await producer.shutdown()`, or
    `async with Producer(...) as producer:`. With `credentials=Credentials(ak, sk)`
    (Java's `new DefaultMQProducer(group, new AclClientRPCHook(...))`) every
    request of its client instance is signed.
    """

    def __init__(
        self,
        namesrv_addr: str,
        group: str = DEFAULT_PRODUCER_GROUP,
        *,
        config: ProducerConfig | None = None,
        instance_name: str | None = None,
        client_ip: str | None = None,
        client_config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
        credentials: Credentials | None = None,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        """`enable_msg_trace` (Java's enableMsgTrace): each send's Pub context goes to
        `trace_topic` (RMQ_SYS_TRACE_TOPIC by default) in 4.9.8's trace format (B-483)."""
        self.group = group
        self.config = config or ProducerConfig()
        if instance is not None:
            instance.check_credentials(credentials)
        self.instance = instance or ClientInstance(
            namesrv_addr,
            instance_name=instance_name,
            client_ip=client_ip,
            config=client_config,
            credentials=credentials,
        )
        self._publish: dict[str, tuple[MessageQueue, ...]] = {}
        self._have_route: set[str] = set()
        self._which_queue: dict[str, int] = {}
        self._ids = UniqIdGenerator(self.instance.client_ip)
        self._async: AsyncSends | None = None
        self._started = False
        self._trace_topic = trace_topic
        self._trace_wanted = enable_msg_trace
        self.trace: TraceDispatcher | None = None
        self._trace_producer: Producer | None = None

    # ------------------------------------------------------------------ life cycle
    async def start(self, nursery: TaskSpawner) -> None:
        """Join the client instance (starting it if needed) and announce the group to every broker."""
        self.instance.register_producer(self)
        try:
            await self.instance.acquire(nursery)
        except BaseException:
            await self.instance.unregister_producer(self.group)
            raise
        self._async = AsyncSends(self)
        try:
            await self._async.start(nursery)
        except BaseException:
            await self.instance.unregister_producer(self.group)
            await self.instance.release()
            raise
        self._started = True
        if self._trace_wanted:
            await self._start_trace(nursery)
        # Java's start heartbeats every broker it knows; learning them first from the
        # name server lets a restarted transactional producer be checked before it sends (B-320).
        await self.instance.update_cluster_brokers()
        await self.instance.send_heartbeat_to_all_brokers()

    async def shutdown(self) -> None:
        """Let async sends finish, unregister the group from the brokers, leave the client instance."""
        if not self._started:
            return
        if self._async is not None:
            await self._async.stop()
        await self._stop_trace()
        self._started = False
        await self.instance.unregister_producer(self.group)
        await self.instance.release()

    async def _start_trace(self, nursery: TaskSpawner) -> None:
        self.trace, self._trace_producer = await start_trace_dispatcher(
            self.instance, self.group, self._trace_topic, nursery
        )

    async def _stop_trace(self) -> None:
        if self.trace is not None and self._trace_producer is not None:
            await stop_trace_dispatcher(self.trace, self._trace_producer)
        self.trace, self._trace_producer = None, None

    def _trace_pub(
        self, topic: str, message: Message, props: dict[str, str], result: SendResult, began: int
    ) -> None:
        """Queue a send's Pub context; nothing for a send to the trace topic itself."""
        if self.trace is None or topic == self.trace.topic:
            return
        store_host = self.instance.find_broker_address_in_publish(result.queue.broker_name) or ""
        self.trace.append(
            pub_context(
                self.group,
                topic,
                result,
                tags=message.tags,
                keys=props.get(KEYS, ""),
                store_host=store_host,
                body_length=len(message.body),
                began_ms=began,
                msg_type=message_type(props),
            )
        )

    # ------------------------------------------------------------------ instance member
    def published_topics(self) -> Iterable[str]:
        return list(self._publish)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        if topic in self._publish:
            self._publish[topic] = publish_queues(topic, route)
            self._have_route.add(topic)

    # ------------------------------------------------------------------ routes
    async def find_publish_queues(self, topic: str) -> tuple[MessageQueue, ...]:
        """The topic's writable queues (tryToFindTopicPublishInfo), TBW102's route for a new topic.

        A route read before a broker it names failed is read again first (B-540).
        """
        queues = self._publish.get(topic)
        if queues and self.instance.route_outdated(topic):
            await self.instance.reread_route(topic)
            return self._publish.get(topic, ())
        if not queues:
            self._publish.setdefault(topic, ())
            await self.instance.update_route(topic)
            queues = self._publish.get(topic, ())
        if queues or topic in self._have_route:
            return queues
        await self.instance.update_route_from_default(topic, self.config.default_topic_queue_nums)
        return self._publish.get(topic, ())

    def cached_publish_queues(self, topic: str) -> tuple[MessageQueue, ...]:
        """The topic's writable queues as last looked up, without a lookup; () if none yet."""
        return self._publish.get(topic, ())

    def select_queue(
        self, topic: str, queues: Sequence[MessageQueue], last_broker: str | None
    ) -> MessageQueue:
        """Round robin; after a failure, the next queue of another broker if there is one.

        Brokers whose master failed and has not answered since are passed over
        while another broker has a queue (B-541).
        """
        index = self._which_queue.get(topic)
        if index is None:
            index = random.randrange(1 << 16)
        failed = self.instance.failures.names(self.instance.broker_addrs)
        passed_over: list[frozenset[str]] = [failed] if failed else []
        if last_broker is not None:
            last = frozenset((last_broker,))
            passed_over = [failed | last, failed, last] if failed else [last]
        for names in passed_over:
            for _ in range(len(queues)):
                index += 1
                mq = queues[index % len(queues)]
                if mq.broker_name not in names:
                    self._which_queue[topic] = index
                    return mq
        index += 1
        self._which_queue[topic] = index
        return queues[index % len(queues)]

    # ------------------------------------------------------------------ sending
    async def send(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
        *,
        delay_level: int = 0,
        flag: int = 0,
        queue_selector: QueueSelector | None = None,
    ) -> SendResult:
        """Send one message and wait until the broker stored it.

        `delay_level` (1..18) sets property DELAY; `queue_selector` picks the
        queue from the topic's writable queues (no retry, as in Java).
        """
        message = Message(body, tags, keys, dict(properties or {}), flag, delay_level)
        return await self.send_message(topic, message, queue_selector=queue_selector)

    async def send_message(
        self, topic: str, message: Message, *, queue_selector: QueueSelector | None = None
    ) -> SendResult:
        """`send` for a prepared `Message`."""
        props = self.prepare(message)
        began = trace_now_ms() if self.trace is not None else 0
        result = await self._send(
            topic,
            message.body,
            props,
            message.flag,
            batch=False,
            queue_selector=queue_selector,
            oneway=False,
            msg_id=props[UNIQ_KEY],
        )
        assert result is not None
        self._trace_pub(topic, message, props, result, began)
        return result

    def send_async(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
        *,
        delay_level: int = 0,
        flag: int = 0,
        queue_selector: QueueSelector | None = None,
    ) -> SendHandle:
        """Start a send and return at once: `result = await handle.result()` (Java's async send).

        Sends started one after the other are written in that order (B-235); the
        producer's own tasks wait for the answers, so the caller pipelines
        without a task of its own. Not a coroutine: call it without await.
        """
        message = Message(body, tags, keys, dict(properties or {}), flag, delay_level)
        return self.send_message_async(topic, message, queue_selector=queue_selector)

    def send_message_async(
        self, topic: str, message: Message, *, queue_selector: QueueSelector | None = None
    ) -> SendHandle:
        """`send_async` for a prepared `Message`."""
        if not self._started or self._async is None:
            raise ClientError("the producer is not started")
        props = self.prepare(message)
        return self._async.submit(
            topic,
            message.body,
            props,
            message.flag,
            batch=False,
            msg_id=props[UNIQ_KEY],
            selector=queue_selector,
        )

    # ------------------------------------------------------------------ request-reply
    async def request(
        self,
        topic: str,
        body: bytes,
        *,
        timeout: float = 3.0,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> ReceivedMessage:
        """Send a request and wait for its reply (DefaultMQProducer#request(msg, timeout)).

        RequestTimeout when no reply came within `timeout` seconds; the send's
        own error when the request could not be sent.
        """
        if not self._started:
            raise ClientError("the producer is not started")
        if not self.cached_publish_queues(topic):
            # prepareSendRequest: a topic without a route yet is looked up and every broker told
            # of this producer, so the broker that gets the reply knows where to push it
            await self.find_publish_queues(topic)
            await self.instance.send_heartbeat_to_all_brokers()
        return await self.request_async(
            topic, body, timeout=timeout, tags=tags, keys=keys, properties=properties
        ).result()

    def request_async(
        self,
        topic: str,
        body: bytes,
        *,
        timeout: float = 3.0,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> RequestHandle:
        """Start a request and return at once: `reply = await handle.result()`.

        The request is sent as `send_async` sends (not a coroutine: call it
        without await); the handle waits for the reply the broker pushes.
        """
        correlation_id = str(uuid.uuid4())  # CorrelationIdUtil.createCorrelationId
        props = dict(properties or {})
        props[CORRELATION_ID] = correlation_id
        props[REPLY_TO_CLIENT] = self.instance.client_id
        props[TTL] = str(int(timeout * 1000))
        handle = self.instance.replies.open(correlation_id, topic, timeout)
        try:
            handle._send = self.send_message_async(topic, Message(body, tags, keys, props))
        except BaseException:
            self.instance.replies.forget(correlation_id)
            raise
        return handle

    async def send_reply(self, reply: Reply) -> SendResult:
        """Send a reply built by `es_broker.client.reply` (SEND_REPLY_MESSAGE_V2), once.

        The broker answers SUCCESS when it pushed the reply to the requester;
        BrokerRefused (SYSTEM_ERROR) when it could not: the reply is stored and
        recorded undeliverable, and sending it again would store it again.
        """
        topic = reply.topic
        return await self.send_message(
            topic, reply.message, queue_selector=lambda qs: self.select_queue(topic, qs, None)
        )

    async def send_to_queue(
        self, topic: str, queue_id: int, message: Message, *, broker_name: str | None = None
    ) -> SendResult:
        """Send to the topic's queue `queue_id` (Java's `send(msg, mq)`); no retry on another queue."""
        try:
            return await self.send_message(
                topic, message, queue_selector=by_queue_id(queue_id, broker_name)
            )
        except ValueError as exc:
            raise ClientError(f"{topic}: {exc}") from None

    async def send_oneway(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
        *,
        delay_level: int = 0,
        flag: int = 0,
        queue_selector: QueueSelector | None = None,
    ) -> None:
        """Send without waiting for the broker (one attempt, no result)."""
        message = Message(body, tags, keys, dict(properties or {}), flag, delay_level)
        props = self.prepare(message)
        await self._send(
            topic,
            body,
            props,
            flag,
            batch=False,
            queue_selector=queue_selector,
            oneway=True,
            msg_id=props[UNIQ_KEY],
        )

    async def send_batch(
        self,
        topic: str,
        messages: Sequence[Message],
        *,
        queue_selector: QueueSelector | None = None,
    ) -> SendResult:
        """Send messages to one queue in one SEND_BATCH_MESSAGE; msg_id joins their UNIQ_KEYs."""
        body, ids = self.batch_body(topic, messages)
        result = await self._send(
            topic,
            body,
            BATCH_PROPERTIES,
            0,
            batch=True,
            queue_selector=queue_selector,
            oneway=False,
            msg_id=ids,
        )
        assert result is not None
        return result

    def batch_body(self, topic: str, messages: Sequence[Message]) -> tuple[bytes, str]:
        """The SEND_BATCH_MESSAGE body of `messages` and the batch's msg_id (their UNIQ_KEYs joined)."""
        if not messages:
            raise ClientError("a batch needs at least one message")
        if topic.startswith(RETRY_PREFIX):
            raise ClientError("Retry Group is not supported for batching")
        entries = []
        for message in messages:
            if message.delay_level > 0:
                raise ClientError("TimeDelayLevel is not supported for batching")
            entries.append((message.flag, message.body, self.prepare(message)))
        # The batch itself carries only WAIT; its id joins the messages' UNIQ_KEYs (as Java).
        return encode_batch(entries), ",".join(props[UNIQ_KEY] for _, _, props in entries)

    def prepare(self, message: Message) -> dict[str, str]:
        """The wire properties of a message to send, UNIQ_KEY included; ClientError for a bad body."""
        if len(message.body) == 0:
            raise ClientError("the message body is empty")
        if len(message.body) > self.config.max_message_size:
            raise ClientError(
                f"the message body size over max value, MAX: {self.config.max_message_size}"
            )
        props = message.wire_properties()
        props.setdefault(UNIQ_KEY, self._ids.next_id())  # kept when re-sending a consumed message
        return props

    async def _send(
        self,
        topic: str,
        body: bytes,
        props: dict[str, str],
        flag: int,
        *,
        batch: bool,
        queue_selector: QueueSelector | None,
        oneway: bool,
        msg_id: str,
    ) -> SendResult | None:
        if not self._started:
            raise ClientError("the producer is not started")
        now = anyio.current_time()  # read once per attempt: the loop's clock is not free
        deadline = now + self.config.send_msg_timeout
        queues = await self.find_publish_queues(topic)
        if not queues:
            raise ClientError(f"No route info of this topic: {topic}")
        if queue_selector is not None:
            selected = queue_selector(queues)
            return await self._send_kernel(
                selected, body, props, flag, batch, oneway, deadline, msg_id, now
            )
        tries = SendTries(self, topic, queues, oneway)
        while (mq := tries.next_queue(now >= deadline)) is not None:
            try:
                result = await self._send_kernel(
                    mq, body, props, flag, batch, oneway, deadline, msg_id, now
                )
            except (RemotingError, ClientError) as exc:
                if not tries.keep_going(exc):
                    raise
                now = anyio.current_time()
                if now < deadline:
                    # after a broker failed, its route is read again before the next choice (B-540)
                    tries.queues = await self.find_publish_queues(topic)
                    now = anyio.current_time()
                continue
            if not self.retry_on_result(result):
                return result
            now = anyio.current_time()
        raise tries.exhausted() from tries.last_error

    def retry_on_result(self, result: SendResult | None) -> bool:
        """Stored but not SEND_OK: another try only with retryAnotherBrokerWhenNotStoreOK."""
        return (
            result is not None
            and result.status != SendStatus.SEND_OK
            and self.config.retry_another_broker_when_not_store_ok
        )

    async def _send_kernel(
        self,
        mq: MessageQueue,
        body: bytes,
        props: dict[str, str],
        flag: int,
        batch: bool,
        oneway: bool,
        deadline: float,
        msg_id: str,
        now: float,
    ) -> SendResult | None:
        """One attempt, begun at `now` (the loop's clock)."""
        addr = self.instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await self.find_publish_queues(mq.topic)
            addr = self.instance.find_broker_address_in_publish(mq.broker_name)
            now = anyio.current_time()  # the lookup took time of the attempt's
        if addr is None:
            raise ClientError(f"The broker[{mq.broker_name}] not exist")
        command = self.send_request(mq, body, props, flag, batch, oneway)
        if oneway:
            await self.instance.invoke_oneway(addr, command)
            return None
        timeout = max(deadline - now, 0.001)
        return self.send_result(
            mq, await self.instance.invoke(addr, command, timeout), addr, msg_id
        )

    def send_request(
        self,
        mq: MessageQueue,
        body: bytes,
        props: dict[str, str],
        flag: int,
        batch: bool,
        oneway: bool,
    ) -> RemotingCommand:
        """The SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request for one queue (body compressed if large)."""
        sys_flag = 0
        if not batch and len(body) >= self.config.compress_msg_body_over_howmuch:
            body = zlib.compress(body, 5)  # Java's Deflater level 5 (docs/protocol.md §8.3)
            sys_flag |= FLAG_COMPRESSED
        if props.get(TRAN_MSG, "").lower() == "true":
            sys_flag |= FLAG_TRANSACTION_PREPARED
        reconsume, max_reconsume = 0, None
        if mq.topic.startswith(RETRY_PREFIX):
            # A consumer's re-send carries its counters in the header (B-89, B-95).
            if RECONSUME_TIME in props:
                reconsume = int(props[RECONSUME_TIME])
            if MAX_RECONSUME_TIMES in props:
                max_reconsume = int(props[MAX_RECONSUME_TIMES])
        header = SendMessageRequestHeader(
            producer_group=self.group,
            topic=mq.topic,
            default_topic="TBW102",
            default_topic_queue_nums=self.config.default_topic_queue_nums,
            queue_id=mq.queue_id,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=flag,
            properties=encode_properties(props).decode("utf-8"),
            reconsume_times=reconsume,
            unit_mode=False,
            batch=batch,
            max_reconsume_times=max_reconsume,
        )
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        if not batch and props.get(MSG_TYPE) == REPLY_FLAG:
            code = RequestCode.SEND_REPLY_MESSAGE_V2  # MQClientAPIImpl#sendMessage: isReply
        return self.instance.request(code, header, body, oneway=oneway)

    send_result = staticmethod(send_result)


async def start_trace_dispatcher(
    instance: ClientInstance, group: str, topic: str | None, nursery: TaskSpawner
) -> tuple[TraceDispatcher, Producer]:
    """A client's trace dispatcher, sending with an inner producer `_INNER_TRACE_PRODUCER-<group>`
    of the same client instance (B-483)."""
    inner = Producer(
        ";".join(instance.namesrv_addrs), TRACE_PRODUCER_PREFIX + group, instance=instance
    )
    await inner.start(nursery)

    async def send(trace_topic: str, body: bytes, keys: list[str]) -> object:
        return await inner.send(trace_topic, body, keys=keys)

    dispatcher = TraceDispatcher(send, topic)
    nursery.start_soon(dispatcher.run)
    return dispatcher, inner


async def stop_trace_dispatcher(dispatcher: TraceDispatcher, inner: Producer) -> None:
    """Send what the dispatcher holds (waiting a little), then stop its inner producer."""
    await dispatcher.stop()
    await inner.shutdown()
