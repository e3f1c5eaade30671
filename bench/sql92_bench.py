"""SQL92 filter benchmark: reads of 32 through the broker core, by tag and by SQL92 selector.

Run: python bench/sql92_bench.py [--messages N]
Stores N messages of 1 KiB on one queue (half of them region=eu, prices 0..99, tags A/B),
then reads them all back in reads of 32 with: no filter, the tag filter `A`, and SQL92
selectors. Prints messages scanned per second and how many each read delivered.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import trio

from es_broker.commands import sql92
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.remoting.message import tag_hash

BODY = b"x" * 1024
SELECTORS = [
    "TAGS = 'A'",
    "region = 'eu' AND price > 50",
    "price BETWEEN 10 AND 20 OR region IN ('us', 'apac')",
]


def scan(broker: Broker, **filters) -> tuple[float, int]:
    start = time.perf_counter()
    offset, delivered = 0, 0
    while True:
        r = broker.get_message("B", 0, offset, 32, **filters)
        delivered += len(r.messages)
        if r.next_begin_offset == offset or r.status.name == "OFFSET_OVERFLOW_ONE":
            break
        offset = r.next_begin_offset
    return offset / (time.perf_counter() - start), delivered


async def run(n: int) -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        broker = Broker.open(d, BrokerConfig(storePathRootDir=d, initial_map_size=1 << 30))
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            await broker.update_topic({"topicName": "B", "readQueueNums": 1, "writeQueueNums": 1})
            for k in range(0, n, 32):
                batch = [
                    MessageIn(
                        BODY,
                        {
                            "TAGS": "A" if i % 2 else "B",
                            "region": "eu" if i % 2 else ("us" if i % 4 else "apac"),
                            "price": str(i % 100),
                        },
                    )
                    for i in range(k, min(n, k + 32))
                ]
                await broker.put_messages("B", 0, batch)
            rows = [("no filter", *scan(broker))]
            rows.append(("tag A", *scan(broker, tags_codes=frozenset({tag_hash("A")}))))
            for text in SELECTORS:
                selector = sql92.compile_selector(text).matches_message
                rows.append((f"SQL92 {text}", *scan(broker, message_filter=selector)))
            nursery.cancel_scope.cancel()
        broker.close()
    print(f"{n:,} messages of 1 KiB on one queue, reads of 32")
    for name, rate, delivered in rows:
        print(f"  {name:<60} {rate:>10,.0f} scanned/s  {delivered:>8,} delivered")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    trio.run(run, parser.parse_args().messages)


if __name__ == "__main__":
    main()
