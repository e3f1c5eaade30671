"""Child process of the crash test: appends under concurrent load and prints every acknowledgement.

Usage: python crash_writer.py DATA_DIR SYNC_FLUSH|ASYNC_FLUSH
Prints `ACK <queue id> <queue offset> <body>` after each acknowledged send and
`COMMIT <queue id> <offset>` after each acknowledged offset commit, flushed at once.
"""

from __future__ import annotations

import sys

import trio

from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker

SENDERS = 16


async def main(data_dir: str, flush: str) -> None:
    config = BrokerConfig(storePathRootDir=data_dir, flushDiskType=flush)
    broker = Broker.open(data_dir, config)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        if broker.topic_config("CRASH") is None:
            await broker.update_topic(
                {"topicName": "CRASH", "readQueueNums": 4, "writeQueueNums": 4}
            )
        print("READY", flush=True)

        async def sender(n: int) -> None:
            i = 0
            while True:
                body = b"s%d-%d" % (n, i)
                result = await broker.put_message(
                    "CRASH", n % 4, MessageIn(body, {"KEYS": body.decode()})
                )
                print(f"ACK {result.queue_id} {result.queue_offset} {body.decode()}", flush=True)
                if i % 5 == 0:
                    await broker.commit_offset("G", "CRASH", n % 4, result.queue_offset)
                    print(f"COMMIT {n % 4} {result.queue_offset}", flush=True)
                i += 1

        for n in range(SENDERS):
            nursery.start_soon(sender, n)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
