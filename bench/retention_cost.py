"""A retention pass: how long it holds the writer, per step and per message it expires.

Run: python bench/retention_cost.py [--messages 100000] [--file-mib 16] [--step-kib 4096]
     [--queues 8] [--scan-all] [--profile FILE]

The broker's writer stores `--messages` sends of 1 KiB with a KEYS and a UNIQ_KEY (as RocketMQ's
benchmark producer sends with `-k true`, `writer_ceiling.py`'s messages) into commit-log files of
`--file-mib` MiB, with `fileReservedTime=0`; then one manual retention pass (the pass
`deleteExpiredCommitLog` asks for) expires every file but the newest, at most 10, in steps of
`--step-kib` (`retention_step_bytes`, B-676; 0: each file in one step, as before B-676), each
step a write transaction: a `commitlog_expired` record and its application (the message bodies,
their consume-queue units, their key-index entries). Printed: the files, steps and messages
expired, the pass's CPU seconds and CPU a message, and the longest step's wall time, which is how
long the writer (and, with ASYNC_FLUSH, the broker's event loop) is held at once.
`--queues N` spreads the sends round-robin over N queues (topics of 8 queues each); the pass
reads the queues below each step through its `QueueHeads` (B-678), or with `--scan-all` every
queue at every step, as before B-678. `--profile FILE` writes cProfile's stats of the pass.
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from writer_ceiling import QUEUES, TOPIC, _ignore, _message  # noqa: E402

from es_broker.commands.messages import PutRequest  # noqa: E402
from es_broker.commands.retention import FILES_PER_PASS, QueueHeads, retention_job  # noqa: E402
from es_broker.config import ASYNC_FLUSH, BrokerConfig  # noqa: E402
from es_broker.core.broker import Broker  # noqa: E402

GIB = 1 << 30


async def measure(
    messages: int,
    file_bytes: int,
    step_bytes: int,
    queues: int,
    scan_all: bool,
    profile: str | None,
) -> None:
    with tempfile.TemporaryDirectory() as d:
        config = BrokerConfig(
            storePathRootDir=d,
            flushDiskType=ASYNC_FLUSH,
            mappedFileSizeCommitLog=file_bytes,
            fileReservedTime=0,
            retention_step_bytes=step_bytes,
        )
        broker = Broker.open(d, config)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            topics = [TOPIC] + [f"{TOPIC}{t}" for t in range(1, -(-queues // QUEUES))]
            for topic in topics:
                await broker.update_topic(
                    {"topicName": topic, "readQueueNums": QUEUES, "writeQueueNums": QUEUES}
                )
            writer = broker.writer
            for i in range(messages):
                q = i % queues
                topic, qid = topics[q // QUEUES], q % QUEUES
                request = PutRequest(topic, qid, [_message(i)], "127.0.0.1:1", "bench")
                broker.start_put(request, _ignore)
                if i % 64 == 63:
                    writer.commit_waiting()
            while writer.waiting:
                writer.commit_waiting()
            store = broker.store
            with store.read() as txn:
                stored_size = store.commitlog.phy_max(txn) / messages
            profiler = cProfile.Profile() if profile else None
            if profiler is not None:
                profiler.enable()
            cpu0 = time.process_time()
            files: list[int] = []
            holds: list[float] = []
            reason = None
            heads = None if scan_all else QueueHeads()
            while len(files) < FILES_PER_PASS:  # the steps as Broker.retention_pass takes them
                wall0 = time.perf_counter()
                [(ok, step)] = store.log.write_batch(
                    [retention_job(store, manual=True, reason=reason, heads=heads)]
                )
                holds.append(time.perf_counter() - wall0)
                if not ok:
                    raise SystemExit(f"a retention step failed: {step}")
                if step.seq is None:
                    break
                if heads is not None and step.heads is not None:
                    heads.settle(step.heads)
                reason = step.reason
                files.extend(step.deleted_files)
            cpu = time.process_time() - cpu0
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(profile)
            nursery.cancel_scope.cancel()
        broker.close()
    expired = step.phy_min / stored_size
    per_message = cpu / max(1.0, expired)
    steps = len(holds) - 1  # the last found nothing to expire
    print(
        f"{queues:,} queues{' (every queue read each step)' if scan_all else ''}: "
        f"{len(files)} files of {file_bytes >> 20} MiB in {steps} steps of "
        f"{'a whole file' if step_bytes <= 0 else f'{step_bytes >> 10} KiB'}, ~{expired:,.0f} "
        f"messages of {stored_size:,.0f} bytes: {cpu:.2f} s CPU, {1e6 * per_message:.1f} µs a "
        f"message; the longest step held the writer {1000 * max(holds):.0f} ms (the first "
        f"{1000 * holds[0]:.0f}, the others {1000 * max(holds[1:], default=0):.0f}) "
        f"(a 1 GiB file of such messages in one step: ~{per_message * GIB / stored_size:.1f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--file-mib", type=int, default=16, help="mappedFileSizeCommitLog, MiB")
    parser.add_argument(
        "--step-kib", type=int, default=4096, help="retention_step_bytes, KiB (0: whole files)"
    )
    parser.add_argument("--queues", type=int, default=QUEUES, help="queues the sends go to")
    parser.add_argument(
        "--scan-all", action="store_true", help="read every queue at each step (before B-678)"
    )
    parser.add_argument("--profile", help="write cProfile's stats of the pass to this file")
    args = parser.parse_args()
    trio.run(
        measure,
        args.messages,
        args.file_mib << 20,
        args.step_kib << 10,
        max(1, args.queues),
        args.scan_all,
        args.profile,
    )


if __name__ == "__main__":
    main()
