"""Waiting on a condition that another process or component holds and announces to nobody.

Where a test can wait on an event (a trio Event, a process's output line) it
does; these two helpers are for the rest: state inside a broker process, a
name-server route, a SQL follower's rows. They re-ask the condition at a short
interval until it holds, and fail with `what` after `timeout`. They never
stand in for a condition: the test proceeds the moment it holds.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

T = TypeVar("T")
INTERVAL = 0.02


async def poll_until(
    check: Callable[[], Any | Awaitable[Any]], timeout: float = 30.0, what: str = "condition"
) -> Any:
    """Return the first truthy result of check() (sync or async), re-asked until timeout."""
    with anyio.move_on_after(timeout):  # under trio or asyncio
        while True:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            await anyio.sleep(INTERVAL)
    raise AssertionError(f"{what}: not reached within {timeout} s")


def poll_until_sync(check: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
    """poll_until for tests without an event loop."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout} s; last: {result!r}")
        time.sleep(INTERVAL)
