"""Core benchmark: put and pull through the broker core against raw LMDB appends.

Run: python bench/core_bench.py [--messages N] [--keys]
Prints one table: rates in messages/s and the ratios the Foundation issue asks for.
With --keys every message carries a distinct KEYS and UNIQ_KEY, as a producer's do.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import lmdb
import trio

from es_broker.commands.placement import MessageIn
from es_broker.config import ASYNC_FLUSH, SYNC_FLUSH, BrokerConfig
from es_broker.core.broker import Broker

BODY = b"x" * 1024


def raw_append_rate(n: int, txn_size: int, sync: bool) -> float:
    """1 KiB values appended under 8-byte big-endian keys, txn_size per transaction."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        env = lmdb.open(d, map_size=4 << 30, sync=sync, metasync=sync, max_dbs=2)
        db = env.open_db(b"log")
        start = time.perf_counter()
        seq = 0
        while seq < n:
            with env.begin(write=True) as txn:
                for _ in range(txn_size):
                    seq += 1
                    txn.put(seq.to_bytes(8, "big"), BODY, db=db, append=True)
        elapsed = time.perf_counter() - start
        env.close()
        return n / elapsed


def _keyed(sender: int, k: int, j: int) -> MessageIn:
    """A message with a KEYS and a UNIQ_KEY of its own."""
    uniq = f"{sender:08X}{k:012X}{j:04X}"
    return MessageIn(BODY, {"TAGS": "A", "KEYS": f"order-{uniq}", "UNIQ_KEY": uniq})


async def put_rate(
    n: int, flush: str, senders: int, batch: int = 1, keys: bool = False
) -> tuple[float, float, int]:
    """n messages through Broker.put_messages from `senders` concurrent tasks."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        config = BrokerConfig(storePathRootDir=d, flushDiskType=flush, initial_map_size=1 << 30)
        broker = Broker.open(d, config)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            await broker.update_topic({"topicName": "B", "readQueueNums": 8, "writeQueueNums": 8})
            per_sender = n // senders // batch
            msgs = [MessageIn(BODY, {"TAGS": "A"}) for _ in range(batch)]
            keyed = (
                [
                    [_keyed(s, k, j) for j in range(batch)]
                    for s in range(senders)
                    for k in range(per_sender)
                ]
                if keys
                else []
            )
            start = time.perf_counter()

            async def send(i: int) -> None:
                for k in range(per_sender):
                    batch_k = keyed[i * per_sender + k] if keys else msgs
                    await broker.put_messages("B", i % 8, batch_k)

            async with trio.open_nursery() as inner:
                for i in range(senders):
                    inner.start_soon(send, i)
            elapsed = time.perf_counter() - start
            total = per_sender * senders * batch
            pull = (
                await pull_rate(broker, total)
                if flush == ASYNC_FLUSH and batch == 1
                else (0.0, 0.0)
            )
            batches = broker.writer.batches
            nursery.cancel_scope.cancel()
        broker.close()
        return total / elapsed, pull, batches


async def pull_rate(broker: Broker, total: int) -> tuple[float, float]:
    """Read everything back in pulls of 32: the raw read, and pulls that record deliveries."""
    start = time.perf_counter()
    got = 0
    for q in range(8):
        offset = 0
        while True:
            r = broker.get_message("B", q, offset, 32)
            if not r.messages:
                break
            got += len(r.messages)
            offset = r.next_begin_offset
    read_rate = got / (time.perf_counter() - start)

    start = time.perf_counter()
    recorded = 0

    async def consume(q: int) -> None:
        nonlocal recorded
        offset = 0
        while True:
            r = await broker.pull("BG", "B", q, offset, 32, client="bench")
            if not r.messages:
                return
            recorded += len(r.messages)
            offset = r.next_begin_offset

    async with trio.open_nursery() as nursery:
        for q in range(8):
            nursery.start_soon(consume, q)
    return read_rate, recorded / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument(
        "--keys", action="store_true", help="a distinct KEYS and UNIQ_KEY on every message"
    )
    args = parser.parse_args()
    n, keys = args.messages, args.keys

    raw_async = raw_append_rate(n, 1000, sync=False)
    raw_sync = raw_append_rate(min(n, 20_000), 100, sync=True)
    put_async, (read, pull), async_batches = trio.run(put_rate, n, ASYNC_FLUSH, 64, 1, keys)
    put_async_batch32, _, _ = trio.run(put_rate, n, ASYNC_FLUSH, 8, 32, keys)
    put_sync, _, sync_batches = trio.run(put_rate, min(n, 20_000), SYNC_FLUSH, 64, 1, keys)

    rows = [
        ("raw LMDB append, txn 1000, sync off", raw_async, ""),
        ("raw LMDB append, txn 100, sync on", raw_sync, ""),
        (
            "put ASYNC_FLUSH, 64 senders",
            put_async,
            f"{put_async / raw_async:.2f}x raw (goal >= 0.3x)",
        ),
        (
            "put ASYNC_FLUSH, batches of 32, 8 senders",
            put_async_batch32,
            f"{put_async_batch32 / raw_async:.2f}x raw",
        ),
        (
            "put SYNC_FLUSH, 64 senders",
            put_sync,
            f"{put_sync / raw_sync:.2f}x raw sync (goal >= 0.3x)",
        ),
        ("pull read, batches of 32", read, "goal >= 500k/s"),
        ("pull with delivery record, 8 queues", pull, ""),
    ]
    keyed = " with KEYS and UNIQ_KEY" if keys else ""
    print(f"1 KiB messages{keyed}, {n} per run, {os.cpu_count()} cores")
    for name, rate, note in rows:
        print(f"{name:45s} {rate:12,.0f} msg/s  {note}")
    print(
        f"group commit: ASYNC run {async_batches} transactions, SYNC run {sync_batches} transactions"
    )


if __name__ == "__main__":
    main()
