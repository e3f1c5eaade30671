"""Lookups by key: QUERY_MESSAGE through the key index against the scan it replaced.

Run: python bench/key_lookup_bench.py [--messages N] [--lookups L] [--scan-messages M] [--dir D]

Stores N messages (100-byte bodies, each with a KEYS and a UNIQ_KEY of its own)
through the broker core in batches of 32, then times L lookups of random keys
(half KEYS, half UNIQ_KEY) through Broker.query_messages_by_key, and a few as
QUERY_MESSAGE requests over TCP. For comparison it stores M messages in
another directory and times the lookup as it was before the index: every
unit of every queue of the topic read and its message decoded.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time

import trio

from es_broker.commands.placement import MessageIn
from es_broker.config import ASYNC_FLUSH, BrokerConfig
from es_broker.core.broker import Broker
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.remoting.message import decode_one
from es_broker.server.main import BrokerServer

BODY = b"x" * 100
TOPIC = "KeyBench"
QUEUES = 8
BATCH = 32
SENDERS = 8
FOREVER = (0, 2**62)


def keys_of(i: int) -> tuple[str, str]:
    return f"order-{i:010d}", f"7F000001{i:024X}"


def config_for(data_dir: str, messages: int) -> BrokerConfig:
    return BrokerConfig(
        storePathRootDir=data_dir,
        flushDiskType=ASYNC_FLUSH,
        initial_map_size=max(1 << 30, messages * 1024),
        listenPort=0,
    )


async def fill(data_dir: str, n: int) -> float:
    """Store n keyed messages from SENDERS concurrent tasks; returns the seconds it took."""
    broker = Broker.open(data_dir, config_for(data_dir, n))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await broker.update_topic(
            {"topicName": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES}
        )
        batches = (n + BATCH - 1) // BATCH
        start = time.perf_counter()
        last_report = start

        async def send(sender: int) -> None:
            nonlocal last_report
            for b in range(sender, batches, SENDERS):
                first = b * BATCH
                msgs = []
                for i in range(first, min(first + BATCH, n)):
                    key, uniq = keys_of(i)
                    msgs.append(MessageIn(BODY, {"KEYS": key, "UNIQ_KEY": uniq}))
                await broker.put_messages(TOPIC, b % QUEUES, msgs)
                now = time.perf_counter()
                if sender == 0 and now - last_report > 30:
                    last_report = now
                    rate = first / (now - start)
                    print(f"  stored ~{first:,} messages, {rate:,.0f} msg/s", flush=True)

        async with trio.open_nursery() as inner:
            for s in range(SENDERS):
                inner.start_soon(send, s)
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    broker.close()
    return elapsed


def scan_lookup(
    broker: Broker, topic: str, key: str, max_num: int, begin: int, end: int
) -> list[bytes]:
    """The lookup before the key index: every unit of the topic read, its message decoded."""
    found: list[bytes] = []
    store = broker.store
    with store.read() as txn:
        config = store.topics.get(txn, topic)
        queues = max(config.read_queue_nums, config.write_queue_nums) if config else 0
        for q in range(queues):
            lo, hi = store.cq.bounds(txn, topic, q)
            for unit in store.cq.units(txn, topic, q, lo, hi):
                if not begin <= unit.store_time <= end:
                    continue
                raw = store.log.payload(txn, unit.physical_offset)
                if raw is None:
                    continue
                msg, _ = decode_one(raw)
                if key in msg.keys or msg.properties.get("UNIQ_KEY") == key:
                    found.append(raw)
                    if len(found) >= max_num:
                        return found
    return found


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def time_lookups(data_dir: str, n: int, lookups: int) -> tuple[list[float], list[float]]:
    """Milliseconds per lookup of random KEYS and UNIQ_KEY values; each must find its one message."""
    broker = Broker.open(data_dir, config_for(data_dir, n))
    rng = random.Random(7)
    by_keys, by_uniq = [], []
    try:
        for j in range(lookups):
            i = rng.randrange(n)
            key, uniq = keys_of(i)
            asked = key if j % 2 == 0 else uniq
            start = time.perf_counter()
            found = broker.query_messages_by_key(TOPIC, asked, 64, *FOREVER)
            elapsed = (time.perf_counter() - start) * 1000
            assert len(found) == 1, (asked, len(found))
            (by_keys if j % 2 == 0 else by_uniq).append(elapsed)
    finally:
        broker.close()
    return by_keys, by_uniq


async def wire_lookups(data_dir: str, n: int, count: int) -> list[float]:
    """Milliseconds per QUERY_MESSAGE over TCP, to a broker serving data_dir."""
    rng = random.Random(11)
    out = []
    async with trio.open_nursery() as nursery:
        server = await nursery.start(BrokerServer(config_for(data_dir, n), []).run, "127.0.0.1")
        client = RemotingClient(nursery)
        for _ in range(count):
            key, _ = keys_of(rng.randrange(n))
            fields = {
                "topic": TOPIC,
                "key": key,
                "maxNum": 32,
                "beginTimestamp": 0,
                "endTimestamp": 2**62,
            }
            start = time.perf_counter()
            answer = await client.invoke(server.addr, request(RequestCode.QUERY_MESSAGE, fields))
            out.append((time.perf_counter() - start) * 1000)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        nursery.cancel_scope.cancel()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--lookups", type=int, default=1000)
    parser.add_argument("--scan-messages", type=int, default=100_000)
    parser.add_argument("--wire-lookups", type=int, default=20)
    parser.add_argument(
        "--dir", default=os.environ.get("BENCH_DIR"), help="where the data directories go"
    )
    args = parser.parse_args()
    n = args.messages

    root = tempfile.mkdtemp(prefix="key-lookup-bench-", dir=args.dir)
    try:
        big = os.path.join(root, "big")
        print(
            f"storing {n:,} messages (100-byte bodies, KEYS and UNIQ_KEY each), "
            f"batches of {BATCH}, {SENDERS} senders, {os.cpu_count()} cores",
            flush=True,
        )
        fill_s = trio.run(fill, big, n)
        lmdb_dir = os.path.join(big, "lmdb")
        size = sum(os.path.getsize(os.path.join(lmdb_dir, f)) for f in os.listdir(lmdb_dir))
        print(
            f"stored in {fill_s:,.1f} s ({n / fill_s:,.0f} msg/s); data.mdb {size / 2**30:.2f} GiB",
            flush=True,
        )

        by_keys, by_uniq = time_lookups(big, n, args.lookups)
        both = by_keys + by_uniq
        print(
            f"index lookup, {len(both)} random keys of {n:,} messages: "
            f"p50 {percentile(both, 50):.3f} ms, p99 {percentile(both, 99):.3f} ms, "
            f"max {max(both):.3f} ms (KEYS p50 {percentile(by_keys, 50):.3f}, "
            f"UNIQ_KEY p50 {percentile(by_uniq, 50):.3f})",
            flush=True,
        )
        if args.wire_lookups:
            wire = trio.run(wire_lookups, big, n, args.wire_lookups)
            print(
                f"QUERY_MESSAGE over TCP, {len(wire)} lookups: "
                f"p50 {statistics.median(wire):.3f} ms, max {max(wire):.3f} ms",
                flush=True,
            )
        shutil.rmtree(big)

        small = os.path.join(root, "small")
        m = args.scan_messages
        trio.run(fill, small, m)
        broker = Broker.open(small, config_for(small, m))
        try:
            key, _ = keys_of(m // 2)
            start = time.perf_counter()
            assert len(scan_lookup(broker, TOPIC, key, 64, *FOREVER)) == 1
            scan_s = time.perf_counter() - start
            start = time.perf_counter()
            assert len(broker.query_messages_by_key(TOPIC, key, 64, *FOREVER)) == 1
            index_ms = (time.perf_counter() - start) * 1000
        finally:
            broker.close()
        print(
            f"scan lookup (before the index), {m:,} messages: {scan_s * 1000:,.0f} ms for one "
            f"key (~{scan_s * n / m:,.0f} s at {n:,} if linear); the index: {index_ms:.3f} ms",
            flush=True,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
