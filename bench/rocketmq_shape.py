"""RocketMQ's own benchmark, in its load shape, as raw frames: the figures a RocketMQ shop measures first.

`tools.sh org.apache.rocketmq.example.benchmark.Producer` and `...Consumer` of the 4.9.8 release
(example/src/main/java/org/apache/rocketmq/example/benchmark/) put this load on a broker:

* producer: one DefaultMQProducer, so one TCP connection per broker, shared by N sending threads;
  up to N SEND_MESSAGE_V2 requests in flight, each one message of 1 KiB with a key (`-k true`), the
  queues taken round-robin, sync sends, the round trip measured per send;
* consumer: one DefaultMQPushConsumer on its own connection, one PULL_MESSAGE in flight per queue,
  maxMsgNums 32, suspendTimeoutMillis 15000, sysFlag commitOffset|suspend|subscription, the offset
  committed through each pull and by UPDATE_CONSUMER_OFFSET every 5 s, a heartbeat every 30 s.

This script puts the same load on a broker with one process and no framework: both connections are
plain sockets driven by one selector, the frames written as the Java client writes them (a JSON
header whose extFields are strings). The generator costs a few microseconds a message, so the
broker is what is measured. It prints, per run:

* send TPS (messages acknowledged a second over the measured window) and the send RT average / p50 / p99;
* the share of what was sent that the consumer received while the producer ran;
* born-to-consume latency (the consumer's receipt time minus the born timestamp in the stored
  message) median and p99;
* the broker's CPU per message sent and delivered: user + system seconds of the broker process and
  its children (the read model) over the window, divided by the messages sent;
* where the broker process's CPU goes: how much of a core it kept busy (`broker_process_busy`), the
  share of its CPU spent in the kernel (`broker_process_system_share`) and its read and write
  system calls a message (`broker_process_syscalls_per_msg`, /proc's syscr + syscw), which tell a
  broker bound by its own user-space work from one bound by system calls or by waiting.

`--trace-hops FILE` starts the broker with ES_BROKER_TRACE_HOPS=FILE (es_broker/log/hops.py) and
prints, after each run, the median and mean of every hop of a send and of a pull inside the broker.

    python bench/rocketmq_shape.py --inflight 8 --seconds 20
    python bench/rocketmq_shape.py --inflight 64 --seconds 20
    python bench/rocketmq_shape.py --broker 127.0.0.1:10911 --inflight 8   # a broker already running

Against a running broker (RocketMQ's own, say), `--broker` names it and `--pid` the process whose
CPU to count; the topic is created through UPDATE_AND_CREATE_TOPIC first in either case.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import selectors
import socket
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.wire_bench import child_pids, cpu_seconds, cpu_split  # noqa: E402
from tests.process_fixtures import serve  # noqa: E402

SEND_MESSAGE_V2 = 310
PULL_MESSAGE = 11
QUERY_CONSUMER_OFFSET = 14
UPDATE_CONSUMER_OFFSET = 15
HEART_BEAT = 34
UPDATE_AND_CREATE_TOPIC = 17
GET_BROKER_RUNTIME_INFO = 28

TOPIC = "BenchmarkShape"
GROUP_P = "benchmark_producer"
GROUP_C = "benchmark_consumer"
QUEUES = 8
BODY = b"x" * 1024
# the born timestamp's place in a stored message (docs/protocol.md §8): after TOTALSIZE, MAGICCODE,
# BODYCRC, QUEUEID, FLAG (4 bytes each), QUEUEOFFSET, PHYSICALOFFSET (8 each) and SYSFLAG (4)
BORN_AT = 40


def syscalls(pid: int) -> int:
    """The read and write system calls a process made so far (/proc's syscr + syscw; 0 elsewhere)."""
    try:
        lines = Path(f"/proc/{pid}/io").read_text().splitlines()
    except OSError:
        return 0
    counts = dict(line.split(": ", 1) for line in lines if ": " in line)
    return int(counts.get("syscr", 0)) + int(counts.get("syscw", 0))


def frame(
    code: int, opaque: int, ext: dict[str, str], body: bytes = b"", oneway: bool = False
) -> bytes:
    """One request as the Java client writes it: JSON header, every extFields value a string."""
    header = json.dumps(
        {
            "code": code,
            "extFields": ext,
            "flag": 2 if oneway else 0,
            "language": "JAVA",
            "opaque": opaque,
            "serializeTypeCurrentRPC": "JSON",
            "version": 395,
        },
        separators=(",", ":"),
    ).encode()
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


class Conn:
    """A plain socket with a receive buffer that yields whole frames: (header dict, body)."""

    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.buf = bytearray()
        self.out = bytearray()

    def send(self, data: bytes) -> None:
        self.out += data
        self.flush()

    def flush(self) -> None:
        while self.out:
            try:
                n = self.sock.send(self.out)
            except BlockingIOError:
                return
            del self.out[:n]

    def frames(self) -> list[tuple[dict, bytes]]:
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return []
        if not data:
            raise ConnectionError("the broker closed the connection")
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            (length,) = struct.unpack_from(">I", self.buf, 0)
            if len(self.buf) < 4 + length:
                break
            (mark,) = struct.unpack_from(">I", self.buf, 4)
            hlen = mark & 0xFFFFFF
            header = json.loads(bytes(self.buf[8 : 8 + hlen]))
            out.append((header, bytes(self.buf[8 + hlen : 4 + length])))
            del self.buf[: 4 + length]
        return out


def call(conn: Conn, code: int, ext: dict[str, str], body: bytes = b"") -> dict:
    return exchange(conn, code, ext, body)[0]


def exchange(conn: Conn, code: int, ext: dict[str, str], body: bytes = b"") -> tuple[dict, bytes]:
    """One request's answer (header, body), waited for without a timeout (a broker under valgrind
    may take seconds)."""
    conn.sock.setblocking(True)
    conn.send(frame(code, 1, ext, body))
    while True:
        for answer in conn.frames():
            conn.sock.setblocking(False)
            return answer


def group_commits(addr: str) -> tuple[int, int]:
    """(write transactions, jobs written) since the broker started, from GET_BROKER_RUNTIME_INFO;
    (0, 0) from a broker that does not report them (RocketMQ's own)."""
    conn = Conn(addr)
    header, body = exchange(conn, GET_BROKER_RUNTIME_INFO, {})
    conn.sock.close()
    if header["code"] != 0:
        return 0, 0
    table = json.loads(body).get("table", {})
    return int(table.get("groupCommitBatches", 0)), int(table.get("groupCommitJobs", 0))


def committed_offsets(addr: str) -> list[int]:
    """The consumer group's committed offset of each queue (0 where none): where the push consumer
    resumes, as a restarted DefaultMQPushConsumer does, so that a run does not read again what an
    earlier run against the same broker consumed."""
    conn = Conn(addr)
    offsets = []
    for q in range(QUEUES):
        ext = {"consumerGroup": GROUP_C, "topic": TOPIC, "queueId": str(q)}
        header = call(conn, QUERY_CONSUMER_OFFSET, ext)
        fields = header.get("extFields") or {}
        offsets.append(int(fields["offset"]) if header["code"] == 0 and "offset" in fields else 0)
    conn.sock.close()
    return offsets


def stored_messages(body: bytes) -> list[int]:
    """The born timestamps (ms) of the stored messages in a pull answer's body."""
    out = []
    pos = 0
    while pos + BORN_AT + 8 <= len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        (born,) = struct.unpack_from(">q", body, pos + BORN_AT)
        out.append(born)
        pos += size
    return out


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


class Run:
    def __init__(self, addr: str, inflight: int, producers: int = 1) -> None:
        self.addr = addr
        self.inflight = inflight
        # the producer's connections: one (RocketMQ's benchmark), or several, the sends in flight
        # spread over them (many client processes, each with its own connection)
        self.prods = [Conn(addr) for _ in range(max(1, min(producers, inflight)))]
        self.prod = self.prods[0]
        self.cons = Conn(addr)
        self.opaque = 10
        self.sent_at: dict[int, float] = {}
        self.pulls: dict[int, int] = {}  # opaque -> queue id
        self.offsets = committed_offsets(addr)
        self.next_queue = 0
        self.rts: list[float] = []
        self.acked = 0
        self.acked_by_second: list[int] = []  # sends acknowledged in each second counted
        self.t0 = 0.0
        self.received = 0
        self.latencies: list[float] = []
        self.counting = False
        self.producing = True
        self.last_commit = self.last_heartbeat = time.monotonic()
        self.key = str(int(time.time()))

    def next_opaque(self) -> int:
        self.opaque += 1
        return self.opaque

    def send_one(self, producer: int = 0) -> None:
        q = self.next_queue
        self.next_queue = (q + 1) % QUEUES
        props = f"KEYS\x01{self.key}\x02UNIQ_KEY\x01{uuid.uuid4().hex.upper()}\x02WAIT\x01true\x02"
        ext = {
            "a": GROUP_P,
            "b": TOPIC,
            "c": "TBW102",
            "d": "4",
            "e": str(q),
            "f": "0",
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": props,
            "j": "0",
            "k": "false",
            "m": "false",
        }
        opaque = self.next_opaque()
        self.sent_at[opaque] = time.perf_counter()
        self.prods[producer].send(frame(SEND_MESSAGE_V2, opaque, ext, BODY))

    def pull(self, q: int) -> None:
        ext = {
            "consumerGroup": GROUP_C,
            "topic": TOPIC,
            "queueId": str(q),
            "queueOffset": str(self.offsets[q]),
            "maxMsgNums": "32",
            "sysFlag": "7",  # commitOffset | suspend | subscription
            "commitOffset": str(self.offsets[q]),
            "suspendTimeoutMillis": "15000",
            "subscription": "*",
            "subVersion": str(int(time.time() * 1000)),
            "expressionType": "TAG",
        }
        opaque = self.next_opaque()
        self.pulls[opaque] = q
        self.cons.send(frame(PULL_MESSAGE, opaque, ext))

    def housekeeping(self, now: float) -> None:
        if now - self.last_commit >= 5:
            self.last_commit = now
            for q in range(QUEUES):
                ext = {
                    "consumerGroup": GROUP_C,
                    "topic": TOPIC,
                    "queueId": str(q),
                    "commitOffset": str(self.offsets[q]),
                }
                self.cons.send(frame(UPDATE_CONSUMER_OFFSET, self.next_opaque(), ext, oneway=True))
        if now - self.last_heartbeat >= 30:
            self.last_heartbeat = now
            self.cons.send(frame(HEART_BEAT, self.next_opaque(), {}, heartbeat_body()))

    def on_send_answer(self, header: dict, producer: int = 0) -> None:
        started = self.sent_at.pop(header["opaque"], None)
        if started is None:
            return
        if header["code"] != 0:
            raise RuntimeError(f"send refused: {header.get('remark')}")
        if self.counting:
            self.rts.append(time.perf_counter() - started)
            self.acked += 1
            second = int(time.monotonic() - self.t0)
            while len(self.acked_by_second) <= second:
                self.acked_by_second.append(0)
            self.acked_by_second[second] += 1
        if self.producing:
            self.send_one(producer)

    def on_pull_answer(self, header: dict, body: bytes) -> None:
        q = self.pulls.pop(header["opaque"], None)
        if q is None:
            return
        ext = header.get("extFields") or {}
        if header["code"] == 0:
            now_ms = time.time() * 1000
            borns = stored_messages(body)
            if self.counting:
                self.received += len(borns)
                self.latencies.extend(now_ms - b for b in borns)
        if "nextBeginOffset" in ext:
            self.offsets[q] = int(ext["nextBeginOffset"])
        self.pull(q)

    def pump(self, sel: selectors.BaseSelector, timeout: float) -> None:
        """One round: every answer that arrived within `timeout` handled, then what is unsent sent."""
        for key, _ in sel.select(timeout=timeout):
            producer = key.data
            conn = self.cons if producer is None else self.prods[producer]
            for header, body in conn.frames():
                if producer is not None:
                    self.on_send_answer(header, producer)
                else:
                    self.on_pull_answer(header, body)
        for prod in self.prods:
            prod.flush()
        self.cons.flush()

    def run(self, warmup: float, seconds: float, pids: list[int]) -> dict[str, float]:
        sel = selectors.DefaultSelector()
        for i, prod in enumerate(self.prods):
            sel.register(prod.sock, selectors.EVENT_READ, i)
        sel.register(self.cons.sock, selectors.EVENT_READ, None)
        self.cons.send(frame(HEART_BEAT, self.next_opaque(), {}, heartbeat_body()))
        for q in range(QUEUES):
            self.pull(q)
        for i in range(self.inflight):
            self.send_one(i % len(self.prods))
        start = time.monotonic()
        cpu0 = own0 = edges0 = 0.0
        split0, calls0 = (0.0, 0.0), 0
        edge_pids = [p for p in pids if is_edge(p)]
        t0 = 0.0
        commits0 = (0, 0)
        while True:
            now = time.monotonic()
            if not self.counting and now - start >= warmup:
                self.counting = True
                commits0 = group_commits(self.addr)
                cpu0 = sum(cpu_seconds(p) for p in pids)
                own0 = cpu_seconds(pids[0]) if pids else 0.0
                edges0 = sum(cpu_seconds(p) for p in edge_pids)
                if pids:
                    split0, calls0 = cpu_split(pids[0]), syscalls(pids[0])
                t0 = self.t0 = now
            if self.counting and now - t0 >= seconds:
                break
            self.housekeeping(now)
            self.pump(sel, 0.5)
        elapsed = time.monotonic() - t0
        cpu = sum(cpu_seconds(p) for p in pids) - cpu0
        own = (cpu_seconds(pids[0]) - own0) if pids else 0.0
        edges = sum(cpu_seconds(p) for p in edge_pids) - edges0
        user, system = 0.0, 0.0
        if pids:
            split1 = cpu_split(pids[0])
            user, system = split1[0] - split0[0], split1[1] - split0[1]
        calls = (syscalls(pids[0]) - calls0) if pids else 0
        commits1 = group_commits(self.addr)
        batches, jobs = commits1[0] - commits0[0], commits1[1] - commits0[1]
        return {
            "inflight": self.inflight,
            "seconds": round(elapsed, 1),
            "send_tps": round(self.acked / elapsed),
            "send_rt_avg_ms": round(1000 * sum(self.rts) / max(1, len(self.rts)), 3),
            "send_rt_p50_ms": round(1000 * pct(self.rts, 0.5), 3),
            "send_rt_p99_ms": round(1000 * pct(self.rts, 0.99), 3),
            "consumed_share": round(self.received / max(1, self.acked), 3),
            "consume_latency_p50_ms": round(pct(self.latencies, 0.5), 2),
            "consume_latency_p99_ms": round(pct(self.latencies, 0.99), 2),
            "broker_cpu_us_per_msg": round(1e6 * cpu / max(1, self.acked), 1)
            if pids
            else float("nan"),
            # the broker process alone; the rest of the figure above is its children's (the read model)
            "broker_process_cpu_us_per_msg": round(1e6 * own / max(1, self.acked), 1),
            # the cores the broker process kept busy, its kernel share, its read/write calls a message
            "broker_process_busy": round(own / elapsed, 2),
            "broker_process_system_share": round(system / max(user + system, 1e-9), 3),
            "broker_process_syscalls_per_msg": round(calls / max(1, self.acked), 2),
            # with --edges: the edge processes' CPU (in the tree's figure too); the writer's is the process's
            "edges": len(edge_pids),
            "edges_cpu_us_per_msg": round(1e6 * edges / max(1, self.acked), 1),
            "write_txns_per_msg": round(batches / max(1, self.acked), 2),
            "jobs_per_txn": round(jobs / max(1, batches), 2),
            "send_tps_by_second": self.acked_by_second,
        }


def heartbeat_body() -> bytes:
    consumer = {
        "groupName": GROUP_C,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "subscriptionDataSet": [
            {
                "topic": TOPIC,
                "subString": "*",
                "tagsSet": [],
                "codeSet": [],
                "subVersion": int(time.time() * 1000),
                "expressionType": "TAG",
                "classFilterMode": False,
            }
        ],
        "unitMode": False,
    }
    return json.dumps(
        {
            "clientID": f"127.0.0.1@{os.getpid()}",
            "consumerDataSet": [consumer],
            "producerDataSet": [],
        }
    ).encode()


def create_topic(addr: str) -> None:
    conn = Conn(addr)
    ext = {
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "readQueueNums": str(QUEUES),
        "writeQueueNums": str(QUEUES),
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }
    answer = call(conn, UPDATE_AND_CREATE_TOPIC, ext)
    conn.sock.close()
    if answer["code"] != 0:
        raise RuntimeError(f"topic not created: {answer.get('remark')}")


def is_edge(pid: int) -> bool:
    """An edge process of the broker (edge_processes, es_broker/server/edge/relay.py)."""
    try:
        return b"es_broker.server.edge.relay" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def broker_pids(pid: int, edges: int, follower: bool) -> list[int]:
    """The broker process and its children, once its `edges` edge processes and its read-model
    follower (if it has one) run (bounded wait)."""
    deadline = time.monotonic() + 30
    while True:
        children = child_pids(pid)
        started = sum(map(is_edge, children)) >= edges and len(children) >= edges + follower
        if started or time.monotonic() > deadline:
            return [pid, *children]
        time.sleep(0.05)  # the edges start just after the ready line: poll /proc, bounded


def hop_medians(path: Path) -> dict[str, dict[str, list[float]]]:
    """[p50, mean] µs of each hop of a send and of a pull, from the broker's hops file."""
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"error": {str(exc): []}}
    out = {}
    for name, code in (("send", SEND_MESSAGE_V2), ("pull", PULL_MESSAGE)):
        hops = table.get(str(code), {}).get("hops", {})
        out[name] = {
            hop: [round(v["p50"]), round(v["mean"])] for hop, v in hops.items() if v.get("n")
        }
    return out


