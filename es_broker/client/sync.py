"""A blocking producer for scripts.

Sends go from the calling thread straight to the broker over a blocking
socket (`blocking.BlockingRemoting`), with the trio producer's queue choice,
retries, timeout, signing and TLS. An event loop in a background thread (anyio's
blocking portal, on trio unless `backend="asyncio"` is given) does what runs on
timers or rarely: heartbeats, route polling, the first route lookup of a topic,
and unregistering at shutdown.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from es_broker.client.blocking import BlockingRemoting
from es_broker.client.config import DEFAULT_PRODUCER_GROUP, client_tls
from es_broker.client.messages import UNIQ_KEY, Message, SendResult
from es_broker.client.producer import BATCH_PROPERTIES, Producer
from es_broker.client.send_tries import ClientError, QueueSelector, SendTries
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.bodies import MessageQueue

P = ParamSpec("P")
T = TypeVar("T")


class SyncProducer:
    """`Producer` with blocking calls; use as a context manager or call start()/shutdown().

    Safe to call from several threads at once: each send then uses a
    connection of its own.
    """

    def __init__(
        self,
        namesrv_addr: str,
        group: str = DEFAULT_PRODUCER_GROUP,
        *,
        backend: str = "trio",
        **options: Any,
    ) -> None:
        """`backend`: the event loop of the background thread, "trio" or "asyncio"."""
        self.producer = Producer(namesrv_addr, group, **options)
        self.backend = backend
        self._portal: BlockingPortal | None = None
        self._running: contextlib.ExitStack | None = None
        self._remoting: BlockingRemoting | None = None
        # the round-robin counter is shared by the calling threads
        self._select_lock = threading.Lock()

    def start(self) -> None:
        """Start the background loop and the producer in it; raises what the start raised."""
        with contextlib.ExitStack() as stack:
            portal = stack.enter_context(start_blocking_portal(self.backend))
            stack.enter_context(portal.wrap_async_context_manager(self.producer))
            self._portal, self._running = portal, stack.pop_all()
        config = self.producer.instance.config
        self._remoting = BlockingRemoting(
            credentials=config.credentials,
            tls=client_tls(config),
            connect_timeout=config.rpc_timeout,
        )

    def _call(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._portal is None:
            raise RuntimeError("the producer is not started")
        return self._portal.call(functools.partial(fn, *args, **kwargs))

    def _on_loop(self, fn: Callable[[str], None], addr: str) -> None:
        """Call fn(addr) in the background loop, which owns the client instance's state."""
        if self._portal is None:
            raise RuntimeError("the producer is not started")
        self._portal.call(fn, addr)

    # ------------------------------------------------------------------ sending
    def send(
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
        """Producer.send, blocking."""
        message = Message(body, tags, keys, dict(properties or {}), flag, delay_level)
        return self.send_message(topic, message, queue_selector=queue_selector)

    def send_message(
        self, topic: str, message: Message, *, queue_selector: QueueSelector | None = None
    ) -> SendResult:
        """Producer.send_message, blocking."""
        props = self.producer.prepare(message)
        result = self._send(
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
        return result

    def send_oneway(
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
        """Producer.send_oneway, blocking until written."""
        message = Message(body, tags, keys, dict(properties or {}), flag, delay_level)
        props = self.producer.prepare(message)
        self._send(
            topic,
            body,
            props,
            flag,
            batch=False,
            queue_selector=queue_selector,
            oneway=True,
            msg_id=props[UNIQ_KEY],
        )

    def send_batch(
        self,
        topic: str,
        messages: Sequence[Message],
        *,
        queue_selector: QueueSelector | None = None,
    ) -> SendResult:
        """Producer.send_batch, blocking."""
        body, ids = self.producer.batch_body(topic, messages)
        result = self._send(
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

    def _send(
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
        """Producer._send over the blocking connections: the same queue choice, retries and deadline."""
        producer = self.producer
        deadline = time.monotonic() + producer.config.send_msg_timeout
        queues = self._publish_queues(topic)
        if not queues:
            raise ClientError(f"No route info of this topic: {topic}")
        if queue_selector is not None:
            return self._send_kernel(
                queue_selector(queues), body, props, flag, batch, oneway, deadline, msg_id
            )
        tries = SendTries(producer, topic, queues, oneway, self._select_lock)
        while (mq := tries.next_queue(time.monotonic() >= deadline)) is not None:
            try:
                result = self._send_kernel(mq, body, props, flag, batch, oneway, deadline, msg_id)
            except (RemotingError, ClientError) as exc:
                if not tries.keep_going(exc):
                    raise
                if time.monotonic() < deadline:
                    # after a broker failed, its route is read again before the next choice (B-540)
                    tries.queues = self._publish_queues(topic)
                continue
            if not producer.retry_on_result(result):
                return result
        raise tries.exhausted() from tries.last_error

    def _publish_queues(self, topic: str) -> tuple[MessageQueue, ...]:
        queues = self.producer.cached_publish_queues(topic)
        if queues and not self.producer.instance.route_outdated(topic):
            return queues
        # a lookup: the background loop's job
        return self._call(self.producer.find_publish_queues, topic)

    def _send_kernel(
        self,
        mq: MessageQueue,
        body: bytes,
        props: dict[str, str],
        flag: int,
        batch: bool,
        oneway: bool,
        deadline: float,
        msg_id: str,
    ) -> SendResult | None:
        remoting = self._remoting
        if remoting is None:
            raise RuntimeError("the producer is not started")
        instance = self.producer.instance
        addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            self._call(self.producer.find_publish_queues, mq.topic)
            addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise ClientError(f"The broker[{mq.broker_name}] not exist")
        command = self.producer.send_request(mq, body, props, flag, batch, oneway)
        timeout = max(deadline - time.monotonic(), 0.001)
        try:
            if oneway:
                remoting.invoke_oneway(addr, command, timeout)
                return None
            response = remoting.invoke(addr, command, timeout)
        except RemotingError:
            # what the async producer's requests tell the client instance by themselves (B-540)
            self._on_loop(instance.broker_failed, addr)
            raise
        if addr in instance.failures.failed:
            self._on_loop(instance.failures.answered, addr)
        return self.producer.send_result(mq, response, addr, msg_id)

    # ------------------------------------------------------------------ life cycle
    def shutdown(self) -> None:
        """Close the connections, shut the producer down and end the thread."""
        if self._remoting is not None:
            self._remoting.close()
            self._remoting = None
        running, self._running, self._portal = self._running, None, None
        if running is not None:
            running.close()  # the producer's shutdown, then the loop's end

    def __enter__(self) -> SyncProducer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
