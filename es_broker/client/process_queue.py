"""A consumer's local buffer for one assigned queue (Java ProcessQueue, B-42)."""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable
from types import TracebackType

import anyio

from es_broker.client.messages import ReceivedMessage


class PullScope:
    """A cancel scope that may be cancelled before it is entered.

    The anyio scope itself is made on entry: anyio makes scopes inside a
    running event loop only, and a queue is made by plain code too.
    """

    __slots__ = ("cancel_called", "_scope")

    def __init__(self) -> None:
        self.cancel_called = False
        self._scope: anyio.CancelScope | None = None

    def cancel(self) -> None:
        self.cancel_called = True
        if self._scope is not None:
            self._scope.cancel()

    def __enter__(self) -> anyio.CancelScope:
        self._scope = anyio.CancelScope()
        if self.cancel_called:
            self._scope.cancel()
        return self._scope.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._scope is not None
        return bool(self._scope.__exit__(exc_type, exc, tb))


class ProcessQueue:
    """Messages pulled but not yet consumed, by queue offset, and the queue's life-cycle flags.

    The committed offset is a sliding window: the smallest offset still held,
    or one past the largest offset ever put in once nothing is held (B-42).
    """

    def __init__(self) -> None:
        self._msgs: dict[int, ReceivedMessage] = {}
        self._offsets: list[int] = []  # sorted keys of _msgs
        self.queue_offset_max = 0
        self.msg_size = 0
        self.dropped = False
        self.last_pull_time = time.monotonic()
        self.last_consume_time = time.monotonic()
        # cancelled on drop: a held pull must not outlive its queue
        self.pull_scope = PullScope()

    @property
    def msg_count(self) -> int:
        return len(self._offsets)

    def drop(self) -> None:
        """Mark dropped: results of in-flight consumption are discarded, pulling stops."""
        self.dropped = True
        self.pull_scope.cancel()

    def put_messages(self, msgs: Iterable[ReceivedMessage]) -> int:
        """Hold newly pulled messages; returns how many were new."""
        added = 0
        for msg in msgs:
            if msg.queue_offset in self._msgs:
                continue
            self._msgs[msg.queue_offset] = msg
            bisect.insort(self._offsets, msg.queue_offset)
            self.msg_size += len(msg.body)
            self.queue_offset_max = msg.queue_offset
            added += 1
        return added

    def remove_messages(self, msgs: Iterable[ReceivedMessage]) -> int:
        """Forget consumed messages; returns the offset to commit, -1 if nothing was held."""
        if not self._offsets:
            return -1
        for msg in msgs:
            held = self._msgs.pop(msg.queue_offset, None)
            if held is not None:
                del self._offsets[bisect.bisect_left(self._offsets, msg.queue_offset)]
                self.msg_size -= len(held.body)
        self.last_consume_time = time.monotonic()
        return self._offsets[0] if self._offsets else self.queue_offset_max + 1

    def max_span(self) -> int:
        """Distance between the newest and the oldest held offset (consumeConcurrentlyMaxSpan)."""
        return self._offsets[-1] - self._offsets[0] if self._offsets else 0

    def clear(self) -> None:
        """Forget every held message (reset, B-78 step 3)."""
        self._msgs.clear()
        self._offsets.clear()
        self.msg_size = 0

    def is_pull_expired(self, max_idle: float) -> bool:
        return time.monotonic() - self.last_pull_time > max_idle
