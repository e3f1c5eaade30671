"""The single writer's ceiling: messages a second it appends, with every projection, when the edge
costs nothing.

Run: python bench/writer_ceiling.py [--messages 20000] [--pure]

No socket, no frame, no task per request: the sends are built as the send path builds them
(`PutRequest` of `MessageIn`s with a KEYS and a UNIQ_KEY, as RocketMQ's benchmark producer sends
with `-k true`), their jobs queued on the writer with `Broker.start_put` (the checks of a put
run there, as in the read loop), and the writer commits what is queued in group commits of at
most `max_batch` jobs on this thread (ASYNC_FLUSH, as `es-broker serve` runs by default). The
time counted is from the first job queued to the last committed, the jobs' checks included, in
CPU seconds of this process (the flush tick's fsync runs in a thread and is counted too).

Rows:
- one message per record, as a sync SEND_MESSAGE_V2 makes them;
- 32 messages per record, as a SEND_BATCH_MESSAGE of 32 makes them;
- the RocketMQ shape's records: one message per record, and for every 8 messages stored (one per
  queue) a pull of each queue recording its delivery and the commitOffset it carried, as the push
  consumer's suspended pulls do when they keep up (a pull finds one message).

The jobs wait in the queue for up to `--window` messages at a time before the writer commits
them, so a group commit holds as many jobs as a busy edge would hand it (512 at most).

CPU seconds drift on a shared machine; instructions do not. Per message, under callgrind: run a
row with N and with 2N messages and divide the difference of the totals by N, e.g.

    for n in 2000 4000; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python bench/writer_ceiling.py --rows 0 --messages $n 2>&1 | grep Collected; done

Where they go: `--count` collects only while the messages go through the writer, under callgrind
started with `--instr-atstart=no` (imports, the store's opening and the topic are left out):

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/wc.cg \
        python bench/writer_ceiling.py --rows 0 --messages 4000 --count
    callgrind_annotate --inclusive=yes /tmp/wc.cg | head -60
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

if "--pure" in sys.argv:
    os.environ["ES_BROKER_PURE_PYTHON"] = "1"

from es_broker.commands.messages import MessageIn, PutRequest  # noqa: E402
from es_broker.commands.pull import PullRequest  # noqa: E402
from es_broker.config import ASYNC_FLUSH, BrokerConfig  # noqa: E402
from es_broker.core.broker import Broker  # noqa: E402

BODY = b"x" * 1024
QUEUES = 8
TOPIC = "BenchmarkShape"
GROUP = "benchmark_consumer"


def _message(i: int) -> MessageIn:
    uniq = f"7F000001{os.getpid():08X}{i:016X}"
    props = {"KEYS": "1732800000", "UNIQ_KEY": uniq, "WAIT": "true"}
    return MessageIn(BODY, props, 0, 0, int(time.time() * 1000), ("127.0.0.1", 40000))


def _ignore(_: Any) -> None:
    return None


def _collect(on: bool) -> None:
    """Turn callgrind's collection in this process on or off (the process runs under callgrind)."""
    flag = "--instr=on" if on else "--instr=off"
    subprocess.run(["callgrind_control", flag, str(os.getpid())], check=True, capture_output=True)


async def _run(
    n: int, per_record: int, pulls: bool, window: int, count: bool = False
) -> tuple[float, int, int]:
    """(CPU seconds, messages, group commits) of n messages through the writer."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        config = BrokerConfig(storePathRootDir=d, flushDiskType=ASYNC_FLUSH)
        broker = Broker.open(d, config)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            await broker.update_topic(
                {"topicName": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES}
            )
            await broker.ensure_group(GROUP)
            writer = broker.writer
            offsets = [0] * QUEUES
            records = n // per_record
            batches0 = writer.batches
            if count:
                _collect(True)
            cpu0 = time.process_time()
            i = 0
            while i < records:
                for _ in range(min(window // per_record, records - i) or 1):
                    msgs = [_message(i * per_record + k) for k in range(per_record)]
                    request = PutRequest(TOPIC, i % QUEUES, msgs, "127.0.0.1:1", "bench_producer")
                    broker.start_put(request, _ignore)
                    i += 1
                    if pulls and i % QUEUES == 0:
                        writer.commit_waiting()
                        for q in range(QUEUES):
                            pull = PullRequest(
                                GROUP,
                                TOPIC,
                                q,
                                offsets[q],
                                client="127.0.0.1@bench",
                                commit_offset=offsets[q],
                            )
                            result, group_config = broker.read_pull(pull)
                            assert group_config is not None
                            broker.start_pull(pull, result, group_config, _ignore)
                            offsets[q] = result.next_begin_offset
                while writer.waiting:
                    writer.commit_waiting()
            cpu = time.process_time() - cpu0
            if count:
                _collect(False)
            batches = writer.batches - batches0
            nursery.cancel_scope.cancel()
        broker.close()
        return cpu, records * per_record, batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=64, help="messages queued before a commit")
    parser.add_argument("--pure", action="store_true", help="ES_BROKER_PURE_PYTHON=1")
    parser.add_argument("--rows", default="0,1,2", help="which rows to run (0, 1, 2)")
    parser.add_argument(
        "--count", action="store_true", help="under callgrind: collect only the messages' run"
    )
    args = parser.parse_args()
    n = args.messages
    print(
        f"the writer alone, 1 KiB messages with KEYS and UNIQ_KEY, {n} per row, "
        f"{'pure Python' if args.pure else 'compiled'}, ASYNC_FLUSH, up to {args.window} queued"
    )
    rows = (
        ("one message per record (sync send)", 1, False),
        ("32 messages per record (batch send)", 32, False),
        ("shape: one per record + a pull/commit per 1", 1, True),
    )
    for name, per_record, pulls in (rows[int(r)] for r in args.rows.split(",")):
        cpu, messages, batches = trio.run(_run, n, per_record, pulls, args.window, args.count)
        print(
            f"{name:45s} {messages / cpu:10,.0f} msg/s  {cpu / messages * 1e6:7.1f} µs CPU/msg  "
            f"{messages / batches:6.1f} msg/commit"
        )


if __name__ == "__main__":
    main()
