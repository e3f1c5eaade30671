"""RocketMQ 5 clients through the gRPC proxy beside the 4.x path, on one broker process.

Send throughput and latency: the official 5.x Python client (rocketmq-python-client,
its blocking `send` and its `send_async` with a window of futures) through
`es-broker proxy`, against the project's 4.x client (`Producer.send`, one at a
time and with the same window) straight to the broker. Receive latency: a
message's send to its arrival, through a 5.x SimpleConsumer long-polling the
proxy (ReceiveMessage over the broker's POP_MESSAGE), against a 4.x PushConsumer
(suspended pulls). Bodies of 1 KiB. Everything runs on this machine (2 cores),
the broker, the proxy and the clients together: compare the two paths, not the
absolute figures.

    python bench/grpc_bench.py [--count 2000] [--window 32] [--latency 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future, wait
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer  # noqa: E402
from rocketmq import Message as V5Message  # noqa: E402
from rocketmq import Producer as V5Producer  # noqa: E402

from es_broker.client import ConsumeResult, Producer, PushConsumer  # noqa: E402
from es_broker.client.consumer import ConsumeFromWhere  # noqa: E402
from tests.process_fixtures import serve  # noqa: E402
from tests.proxy_fixtures import proxy  # noqa: E402

BODY = b"x" * 1024


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


def v5_message(topic: str, body: bytes = BODY) -> V5Message:
    m = V5Message()
    m.topic, m.body, m.tag = topic, body, "A"
    return m


def v5_sends(endpoint: str, topic: str, count: int, window: int) -> dict[str, float]:
    config = ClientConfiguration(endpoint, Credentials("", ""), request_timeout=10)
    producer = V5Producer(config, topics=(topic,))
    producer.startup()
    try:
        producer.send(v5_message(topic))  # route and connection before the clock
        times = []
        start = time.perf_counter()
        for _ in range(count):
            t = time.perf_counter()
            producer.send(v5_message(topic))
            times.append(time.perf_counter() - t)
        sync_rate = count / (time.perf_counter() - start)
        start = time.perf_counter()
        pending: set[Future] = set()
        for _ in range(count):
            if len(pending) >= window:
                done, pending = wait(pending, return_when="FIRST_COMPLETED")
                for f in done:
                    f.result()
            pending.add(producer.send_async(v5_message(topic)))
        for f in pending:
            f.result()
        async_rate = count / (time.perf_counter() - start)
    finally:
        producer.shutdown()
    return {
        "sync": sync_rate,
        "p50": pct(times, 0.5),
        "p99": pct(times, 0.99),
        "window": async_rate,
    }


async def v4_sends(namesrv: str, topic: str, count: int, window: int) -> dict[str, float]:
    async with Producer(namesrv, "GrpcBench4", client_ip="127.0.0.1") as producer:
        await producer.send(topic, BODY, tags="A")
        times = []
        start = time.perf_counter()
        for _ in range(count):
            t = time.perf_counter()
            await producer.send(topic, BODY, tags="A")
            times.append(time.perf_counter() - t)
        sync_rate = count / (time.perf_counter() - start)
        limit = trio.Semaphore(window)
        start = time.perf_counter()

        async def one() -> None:
            try:
                await producer.send(topic, BODY, tags="A")
            finally:
                limit.release()

        async with trio.open_nursery() as nursery:
            for _ in range(count):
                await limit.acquire()
                nursery.start_soon(one)
        window_rate = count / (time.perf_counter() - start)
    return {
        "sync": sync_rate,
        "p50": pct(times, 0.5),
        "p99": pct(times, 0.99),
        "window": window_rate,
    }


def v5_receive_latency(endpoint: str, topic: str, count: int) -> list[float]:
    """Send one message at a time and time it until a long-polling SimpleConsumer has it."""
    config = ClientConfiguration(endpoint, Credentials("", ""), request_timeout=10)
    producer = V5Producer(config, topics=(topic,))
    producer.startup()
    consumer = SimpleConsumer(
        config, "GrpcBenchRecv", {topic: FilterExpression()}, await_duration=5
    )
    consumer.startup()
    out = []
    try:
        while consumer.receive(32, 15):  # drain what earlier runs left
            pass
        for i in range(count):
            body = f"lat-{i}".encode()
            sent = time.perf_counter()
            producer.send(v5_message(topic, body))
            got = []
            while not got:
                got = [m for m in consumer.receive(32, 15) if m.body == body]
            out.append(time.perf_counter() - sent)
            for m in got:
                consumer.ack(m)
    finally:
        consumer.shutdown()
        producer.shutdown()
    return out


async def v4_receive_latency(namesrv: str, topic: str, count: int) -> list[float]:
    arrived: dict[bytes, float] = {}
    signal = trio.Event()

    async def handle(msgs) -> ConsumeResult:
        nonlocal signal
        for m in msgs:
            arrived[m.body] = time.perf_counter()
        signal.set()
        return ConsumeResult.SUCCESS

    out = []
    consumer = PushConsumer(
        namesrv,
        "GrpcBenchPush",
        handle,
        subscriptions={topic: "*"},
        client_ip="127.0.0.1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    )
    async with (
        trio.open_nursery() as nursery,
        Producer(namesrv, "GrpcBench4L", client_ip="127.0.0.1") as producer,
    ):
        await consumer.start(nursery)
        await producer.send(topic, b"warm")
        with trio.fail_after(30):
            while b"warm" not in arrived:
                signal = trio.Event()
                await signal.wait()
        for i in range(count):
            body = f"lat-{i}".encode()
            sent = time.perf_counter()
            await producer.send(topic, body)
            with trio.fail_after(30):
                while body not in arrived:
                    signal = trio.Event()
                    await signal.wait()
            out.append(arrived[body] - sent)
        await consumer.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument(
        "--latency", type=int, default=200, help="messages timed for receive latency"
    )
    parser.add_argument("--no-receive", action="store_true", help="sends only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        with (
            serve(base / "data", "--readmodel-url", "none", log_file=base / "broker.log") as b,
            proxy(b.namesrv, log_file=base / "proxy.log") as (_, endpoint),
        ):
            for topic in ("B5", "B4", "L5", "L4"):
                b.admin("updateTopic", "-t", topic, "-c", "DefaultCluster", "-r", "4", "-w", "4")
            v5 = v5_sends(endpoint, "B5", args.count, args.window)
            v4 = trio.run(v4_sends, b.namesrv, "B4", args.count, args.window)
            print(f"{args.count} sends of 1 KiB, window {args.window}")
            print(f"{'':34}{'5.x via proxy':>16}{'4.x direct':>14}")
            for key, label in [
                ("sync", "one at a time (msg/s)"),
                ("p50", "send p50 (ms)"),
                ("p99", "send p99 (ms)"),
                ("window", f"{args.window} in flight (msg/s)"),
            ]:
                print(f"  {label:32}{v5[key]:>16,.1f}{v4[key]:>14,.1f}")
            if not args.no_receive:
                l5 = v5_receive_latency(endpoint, "L5", args.latency)
                l4 = trio.run(v4_receive_latency, b.namesrv, "L4", args.latency)
                print(f"receive latency, send to arrival, {args.latency} messages one at a time")
                for p, label in [(0.5, "p50 (ms)"), (0.99, "p99 (ms)")]:
                    print(f"  {label:32}{pct(l5, p):>16,.2f}{pct(l4, p):>14,.2f}")
                print(
                    f"  {'mean (ms)':32}{statistics.mean(l5) * 1000:>16,.2f}{statistics.mean(l4) * 1000:>14,.2f}"
                )


if __name__ == "__main__":
    main()
