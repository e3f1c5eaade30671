"""The orderly push consumer (Java DefaultMQPushConsumer with a MessageListenerOrderly).

Each queue is consumed by one task at a time, in queue order (Java's
ConsumeMessageOrderlyService). In CLUSTERING mode a queue is taken only once
its lock is granted by the broker (LOCK_BATCH_MQ, B-142), the locks are renewed
every `lock_interval` (20 s), and a queue whose lock was refused or not renewed
within `lock_max_live` (30 s, ProcessQueue#isLockExpired) is neither pulled nor
consumed until it is locked again. The handler answers SUCCESS (the batch's
offset is committed) or SUSPEND_CURRENT_QUEUE_A_MOMENT (the same messages are
offered again after the suspend time, each retry counted; a message that
reached maxReconsumeTimes is sent back to %RETRY%group, whose broker dead-letters
it, and the queue goes on). Shutdown waits for the handler calls under way,
persists the offsets, then unlocks every queue (UNLOCK_BATCH_MQ). B-238..B-241.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import anyio

from es_broker.client.config import MASTER_ID
from es_broker.client.consumer import (
    CONSUME_EXCEPTION_CODE,
    CONSUME_FAILED_CODE,
    CONSUME_NULL_CODE,
    CONSUME_SUCCESS_CODE,
    ConsumeResult,
    MessageModel,
    PushConsumer,
)
from es_broker.client.messages import (
    ReceivedMessage,
)
from es_broker.client.process_queue import ProcessQueue
from es_broker.net.remoting_client import RemotingError
from es_broker.net.tasks import TaskSpawner
from es_broker.remoting.bodies import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    UnlockBatchRequestBody,
)
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.errors import BodyDecodeError

log = logging.getLogger(__name__)

INTEGER_MAX = 2**31 - 1


class ConsumeOrderlyStatus(Enum):
    """What an orderly handler returns for its batch (Java ConsumeOrderlyStatus)."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass(slots=True)
class ConsumeOrderlyContext:
    """Given with each batch; the handler may change the suspend time of this batch."""

    queue: MessageQueue
    suspend_current_queue_time: float  # seconds (suspendCurrentQueueTimeMillis)


OrderlyHandler = Callable[
    [list[ReceivedMessage], ConsumeOrderlyContext], Awaitable[ConsumeOrderlyStatus]
]


@dataclass(frozen=True, slots=True)
class OrderlyConfig:
    """The orderly service's settings, Java's defaults; seconds where Java has milliseconds."""

    lock_interval: float = 20.0  # rocketmq.client.rebalance.lockInterval: renewal period
    lock_max_live: float = 30.0  # rocketmq.client.rebalance.lockMaxLiveTime: trust in a lock
    suspend_current_queue_time: float = 1.0  # suspendCurrentQueueTimeMillis
    max_reconsume_times: int = -1  # maxReconsumeTimes; -1 is Integer.MAX_VALUE for orderly
    pull_delay_when_not_locked: float = 3.0  # pullMessage's delay for a queue not locked
    relock_delay: float = 3.0  # tryLockLaterAndReconsume: a consume retried after a failed lock
    max_time_consume_continuously: float = 60.0  # rocketmq.client.maxTimeConsumeContinuously

    def replace(self, **changes: Any) -> OrderlyConfig:
        return dataclasses.replace(self, **changes)


class OrderlyProcessQueue(ProcessQueue):
    """A ProcessQueue with Java's orderly part: lock state and the messages being consumed."""

    def __init__(self) -> None:
        super().__init__()
        self.locked = False
        self.last_lock_time = 0.0  # monotonic time of the last grant or renewal
        self.previously_locked = False  # the pull loop re-read the offset after the first lock
        self.consuming = False  # a consume task runs for this queue
        self.consume_lock = anyio.Lock()  # held during a handler call (Java's consumeLock)
        self._taken: dict[int, ReceivedMessage] = {}  # consumingMsgOrderlyTreeMap

    @property
    def msg_count(self) -> int:
        return super().msg_count + len(self._taken)

    def has_messages(self) -> bool:
        return super().msg_count > 0

    def lock_granted(self, at: float) -> None:
        self.locked = True
        self.last_lock_time = at

    def is_lock_expired(self, max_live: float) -> bool:
        return time.monotonic() - self.last_lock_time > max_live

    def take_messages(self, n: int) -> list[ReceivedMessage]:
        """The next n messages by offset, moved aside until commit or make_again."""
        taken = []
        for offset in self._offsets[:n]:
            msg = self._msgs.pop(offset)
            self._taken[offset] = msg
            taken.append(msg)
        del self._offsets[: len(taken)]
        return taken

    def commit(self) -> int:
        """Forget the taken messages; the offset to commit (one past the last), -1 if none."""
        if not self._taken:
            return -1
        offset = max(self._taken) + 1
        self.msg_size -= sum(len(m.body) for m in self._taken.values())
        self._taken.clear()
        self.last_consume_time = time.monotonic()
        return offset

    def make_again(self, msgs: Iterable[ReceivedMessage]) -> None:
        """Put taken messages back to be consumed again (makeMessageToConsumeAgain)."""
        for msg in msgs:
            self._taken.pop(msg.queue_offset, None)
            self._msgs[msg.queue_offset] = msg
            bisect.insort(self._offsets, msg.queue_offset)

    def clear(self) -> None:
        super().clear()
        self._taken.clear()


