"""Held pulls (PullRequestHoldService, B-63): wait for a message on one queue, or time out."""

from __future__ import annotations

import trio


class PullHoldService:
    def __init__(self) -> None:
        self._events: dict[tuple[str, int], trio.Event] = {}

    def arrival(self, topic: str, queue_id: int) -> trio.Event:
        """The event set when the next message for (topic, queue) is stored."""
        key = (topic, queue_id)
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = trio.Event()
        return event

    def notify(self, topic: str, queue_id: int) -> None:
        event = self._events.pop((topic, queue_id), None)
        if event is not None:
            event.set()
