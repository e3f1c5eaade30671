"""Client benchmark: es-broker through its public Python client against Redis Streams through redis-py.

Run: python bench/client_bench.py [--messages 100000] [--sync 2000] [--no-redis] [--only PHASE ...]

Unlike bench/wire_bench.py, which speaks raw frames, everything on the
es-broker side goes through `es_broker.client` as a user drives it:

- produce: `Producer.send_batch`, batches of 32 with 16 batches in flight;
- consume: a `PushConsumer` in a new group (CONSUME_FROM_FIRST_OFFSET) with
  its default settings, until its handler has seen every message and the
  consumed offsets it commits cover them all;
- sync: `Producer.send` one at a time (p50/p99), and `SyncProducer.send`,
  the blocking API, from plain code.

Redis, same run: Debian's redis-server on a free loopback port with AOF
everysec; pipelines of 32 XADD, XREADGROUP COUNT 32 + XACK, single XADD.
es-broker runs as a real `es-broker serve` process (tests/process_fixtures.py).
`--only` runs some phases (for profiling the client process with py-spy).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_broker.client import (  # noqa: E402
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    SyncProducer,
)
from tests.process_fixtures import serve  # noqa: E402

BODY = b"x" * 1024
QUEUES = 8
BATCH = 32
WINDOW = 16
PHASES = ("produce", "consume", "sync", "blocking")


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------- es-broker, public client


async def es_produce(namesrv: str, topic: str, n: int) -> float:
    batch = [Message(BODY, tags="A") for _ in range(BATCH)]
    async with Producer(namesrv, "BenchProducer", client_ip="127.0.0.1") as producer:
        # route lookup and connection before the clock starts
        await producer.send(topic, BODY, tags="A")
        batches = n // BATCH
        window = trio.Semaphore(WINDOW)
        start = time.perf_counter()

        async def one() -> None:
            try:
                await producer.send_batch(topic, batch)
            finally:
                window.release()

        async with trio.open_nursery() as nursery:
            for _ in range(batches):
                await window.acquire()
                nursery.start_soon(one)
        elapsed = time.perf_counter() - start
    return batches * BATCH / elapsed


async def es_consume(namesrv: str, topic: str, n: int) -> float:
    """A new group from the first offset until the handler saw n messages and their offsets are committed."""
    seen = 0
    done = trio.Event()

    async def handle(msgs) -> ConsumeResult:
        nonlocal seen
        seen += len(msgs)
        if seen >= n:
            done.set()
        return ConsumeResult.SUCCESS

    group = f"BenchConsumer{uuid.uuid4().hex[:8]}"
    consumer = PushConsumer(
        namesrv,
        group,
        handle,
        subscriptions={topic: "*"},
        client_ip="127.0.0.1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        await consumer.start(nursery)
        await done.wait()
        # the offsets committed in memory (what the next persist sends) cover every message
        while (
            sum(off for mq, off in consumer.offset_store.offsets().items() if mq.topic == topic) < n
        ):
            await trio.sleep(0.001)
        elapsed = time.perf_counter() - start
        await consumer.shutdown()
    return n / elapsed


async def es_sync(namesrv: str, topic: str, count: int) -> list[float]:
    out = []
    async with Producer(namesrv, "BenchSync", client_ip="127.0.0.1") as producer:
        await producer.send(topic, BODY, tags="A")
        for _ in range(count):
            t = time.perf_counter()
            await producer.send(topic, BODY, tags="A")
            out.append(time.perf_counter() - t)
    return out


def es_blocking(namesrv: str, topic: str, count: int) -> list[float]:
    out = []
    with SyncProducer(namesrv, "BenchBlocking", client_ip="127.0.0.1") as producer:
        producer.send(topic, BODY, tags="A")
        for _ in range(count):
            t = time.perf_counter()
            producer.send(topic, BODY, tags="A")
            out.append(time.perf_counter() - t)
    return out


def run_es_broker(n: int, sync: int, phases: set[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d,
        serve(Path(d) / "data") as broker,
    ):
        for topic in ("Bench", "Sync"):
            broker.admin(
                "updateTopic",
                "-b",
                broker.broker,
                "-t",
                topic,
                "-r",
                str(QUEUES),
                "-w",
                str(QUEUES),
            )
        if "produce" in phases or "consume" in phases:
            out["produce"] = trio.run(es_produce, broker.namesrv, "Bench", n)
        if "consume" in phases:
            out["consume"] = trio.run(es_consume, broker.namesrv, "Bench", n // BATCH * BATCH)
        if "sync" in phases:
            lat = trio.run(es_sync, broker.namesrv, "Sync", sync)
            out["p50"], out["p99"] = percentile(lat, 0.5), percentile(lat, 0.99)
        if "blocking" in phases:
            lat = es_blocking(broker.namesrv, "Sync", sync)
            out["blocking_p50"], out["blocking_p99"] = percentile(lat, 0.5), percentile(lat, 0.99)
    return out


# ---------------------------------------------------------------------- Redis Streams, redis-py


def run_redis(n: int, sync: int) -> dict[str, float]:
    """The same Redis workload as wire_bench's (one XADD at a time is what a blocking client sees too)."""
    from wire_bench import run_redis as redis_streams

    out = redis_streams(n, BATCH, sync)
    return dict(out, blocking_p50=out["p50"], blocking_p99=out["p99"])


ROWS = (
    ("produce", "produce, send_batch (msg/s)", 1.0),
    ("consume", "consume, PushConsumer (msg/s)", 1.0),
    ("p50", "Producer.send p50 (ms)", 1000.0),
    ("p99", "Producer.send p99 (ms)", 1000.0),
    ("blocking_p50", "SyncProducer.send p50 (ms)", 1000.0),
    ("blocking_p99", "SyncProducer.send p99 (ms)", 1000.0),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument(
        "--sync", type=int, default=2000, help="single sends for the latency figures"
    )
    parser.add_argument("--no-redis", action="store_true", help="es-broker only")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=PHASES,
        default=list(PHASES),
        help="es-broker phases to run (consume needs produce, which then runs too)",
    )
    args = parser.parse_args()
    es = run_es_broker(args.messages, args.sync, set(args.only))
    rd = {} if args.no_redis else run_redis(args.messages, args.sync)
    print(
        f"{args.messages} messages of 1 KiB, {os.cpu_count()} cores; es-broker through es_broker.client, "
        f"Redis Streams through redis-py"
    )
    print(f"{'':32s}{'es-broker':>12s}{'Redis':>12s}{'ratio':>8s}")
    for key, label, scale in ROWS:
        if key not in es:
            continue
        line = (
            f"{label:32s}{es[key] * scale:12,.3f}" if scale != 1 else f"{label:32s}{es[key]:12,.0f}"
        )
        if key in rd:
            line += f"{rd[key] * scale:12,.3f}" if scale != 1 else f"{rd[key]:12,.0f}"
            line += f"{es[key] / rd[key]:8.2f}"
        print(line)


if __name__ == "__main__":
    main()
