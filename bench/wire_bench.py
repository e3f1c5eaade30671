"""Wire benchmark: es-broker over TCP against Redis Streams, same workload, same run.

Run: python bench/wire_bench.py [--messages 200000] [--batch 32] [--no-redis] [--tls] [--sync-flush] [--trace-hops]
       [--acl [--acl-scheme es-v1|rocketmq]]
Needs Debian's redis-server (the bench starts and stops it on loopback with
AOF everysec) and the `redis` Python package. es-broker runs as a real
`es-broker serve` process on free ports.

Workload, both sides: N messages of 1 KiB produced in batches of `--batch`
with up to `--window` batches in flight (what a fast client does: batch sends
on es-broker, pipelined XADDs on Redis), then read back in reads of 32
(PULL_MESSAGE maxMsgNums=32, each committing the offset read so far / XREADGROUP COUNT 32 with an
XACK of the previous read in the same pipeline), then `--sync` synchronous single sends (one
request, wait for the answer) for p50/p99 latency: from the async client
(`RemotingClient`), then the same count from a blocking socket
(`es_broker.client.blocking`, what `SyncProducer` uses), which is how redis-py
talks to Redis, so the "blocking" rows are the like-for-like ones. Last,
the same sends as raw frames on both sides (each request encoded before its
clock starts, written and read on a plain socket, no client library): the
servers alone, so a client's share of a "blocking" row is that row minus
this one.

The broker runs as `es-broker serve` does by default, read model on (its
follower is a child process); the bench waits for the follower's first
checkpoint before it measures, as it waits for redis-server to answer. The CPU seconds the broker process and its
children (the follower) used over the workload are printed too (Linux).

--acl: the broker with aclEnable and a generated plain_acl.yml, every request signed
(`--acl-scheme`: es-broker's bound signature, the default, or RocketMQ's); also printed, in
process, what signing and checking one send costs under each scheme, and the bound scheme's
overhead per request (docs/semantics.md B-345..B-349).

--tls: the broker in tls.server.mode=enforcing with a certificate of a
throwaway CA (trustme, a dev dependency), every client connection over TLS.

--trace-hops: the broker stamps each hop of every request inside its process
(ES_BROKER_TRACE_HOPS, es_broker/log/hops.py) and the per-hop p50/p99 of the
synchronous sends (SEND_MESSAGE_V2, which only that phase uses) are printed.
Also printed: the p50/p99 of a request the broker answers without a handler
(an unsupported code), the floor of one round trip through this client and
the listener, and the same as raw frames: the listener's floor alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_broker.acl.signing import Credentials  # noqa: E402
from es_broker.client.blocking import BlockingRemoting  # noqa: E402
from es_broker.log.hops import format_table  # noqa: E402
from es_broker.net.remoting_client import RemotingClient  # noqa: E402
from es_broker.net.tls import TlsClientSettings  # noqa: E402
from es_broker.remoting.codes import RequestCode  # noqa: E402
from es_broker.remoting.command import RemotingCommand, request  # noqa: E402
from es_broker.remoting.connection import Connection  # noqa: E402
from es_broker.remoting.message import decode_all, encode_properties  # noqa: E402
from tests.process_fixtures import serve  # noqa: E402

BODY = b"x" * 1024
QUEUES = 8
CLIENT_TLS: TlsClientSettings | None = None  # set by --tls: the clients below speak TLS


def tls_conf(directory: Path) -> list[str]:
    """--tls: broker.conf lines for enforcing mode with a fresh CA's certificate; the clients trust that CA."""
    global CLIENT_TLS
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(str(directory / "server.pem"))
    CLIENT_TLS = TlsClientSettings(ca_file=str(directory / "ca.pem"))
    return [
        "tls.server.mode=enforcing",
        "tls.test.mode.enable=false",
        f"tls.server.certPath={directory / 'server.pem'}",
        f"tls.server.keyPath={directory / 'server.pem'}",
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batch_body(n: int) -> bytes:
    props = encode_properties({"TAGS": "A"})
    entry = struct.pack(">iiiii", 20 + len(BODY) + 2 + len(props), 0, 0, 0, len(BODY)) + BODY
    entry += struct.pack(">h", len(props)) + props
    return entry * n


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


# ---------------------------------------------------------------------- es-broker


async def es_produce(addr: str, n: int, batch: int, window: int) -> float:
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery, credentials=CREDENTIALS, tls=CLIENT_TLS)
        body = batch_body(batch)
        batches = n // batch
        sem = trio.Semaphore(window)
        start = time.perf_counter()

        async def one(i: int) -> None:
            async with sem:
                r = await client.invoke(
                    addr,
                    request(
                        RequestCode.SEND_BATCH_MESSAGE,
                        {
                            "a": "BENCH",
                            "b": "Bench",
                            "c": "TBW102",
                            "d": 4,
                            "e": i % QUEUES,
                            "f": 0,
                            "g": 0,
                            "h": 0,
                            "m": True,
                        },
                        body,
                    ),
                    timeout=60,
                )
                assert r.code == 0, r.remark

        async with trio.open_nursery() as senders:
            for i in range(batches):
                await sem.acquire()
                sem.release()
                senders.start_soon(one, i)
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return batches * batch / elapsed


