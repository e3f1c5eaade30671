"""A task group a client component owns inside its caller's task group, stopped on demand."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, Self

import anyio
import anyio.abc


class TaskSpawner(Protocol):
    """Where a component starts its tasks: an anyio task group, or (under trio) a trio nursery.

    Both spell `start_soon` and `start` alike, so callers on trio keep passing
    their nurseries while callers on asyncio pass `anyio.create_task_group()`.
    """

    def start_soon(
        self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: object = None
    ) -> object: ...

    async def start(
        self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: object = None
    ) -> Any: ...


class TaskGroup:
    """Background tasks of one component: started into a parent task group, cancelled by `stop`.

    The component's tasks never outlive its owner (the parent task group) and
    `stop` returns only once every one of them has finished.
    """

    def __init__(self) -> None:
        self._group: anyio.abc.TaskGroup | None = None
        self._done = anyio.Event()

    @property
    def running(self) -> bool:
        return self._group is not None and not self._done.is_set()

    async def start(self, parent: TaskSpawner) -> None:
        self._group = await parent.start(self._run)

    async def _run(
        self, *, task_status: anyio.abc.TaskStatus[anyio.abc.TaskGroup] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with anyio.create_task_group() as group:
                task_status.started(group)
                await anyio.sleep_forever()  # keep the group open while it has no task
        finally:
            self._done.set()

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        if self._group is None:
            raise RuntimeError("the component is not started")
        self._group.start_soon(fn, *args)

    async def start_task(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """`task_group.start` inside the group: returns what the task reports as started."""
        if self._group is None:
            raise RuntimeError("the component is not started")
        return await self._group.start(fn, *args)

    async def stop(self) -> None:
        """Cancel every task and wait for them to finish."""
        if self._group is None:
            return
        self._group.cancel_scope.cancel()
        await self._done.wait()


class Service:
    """`async with` support for a component with `start(task_group)` and `shutdown()`.

    The context opens a task group of its own, starts the component in it, and
    on exit shuts the component down before the task group closes.
    """

    _exit_stack: contextlib.AsyncExitStack | None = None

    async def start(self, nursery: TaskSpawner) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def shutdown(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        stack = contextlib.AsyncExitStack()
        group = await stack.enter_async_context(anyio.create_task_group())
        stack.push_async_callback(self.shutdown)
        try:
            await self.start(group)
        except BaseException:
            group.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._exit_stack = stack
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        stack, self._exit_stack = self._exit_stack, None
        if stack is None:
            return None
        return await stack.__aexit__(*exc_info)
