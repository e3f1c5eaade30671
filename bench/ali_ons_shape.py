"""RocketMQ's benchmark shape through a real third-party client: the npm RocketMQ client ali-ons.

`bench/rocketmq_shape.py` puts RocketMQ's benchmark load on a broker with raw frames; this puts the
same load through ali-ons (pinned in tests/interop/package.json), as an application would, with
tests/interop/bench_shape.js in two Node processes (RocketMQ's benchmark Producer and Consumer are
two JVMs):

* producer: one ali-ons Producer, so one connection to the broker, and N async loops that each
  send one 1 KiB message with a key (`-k true`) and wait for its answer: N sync sends in flight,
  the queues round-robin;
* consumer: one ali-ons push Consumer (its own connection; pulls of 32 held 15 s, offsets
  persisted every 5 s, ali-ons' defaults), subscribed before the producer starts, in a group
  named anew each run.

It starts `es-broker serve` on a temporary data directory (or uses `--namesrv`/`--broker`/`--pid`
of a broker already running), creates the topic with 8 queues, waits until the consumer holds
all 8, lets the producer run `--warmup` seconds, then measures `--seconds` seconds and prints one
JSON line per in-flight count:

* send TPS: sends answered a second over the window (`send_tps`) and the median of
  `--window`-second windows (`send_tps_median`; `window_s` says how long, shorter than asked if
  the run would otherwise have fewer than 3), send RT average / p50 / p99;
* consumed share: messages the consumer received in the window over sends answered in it;
* born-to-consume latency p50 / p99: receipt in the consumer's listener minus the born
  timestamp the producer set (one machine, one clock);
* broker CPU per message: user + system seconds of the broker process and its children over the
  window, divided by the sends answered (`broker_process_cpu_us_per_msg`: the process alone);
* the generator's CPU: each Node process's CPU over the window in cores (`*_node_cores`; near 1.0
  means that process saturated a core and is the limit, not the broker) and per message.

    npm ci --prefix tests/interop --no-audit --no-fund
    PYTHONPATH=$PWD python bench/ali_ons_shape.py --inflight 8 64 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rocketmq_shape import (  # noqa: E402
    QUEUES,
    TOPIC,
    Conn,
    create_topic,
    exchange,
    group_commits,
)
from bench.wire_bench import child_pids, cpu_seconds  # noqa: E402
from tests.process_fixtures import serve  # noqa: E402

SCRIPT = ROOT / "tests" / "interop" / "bench_shape.js"
GET_ROUTEINFO_BY_TOPIC = 105
READY_TIMEOUT = 90.0


class Node:
    """One bench_shape.js process: JSON lines read from its stdout by a thread, commands on stdin."""

    def __init__(self, role: str, namesrv: str, extra: list[str], stderr: Path) -> None:
        node = shutil.which("node")
        if node is None:
            raise SystemExit("node is not installed")
        if not (SCRIPT.parent / "node_modules" / "ali-ons").is_dir():
            raise SystemExit("ali-ons is not installed: npm ci --prefix tests/interop")
        self.role = role
        self.stderr = stderr
        self.proc = subprocess.Popen(
            [node, str(SCRIPT), "--role", role, "--namesrv", namesrv, "--topic", TOPIC, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr.open("w"),
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def expect(self, event: str, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                msg = None
            if msg is None:
                self.proc.kill()
                raise RuntimeError(
                    f"{self.role}: no {event!r} line; stderr:\n{self.stderr.read_text()[-3000:]}"
                )
            if msg.get("event") == event:
                return msg

    def command(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_for_route(namesrv: str, timeout: float = 30.0) -> None:
    """ali-ons takes the topic's route from the name server only (no TBW102 fallback): wait until
    the broker's registration after the topic's creation shows all the queues there."""
    deadline = time.monotonic() + timeout
    want = f'"writeQueueNums":{QUEUES}'
    while time.monotonic() < deadline:
        conn = Conn(namesrv)
        header, body = exchange(conn, GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        conn.sock.close()
        if header["code"] == 0 and want in body.decode().replace(" ", ""):
            return
        time.sleep(0.2)  # bounded poll of the name server
    raise RuntimeError(f"no route of {TOPIC} with {QUEUES} queues at {namesrv} in {timeout} s")


def measure(
    namesrv: str, broker: str, pids: list[int], inflight: int, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    create_topic(broker)
    wait_for_route(namesrv)
    window = min(args.window, args.seconds / 3)
    group = f"benchmark_consumer_{int(time.time() * 1000) % 100000}"
    consumer = Node(
        "consumer", namesrv, ["--queues", str(QUEUES), "--group", group], tmp / "consumer.err"
    )
    producer = None
    try:
        consumer.expect("ready")
        producer = Node("producer", namesrv, ["--inflight", str(inflight)], tmp / "producer.err")
        producer.expect("ready")
        time.sleep(args.warmup)  # the producer runs unmeasured meanwhile
        nodes = [producer.proc.pid, consumer.proc.pid]
        load0 = os.getloadavg()[0]
        commits0 = group_commits(broker)
        cpu0 = [cpu_seconds(p) for p in pids]
        node0 = [cpu_seconds(p) for p in nodes]
        t0 = time.time()
        time.sleep(args.seconds)
        t1 = time.time()
        cpu1 = [cpu_seconds(p) for p in pids]
        node1 = [cpu_seconds(p) for p in nodes]
        commits1 = group_commits(broker)
        load1 = os.getloadavg()[0]
        producer.command("stop")
        producer.expect("stopped", timeout=60)
        span = f"{t0 * 1000:.3f} {t1 * 1000:.3f} {window}"
        producer.command(f"report {span}")
        consumer.command(f"report {span}")
        sent = producer.expect("report", timeout=60)
        got = consumer.expect("report", timeout=60)
    finally:
        for node in (producer, consumer):
            if node is not None:
                node.finish()
    elapsed = t1 - t0
    acked = max(1, sent["acked"])
    tree = sum(cpu1) - sum(cpu0)
    own = cpu1[0] - cpu0[0] if pids else 0.0
    prod_cpu, cons_cpu = (b - a for a, b in zip(node0, node1, strict=True))
    batches, jobs = commits1[0] - commits0[0], commits1[1] - commits0[1]
    r3 = lambda v: None if v is None else round(v, 3)  # noqa: E731
    return {
        "client": "ali-ons",
        "inflight": inflight,
        "seconds": round(elapsed, 1),
        "window_s": round(window, 1),
        "send_tps": round(sent["acked"] / elapsed),
        "send_tps_median": round(statistics.median(sent["window_counts"]) / window),
        "send_tps_windows": [round(c / window) for c in sent["window_counts"]],
        "send_rt_avg_ms": r3(sent["rt_avg_ms"]),
        "send_rt_p50_ms": r3(sent["rt_p50_ms"]),
        "send_rt_p99_ms": r3(sent["rt_p99_ms"]),
        "send_failures": sent["failures"],
        "consumed_share": round(got["received"] / acked, 3),
        "consume_latency_p50_ms": r3(got["b2c_p50_ms"]),
        "consume_latency_p99_ms": r3(got["b2c_p99_ms"]),
        "broker_cpu_us_per_msg": round(1e6 * tree / acked, 1) if pids else None,
        "broker_process_cpu_us_per_msg": round(1e6 * own / acked, 1) if pids else None,
        "broker_tree_cores": round(tree / elapsed, 2) if pids else None,
        "write_txns_per_msg": round(batches / acked, 2),
        "jobs_per_txn": round(jobs / max(1, batches), 2),
        "producer_node_cores": round(prod_cpu / elapsed, 2),
        "consumer_node_cores": round(cons_cpu / elapsed, 2),
        "node_cpu_us_per_msg": round(1e6 * (prod_cpu + cons_cpu) / acked, 1),
        "load_avg_1m": [round(load0, 2), round(load1, 2)],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--inflight", type=int, nargs="+", default=[8, 64])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--window", type=float, default=10.0, help="TPS window (s) for the median")
    p.add_argument("--namesrv", help="host:port of a running broker's name server (with --broker)")
    p.add_argument("--broker", help="host:port of that broker (default: start one)")
    p.add_argument(
        "--pid", type=int, help="with --broker: the process whose CPU (and children's) to count"
    )
    p.add_argument(
        "--serve-arg", action="append", default=[], help="an extra argument to es-broker serve"
    )
    args = p.parse_args()
    if bool(args.broker) != bool(args.namesrv):
        p.error("--broker and --namesrv go together")
    for n in args.inflight:
        with tempfile.TemporaryDirectory() as tmp:
            if args.broker:
                pids = [args.pid, *child_pids(args.pid)] if args.pid else []
                result = measure(args.namesrv, args.broker, pids, n, args, Path(tmp))
            else:
                log = Path(tmp) / "broker.log"
                with serve(Path(tmp) / "data", *args.serve_arg, log_file=log) as served:
                    pid = served.process.pid
                    pids = [pid, *child_pids(pid)]
                    result = measure(served.namesrv, served.broker, pids, n, args, Path(tmp))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
