"""A nursery a client component owns inside its caller's nursery, stopped on demand."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Self

import trio


class TaskGroup:
    """Background tasks of one component: started into a parent nursery, cancelled by `stop`.

    The component's tasks never outlive its owner (the parent nursery) and
    `stop` returns only once every one of them has finished.
    """

    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None
        self._done = trio.Event()

    @property
    def running(self) -> bool:
        return self._nursery is not None and not self._done.is_set()

    async def start(self, parent: trio.Nursery) -> None:
        self._nursery = await parent.start(self._run)

    async def _run(
        self, *, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with trio.open_nursery() as nursery:
                task_status.started(nursery)
                await trio.sleep_forever()  # keep the nursery open while it has no task
        finally:
            self._done.set()

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        if self._nursery is None:
            raise RuntimeError("the component is not started")
        self._nursery.start_soon(fn, *args)

    async def start_task(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """`nursery.start` inside the group: returns what the task reports as started."""
        if self._nursery is None:
            raise RuntimeError("the component is not started")
        return await self._nursery.start(fn, *args)

    async def stop(self) -> None:
        """Cancel every task and wait for them to finish."""
        if self._nursery is None:
            return
        self._nursery.cancel_scope.cancel()
        await self._done.wait()


class Service:
    """`async with` support for a component with `start(nursery)` and `shutdown()`.

    The context opens a nursery of its own, starts the component in it, and
    on exit shuts the component down before the nursery closes.
    """

    _exit_stack: contextlib.AsyncExitStack | None = None

    async def start(self, nursery: trio.Nursery) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def shutdown(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        stack = contextlib.AsyncExitStack()
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.push_async_callback(self.shutdown)
        try:
            await self.start(nursery)
        except BaseException:
            nursery.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._exit_stack = stack
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        stack, self._exit_stack = self._exit_stack, None
        if stack is None:
            return None
        return await stack.__aexit__(*exc_info)
