"""Broker instructions per message under RocketMQ's benchmark shape, counted by callgrind.

Run: python bench/shape_cg.py [--messages 1000] [--inflight 8] [--pure] [--annotate N]

`bench/rocketmq_shape.py` measures the shape in wall-clock and CPU seconds, which drift by tens of
percent on a shared machine. This runs the same load (one producer connection with N sync
SEND_MESSAGE_V2 of 1 KiB with a key in flight, a push consumer's suspended pulls of 32 with
commitOffset on its own connection) against `es-broker serve` under `valgrind --tool=callgrind`
(read model off, ASYNC_FLUSH), zeroes the counters after a warm-up, sends `--messages` messages,
waits until the consumer has received every one of them and dumps the counters: the broker's
instructions (every thread) per message sent and delivered, and per request (sends + pulls).
--annotate N prints the N C functions with the most self instructions; --keep DIR keeps the dump.
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from rocketmq_shape import (  # noqa: E402
    HEART_BEAT,
    QUEUES,
    Run,
    create_topic,
    frame,
    group_commits,
    heartbeat_body,
)
from server_cg import _BROKER, _dump, self_costs  # noqa: E402


class CountedRun(Run):
    """The shape, stopped after a number of sends instead of a number of seconds."""

    def __init__(self, addr: str, inflight: int, producers: int = 1) -> None:
        super().__init__(addr, inflight, producers)
        self.started = False
        self.sent = 0
        self.pull_requests = 0
        self.counting = True

    def send_one(self, producer: int = 0) -> None:
        if self.producing:
            self.sent += 1
            super().send_one(producer)

    def pull(self, q: int) -> None:
        self.pull_requests += 1
        super().pull(q)

    def on_send_answer(self, header: dict, producer: int = 0) -> None:
        if self.sent >= self.target:
            self.producing = False
        super().on_send_answer(header, producer)

    def drive(self, messages: int) -> tuple[int, int]:
        """Send `messages` more messages and wait until they are all acknowledged and received;
        (messages, requests) it took."""
        self.target = self.sent + messages
        acked0, received0, pulls0, sent0 = self.acked, self.received, self.pull_requests, self.sent
        self.producing = True
        if not self.started:
            self.started = True
            self.sel = selectors.DefaultSelector()
            for i, prod in enumerate(self.prods):
                self.sel.register(prod.sock, selectors.EVENT_READ, i)
            self.sel.register(self.cons.sock, selectors.EVENT_READ, None)
            self.cons.send(frame(HEART_BEAT, self.next_opaque(), {}, heartbeat_body()))
            for q in range(QUEUES):
                self.pull(q)
        for i in range(self.inflight):
            self.send_one(i % len(self.prods))
        while self.sent_at or self.received - received0 < self.sent - sent0:
            self.pump(self.sel, 1)
        sends = self.acked - acked0
        return sends, sends + self.pull_requests - pulls0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--pure", action="store_true", help="ES_BROKER_PURE_PYTHON=1 in the broker")
    parser.add_argument("--annotate", type=int, default=0)
    parser.add_argument(
        "--producers", type=int, default=1, help="producer connections, the sends spread over them"
    )
    parser.add_argument(
        "--edges",
        type=int,
        default=0,
        help="edge processes in front of the broker (edge_processes; they are not counted)",
    )
    parser.add_argument("--keep", help="directory for the callgrind dump")
    args = parser.parse_args()
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
    command += [sys.executable, "-m", "es_broker.cli", "serve", "--data-dir", str(work / "data")]
    command += ["--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0"]
    command += ["--readmodel-url", "none"]
    if args.edges:
        (work / "broker.conf").write_text(f"edge_processes={args.edges}\n")
        command += ["--config", str(work / "broker.conf")]
    log_path = work / "serve.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        addr = None
        deadline = time.monotonic() + 600
        while addr is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"broker did not start:\n{log_path.read_text()}")
            if m := re.search(_BROKER, log_path.read_text(errors="replace")):
                addr = m.group(1)
            else:
                time.sleep(0.5)  # polling another process's log; nothing to wait on
        create_topic(addr)  # a blocking call: no timeout, however slow the broker under valgrind
        run = CountedRun(addr, args.inflight, args.producers)
        run.drive(max(100, args.messages // 10))  # warm-up: every path of the shape once
        subprocess.run(
            ["callgrind_control", "-z", str(process.pid)], check=True, capture_output=True
        )
        before = set(out_dir.glob("cg.out*"))
        commits0 = group_commits(addr)
        messages, requests = run.drive(args.messages)
        instructions, dump = _dump(process.pid, out_dir, before)
        commits1 = group_commits(addr)
        txns, jobs = commits1[0] - commits0[0], commits1[1] - commits0[1]
        mode = "pure Python" if args.pure else "compiled"
        if args.producers > 1:
            mode += f", {len(run.prods)} producer connections"
        if args.edges:
            mode += f", behind {args.edges} edge process(es), the writer counted"
        print(
            f"shape, {args.inflight} in flight ({mode}; callgrind, every thread of the broker): "
            f"{messages} messages, {requests} requests, {instructions / 1e6:.1f} M Ir, "
            f"{instructions / messages / 1e3:.1f} k Ir/msg, {instructions / requests / 1e3:.1f} k Ir/req; "
            f"{txns} write transactions of {jobs / max(1, txns):.1f} jobs"
        )
        if args.annotate:
            print(f"\n== top {args.annotate} C functions by self Ir")
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
