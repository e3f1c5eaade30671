"""Metadata at scale: per-operation latency of topic and group admin as a broker's tables grow.

Run: python bench/metadata_bench.py [--sizes 1000,5000,10000] [--groups 1000] [--samples 30]
     [--namesrv in-process|separate] [--fill-concurrency 16]

Spawns `python -m es_broker.cli serve` (read model off) as tests/process_fixtures.py does, with
its name server in the same process (`in-process`, the default) or as a process of its own
(`--role namesrv`, the broker registering over the wire). Through es_broker.client.admin it then
fills the broker with topics (and groups, in proportion, up to --groups at the largest size),
--fill-concurrency at a time, and at each size measures --samples sequential operations of each
kind, printing the median and p90 in milliseconds:

  createTopic   UPDATE_AND_CREATE_TOPIC of a new topic, answered after the name servers have it
  updatePerm    UPDATE_AND_CREATE_TOPIC of an existing topic with another perm, same wait
  deleteTopic   DELETE_TOPIC_IN_BROKER then DELETE_TOPIC_IN_NAMESRV (es-broker admin deleteTopic)
  route         GET_ROUTEINFO_BY_TOPIC of a random topic at the name server
  createGroup   UPDATE_AND_CREATE_SUBSCRIPTIONGROUP of a new group
  heartbeat     HEART_BEAT of a consumer with one subscription
  allTopics     GET_ALL_TOPIC_CONFIG (the whole table; grows with it by nature)
  fullRegister  UPDATE_BROKER_CONFIG brokerPermission=6, answered after a full registration

Figures are wall time on whatever machine runs it; compare runs on the same machine only.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_broker.client.admin import Admin  # noqa: E402
from es_broker.remoting.bodies import (  # noqa: E402
    ConsumerData,
    HeartbeatData,
    SubscriptionData,
)
from es_broker.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from es_broker.remoting.command import request  # noqa: E402

NAMESRV = re.compile(r"name server listening on (\S+)")
BROKER = re.compile(r"listening on (\S+), data in")


def spawn(args: list[str], pattern: re.Pattern[str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "es_broker.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if m := pattern.search(line):
            return process, m.group(1)
    raise RuntimeError(f"es-broker {args[0]} did not start (exit {process.wait()})")


def start(data: Path, mode: str) -> tuple[list[subprocess.Popen[str]], str, str]:
    common = ["--data-dir", str(data), "--listen", "127.0.0.1:0", "--readmodel-url", "none"]
    if mode == "separate":
        ns, namesrv = spawn(
            ["serve", "--role", "namesrv", "--namesrv-listen", "127.0.0.1:0"], NAMESRV
        )
        broker, addr = spawn(["serve", "--role", "broker", "--namesrv", namesrv, *common], BROKER)
        return [broker, ns], namesrv, addr
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "serve",
            "--namesrv-listen",
            "127.0.0.1:0",
            *common,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    namesrv = ""
    for line in process.stdout:
        if m := NAMESRV.search(line):
            namesrv = m.group(1)
        elif m := BROKER.search(line):
            return [process], namesrv, m.group(1)
    raise RuntimeError(f"es-broker serve did not start (exit {process.wait()})")


async def timed(samples: int, op: Callable[[int], Awaitable[object]]) -> tuple[float, float]:
    took = []
    for i in range(samples):
        t0 = time.perf_counter()
        await op(i)
        took.append((time.perf_counter() - t0) * 1000)
    took.sort()
    return statistics.median(took), took[min(len(took) - 1, int(len(took) * 0.9))]


async def fill(n: int, concurrency: int, make: Callable[[int], Awaitable[object]]) -> None:
    limiter = trio.CapacityLimiter(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            await make(i)

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)


async def bench(opts: argparse.Namespace, namesrv: str, addr: str) -> None:
    sizes = [int(s) for s in opts.sizes.split(",")]
    largest = max(sizes)
    rng = random.Random(7)
    async with Admin.open(namesrv) as admin:
        topics = 0
        groups = 0
        made = 0  # names used by the measured operations

        def group_config(name: str) -> dict[str, object]:
            return {"groupName": name, "consumeEnable": True, "retryQueueNums": 1}

        async def heartbeat(i: int) -> None:
            body = HeartbeatData(
                client_id=f"127.0.0.1@bench{i % 4}",
                consumer_data_set=(
                    ConsumerData(
                        group_name=f"G{i % max(1, groups)}",
                        subscription_data_set=(SubscriptionData(topic=f"T{i % topics}"),),
                    ),
                ),
            ).encode()
            answer = await admin.client.invoke(addr, request(RequestCode.HEART_BEAT, {}, body), 5.0)
            assert answer.code == ResponseCode.SUCCESS, answer.remark

        print(f"{'topics':>7} {'groups':>6}  operation      median ms   p90 ms", flush=True)
        for size in sizes:
            want_groups = opts.groups * size // largest
            t0 = time.perf_counter()
            await fill(
                size - topics,
                opts.fill_concurrency,
                lambda i, base=topics: admin.update_topic(addr, f"T{base + i}", 4, 4),
            )
            await fill(
                want_groups - groups,
                opts.fill_concurrency,
                lambda i, base=groups: admin.update_group(addr, group_config(f"G{base + i}")),
            )
            topics, groups = size, want_groups
            print(
                f"# filled to {topics} topics, {groups} groups in {time.perf_counter() - t0:.1f} s"
            )

            async def create(i: int, made: int = made) -> None:
                await admin.update_topic(addr, f"M{made + i}", 4, 4)
                route = await admin.route(f"M{made + i}")  # visible right after the answer
                assert route.queue_datas, f"M{made + i}"

            async def perm(i: int, made: int = made) -> None:
                await admin.update_topic(addr, f"M{made + i}", 4, 4, perm=4 if i % 2 else 6)

            async def delete(i: int, made: int = made) -> None:
                await admin.delete_topic([addr], f"M{made + i}")

            rows: list[tuple[str, Callable[[int], Awaitable[object]]]] = [
                ("createTopic", create),
                ("updatePerm", perm),
                ("deleteTopic", delete),
                ("route", lambda i, n=topics: admin.route(f"T{rng.randrange(n)}")),
                (
                    "createGroup",
                    lambda i, made=made: admin.update_group(addr, group_config(f"N{made + i}")),
                ),
                ("heartbeat", heartbeat),
                ("allTopics", lambda i: admin.topic_configs(addr)),
                (
                    "fullRegister",
                    lambda i: admin.update_broker_config(addr, {"brokerPermission": "6"}),
                ),
            ]
            for name, op in rows:
                median, p90 = await timed(opts.samples, op)
                print(f"{topics:>7} {groups:>6}  {name:<13} {median:>9.2f} {p90:>8.2f}", flush=True)
            made += opts.samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--groups", type=int, default=1000, help="groups at the largest size")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--namesrv", choices=["in-process", "separate"], default="in-process")
    parser.add_argument("--fill-concurrency", type=int, default=16)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="es-broker-metadata-") as tmp:
        processes, namesrv, addr = start(Path(tmp) / "data", opts.namesrv)
        print(f"# broker {addr}, name server {namesrv} ({opts.namesrv})", flush=True)
        try:
            trio.run(bench, opts, namesrv, addr)
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)


if __name__ == "__main__":
    main()