async def _unused_handler(msgs: list[ReceivedMessage]) -> ConsumeResult:  # pragma: no cover
    raise RuntimeError("the orderly consumer calls its orderly handler")


class OrderlyPushConsumer(PushConsumer):
    """Consumes each assigned queue in order with `handler(msgs, context)`, one call at a time per queue.

    Takes the PushConsumer's keywords (subscriptions, message_model, consume
    timestamps, config, ...) and `orderly=OrderlyConfig(...)`.
    """

    _checks_span = False  # Java checks consumeConcurrentlyMaxSpan for concurrent listeners only

    def __init__(
        self,
        namesrv_addr: str,
        group: str,
        handler: OrderlyHandler,
        *,
        orderly: OrderlyConfig | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(namesrv_addr, group, _unused_handler, **kwargs)
        self.orderly_handler = handler
        self.orderly = orderly or OrderlyConfig()
        self._granted: dict[MessageQueue, float] = {}  # lock time of queues claimed, not yet held
        self._queue_locks: dict[MessageQueue, anyio.Lock] = {}  # Java's MessageQueueLock
        self._clustering = self.message_model == MessageModel.CLUSTERING

    # ------------------------------------------------------------------ life cycle
    async def start(self, nursery: TaskSpawner) -> None:
        await super().start(nursery)
        if self._clustering:
            self._tasks.start_soon(self._lock_loop)

    async def shutdown(self) -> None:
        """Finish the handler calls under way, persist the offsets, unlock every queue, stop (B-241)."""
        if not self._started:
            return
        held = dict(self._process_queues)
        for pq in held.values():
            pq.drop()
        for pq in held.values():
            if isinstance(pq, OrderlyProcessQueue):
                async with pq.consume_lock:
                    pass
        if self._offset_store is not None:
            await self._offset_store.persist_all(set(held))
        if self._clustering:
            await self._unlock(held, oneway=False)
        await super().shutdown()

    def held_locks(self) -> frozenset[MessageQueue]:
        """The queues this consumer holds a valid lock of now (what it may consume)."""
        return frozenset(
            mq
            for mq, pq in self._process_queues.items()
            if isinstance(pq, OrderlyProcessQueue)
            and not pq.dropped
            and pq.locked
            and not pq.is_lock_expired(self.orderly.lock_max_live)
        )

    # ------------------------------------------------------------------ locks
    def _lock_request(self, mqs: Iterable[MessageQueue]) -> bytes:
        return LockBatchRequestBody(
            consumer_group=self.group, client_id=self.client_id, mq_set=tuple(sorted(mqs))
        ).encode()

    async def _lock(self, broker_name: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ at the queue's master: the queues now held (empty if it cannot be asked)."""
        found = self.instance.find_broker_address_in_subscribe(broker_name, MASTER_ID, True)
        if found is None:
            await self.instance.update_route(mqs[0].topic)
            found = self.instance.find_broker_address_in_subscribe(broker_name, MASTER_ID, True)
        if found is None:
            return set()
        try:
            response = await self.instance.invoke(
                found.addr,
                self.instance.request(RequestCode.LOCK_BATCH_MQ, None, self._lock_request(mqs)),
                self.config.offset_rpc_timeout,
            )
        except RemotingError as exc:
            log.warning("lock of %d queues at %s: %s", len(mqs), broker_name, exc)
            return set()
        if response.code != ResponseCode.SUCCESS:
            log.warning("lock at %s refused: %s %s", broker_name, response.code, response.remark)
            return set()
        try:
            return set(LockBatchResponseBody.decode(response.body).lock_ok_mq_set)
        except BodyDecodeError as exc:
            log.warning("lock answer of %s is unreadable: %s", broker_name, exc)
            return set()

    async def _unlock(self, mqs: Mapping[MessageQueue, Any], oneway: bool) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name, queues in by_broker.items():
            found = self.instance.find_broker_address_in_subscribe(broker_name, MASTER_ID, True)
            if found is None:
                continue
            body = UnlockBatchRequestBody(
                consumer_group=self.group, client_id=self.client_id, mq_set=tuple(sorted(queues))
            ).encode()
            try:
                if oneway:
                    await self.instance.invoke_oneway(
                        found.addr,
                        self.instance.request(RequestCode.UNLOCK_BATCH_MQ, None, body, oneway=True),
                    )
                else:
                    await self.instance.invoke(
                        found.addr,
                        self.instance.request(RequestCode.UNLOCK_BATCH_MQ, None, body),
                        self.config.offset_rpc_timeout,
                    )
            except RemotingError as exc:
                log.warning("unlock of %d queues at %s: %s", len(queues), broker_name, exc)
            for mq in queues:
                pq = self._process_queues.get(mq)
                if isinstance(pq, OrderlyProcessQueue):
                    pq.locked = False

    async def lock_all(self) -> None:
        """Renew (or take again) the lock of every held queue, broker by broker (RebalanceImpl#lockAll)."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq, pq in self._process_queues.items():
            if not pq.dropped:
                by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name, mqs in by_broker.items():
            asked_at = time.monotonic()  # the lease counts from the request, not the answer
            granted = await self._lock(broker_name, mqs)
            for mq in mqs:
                held = self._process_queues.get(mq)
                if not isinstance(held, OrderlyProcessQueue):
                    continue
                if mq in granted:
                    held.lock_granted(asked_at)
                else:
                    held.locked = False  # another client holds it: stop consuming it

    async def _lock_loop(self) -> None:
        while True:
            await anyio.sleep(self.orderly.lock_interval)
            await self.lock_all()

    async def _lock_one(self, mq: MessageQueue) -> bool:
        asked_at = time.monotonic()
        if mq in await self._lock(mq.broker_name, [mq]):
            pq = self._process_queues.get(mq)
            if isinstance(pq, OrderlyProcessQueue):
                pq.lock_granted(asked_at)
            else:
                self._granted[mq] = asked_at
            return True
        return False

    # ------------------------------------------------------------------ PushConsumer hooks
    async def _claim(self, mq: MessageQueue) -> bool:
        """A new queue is taken only once locked (RebalanceImpl#updateProcessQueueTableInRebalance)."""
        if not self._clustering:
            return True
        return await self._lock_one(mq)

    def _new_process_queue(self, mq: MessageQueue) -> ProcessQueue:
        pq = OrderlyProcessQueue()
        granted = self._granted.pop(mq, None)
        if granted is not None:
            pq.lock_granted(granted)
        return pq

    async def _pull_gate(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> int | None:
        """Pull only a locked queue; at its first lock, from the offset stored at the broker."""
        if not self._clustering:
            return next_offset
        assert isinstance(pq, OrderlyProcessQueue)
        if not pq.locked:
            await anyio.sleep(self.orderly.pull_delay_when_not_locked)
            return None
        if not pq.previously_locked:
            offset = await self._compute_pull_from_where(mq)
            if offset < 0:
                await anyio.sleep(self.config.pull_time_delay_when_exception)
                return None
            pq.previously_locked = True
            return offset
        return next_offset

    async def _remove_unnecessary_queue(self, mq: MessageQueue, oneway: bool = True) -> None:
        """Wait for the handler call under way, persist the offset, then unlock (Java: the same order)."""
        pq = self._process_queues.get(mq)
        if isinstance(pq, OrderlyProcessQueue):
            async with pq.consume_lock:
                await self.offset_store.persist(mq, oneway=False)
                self.offset_store.remove_offset(mq)
                if self._clustering:
                    await self._unlock({mq: pq}, oneway=False)
            return
        await super()._remove_unnecessary_queue(mq, oneway)

    def _submit_consume(self, msgs: Any, pq: ProcessQueue, mq: MessageQueue) -> None:
        """The pull put messages in the queue: start its consume task unless one runs."""
        assert isinstance(pq, OrderlyProcessQueue)
        if not pq.consuming and not pq.dropped:
            pq.consuming = True
            self._tasks.start_soon(self._consume_orderly, mq, pq)

    # ------------------------------------------------------------------ consuming
    def _may_consume(self, pq: OrderlyProcessQueue) -> bool:
        return not self._clustering or (
            pq.locked and not pq.is_lock_expired(self.orderly.lock_max_live)
        )

    async def _consume_orderly(self, mq: MessageQueue, pq: OrderlyProcessQueue) -> None:
        """ConsumeRequest#run: batches of one queue in order while it is locked; one task per queue."""
        lock = self._queue_locks.setdefault(mq, anyio.Lock())
        try:
            async with lock:
                await self._consume_while_locked(mq, pq)
        finally:
            pq.consuming = False
        if pq.has_messages() and not pq.dropped:
            self._submit_consume([], pq, mq)  # messages came while the task was ending

    async def _consume_while_locked(self, mq: MessageQueue, pq: OrderlyProcessQueue) -> None:
        began = anyio.current_time()
        while not pq.dropped:
            if not self._may_consume(pq):
                # tryLockLaterAndReconsume: lock this queue again, then go on or wait
                if not await self._lock_one(mq):
                    await anyio.sleep(self.orderly.relock_delay)
                continue
            if anyio.current_time() - began > self.orderly.max_time_consume_continuously:
                await anyio.sleep(0)  # let other queues' tasks run, as Java re-submits
                began = anyio.current_time()
            msgs = pq.take_messages(max(1, self.config.consume_message_batch_max_size))
            if not msgs:
                return
            context = ConsumeOrderlyContext(mq, self.orderly.suspend_current_queue_time)
            async with pq.consume_lock:
                if pq.dropped:
                    return
                shown = [self._with_original_topic(m) for m in msgs]
                before = self._trace_before(shown)
                code = CONSUME_SUCCESS_CODE
                try:
                    status: Any = await self.orderly_handler(shown, context)
                except Exception:
                    log.exception("orderly handler of %s failed on %s", self.group, mq)
                    status, code = None, CONSUME_EXCEPTION_CODE
            if not isinstance(status, ConsumeOrderlyStatus):
                code = code if code != CONSUME_SUCCESS_CODE else CONSUME_NULL_CODE
                status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT  # null or a failure
            elif status != ConsumeOrderlyStatus.SUCCESS:
                code = CONSUME_FAILED_CODE
            self._trace_after(before, status == ConsumeOrderlyStatus.SUCCESS, code)
            if pq.dropped:
                return
            if not await self._process_consume_result_orderly(msgs, status, context, pq, mq):
                await anyio.sleep(context.suspend_current_queue_time)

    def _max_reconsume_times(self) -> int:
        times = self.orderly.max_reconsume_times
        return INTEGER_MAX if times == -1 else times

    async def _process_consume_result_orderly(
        self,
        msgs: list[ReceivedMessage],
        status: ConsumeOrderlyStatus,
        context: ConsumeOrderlyContext,
        pq: OrderlyProcessQueue,
        mq: MessageQueue,
    ) -> bool:
        """processConsumeResult (autoCommit): True to go on with the next batch, False to suspend."""
        if status == ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            again = await self._check_reconsume_times(msgs)
            if again is not None:
                pq.make_again(again)
                return False
        offset = pq.commit()
        if offset >= 0 and not pq.dropped:
            self.offset_store.update_offset(mq, offset, increase_only=False)
        return True

    async def _check_reconsume_times(
        self, msgs: list[ReceivedMessage]
    ) -> list[ReceivedMessage] | None:
        """checkReconsumeTimes: the batch to offer again (each count + 1), or None to go on.

        A message that reached maxReconsumeTimes is sent back to %RETRY%group
        (the broker dead-letters it); if that fails it is offered again too.
        """
        suspend = False
        again = []
        for msg in msgs:
            if msg.reconsume_times >= self._max_reconsume_times() and await self._send_back_orderly(
                msg
            ):
                continue  # sent back: it leaves the queue with this batch's commit
            suspend = True
            again.append(dataclasses.replace(msg, reconsume_times=msg.reconsume_times + 1))
        return again if suspend else None

    async def _send_back_orderly(self, msg: ReceivedMessage) -> bool:
        """ConsumeMessageOrderlyService#sendMessageBack: a plain send to %RETRY%group with the counts."""
        return await self._send_to_retry_topic(
            msg, msg.reconsume_times, self._max_reconsume_times()
        )