def measure(
    addr: str, pids: list[int], inflight: int, warmup: float, seconds: float, producers: int = 1
) -> dict:
    create_topic(addr)
    return {**Run(addr, inflight, producers).run(warmup, seconds, pids), "producers": producers}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--inflight", type=int, nargs="+", default=[8, 64])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--broker", help="host:port of a broker already running (default: start one)")
    p.add_argument(
        "--pid", type=int, help="with --broker: the process whose CPU (and children's) to count"
    )
    p.add_argument(
        "--serve-arg", action="append", default=[], help="an extra argument to es-broker serve"
    )
    p.add_argument(
        "--producers",
        type=int,
        default=1,
        help="producer connections, the sends in flight spread over them (default 1, as "
        "RocketMQ's benchmark: one DefaultMQProducer)",
    )
    p.add_argument(
        "--by-second",
        action="store_true",
        help="also the sends acknowledged in each second counted (send_tps_by_second)",
    )
    p.add_argument(
        "--edges",
        type=int,
        default=0,
        help="edge processes in front of the writer (edge_processes)",
    )
    p.add_argument(
        "--trace-hops",
        metavar="FILE",
        help="start the broker with ES_BROKER_TRACE_HOPS=FILE and add the hops of a send and of a "
        "pull inside it (p50 / mean, µs) to each run's figures",
    )
    p.add_argument(
        "--broker-pythonpath",
        metavar="PATH",
        help="PYTHONPATH of the broker it starts (default: this checkout): another checkout, "
        'built in place, to measure that tree with this bench (bench/README.md, "The '
        "performance issue's table, before and after\"), or this one with bench/without_leaves",
    )
    args = p.parse_args()
    if args.broker_pythonpath and args.broker:
        p.error("--broker-pythonpath starts the broker itself: not with --broker")
    if args.trace_hops and args.broker:
        p.error("--trace-hops starts the broker itself: not with --broker")
    results = []
    if args.broker:
        pids = [args.pid, *child_pids(args.pid)] if args.pid else []
        for n in args.inflight:
            results.append(measure(args.broker, pids, n, args.warmup, args.seconds, args.producers))
    else:
        for n in args.inflight:
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "broker.log"
                conf = [f"edge_processes={args.edges}"] if args.edges else []
                env = {"ES_BROKER_TRACE_HOPS": args.trace_hops} if args.trace_hops else {}
                if args.broker_pythonpath:
                    env["PYTHONPATH"] = args.broker_pythonpath
                with serve(
                    Path(tmp) / "data",
                    *args.serve_arg,
                    log_file=log,
                    conf=conf,
                    env=env,
                    cwd=Path(tmp) if args.broker_pythonpath else None,  # not this checkout's
                ) as broker:
                    follower = "none" not in args.serve_arg  # --readmodel-url none: no follower
                    pids = broker_pids(broker.process.pid, args.edges, follower)
                    results.append(
                        measure(broker.broker, pids, n, args.warmup, args.seconds, args.producers)
                    )
            if args.trace_hops:  # written by the broker as it stopped
                results[-1]["hops_us"] = hop_medians(Path(args.trace_hops))
            # the broker runs on this interpreter, whose build moves its CPU a message by ~20%
            # (bench/README.md, "The interpreter's build")
            results[-1]["broker_python"] = f"{sys.executable} {platform.python_version()}"
    for r in results:
        if not args.by_second:
            del r["send_tps_by_second"]
        print(json.dumps(r))


if __name__ == "__main__":
    main()
