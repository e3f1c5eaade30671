"""The answers of one connection waiting to be written, and the one task that writes them.

Whoever has an answer puts it here without waiting: the read loop for a
request refused at the edge, the writer's completion for a send (no task
runs per send), a request's own task for everything else. The connection's
answer put while nothing else is being written goes to the socket at once
(`Channel.write_now`: no task wakes for it); otherwise the connection's
sender task writes every answer that is ready with one `send_all`, in the
order they were put, so a burst of answers costs one write and one
scheduler pass, not one each.

While a group commit hands out its outcomes (`HeldAnswers.holding`, the
writer's completion pass), answers are held instead and each connection's
are written with one write when the pass ends: the answers to the sends of
one commit cost one syscall per connection, not one per send.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import cast

import trio

from es_broker.log import hops
from es_broker.net.channel import Channel, ChannelClosed
from es_broker.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

# The answer to a request whose handler raised (RemotingServer._failed): its code and remark, or None.
Failed = Callable[[RemotingCommand, Exception], RemotingCommand | None]


class HeldAnswers:
    """Outboxes whose answers wait for the end of a completion pass, shared by a listener's connections."""

    __slots__ = ("on", "outboxes")

    def __init__(self) -> None:
        self.on = False
        self.outboxes: list[Outbox] = []  # in the order their first held answer came

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Hold every answer put meanwhile; then write each outbox's with one write."""
        if self.on:  # nested: the outer pass writes them
            yield
            return
        self.on = True
        try:
            yield
        finally:
            self.on = False
            outboxes, self.outboxes = self.outboxes, []
            for outbox in outboxes:
                outbox._push()


class Outbox:
    """A connection's answers not yet written; `run` is its sender task."""

    __slots__ = (
        "channel",
        "_failed",
        "_held",
        "_frames",
        "_traces",
        "_sender",
        "closed",
        "observe",
        "started",
    )

    def __init__(
        self,
        channel: Channel,
        failed: Failed,
        held: HeldAnswers | None = None,
        observe: Callable[[int, int, float], None] | None = None,
    ) -> None:
        self.channel = channel
        # the metrics' latency observer, and when each request being handled was decoded (by opaque)
        self.observe = observe
        self.started: dict[int, float] = {}
        self._failed = failed
        self._held = held
        self._frames: list[bytes] = []
        self._traces: list[hops.Trace] = []  # hops.ON only: the traces of the frames waiting
        self._sender: trio.lowlevel.Task | None = None  # the sender, while it waits for frames
        self.closed = False  # the peer is gone: answers are dropped

    def answer(
        self,
        request: RemotingCommand,
        response: RemotingCommand | None,
        trace: hops.Trace | None = None,
    ) -> None:
        """Queue `response` to `request` for writing (nothing for None or a one-way request)."""
        if self.observe is not None:
            began = self.started.pop(request.opaque, None)
            if began is not None and response is not None:
                self.observe(request.code, response.code, began)
        if response is None or request.is_oneway or self.closed:
            if trace is not None:
                hops.done(trace)
            return
        try:
            frame = self.channel.conn.send(response)
        except Exception as exc:  # a response that cannot be encoded is answered as a failure
            fallback = self._failed(request, exc)
            if fallback is None:
                return
            frame = self.channel.conn.send(fallback)
        queued = bool(self._frames)  # then the sender is woken, writing, or held: it takes this too
        self._frames.append(frame)
        if trace is not None:
            self._traces.append(trace)
        held = self._held
        if held is not None and held.on:
            if not queued:
                held.outboxes.append(self)
        elif not queued:
            self._push()

    def _push(self) -> None:
        """Write what is queued now if the sender is idle (no write under way), else leave it to the sender."""
        sender = self._sender
        if sender is None or self.closed:  # writing (it takes these next), not started, or gone
            return
        frames = self._frames
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        began = hops.now() if self._traces else 0
        try:
            taken = self.channel.write_now(data)
        except ChannelClosed:
            self.closed = True
            taken = True
        if taken:
            if self._traces:
                ended = hops.now()
                for trace in self._traces:
                    trace.at[hops.ENCODED], trace.at[hops.SENT] = began, ended
                    hops.done(trace)
                self._traces.clear()
            if not self.channel.unsent:
                frames.clear()
                return
            self._frames = [b""]  # the sender writes the rest the socket did not take
        self._sender = None
        trio.lowlevel.reschedule(sender)

    def fail(
        self, request: RemotingCommand, exc: Exception, trace: hops.Trace | None = None
    ) -> None:
        """Queue the answer to a request whose handler raised `exc`."""
        self.answer(request, self._failed(request, exc), trace)

    async def run(self) -> None:
        """Write what is queued, all of it at once, until the peer goes away or this is cancelled."""
        while True:
            if not self._frames:
                self._sender = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._abort)
            if self.closed:
                return
            frames, self._frames = self._frames, []
            traces, self._traces = self._traces, []
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            try:
                await self.channel.write(data)
            except ChannelClosed:
                self.closed = True
                self._frames.clear()
                return
            finally:
                if traces:
                    _stamp_written(self.channel, traces)

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self._sender = None
        return trio.lowlevel.Abort.SUCCEEDED


def _stamp_written(channel: Channel, traces: list[hops.Trace]) -> None:
    """Stamp the write's begin and end (the stamped stream's) on the traces of its frames."""
    sent_at = cast(tuple[int, int], getattr(channel.stream, "sent_at", (0, 0)))
    for trace in traces:
        trace.at[hops.ENCODED], trace.at[hops.SENT] = sent_at
        hops.done(trace)
