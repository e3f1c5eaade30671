"""Client-side message trace (Java's `enableMsgTrace`): the contexts, and their dispatch (B-483).

A producer or push consumer built with `enable_msg_trace=True` makes a context
for each send (Pub) and around each consume (SubBefore, SubAfter), in 4.9.8's
TraceDataEncoder format (es_broker.remoting.trace_data), and hands it to its
`TraceDispatcher`. As AsyncTraceDispatcher, the dispatcher sends the contexts in
the background, several per trace message, with an inner producer of group
`_INNER_TRACE_PRODUCER-<group>` to the trace topic (RMQ_SYS_TRACE_TOPIC unless
renamed), keyed by the traced messages' ids. A trace message that cannot be sent
is logged and dropped: tracing never fails or slows the traced send or consume.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

import anyio

from es_broker.client.messages import DELAY, TRAN_MSG, ReceivedMessage, SendResult
from es_broker.remoting import trace_data
from es_broker.remoting.trace_data import TraceContext, TraceType

log = logging.getLogger(__name__)

MAX_BATCH = 100  # contexts per trace message (AsyncTraceDispatcher's batchSize)
MAX_BODY = 128 * 1024  # bytes of contexts per trace message (its maxMsgSize)
STOP_WAIT = 5.0  # seconds a shutdown waits for the queued contexts to be sent

# (topic, body, keys) -> the send's outcome; the inner producer's `send`
TraceSend = Callable[[str, bytes, list[str]], Awaitable[object]]


def now_ms() -> int:
    return int(time.time() * 1000)


class TraceDispatcher:
    """Queues trace contexts and sends them, batched, to the trace topic."""

    def __init__(self, send: TraceSend, topic: str | None = None) -> None:
        self.topic = topic or trace_data.DEFAULT_TRACE_TOPIC
        self._send = send
        self._in, self._out = anyio.create_memory_object_stream[TraceContext](math.inf)
        self._done = anyio.Event()
        self.sent = 0  # trace messages sent (a statistic)

    def append(self, ctx: TraceContext) -> None:
        """Queue a context; never blocks, never fails (after stop, the context is dropped)."""
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._in.send_nowait(ctx)

    async def run(self) -> None:
        """Send what is queued until `stop`: each batch as one trace message."""
        try:
            async with self._out:
                async for ctx in self._out:
                    batch, size = [ctx], len(ctx.encode())
                    while len(batch) < MAX_BATCH and size < MAX_BODY:
                        try:
                            more = self._out.receive_nowait()
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                        batch.append(more)
                        size += len(more.encode())
                    await self._dispatch(batch)
        finally:
            self._done.set()

    async def _dispatch(self, batch: Sequence[TraceContext]) -> None:
        try:
            await self._send(self.topic, trace_data.encode(batch), trace_data.trace_keys(batch))
            self.sent += 1
        except Exception as exc:  # a trace is best effort, as in Java
            log.warning("trace message to %s not sent: %s", self.topic, exc)

    async def stop(self) -> None:
        """Stop taking contexts, and wait (at most STOP_WAIT) until the queued ones are sent."""
        self._in.close()
        with anyio.move_on_after(STOP_WAIT):
            await self._done.wait()


def pub_context(
    group: str,
    topic: str,
    result: SendResult,
    *,
    tags: str | None,
    keys: str,
    store_host: str,
    body_length: int,
    began_ms: int,
    msg_type: int,
) -> TraceContext:
    """A send's context (SendMessageTraceHookImpl): msgId is the UNIQ_KEY, storeHost the broker."""
    return TraceContext(
        TraceType.PUB,
        result.msg_id,
        timestamp=began_ms,
        region_id=result.region_id or trace_data.DEFAULT_REGION,
        group=group,
        topic=topic,
        tags=tags or "",
        keys=keys,
        store_host=store_host,
        body_length=body_length,
        cost_time=max(0, now_ms() - began_ms),
        msg_type=msg_type,
        offset_msg_id=result.offset_msg_id,
        success=True,
    )


def message_type(props: dict[str, str]) -> int:
    """The send's MessageType ordinal, as sendKernelImpl sets it: a half message, a delayed one, or
    a normal one."""
    if props.get(TRAN_MSG, "").lower() == "true":
        return 1  # Trans_Msg_Half
    if props.get(DELAY):
        return 3  # Delay_Msg
    return 0  # Normal_Msg


def traced(msgs: Sequence[ReceivedMessage]) -> list[ReceivedMessage]:
    """The messages a consume hook traces: not those whose TRACE_ON property is "false"."""
    return [m for m in msgs if m.properties.get(trace_data.TRACE_SWITCH) != "false"]


def sub_before(group: str, msgs: Sequence[ReceivedMessage]) -> list[TraceContext]:
    """The SubBefore contexts of one consume call (ConsumeMessageTraceHookImpl), one request id."""
    request_id = uuid.uuid4().hex.upper()
    began = now_ms()
    return [
        TraceContext(
            TraceType.SUB_BEFORE,
            m.msg_id,
            timestamp=began,
            region_id=m.properties.get("MSG_REGION") or trace_data.DEFAULT_REGION,
            group=group,
            request_id=request_id,
            retry_times=m.reconsume_times,
            keys=m.properties.get("KEYS", ""),
        )
        for m in msgs
    ]


def sub_after(
    before: Sequence[TraceContext], success: bool, context_code: int
) -> list[TraceContext]:
    """The SubAfter contexts: the call's cost shared by its messages, its outcome, as Java."""
    if not before:
        return []
    cost = max(0, now_ms() - before[0].timestamp) // len(before)
    return [
        TraceContext(
            TraceType.SUB_AFTER,
            b.msg_id,
            timestamp=now_ms(),  # a new TraceContext's own time, as Java's
            region_id=b.region_id,
            group=b.group,
            request_id=b.request_id,
            cost_time=cost,
            success=success,
            keys=b.keys,
            context_code=context_code,
        )
        for b in before
    ]
