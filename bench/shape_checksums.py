"""The writer's stored bytes under RocketMQ's benchmark shape, for a before/after comparison.

Run: PYTHONHASHSEED=0 PYTHONPATH=$PWD python bench/shape_checksums.py

The records of `bench/writer_ceiling.py`'s shape row (sends of one message to each of 8 queues,
then a pull of each queue with the commitOffset it carries, queued on the writer and committed
in group commits) made deterministic: a manual clock, fixed keys and born times, sends of one or
three messages of three sizes, pulls of two groups, group commits of different sizes, enough
messages to cross the consume queue's blocks. Prints the sha256 of every database of the
directory (es_broker.core.replay.checksums), what `verify` (a replay compared with it) found,
and one digest of them all: a change that keeps every stored byte prints the same lines.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from es_broker.clock import ManualClock  # noqa: E402
from es_broker.commands.messages import MessageIn, PutRequest  # noqa: E402
from es_broker.commands.pull import PullRequest  # noqa: E402
from es_broker.config import ASYNC_FLUSH, BrokerConfig  # noqa: E402
from es_broker.core.broker import Broker  # noqa: E402
from es_broker.core.replay import checksums, verify  # noqa: E402

QUEUES = 8
ROUNDS = 150
START = 1_700_000_000_000


def _ignore(_: Any) -> None:
    return None


async def _run(d: str, clock: ManualClock) -> None:
    config = BrokerConfig(storePathRootDir=d, flushDiskType=ASYNC_FLUSH)
    broker = Broker.open(d, config, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await broker.update_topic(
            {"topicName": "S", "readQueueNums": QUEUES, "writeQueueNums": QUEUES}
        )
        for group in ("G", "H"):
            await broker.ensure_group(group)
        writer = broker.writer
        offsets = {(g, q): 0 for g in ("G", "H") for q in range(QUEUES)}
        i = 0
        for rnd in range(ROUNDS):
            for q in range(QUEUES):
                body = b"x" * (100 + 900 * ((rnd * q) % 3))
                props = {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i:08d}", "WAIT": "true"}
                n = 1 if (rnd + q) % 7 else 3
                msgs = [MessageIn(body, props, 0, 0, START + i, ("127.0.0.1", 40000))] * n
                broker.start_put(PutRequest("S", q, msgs, "127.0.0.1:1", "p"), _ignore)
                i += 1
                if (rnd + q) % 5 == 0:
                    clock.advance(13_000)
            writer.commit_waiting()
            for group in ("G", "H") if rnd % 3 else ("G",):
                for q in range(QUEUES):
                    if group == "H" and (rnd * 3 + q) % 4 == 0:
                        continue
                    at = offsets[(group, q)]
                    pull = PullRequest(group, "S", q, at, client="127.0.0.1@b", commit_offset=at)
                    result, group_config = broker.read_pull(pull)
                    assert group_config is not None
                    broker.start_pull(pull, result, group_config, _ignore)
                    offsets[(group, q)] = result.next_begin_offset
            if rnd % 4 == 0:  # else the pulls share a group commit with the next round's sends
                writer.commit_waiting()
        while writer.waiting:
            writer.commit_waiting()
        nursery.cancel_scope.cancel()
    broker.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        trio.run(_run, d, ManualClock(START))
        differences = verify(d)
        sums = checksums(d)
    for name, digest in sorted(sums.items()):
        print(f"{name:24s} {digest}")
    print("verify:", [difference.describe() for difference in differences] or "no difference")
    print("all:", hashlib.sha256(json.dumps(sums, sort_keys=True).encode()).hexdigest())


if __name__ == "__main__":
    main()
