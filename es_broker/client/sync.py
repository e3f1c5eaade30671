"""A blocking producer for scripts: the trio client runs in a background thread."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import trio

from es_broker.client.config import DEFAULT_PRODUCER_GROUP
from es_broker.client.messages import Message, SendResult
from es_broker.client.producer import Producer


class SyncProducer:
    """`Producer` with blocking calls; use as a context manager or call start()/shutdown()."""

    def __init__(self, namesrv_addr: str, group: str = DEFAULT_PRODUCER_GROUP, **options: Any) -> None:
        self.producer = Producer(namesrv_addr, group, **options)
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> None:
        """Start the trio thread and the producer in it; raises what the start raised."""
        self._thread = threading.Thread(target=self._run_thread, name="rocketmq-producer", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run_thread(self) -> None:
        with contextlib.suppress(BaseException):  # kept in self._error and raised by start()
            trio.run(self._main)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                await self.producer.start(nursery)
                self._ready.set()
                await self._stop.wait()
                await self.producer.shutdown()
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            self._ready.set()  # start() must not wait forever when the start failed

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self._token is None:
            raise RuntimeError("the producer is not started")
        return trio.from_thread.run(functools.partial(fn, *args, **kwargs), trio_token=self._token)

    def send(self, topic: str, body: bytes, tags: str | None = None, keys: str | Sequence[str] | None = None,
             properties: Mapping[str, str] | None = None, **options: Any) -> SendResult:
        """Producer.send, blocking."""
        return self._call(self.producer.send, topic, body, tags, keys, properties, **options)

    def send_oneway(self, topic: str, body: bytes, tags: str | None = None, **options: Any) -> None:
        """Producer.send_oneway, blocking until written."""
        self._call(self.producer.send_oneway, topic, body, tags, **options)

    def send_batch(self, topic: str, messages: Sequence[Message]) -> SendResult:
        """Producer.send_batch, blocking."""
        return self._call(self.producer.send_batch, topic, messages)

    def shutdown(self) -> None:
        """Shut the producer down and end the thread."""
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        if self._thread is not None:
            self._thread.join()
        self._token = None

    def __enter__(self) -> SyncProducer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
