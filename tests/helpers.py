"""What the tests share: bounded waits, the `es-broker` command, topics, producing, a collecting consumer.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

import datetime
import functools
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import trio

from es_broker.client import (
    ConsumeResult,
    Producer,
    PushConsumer,
    PushConsumerConfig,
    ReceivedMessage,
    SendResult,
)
from es_broker.client.admin import Admin, AdminError
from tests.process_fixtures import ROOT, _env
from tests.waiting import poll_until

# RocketMQ's timers, shortened so a test takes a moment instead of minutes.
FAST = PushConsumerConfig(
    rebalance_interval=0.5,
    persist_consumer_offset_interval=0.1,
    persist_consumer_offset_delay=0.1,
    pull_time_delay_when_exception=0.05,
    offset_illegal_delay=0.2,
    reset_offset_wait=0.2,
    consume_later_delay=0.1,
)
TIMEOUT = 15.0  # an upper bound for what must happen, never a measured duration


class Served(Protocol):
    """A running broker and its name server: in process (Running) or a real process (ServedBroker)."""

    @property
    def namesrv_addr(self) -> str: ...

    @property
    def addr(self) -> str: ...


async def wait_until(what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    """Re-ask a check (sync or async) on state that nobody announces until it holds; fail after timeout."""
    return await poll_until(check, timeout, what)


def local_ms(day: int, hour: int, minute: int = 0) -> int:
    """A local wall-clock time of January 2024 in epoch ms (retention runs at local hours)."""
    return int(datetime.datetime(2024, 1, day, hour, minute).timestamp() * 1000)


# ---------------------------------------------------------------------- the command line


def cli(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`es-broker ARGS` as an operator runs it (`python -m es_broker.cli`), finished."""
    return subprocess.run(
        [sys.executable, "-m", "es_broker.cli", *args],
        capture_output=True,
        text=True,
        env=env if env is not None else _env(),
        cwd=ROOT,
        timeout=timeout,
    )


def cli_checked(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """cli() that must succeed."""
    done = cli(*args, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


async def cli_ok(*args: str) -> subprocess.CompletedProcess[str]:
    """cli_checked() from a trio test (in a thread, so the test's own tasks go on)."""
    return await trio.to_thread.run_sync(functools.partial(cli_checked, *args))


async def admin_json(served: Served, *args: str) -> Any:
    """`es-broker admin -n NAMESRV ARGS --json`, parsed."""
    done = await cli_ok("admin", "-n", served.namesrv_addr, *args, "--json")
    return json.loads(done.stdout)


# ---------------------------------------------------------------------- topics and messages


async def topic_ready(served: Served, topic: str, queues: int = 4, perm: int = 6) -> str:
    """Create the topic on the broker (our admin client) and wait until the name server routes it as created."""
    async with Admin.open(served.namesrv_addr) as admin:
        await admin.update_topic(served.addr, topic, queues, queues, perm)

        async def routed() -> bool:
            try:
                route = await admin.route(topic)
            except AdminError:  # not registered yet
                return False
            created = [(q.write_queue_nums, q.perm) for q in route.queue_datas]
            return created == [(queues, perm)]

        await wait_until(f"route of {topic}", routed)
    return topic


def numbered(prefix: str, n: int) -> list[bytes]:
    """n bodies: prefix0, prefix1, ..."""
    return [f"{prefix}{i}".encode() for i in range(n)]


async def produce(
    served: Served, nursery: trio.Nursery, topic: str, bodies: list[bytes], **kw: Any
) -> list[SendResult]:
    """Send each body with a producer of its own (group PG), in order."""
    producer = Producer(served.namesrv_addr, "PG", client_ip="127.0.0.1")
    await producer.start(nursery)
    try:
        return [await producer.send(topic, body, **kw) for body in bodies]
    finally:
        await producer.shutdown()


def stored(running: Any, group: str, topic: str, queues: int) -> list[int]:
    """The committed offsets of an in-process broker (tests.server_fixtures.Running), per queue."""
    return [running.server.broker.stored_offset(group, topic, q) for q in range(queues)]


def max_offsets(running: Any, topic: str, queues: int) -> list[int]:
    """The max offsets of an in-process broker, per queue."""
    return [running.server.broker.max_offset(topic, q) for q in range(queues)]


# ---------------------------------------------------------------------- consuming


class Signal:
    """Wakes waiters whenever something they watch may have changed."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        with trio.fail_after(timeout):
            while True:
                event = self._event  # taken before the check, so no change is missed
                if predicate():
                    return
                await event.wait()


class Collector:
    """A handler recording every delivery; `decide` answers per message (any failure fails the batch)."""

    def __init__(
        self,
        decide: Callable[[ReceivedMessage], ConsumeResult] | None = None,
        signal: Signal | None = None,
    ) -> None:
        self.received: list[ReceivedMessage] = []
        self.decide = decide or (lambda msg: ConsumeResult.SUCCESS)
        self.signal = signal or Signal()

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.received.extend(msgs)
        self.signal.fire()
        results = {self.decide(m) for m in msgs}
        return (
            ConsumeResult.RECONSUME_LATER
            if ConsumeResult.RECONSUME_LATER in results
            else ConsumeResult.SUCCESS
        )

    def bodies(self) -> Counter[bytes]:
        return Counter(m.body for m in self.received)

    async def wait_for(
        self, predicate: Callable[[list[ReceivedMessage]], bool], timeout: float = TIMEOUT
    ) -> None:
        await self.signal.wait_for(lambda: predicate(self.received), timeout)

    async def wait_count(self, n: int, timeout: float = TIMEOUT) -> None:
        await self.wait_for(lambda received: len(received) >= n, timeout)


def consumer(
    served: Served, group: str, handler: Any, subscriptions: dict[str, str], **kw: Any
) -> PushConsumer:
    """A push consumer on loopback with the shortened timers (FAST) unless told otherwise."""
    kw.setdefault("config", FAST)
    kw.setdefault("client_ip", "127.0.0.1")
    return PushConsumer(served.namesrv_addr, group, handler, subscriptions=subscriptions, **kw)
