"""Broker CPU per message of the wire bench's produce and consume + commit phases, user and system apart.

Run: python bench/cpu_phases.py [--messages 100000] [--samples DIR] [--readmodel-url none]
     python bench/cpu_phases.py --hops DIR/consume.txt --us 6.1

The phases are wire_bench.py's (SEND_BATCH_MESSAGE of 32 x 1 KiB, 16 in flight; PULL_MESSAGE of
32 with the commit flag on 8 queues at once, reading everything back) against one `es-broker
serve` (read model on unless told), after a warm-up. For each phase it prints the broker
process's utime and stime per message (/proc/PID/stat; its read-model child not counted) and
the group commits and jobs per commit over the phase (brokerStatus).

--samples DIR runs the broker with bench/cpu_sampler on its PYTHONPATH: a CPU-time sampler
(py-spy counts wall-clock time, so a broker preempted in a syscall on a shared 2-core machine
shows there) whose collapsed stacks of each phase land in DIR/PHASE.txt, for
`python bench/server_cg.py --summarize` or --hops. The sampler counts user and system time
alike (a syscall's time goes to the line that made it), so --hops FILE --us U splits a phase's
total CPU (U us per message, user + sys) into the hops of the request path by their stacks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from wire_bench import await_follower, create_topics, es_consume, es_produce  # noqa: E402

from es_broker.net.remoting_client import RemotingClient  # noqa: E402
from es_broker.remoting.codes import RequestCode  # noqa: E402
from es_broker.remoting.command import request  # noqa: E402
from tests.process_fixtures import serve  # noqa: E402


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


async def _commits(addr: str) -> tuple[int, int]:
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery)
        r = await client.invoke(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=10)
        nursery.cancel_scope.cancel()
    table = json.loads(r.body)["table"]
    return int(table["groupCommitBatches"]), int(table["groupCommitJobs"])


def run(messages: int, samples: Path | None, readmodel: str | None) -> None:
    env = None
    if samples is not None:
        samples.mkdir(parents=True, exist_ok=True)
        env = {
            "PYTHONPATH": f"{ROOT}:{ROOT / 'bench' / 'cpu_sampler'}",
            "ES_BROKER_CPU_SAMPLES": str(samples / "dump"),
        }
    extra = ("--readmodel-url", readmodel) if readmodel else ()
    d = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    try:
        with serve(Path(d) / "data", *extra, env=env) as broker:
            addr, pid = broker.broker, broker.process.pid
            trio.run(create_topics, addr)
            if readmodel != "none":
                await_follower(Path(d) / "data")
            trio.run(es_produce, addr, 3200, 32, 16)  # warm-up
            trio.run(es_consume, addr, 3200)
            phases: list[tuple[str, Callable[[], float], int]] = [
                ("produce", lambda: trio.run(es_produce, addr, messages, 32, 16), messages),
                # reads everything back from offset 0, the warm-up's messages too
                ("consume", lambda: trio.run(es_consume, addr, messages), messages + 3200),
            ]
            dumps = 0
            for name, phase, count in phases:
                if samples is not None:
                    os.kill(pid, signal.SIGUSR2)  # drop what came before
                    dumps += 1
                batches0, jobs0 = trio.run(_commits, addr)
                user0, sys0 = cpu_times(pid)
                rate = phase()
                user1, sys1 = cpu_times(pid)
                batches1, jobs1 = trio.run(_commits, addr)
                if samples is not None:
                    os.kill(pid, signal.SIGUSR2)
                    dumps += 1
                    dump = samples / f"dump.{dumps}"
                    deadline = time.monotonic() + 10
                    while not dump.exists() and time.monotonic() < deadline:
                        time.sleep(0.05)  # the broker writes it on the signal; no other event
                    time.sleep(0.2)
                    shutil.move(dump, samples / f"{name}.txt")
                commits = max(batches1 - batches0, 1)
                print(
                    f"{name:8s} {rate:>9,.0f} msg/s  user {(user1 - user0) / count * 1e6:5.2f}  "
                    f"sys {(sys1 - sys0) / count * 1e6:5.2f}  total "
                    f"{((user1 - user0) + (sys1 - sys0)) / count * 1e6:5.2f} us/msg  "
                    f"{commits} commits, {(jobs1 - jobs0) / commits:.1f} jobs each",
                    flush=True,
                )
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _any(*names: str) -> Callable[[list[str]], bool]:
    return lambda stack: any(name in frame for frame in stack for name in names)


# the hops of the request path, by the frames of a sample's stack; the first that matches takes it
HOPS: list[tuple[str, Callable[[list[str]], bool]]] = [
    (
        "LMDB commit (txn.commit, its pwrite)",
        _any("_write_batch_once (es_broker/log/store.py:246)"),
    ),
    ("projection: key index", _any("KeyIndexProjection")),
    ("projection: stats", _any("StatsProjection")),
    ("projection: consume queue", _any("ConsumeQueueProjection._stored")),
    ("projection: audit", _any("AuditProjection")),
    ("projection: message trace", _any("MessageTraceProjection")),
    ("projection: offset table", _any("OffsetTableProjection")),
    ("projection: time index", _any("TimeIndexProjection")),
    ("projections: the others, dispatch", _any("RecordLog.apply")),
    ("payload puts (putmulti)", _any("put_payloads")),
    (
        "records: build, check, pack, log put",
        _any(
            "AppendContext.append",
            "to_record",
            "record_job.<locals>",
            "commit_job.<locals>",
            "put_job.<locals>",
        ),
    ),
    ("pull read: consume queue, payload gets", _any("read_messages")),
    ("pull read: checks, group config", _any("Broker.read_pull")),
    ("answers: build, encode, write", _any("GroupCommitWriter._complete")),
    ("send: parse, check, encode (crc32)", _any("start_send")),
    ("pull: header, filter, queue the record", _any("start_pull")),
    ("writer: batch bookkeeping", _any("GroupCommitWriter")),
    ("read loop: receive, decode, edge checks", _any("_read_loop")),
    ("other: scheduler, timers", lambda stack: True),
]


def hops(path: Path, us: float) -> None:
    """Print each hop's share of the samples in `path` and its part of `us` us per message."""
    counts: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        total += int(count)
        counts[next(name for name, match in HOPS if match(frames))] += int(count)
    for name, _ in HOPS:
        if counts[name]:
            share = counts[name] / total
            print(f"  {name:42s} {share * 100:5.1f}%  {share * us:5.2f} us/msg")
    print(f"  ({total} samples)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--samples", type=Path, help="sample each phase's CPU into this directory")
    parser.add_argument("--readmodel-url", help="passed to es-broker serve ('none': no read model)")
    parser.add_argument("--hops", type=Path, help="a phase's samples: split its CPU by hop")
    parser.add_argument(
        "--us", type=float, default=1.0, help="with --hops: the phase's total us/msg"
    )
    args = parser.parse_args()
    if args.hops:
        hops(args.hops, args.us)
        return
    run(args.messages, args.samples, args.readmodel_url)


if __name__ == "__main__":
    main()