async def es_consume(addr: str, n: int) -> float:
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery, credentials=CREDENTIALS, tls=CLIENT_TLS)
        got = 0
        start = time.perf_counter()

        async def queue(q: int) -> None:
            nonlocal got
            offset = 0
            while True:
                # sysFlag 1|4: each pull commits the offset consumed so far, as a push consumer does
                r = await client.invoke(
                    addr,
                    request(
                        RequestCode.PULL_MESSAGE,
                        {
                            "consumerGroup": "BENCH",
                            "topic": "Bench",
                            "queueId": q,
                            "queueOffset": offset,
                            "maxMsgNums": 32,
                            "sysFlag": 5,
                            "commitOffset": offset,
                            "suspendTimeoutMillis": 0,
                            "subscription": "*",
                            "subVersion": 0,
                        },
                    ),
                    timeout=60,
                )
                REQUESTS["pull"] += 1
                if r.code != 0:
                    return
                got += len(decode_all(r.body))
                offset = int(r.ext_fields["nextBeginOffset"])

        async with trio.open_nursery() as readers:
            for q in range(QUEUES):
                readers.start_soon(queue, q)
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    assert got >= n, f"read {got} of {n}"
    return got / elapsed


SYNC_PROPS = encode_properties({"TAGS": "A"}).decode()  # the properties of every sync send


def sync_send(i: int, props: str = SYNC_PROPS) -> RemotingCommand:
    """The i-th single SEND_MESSAGE_V2 of the latency phases (V2's short header names)."""
    header = {"a": "BENCH", "b": "Sync", "c": "TBW102", "d": 4, "e": i % QUEUES}
    header.update(f=0, g=0, h=0, i=props)
    return request(RequestCode.SEND_MESSAGE_V2, header, BODY)


async def es_sync_latency(addr: str, count: int) -> list[float]:
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery, credentials=CREDENTIALS, tls=CLIENT_TLS)
        out = []
        for i in range(count):
            t = time.perf_counter()
            r = await client.invoke(addr, sync_send(i))
            out.append(time.perf_counter() - t)
            assert r.code == 0
        nursery.cancel_scope.cancel()
    return out


def es_sync_latency_blocking(addr: str, count: int) -> list[float]:
    """The same sends from a blocking socket (`es_broker.client.blocking`), as redis-py sends to Redis."""
    client = BlockingRemoting(credentials=CREDENTIALS, tls=CLIENT_TLS)
    out = []
    try:
        for i in range(count):
            t = time.perf_counter()
            r = client.invoke(addr, sync_send(i))
            out.append(time.perf_counter() - t)
            assert r.code == 0
    finally:
        client.close()
    return out


async def es_floor_latency(addr: str, count: int) -> list[float]:
    """Round trips of a request code the broker does not serve: read, decode, dispatch, answer, write."""
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery, credentials=CREDENTIALS, tls=CLIENT_TLS)
        out = []
        for _ in range(count):
            t = time.perf_counter()
            r = await client.invoke(addr, request(UNSERVED_CODE, {}))
            out.append(time.perf_counter() - t)
            assert r.code == 3, r  # REQUEST_CODE_NOT_SUPPORTED
        nursery.cancel_scope.cancel()
    return out


