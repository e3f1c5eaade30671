"""Broker instructions per message, by phase: `es-broker serve` under callgrind, driven over TCP.

Run: python bench/server_cg.py [--messages 3200] [--sync 300] [--pure] [--annotate N]

Wall-clock figures on a shared 2-core machine drift by tens of percent; the
instructions the broker process executes for a fixed workload do not. This
starts `es-broker serve` (read model off, ASYNC_FLUSH) under
`valgrind --tool=callgrind`, warms it up, then for each phase zeroes the
counters (`callgrind_control -z`), runs the phase from this process (the
client's instructions are not counted) and dumps them (`callgrind_control -d`):

- produce: SEND_BATCH_MESSAGE, batches of 32 messages of 1 KiB, 4 in flight
- pull: PULL_MESSAGE of 32 committing the offset read so far (sysFlag 5), 8 queues
- sync: SEND_MESSAGE_V2 of 1 KiB, one at a time
- held (--held N): N long polls one at a time, each held at its queue's end and woken by a
  SEND_MESSAGE_V2 (with a QUERY_CONSUMER_OFFSET behind the pull, so it waits before the send)

and prints the instructions (Ir) per message and per request of each phase,
every thread of the broker counted (the LMDB commit runs in a worker thread).
--pure runs the broker with ES_BROKER_PURE_PYTHON=1. --annotate N prints the
N functions with the most inclusive instructions of each phase
(self instructions, C level); the dumps stay in --keep DIR when given.

--py-spy DIR: no valgrind; the broker runs natively and each phase is
sampled by `py-spy record` (raw collapsed stacks in DIR/PHASE.txt, summed by
`python bench/server_cg.py --summarize DIR/PHASE.txt`); use larger phases
(--messages 64000 --sync 5000) for enough samples.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from wire_bench import BODY, QUEUES, batch_body, create_topics  # noqa: E402

from es_broker.net.remoting_client import RemotingClient  # noqa: E402
from es_broker.remoting.codes import RequestCode  # noqa: E402
from es_broker.remoting.command import request  # noqa: E402
from es_broker.remoting.message import decode_all, encode_properties  # noqa: E402

_NAMESRV = re.compile(r"name server listening on (\S+)")
_BROKER = re.compile(r"listening on (\S+), data in")
_TOTALS = re.compile(r"^(?:summary|totals): (\d+)", re.M)


async def produce(addr: str, batches: int, first: int = 0) -> int:
    body = batch_body(32)
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery)
        limit = trio.Semaphore(4)

        async def one(i: int) -> None:
            async with limit:
                fields = {"a": "BENCH", "b": "Bench", "c": "TBW102", "d": 4, "e": i % QUEUES}
                fields.update({"f": 0, "g": 0, "h": 0, "m": True})
                r = await client.invoke(
                    addr, request(RequestCode.SEND_BATCH_MESSAGE, fields, body), timeout=600
                )
                assert r.code == 0, r.remark

        async with trio.open_nursery() as senders:
            for i in range(first, first + batches):
                senders.start_soon(one, i)
        nursery.cancel_scope.cancel()
    return batches


async def pull(addr: str, offsets: list[int]) -> tuple[int, int]:
    """Pull every queue from `offsets` to its end; (messages, requests)."""
    got = requests = 0
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery)
        for q in range(QUEUES):
            while True:
                fields = {
                    "consumerGroup": "BENCH",
                    "topic": "Bench",
                    "queueId": q,
                    "queueOffset": offsets[q],
                    "maxMsgNums": 32,
                    "sysFlag": 5,
                    "commitOffset": offsets[q],
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                    "subVersion": 0,
                }
                r = await client.invoke(
                    addr, request(RequestCode.PULL_MESSAGE, fields), timeout=600
                )
                requests += 1
                if r.code != 0:
                    break
                got += len(decode_all(r.body))
                offsets[q] = int(r.ext_fields["nextBeginOffset"])
        nursery.cancel_scope.cancel()
    return got, requests


async def sync_sends(addr: str, count: int) -> int:
    props = encode_properties({"TAGS": "A"}).decode()
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery)
        for i in range(count):
            fields = {"a": "BENCH", "b": "Sync", "c": "TBW102", "d": 4, "e": i % QUEUES}
            fields.update({"f": 0, "g": 0, "h": 0, "i": props})
            r = await client.invoke(
                addr, request(RequestCode.SEND_MESSAGE_V2, fields, BODY), timeout=600
            )
            assert r.code == 0, r.remark
        nursery.cancel_scope.cancel()
    return count


async def held_pulls(addr: str, count: int, offsets: list[int]) -> tuple[int, int]:
    """Long polls, one at a time: a pull at its queue's end (sysFlag 7: commit, suspend,
    subscription) of the consumer's connection, a QUERY_CONSUMER_OFFSET behind it on the same
    connection (answered once the pull's record is queued, so the pull waits by then), then a
    SEND_MESSAGE_V2 to that queue from the producer's connection, which the pull is woken for and
    answers. `offsets`: the queues' ends of topic Bench (moved here); (messages, requests)."""
    props = encode_properties({"TAGS": "A"}).decode()
    async with trio.open_nursery() as nursery:
        consumer, producer = RemotingClient(nursery), RemotingClient(nursery)
        for i in range(count):
            q = i % QUEUES
            fields = {
                "consumerGroup": "BENCH",
                "topic": "Bench",
                "queueId": q,
                "queueOffset": offsets[q],
                "maxMsgNums": 32,
                "sysFlag": 7,
                "commitOffset": offsets[q],
                "suspendTimeoutMillis": 15000,
                "subscription": "*",
                "subVersion": 0,
            }
            held = await consumer.start_request(addr, request(RequestCode.PULL_MESSAGE, fields))
            query = {"consumerGroup": "BENCH", "topic": "Bench", "queueId": q}
            r = await consumer.invoke(
                addr, request(RequestCode.QUERY_CONSUMER_OFFSET, query), timeout=600
            )
            assert r.code == 0, r.remark
            send = {"a": "BENCH", "b": "Bench", "c": "TBW102", "d": 4, "e": q}
            send.update({"f": 0, "g": 0, "h": 0, "i": props})
            r = await producer.invoke(
                addr, request(RequestCode.SEND_MESSAGE_V2, send, BODY), timeout=600
            )
            assert r.code == 0, r.remark
            r = await held.response(600)
            assert r.code == 0 and len(decode_all(r.body)) == 1, (r.code, r.remark)
            offsets[q] = int(r.ext_fields["nextBeginOffset"])
        nursery.cancel_scope.cancel()
    return count, 3 * count


def _dump(pid: int, out_dir: Path, before: set[Path]) -> tuple[int, Path]:
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    new = sorted(set(out_dir.glob("cg.out*")) - before, key=lambda p: p.stat().st_mtime)
    path = new[-1]
    match = _TOTALS.search(path.read_text(errors="replace"))
    assert match is not None, path
    return int(match.group(1)), path


def self_costs(path: Path) -> Counter[str]:
    """Self instructions per function of an uncompressed callgrind dump."""
    costs: Counter[str] = Counter()
    function = ""
    call_line = False
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("fn="):
            function = line[3:]
        elif line.startswith("calls="):
            call_line = True  # the next cost line is the call's inclusive cost
        elif line[:1].isdigit() or line[:1] in "+-*":
            if call_line:
                call_line = False
            elif len(parts := line.split()) >= 2:
                costs[function] += int(parts[1])
    return costs


def summarize(path: Path, top: int = 40) -> None:
    """Self and inclusive samples per Python function of a py-spy raw (collapsed) file."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    for title, counter in (("self", own), ("inclusive", inclusive)):
        print(f"== {title} ({total} samples)")
        for frame, count in counter.most_common(top):
            print(f"{count / total * 100:6.1f}% {frame[:120]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=3200, help="per produce/pull phase")
    parser.add_argument("--sync", type=int, default=300)
    parser.add_argument("--pure", action="store_true", help="ES_BROKER_PURE_PYTHON=1 in the broker")
    parser.add_argument(
        "--held", type=int, default=0, help="long polls woken by a send (phase 'held'; 0: none)"
    )
    parser.add_argument("--annotate", type=int, default=0)
    parser.add_argument("--keep", help="directory for the callgrind dumps")
    parser.add_argument(
        "--py-spy", dest="py_spy", help="sample each phase with py-spy into this directory"
    )
    parser.add_argument("--summarize", help="print self and inclusive time of a py-spy raw file")
    args = parser.parse_args()
    if args.summarize:
        summarize(Path(args.summarize))
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("ES_BROKER_TRACE_HOPS", None)
    if args.pure:
        env["ES_BROKER_PURE_PYTHON"] = "1"
    else:
        env.pop("ES_BROKER_PURE_PYTHON", None)
    work = Path(tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR")))
    out_dir = Path(args.keep) if args.keep else work
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("cg.out*"):
        old.unlink()
    command = ["valgrind", "--tool=callgrind", "--compress-strings=no", "--compress-pos=no"]
    command += [f"--callgrind-out-file={out_dir / 'cg.out'}"]
    if args.py_spy:
        command = []
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    command += [sys.executable, "-m", "es_broker.cli", "serve", "--data-dir", str(work / "data")]
    command += ["--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0"]
    command += ["--readmodel-url", "none"]
    log_path = work / "serve.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        addr = None
        deadline = time.monotonic() + 600
        while addr is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"broker did not start:\n{log_path.read_text()}")
            if m := _BROKER.search(log_path.read_text(errors="replace")):
                addr = m.group(1)
            else:
                time.sleep(0.5)  # polling another process's log; nothing to wait on
        trio.run(create_topics, addr)
        # warm-up: every code path once, so first-call costs stay out of the phases
        trio.run(produce, addr, 8, 1000)
        offsets = [0] * QUEUES
        trio.run(pull, addr, offsets)
        trio.run(sync_sends, addr, 16)
        if args.held:
            trio.run(held_pulls, addr, 16, offsets)  # the pull phase leaves offsets at the ends
        rows = []
        for name, run in (
            (
                "produce",
                lambda: (trio.run(produce, addr, args.messages // 32) * 32, args.messages // 32),
            ),
            ("pull", lambda: trio.run(pull, addr, offsets)),
            ("sync", lambda: (trio.run(sync_sends, addr, args.sync),) * 2),
            ("held", lambda: trio.run(held_pulls, addr, args.held, offsets)),
        ):
            if name == "held" and not args.held:
                continue
            if args.py_spy:
                spy = subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "-p",
                        str(process.pid),
                        "-r",
                        os.environ.get("SPY_RATE", "500"),
                        "-f",
                        "raw",
                        "--nonblocking",
                    ]
                    + ["-o", str(Path(args.py_spy) / f"{name}.txt")],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1)  # py-spy attaching; it has no ready signal
                began = time.perf_counter()
                messages, requests = run()
                elapsed = time.perf_counter() - began
                spy.send_signal(signal.SIGINT)
                spy.wait()
                print(
                    f"{name}: {messages} messages, {requests} requests, {messages / elapsed:,.0f} msg/s"
                )
                continue
            subprocess.run(
                ["callgrind_control", "-z", str(process.pid)], check=True, capture_output=True
            )
            before = set(out_dir.glob("cg.out*"))
            messages, requests = run()
            instructions, dump = _dump(process.pid, out_dir, before)
            rows.append((name, messages, requests, instructions, dump))
        if args.py_spy:
            return
        mode = "pure Python" if args.pure else "compiled"
        print(f"broker instructions by phase ({mode}; callgrind, every thread of the broker):")
        print(
            f"{'phase':10s}{'messages':>10s}{'requests':>10s}{'Ir (M)':>12s}{'Ir/msg (k)':>12s}{'Ir/req (k)':>12s}"
        )
        for name, messages, requests, instructions, _ in rows:
            print(
                f"{name:10s}{messages:10d}{requests:10d}{instructions / 1e6:12.1f}"
                f"{instructions / messages / 1e3:12.1f}{instructions / requests / 1e3:12.1f}"
            )
        if args.annotate:
            for name, _, _, instructions, dump in rows:
                print(f"\n== {name}: top {args.annotate} C functions by self Ir")
                for function, cost in self_costs(dump).most_common(args.annotate):
                    print(f"{cost / instructions * 100:6.2f}% {cost:>14,} {function[:100]}")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
