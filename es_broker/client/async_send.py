"""Pipelined sends: `Producer.send_async` returns at once with a handle to await.

Java's `send(msg, SendCallback)` runs each send on an executor. Here one
dispatcher task per producer takes the sends in the order they were asked
and writes each request to its broker connection before taking the next, so
sends of one producer to one broker go out (and, by B-140, are stored) in the
order of the `send_async` calls; the answers are awaited concurrently, one
small task per send in flight inside the producer's own task group. A send
that fails is retried as a synchronous send is (SendTries): a retried send may
then be stored after sends asked later, as in Java. The caller starts no task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import anyio

from es_broker.client.instance import ClientInstance
from es_broker.client.messages import SendResult
from es_broker.client.send_tries import (
    ClientError,
    QueueSelector,
    SelectsQueues,
    SendTries,
    send_result,
)
from es_broker.net.remoting_client import PendingRequest, RemotingError
from es_broker.net.tasks import TaskGroup, TaskSpawner
from es_broker.remoting.bodies import MessageQueue
from es_broker.remoting.command import RemotingCommand


class SendHandle:
    """One send under way. `await handle.result()` gives its SendResult or raises its error.

    `msg_id` (the UNIQ_KEY) is known at once; `done` tells without waiting.
    `result()` may be awaited any number of times, by any number of tasks.
    """

    __slots__ = ("msg_id", "topic", "_done", "_result", "_error")

    def __init__(self, topic: str, msg_id: str) -> None:
        self.topic = topic
        self.msg_id = msg_id
        self._done = anyio.Event()
        self._result: SendResult | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    async def result(self) -> SendResult:
        """The broker's SendResult once the send finished; raises what a `send` would have raised."""
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def _succeed(self, result: SendResult) -> None:
        self._result = result
        self._done.set()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._done.set()


@dataclass(slots=True)
class _Job:
    handle: SendHandle
    body: bytes
    props: dict[str, str]
    flag: int
    batch: bool
    selector: QueueSelector | None
    deadline: float  # event-loop time: sendMsgTimeout counted from the send_async call


class Sender(SelectsQueues, Protocol):
    """What the pipeline needs of its producer (`producer.Producer`, which builds the pipeline)."""

    instance: ClientInstance

    async def find_publish_queues(self, topic: str) -> tuple[MessageQueue, ...]: ...

    def send_request(
        self,
        mq: MessageQueue,
        body: bytes,
        props: dict[str, str],
        flag: int,
        batch: bool,
        oneway: bool,
    ) -> RemotingCommand: ...

    def retry_on_result(self, result: SendResult | None) -> bool: ...


class AsyncSends:
    """The producer's pipeline: a FIFO of sends, one dispatcher, one waiting task per send in flight."""

    def __init__(self, producer: Sender) -> None:
        self.producer = producer
        self._tasks = TaskGroup()
        self._send_jobs, self._jobs = anyio.create_memory_object_stream[_Job](math.inf)
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def start(self, nursery: TaskSpawner) -> None:
        await self._tasks.start(nursery)
        self._tasks.start_soon(self._dispatch)

    async def stop(self) -> None:
        """Let every send asked so far finish (each is bounded by its timeout), then stop."""
        if self._tasks.running:
            await self._idle.wait()
        await self._tasks.stop()

    def submit(
        self,
        topic: str,
        body: bytes,
        props: dict[str, str],
        flag: int,
        *,
        batch: bool,
        msg_id: str,
        selector: QueueSelector | None,
    ) -> SendHandle:
        """Queue one send; never blocks (the queue is unbounded, as Java's async executor's)."""
        if not self._tasks.running:
            raise ClientError("the producer is not started")
        handle = SendHandle(topic, msg_id)
        deadline = anyio.current_time() + self.producer.config.send_msg_timeout
        self._in_flight += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        self._send_jobs.send_nowait(_Job(handle, body, props, flag, batch, selector, deadline))
        return handle

    def _finished(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    async def _dispatch(self) -> None:
        async for job in self._jobs:
            await self._first_attempt(job)

    async def _first_attempt(self, job: _Job) -> None:
        """Write the first attempt's request (in submit order); its answer is awaited elsewhere."""
        producer = self.producer
        topic = job.handle.topic
        tries: SendTries | None = None
        try:
            queues = await producer.find_publish_queues(topic)
            if not queues:
                raise ClientError(f"No route info of this topic: {topic}")
            if job.selector is not None:
                try:
                    mq = job.selector(queues)
                except ValueError as exc:
                    raise ClientError(str(exc)) from None
            else:
                tries = SendTries(producer, topic, queues, oneway=False)
                picked = tries.next_queue(anyio.current_time() >= job.deadline)
                if picked is None:
                    raise ClientError(f"send to {topic} timed out before its first attempt")
                mq = picked
            pending = await self._write(mq, job)
        except (RemotingError, ClientError) as exc:
            if tries is not None and tries.keep_going(exc):
                self._tasks.start_soon(self._retry, job, tries)
            else:
                job.handle._fail(exc)
                self._finished()
            return
        except Exception as exc:  # a selector's own bug, reported to the caller
            job.handle._fail(exc)
            self._finished()
            return
        self._tasks.start_soon(self._await_answer, job, tries, mq, pending)

    async def _write(self, mq: MessageQueue, job: _Job) -> PendingRequest:
        producer = self.producer
        addr = producer.instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await producer.find_publish_queues(mq.topic)
            addr = producer.instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise ClientError(f"The broker[{mq.broker_name}] not exist")
        command = producer.send_request(mq, job.body, job.props, job.flag, job.batch, False)
        return await producer.instance.start_request(addr, command)

    async def _await_answer(
        self, job: _Job, tries: SendTries | None, mq: MessageQueue, pending: PendingRequest
    ) -> None:
        try:
            timeout = max(job.deadline - anyio.current_time(), 0.001)
            response = await self.producer.instance.response(pending, timeout)
            result = send_result(mq, response, pending.addr, job.handle.msg_id)
        except (RemotingError, ClientError) as exc:
            if tries is not None and tries.keep_going(exc):
                await self._retry(job, tries)
                return
            job.handle._fail(exc)
            self._finished()
            return
        if tries is not None and self.producer.retry_on_result(result):
            await self._retry(job, tries)
            return
        job.handle._succeed(result)
        self._finished()

    async def _retry(self, job: _Job, tries: SendTries) -> None:
        """The attempts left, one after the other, as a synchronous send makes them."""
        producer = self.producer
        try:
            while True:
                expired = anyio.current_time() >= job.deadline
                if not expired:
                    # a route a failed broker outdated is read again before each choice (B-540)
                    tries.queues = await producer.find_publish_queues(job.handle.topic)
                    expired = anyio.current_time() >= job.deadline
                mq = tries.next_queue(expired)
                if mq is None:
                    break
                try:
                    pending = await self._write(mq, job)
                    timeout = max(job.deadline - anyio.current_time(), 0.001)
                    response = await producer.instance.response(pending, timeout)
                    result = send_result(mq, response, pending.addr, job.handle.msg_id)
                except (RemotingError, ClientError) as exc:
                    if not tries.keep_going(exc):
                        job.handle._fail(exc)
                        return
                    continue
                if not producer.retry_on_result(result):
                    job.handle._succeed(result)
                    return
            error = tries.exhausted()
            error.__cause__ = tries.last_error
            job.handle._fail(error)
        finally:
            self._finished()