UNSERVED_CODE = 9999


def _plain_socket(host: str, port: int) -> socket.socket:
    """A blocking TCP connection with Nagle off, as the clients above use."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _round_trips(
    sock: socket.socket, frames: list[bytes], answered: Callable[[bytes], bool]
) -> list[float]:
    """Each frame written and its whole answer read, one at a time, on a plain blocking socket."""
    out = []
    for frame in frames:
        t = time.perf_counter()
        sock.sendall(frame)
        answer = sock.recv(65536)
        while not answered(answer):
            answer += sock.recv(65536)
        out.append(time.perf_counter() - t)
    return out


def _whole_frame(data: bytes) -> bool:
    return len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big")


def es_raw_latency(addr: str, count: int) -> dict[str, list[float]]:
    """Round trips with no client library: frames encoded before the clock starts, written and read
    on a plain socket; an unserved code (the listener's floor) and the sync sends above. What is
    left is the kernel's loopback and the broker, so client and broker can be told apart."""
    conn = Connection()
    host, port = addr.rsplit(":", 1)
    with _plain_socket(host, int(port)) as sock:
        unserved = [conn.send(request(UNSERVED_CODE, {})) for _ in range(count)]
        sends = [conn.send(sync_send(i)) for i in range(count)]
        return {
            "unserved": _round_trips(sock, unserved, _whole_frame),
            "send": _round_trips(sock, sends, _whole_frame),
        }


# a server that does nothing but echo, in a process of its own: the round trip of this machine's
# loopback and scheduler, under any server
ECHO_SERVER = """
import socket
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while data := conn.recv(65536):
    conn.sendall(data)
"""


def echo_floor_latency(count: int) -> list[float]:
    """Round trips of a frame the size of a sync send through ECHO_SERVER (the machine's floor)."""
    frame = Connection().send(sync_send(0))
    with subprocess.Popen(
        [sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with _plain_socket("127.0.0.1", port) as sock:
            out = _round_trips(sock, [frame] * count, lambda d: len(d) >= len(frame))
        proc.wait()
    return out


def redis_raw_latency(port: int, count: int) -> list[float]:
    """The single XADDs of `run_redis`, as RESP encoded before the clock starts, on a plain socket."""

    def resp(*parts: bytes) -> bytes:
        return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in parts)

    frames = [
        resp(b"XADD", b"sync%d" % (i % QUEUES), b"*", b"tags", b"A", b"body", BODY)
        for i in range(count)
    ]
    with _plain_socket("127.0.0.1", port) as sock:
        # an XADD answers with one bulk string, the new entry's id: "$<n>\r\n<id>\r\n"
        return _round_trips(
            sock, frames, lambda d: d.endswith(b"\r\n") and (d[:1] != b"$" or d.count(b"\r\n") >= 2)
        )


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds a process used so far (Linux /proc; zeros elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick  # utime, stime


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process used so far (Linux /proc; 0 elsewhere)."""
    return sum(cpu_split(pid))


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MiB (Linux /proc; 0 elsewhere)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def child_pids(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


# --acl: the broker runs with aclEnable and this account; every request is signed (RemotingClient credentials)
CREDENTIALS: Credentials | None = None
BENCH_ACL = """\
accounts:
  - accessKey: BenchAdmin
    secretKey: BenchSecret
    admin: true
  - accessKey: BenchClient
    secretKey: BenchClientSecret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Bench=PUB|SUB, Sync=PUB|SUB]
    groupPerms: [BENCH=SUB]
"""
REQUESTS = {"pull": 0}


async def create_topics(addr: str) -> None:
    async with trio.open_nursery() as nursery:
        admin = Credentials("BenchAdmin", "BenchSecret") if CREDENTIALS else None
        client = RemotingClient(nursery, credentials=admin, tls=CLIENT_TLS)
        for topic in ("Bench", "Sync"):
            r = await client.invoke(
                addr,
                request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    {
                        "topic": topic,
                        "defaultTopic": "TBW102",
                        "readQueueNums": QUEUES,
                        "writeQueueNums": QUEUES,
                        "perm": 6,
                        "topicFilterType": "SINGLE_TAG",
                        "topicSysFlag": 0,
                        "order": False,
                    },
                ),
            )
            assert r.code == 0, r.remark
        nursery.cancel_scope.cancel()


def check_cost_us(rounds: int = 20_000) -> dict[str, float]:
    """In-process µs per request of a signed SEND_MESSAGE_V2 of 1 KiB, by signature scheme.

    For each scheme: `sign` (the client's cost: Credentials.sign_request) and `check`
    (AccessControl.check, the broker's: the signature and, for the bound scheme, its window and
    nonce cache). Every bound request is signed before the clock starts, each with its own nonce,
    so the check never sees a replay.
    """
    from es_broker.acl.access import AccessControl, AclSources
    from es_broker.acl.rules import BROKER_RULES
    from es_broker.acl.signing import SCHEME_ES, SCHEME_ROCKETMQ

    with tempfile.TemporaryDirectory() as d:
        acl_file = Path(d) / "plain_acl.yml"
        acl_file.write_text(BENCH_ACL)
        control = AccessControl(
            AclSources(acl_file), BROKER_RULES, name="bench", nonces_max=4 * rounds
        )
    fields = {
        "a": "BENCH",
        "b": "Sync",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "0",
        "h": "0",
        "i": encode_properties({"TAGS": "A"}).decode(),
    }
    code = RequestCode.SEND_MESSAGE_V2

    class Peer:
        remote = ("127.0.0.1", 1)
        attributes: dict = {}

    peer = Peer()
    out: dict[str, float] = {}
    for scheme in (SCHEME_ROCKETMQ, SCHEME_ES):
        creds = Credentials("BenchClient", "BenchClientSecret", scheme=scheme)
        start = time.perf_counter()
        signed = [creds.sign_request(code, fields, BODY) for _ in range(rounds)]
        out[f"{scheme} sign"] = (time.perf_counter() - start) / rounds * 1e6
        reqs = [request(code, f, BODY) for f in signed]
        start = time.perf_counter()
        for req in reqs:
            refusal = control.check(peer, req)
        out[f"{scheme} check"] = (time.perf_counter() - start) / rounds * 1e6
        assert refusal is None, refusal
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Scraper:
    """--metrics: a thread that GETs /metrics once a second, as a Prometheus would."""

    def __init__(self, url: str) -> None:
        import threading

        self.url = url
        self.scrapes = 0
        self.failed = 0
        self.took: list[float] = []  # seconds per scrape, as the scraper sees it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        took = sorted(self.took) or [0.0]
        print(
            f"metrics: {self.scrapes} scrapes, {self.failed} failed, "
            f"median {took[len(took) // 2] * 1000:.1f} ms, max {took[-1] * 1000:.1f} ms per scrape",
            file=sys.stderr,
        )

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(1.0):
            try:
                started = time.perf_counter()
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    response.read()
                self.took.append(time.perf_counter() - started)
                self.scrapes += 1
            except OSError:
                self.failed += 1


def run_es_broker(
    n: int,
    batch: int,
    window: int,
    sync: int,
    *extra: str,
    tls: bool = False,
    sync_flush: bool = False,
    trace_hops: bool = False,
    metrics: bool = False,
) -> dict:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        conf = tls_conf(Path(d)) if tls else []
        scraper = None
        if metrics:  # /metrics on, scraped every second while the bench runs (B-362)
            port = _free_port()
            conf += ["metricsExporterType=PROM", f"metricsPromExporterPort={port}"]
            scraper = Scraper(f"http://127.0.0.1:{port}/metrics")
        if sync_flush:
            conf.append("flushDiskType=SYNC_FLUSH")
        if CREDENTIALS is not None:
            (Path(d) / "plain_acl.yml").write_text(BENCH_ACL)
            conf += ["aclEnable=true", f"acl_plain_file={Path(d) / 'plain_acl.yml'}"]
        hops_file = Path(d) / "hops.json"
        if trace_hops:
            os.environ["ES_BROKER_TRACE_HOPS"] = str(hops_file)  # the serve process inherits it
        try:
            with serve(Path(d) / "data", *extra, conf=conf) as broker:
                trio.run(create_topics, broker.broker)
                if "none" not in extra:
                    await_follower(Path(d) / "data")
                if scraper is not None:
                    scraper.start()
                try:
                    result = _measure(broker, n, batch, window, sync)
                finally:
                    if scraper is not None:
                        scraper.stop()
        finally:
            os.environ.pop("ES_BROKER_TRACE_HOPS", None)
        if trace_hops:  # written by the broker as it exits
            result["hops"] = json.loads(hops_file.read_text())
        return result


def await_follower(data_dir: Path, deadline: float = 60.0) -> None:
    """Wait until the read-model child has started and applied the topics' records.

    Its start (imports, migrations) is a one-off that a running broker has
    long paid; measured inside the workload it would count against the
    broker's first phase.
    """
    from es_broker.readmodel.process import read_position

    end = time.monotonic() + deadline
    while read_position(data_dir) is None:
        if time.monotonic() > end:
            raise SystemExit(f"the read-model follower reported no position in {deadline:.0f} s")
        time.sleep(0.05)


def _measure(broker, n: int, batch: int, window: int, sync: int) -> dict[str, float]:
    pid = broker.process.pid
    children = child_pids(pid)
    cpu0, child0 = cpu_seconds(pid), sum(cpu_seconds(c) for c in children)
    produce = trio.run(es_produce, broker.broker, n, batch, window)
    cpu_produced = cpu_seconds(pid)
    consume = trio.run(es_consume, broker.broker, n // batch * batch)
    cpu_consumed = cpu_seconds(pid)
    latencies = trio.run(es_sync_latency, broker.broker, sync)
    blocking = es_sync_latency_blocking(broker.broker, sync)
    floor = trio.run(es_floor_latency, broker.broker, sync)
    plain = CREDENTIALS is None and CLIENT_TLS is None  # raw frames are unsigned, over plain TCP
    raw = (
        es_raw_latency(broker.broker, sync)
        if plain
        else {"unserved": [math.nan], "send": [math.nan]}
    )
    cpu, child = cpu_seconds(pid) - cpu0, sum(cpu_seconds(c) for c in children) - child0
    echo = echo_floor_latency(sync)  # after the broker's CPU is taken: not the broker's work
    requests = n // batch + REQUESTS["pull"] + (5 if plain else 3) * sync
    return {
        "produce": produce,
        "consume": consume,
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
        "blocking p50": percentile(blocking, 0.5),
        "blocking p99": percentile(blocking, 0.99),
        "floor p50": percentile(floor, 0.5),
        "floor p99": percentile(floor, 0.99),
        "raw floor p50": percentile(raw["unserved"], 0.5),
        "echo p50": percentile(echo, 0.5),
        "raw send p50": percentile(raw["send"], 0.5),
        "raw send p99": percentile(raw["send"], 0.99),
        "cpu": cpu,
        "child_cpu": child,
        # the broker process's CPU per message of each phase (its read-model child not counted)
        "cpu_produce_us": (cpu_produced - cpu0) / n * 1e6,
        "cpu_consume_us": (cpu_consumed - cpu_produced) / (n // batch * batch) * 1e6,
        "requests": requests,
        "rss_mb": peak_rss_mb(pid),
    }


# ---------------------------------------------------------------------- Redis Streams


@contextmanager
def redis_server(fsync: str = "everysec") -> Iterator[Any]:
    """Debian's redis-server on a free loopback port, AOF with `appendfsync fsync`, and a redis-py client."""
    import redis

    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed: apt-get install -y redis-server")
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [
                server,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                d,
                "--appendonly",
                "yes",
                "--appendfsync",
                fsync,
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            r = redis.Redis(port=port)
            deadline = time.monotonic() + 10
            while True:
                try:
                    r.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)  # waiting for a separate server process to accept; not a test
            r.server_pid = proc.pid  # its CPU, read by run_redis
            yield r
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait()


def run_redis(n: int, batch: int, sync: int, fsync: str = "everysec") -> dict[str, float]:
    with redis_server(fsync) as r:
        cpu0 = cpu_seconds(r.server_pid)
        start = time.perf_counter()
        for i in range(n // batch):
            pipe = r.pipeline(transaction=False)
            for _ in range(batch):
                pipe.xadd(f"bench{i % QUEUES}", {"tags": "A", "body": BODY})
            pipe.execute()
        produce = (n // batch * batch) / (time.perf_counter() - start)
        cpu_produced = cpu_seconds(r.server_pid)
        got = 0
        for q in range(QUEUES):
            r.xgroup_create(f"bench{q}", "BENCH", id="0")
        start = time.perf_counter()
        for q in range(QUEUES):
            # XREADGROUP COUNT 32, acknowledging the previous read in the same round trip
            acked: list = []
            while True:
                pipe = r.pipeline(transaction=False)
                if acked:
                    pipe.xack(f"bench{q}", "BENCH", *acked)
                pipe.xreadgroup("BENCH", "c1", {f"bench{q}": ">"}, count=32)
                res = pipe.execute()[-1]
                if not res or not res[0][1]:
                    break
                entries = res[0][1]
                got += len(entries)
                acked = [entry[0] for entry in entries]
        consume = got / (time.perf_counter() - start)
        cpu_consumed = cpu_seconds(r.server_pid)
        latencies = []
        for i in range(sync):
            t = time.perf_counter()
            r.xadd(f"sync{i % QUEUES}", {"tags": "A", "body": BODY})
            latencies.append(time.perf_counter() - t)
        raw = redis_raw_latency(r.connection_pool.connection_kwargs["port"], sync)
    return {
        "produce": produce,
        "consume": consume,
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
        "raw p50": percentile(raw, 0.5),
        "raw p99": percentile(raw, 0.99),
        # redis-server's CPU per message of each phase (XADD pipelines; XREADGROUP + XACK)
        "cpu_produce_us": (cpu_produced - cpu0) / (n // batch * batch) * 1e6,
        "cpu_consume_us": (cpu_consumed - cpu_produced) / max(got, 1) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--sync", type=int, default=2000)
    parser.add_argument("--no-redis", action="store_true", help="es-broker only")
    parser.add_argument("--readmodel-url", help="passed to es-broker serve ('none': no read model)")
    parser.add_argument(
        "--acl",
        action="store_true",
        help="broker with aclEnable and a generated plain_acl.yml; "
        "every request signed (RemotingClient credentials)",
    )
    parser.add_argument(
        "--acl-scheme",
        choices=("es-v1", "rocketmq"),
        default="es-v1",
        help="with --acl, how the clients sign: es-broker's bound signature (default) or "
        "RocketMQ's (admin requests are always bound)",
    )
    parser.add_argument(
        "--tls", action="store_true", help="broker in tls.server.mode=enforcing, clients over TLS"
    )
    parser.add_argument(
        "--sync-flush",
        action="store_true",
        help="broker in flushDiskType=SYNC_FLUSH, "
        "Redis with appendfsync always: every answer after the data is on disk",
    )
    parser.add_argument(
        "--trace-hops",
        action="store_true",
        help="print where a synchronous send spends "
        "its time inside the broker (ES_BROKER_TRACE_HOPS)",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="broker with metricsExporterType=PROM, /metrics scraped every second meanwhile",
    )
    args = parser.parse_args()
    global CREDENTIALS
    if args.acl:
        CREDENTIALS = Credentials("BenchClient", "BenchClientSecret", scheme=args.acl_scheme)
    extra = ("--readmodel-url", args.readmodel_url) if args.readmodel_url else ()
    es = run_es_broker(
        args.messages,
        args.batch,
        args.window,
        args.sync,
        *extra,
        tls=args.tls,
        sync_flush=args.sync_flush,
        trace_hops=args.trace_hops,
        metrics=args.metrics,
    )
    flush = (
        "SYNC_FLUSH vs appendfsync always"
        if args.sync_flush
        else "ASYNC_FLUSH vs appendfsync everysec"
    )
    print(
        f"{args.messages} messages of 1 KiB, batches of {args.batch}, {os.cpu_count()} cores, "
        f"ACL {f'on (requests signed, {args.acl_scheme})' if args.acl else 'off'}{', TLS (enforcing)' if args.tls else ''}, "
        f"{flush}"
    )
    if args.trace_hops:
        sends = es["hops"].get(str(int(RequestCode.SEND_MESSAGE_V2)))
        if sends:
            print(f"inside the broker, {sends['count']} synchronous sends (SEND_MESSAGE_V2):")
            print(format_table(sends["hops"]))
    print(
        f"round trip of an unserved request code (the floor): p50 {es['floor p50'] * 1000:.3f} ms, "
        f"p99 {es['floor p99'] * 1000:.3f} ms through RemotingClient, "
        f"p50 {es['raw floor p50'] * 1000:.3f} ms as raw frames; a do-nothing echo server of the same "
        f"frames (this machine's floor): p50 {es['echo p50'] * 1000:.3f} ms"
    )
    print(
        f"es-broker CPU over the workload: broker process {es['cpu']:.2f} s, "
        f"its child processes {es['child_cpu']:.2f} s, {es['requests']:,.0f} requests, "
        f"{es['cpu'] / es['requests'] * 1e6:.1f} µs of broker CPU per request, "
        f"peak RSS {es['rss_mb']:.0f} MiB"
    )
    if args.acl:
        cost = check_cost_us()
        es_total = cost["es-v1 sign"] + cost["es-v1 check"]
        rmq_total = cost["rocketmq sign"] + cost["rocketmq check"]
        print(
            "per signed SEND_MESSAGE_V2 of 1 KiB, in process: "
            f"RocketMQ's HmacSHA1 sign {cost['rocketmq sign']:.1f} µs + check "
            f"{cost['rocketmq check']:.1f} µs; es-broker's bound HMAC-SHA256 (window, nonce) sign "
            f"{cost['es-v1 sign']:.1f} µs + check {cost['es-v1 check']:.1f} µs; "
            f"the bound scheme's overhead {es_total - rmq_total:+.1f} µs per request"
        )
    if args.no_redis:
        print(f"{'produce (msg/s)':28s}{es['produce']:14,.0f}")
        print(f"{'consume, reads of 32 (msg/s)':28s}{es['consume']:14,.0f}")
        for p in ("p50", "p99"):
            print(f"{'sync send ' + p + ' (ms)':28s}{es[p] * 1000:14.3f}")
        for p in ("p50", "p99"):
            print(f"{'sync ' + p + ', blocking (ms)':28s}{es['blocking ' + p] * 1000:14.3f}")
        for p in ("p50", "p99"):
            print(f"{'sync ' + p + ', raw frames (ms)':28s}{es['raw send ' + p] * 1000:14.3f}")
        return
    rd = run_redis(
        args.messages, args.batch, args.sync, "always" if args.sync_flush else "everysec"
    )
    print(f"{'':28s}{'es-broker':>14s}{'Redis Streams':>16s}{'ratio':>8s}")
    print(
        f"{'produce (msg/s)':28s}{es['produce']:14,.0f}{rd['produce']:16,.0f}{es['produce'] / rd['produce']:8.2f}"
    )
    print(
        f"{'consume, reads of 32 (msg/s)':28s}{es['consume']:14,.0f}{rd['consume']:16,.0f}"
        f"{es['consume'] / rd['consume']:8.2f}"
    )
    for p in ("p50", "p99"):
        print(
            f"{'sync send ' + p + ' (ms)':28s}{es[p] * 1000:14.3f}{rd[p] * 1000:16.3f}{es[p] / rd[p]:8.2f}"
        )
    # like for like: a blocking socket on both sides (redis-py is one)
    for p in ("p50", "p99"):
        b = es["blocking " + p]
        print(
            f"{'sync ' + p + ', blocking (ms)':28s}{b * 1000:14.3f}{rd[p] * 1000:16.3f}{b / rd[p]:8.2f}"
        )
    # the servers alone: requests encoded before the clock, on plain sockets, no client library
    for p in ("p50", "p99"):
        b, r = es["raw send " + p], rd["raw " + p]
        print(
            f"{'sync ' + p + ', raw frames (ms)':28s}{b * 1000:14.3f}{r * 1000:16.3f}{b / r:8.2f}"
        )


if __name__ == "__main__":
    main()
