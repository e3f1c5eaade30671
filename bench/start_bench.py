"""Start benchmark: time from spawning `es-broker serve` to serving, by the amount stored.

Run: python bench/start_bench.py [--sizes 0,100000,1000000] [--runs 3] [--dir DIR]

For each size N it builds (once, kept in DIR, default $BENCH_DIR or /tmp/es-broker-start-bench)
a data directory holding N messages of 1 KiB in topic B (8 queues), written in process through
the broker core in batches of 32, with a group G that consumed and committed half of each queue.
Then it spawns `python -m es_broker.cli serve` on it as tests/process_fixtures.py does, and
measures the wall time to the broker's ready line and to the first answer to a real request
(GET_MAX_OFFSET, then a PULL_MESSAGE at the middle of queue 0), and the CPU time the broker
process used up to its ready line. Median of --runs runs.

--modules prints the heavy modules present in the broker process once it is ready, and
--importtime the import cost of the `serve` entry (`python -X importtime`), top modules.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BODY = b"x" * 1024
TOPIC = "B"
GROUP = "G"
QUEUES = 8
BATCH = 32
SENDERS = 8
READY = re.compile(r"listening on (\S+), data in")
HEAVY = (
    "sqlalchemy",
    "alembic",
    "pyarrow",
    "yaml",
    "cryptography",
    "pandas",
    "numpy",
    "pyspark",
    "es_broker.readmodel.follower",
    "es_broker.readmodel.models",
    "es_broker.readmodel.export",
)
# `es-broker serve` with a hook: SIGUSR1 prints the modules loaded so far (bench only)
SERVE_WITH_MODULE_LIST = """
import signal, sys
def _modules(signum, frame):
    print("MODULES " + " ".join(sorted(sys.modules)), flush=True)
signal.signal(signal.SIGUSR1, _modules)
from es_broker.cli import main
sys.exit(main(sys.argv[1:]))
"""


def env() -> dict[str, str]:
    """The broker's environment: with bytecode caching on, as an installed broker runs (some shells
    here set PYTHONDONTWRITEBYTECODE, and compiling every module is then most of the start)."""
    child = dict(os.environ, PYTHONPATH=str(ROOT))
    child.pop("PYTHONDONTWRITEBYTECODE", None)
    return child


# -- building the data directories ---------------------------------------------------------------


def build(data_dir: Path, n: int) -> None:
    """N messages through Broker.put_messages (batches of 32), then half of each queue consumed."""
    import trio

    from es_broker.commands.placement import MessageIn
    from es_broker.config import ASYNC_FLUSH, BrokerConfig
    from es_broker.core.broker import Broker

    async def fill() -> None:
        config = BrokerConfig(storePathRootDir=str(data_dir), flushDiskType=ASYNC_FLUSH)
        broker = Broker.open(data_dir, config)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(broker.run)
                await broker.update_topic(
                    {"topicName": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES}
                )
                batch = [MessageIn(BODY, {"TAGS": "A"}) for _ in range(BATCH)]
                per_sender = n // BATCH // SENDERS

                async def send(i: int) -> None:
                    for _ in range(per_sender):
                        await broker.put_messages(TOPIC, i % QUEUES, batch)

                async with trio.open_nursery() as senders:
                    for i in range(SENDERS):
                        senders.start_soon(send, i)
                for q in range(QUEUES):  # a consumer that got half way, pulling as clients do
                    half = broker.max_offset(TOPIC, q) // 2
                    offset = 0
                    while offset < half:
                        offset = (
                            await broker.pull(
                                GROUP, TOPIC, q, offset, BATCH, client="bench", commit_offset=offset
                            )
                        ).next_begin_offset
                    await broker.commit_offset(GROUP, TOPIC, q, offset)
                nursery.cancel_scope.cancel()
        finally:
            broker.close()

    trio.run(fill)


def data_dir_for(root: Path, n: int) -> Path:
    data_dir = root / f"n{n}"
    done = data_dir / "BUILT"
    if not done.exists():
        if data_dir.exists():
            subprocess.run(["rm", "-rf", str(data_dir)], check=True)
        data_dir.mkdir(parents=True)
        began = time.perf_counter()
        print(f"building {n:,} messages in {data_dir} ...", flush=True)
        build(data_dir, n)
        done.write_text(str(n))
        print(f"  built in {time.perf_counter() - began:.0f} s", flush=True)
    return data_dir


# -- one start ---------------------------------------------------------------------------------


def serve_args(data_dir: Path, *extra: str) -> list[str]:
    return [
        "serve",
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--namesrv-listen",
        "127.0.0.1:0",
        *extra,
    ]


def wait_ready(process: subprocess.Popen) -> str:
    for line in process.stdout:
        if m := READY.search(line):
            return m.group(1)
    raise RuntimeError(f"es-broker serve did not start (exit {process.wait()})")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def first_answers(addr: str, n: int) -> None:
    """GET_MAX_OFFSET on queue 0, then a PULL_MESSAGE at its middle; both must succeed."""
    import trio

    from es_broker.net.remoting_client import RemotingClient
    from es_broker.remoting.codes import RequestCode
    from es_broker.remoting.command import request

    async def ask() -> None:
        async with trio.open_nursery() as nursery:
            client = RemotingClient(nursery)
            r = await client.invoke(
                addr, request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0})
            )
            assert r.code == 0, r.remark
            top = int(r.ext_fields["offset"])
            if n:
                r = await client.invoke(
                    addr,
                    request(
                        RequestCode.PULL_MESSAGE,
                        {
                            "consumerGroup": "start-bench",
                            "topic": TOPIC,
                            "queueId": 0,
                            "queueOffset": top // 2,
                            "maxMsgNums": BATCH,
                            "sysFlag": 0x4,
                            "commitOffset": 0,
                            "suspendTimeoutMillis": 0,
                            "subscription": "*",
                            "subVersion": 0,
                            "expressionType": "TAG",
                        },
                    ),
                )
                assert r.code == 0, r.remark
            nursery.cancel_scope.cancel()

    trio.run(ask)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), steadier than wall time on a busy host."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_start(data_dir: Path, n: int, extra: list[str]) -> tuple[float, float, float]:
    """Seconds from spawn to the ready line and to the first answers; CPU seconds up to ready."""
    began = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "es_broker.cli", *serve_args(data_dir, *extra)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env(),
    )
    try:
        addr = wait_ready(process)
        ready = time.perf_counter() - began
        cpu = cpu_seconds(process.pid)
        first_answers(addr, n)
        answered = time.perf_counter() - began
    finally:
        stop(process)
    return ready, answered, cpu


def modules_when_ready(data_dir: Path, extra: list[str]) -> list[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE_WITH_MODULE_LIST, *serve_args(data_dir, *extra)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env(),
    )
    try:
        wait_ready(process)
        process.send_signal(signal.SIGUSR1)
        for line in process.stdout:
            if line.startswith("MODULES "):
                return line.split()[1:]
        raise RuntimeError("no module list")
    finally:
        stop(process)


def import_times(data_dir: Path, extra: list[str], top: int) -> list[tuple[int, str]]:
    """Cumulative import time (us) of the top-level imports of a `serve` run, largest first."""
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "es_broker.cli", *serve_args(data_dir, *extra)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        wait_ready(process)
    finally:
        stop(process)
    rows = []
    for line in process.stderr.read().splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()[1:]  # one space after the bar, then two per nesting level
            depth = (len(name) - len(name.lstrip())) // 2
            rows.append((int(parts[1]), name.strip(), depth))
    total = sum(us for us, _, depth in rows if depth == 0)
    inner = sorted(((us, name) for us, name, depth in rows if depth <= 1), reverse=True)
    return [(total, "(all imports)"), *inner[:top]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="0,100000,1000000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--dir",
        default=os.environ.get("BENCH_DIR")
        or str(Path(tempfile.gettempdir()) / "es-broker-start-bench"),
    )
    parser.add_argument(
        "--readmodel",
        action="store_true",
        help="start the read-model follower as `serve` does by default (else "
        "--readmodel-url none: its child catching up competes for the CPU)",
    )
    parser.add_argument(
        "--modules", action="store_true", help="heavy modules in the broker process"
    )
    parser.add_argument(
        "--importtime",
        type=int,
        default=0,
        metavar="TOP",
        help="the TOP largest imports of the serve entry",
    )
    args = parser.parse_args()
    root = Path(args.dir)
    import es_broker.net.remoting_client  # noqa: F401 (loaded before the clock runs: the bench's cost)

    extra = [] if args.readmodel else ["--readmodel-url", "none"]
    sizes = [int(s) for s in args.sizes.split(",")]
    dirs = {n: data_dir_for(root, n) for n in sizes}

    print(
        f"1 KiB messages, {os.cpu_count()} cores, median of {args.runs} runs, serve {' '.join(extra)}"
    )
    print(
        f"{'stored':>10s} {'ready (s)':>10s} {'answered (s)':>13s} {'cpu to ready (s)':>17s}   "
        "runs (ready/answered)"
    )
    for n in sizes:
        runs = [one_start(dirs[n], n, extra) for _ in range(args.runs)]
        ready, answered, cpu = (statistics.median(run[i] for run in runs) for i in range(3))
        detail = " ".join(f"{r:.2f}/{a:.2f}" for r, a, _ in runs)
        print(f"{n:>10,d} {ready:>10.2f} {answered:>13.2f} {cpu:>17.2f}   {detail}", flush=True)

    if args.modules:
        present = modules_when_ready(dirs[sizes[-1]], extra)
        heavy = sorted({m for m in present for h in HEAVY if m == h or m.startswith(h + ".")})
        shown = sorted({m if m.startswith("es_broker.") else m.split(".")[0] for m in heavy})
        print(f"modules in the broker process when ready: {len(present)}; heavy: {shown or 'none'}")
    if args.importtime:
        print("import time of `serve` (cumulative, us):")
        for us, name in import_times(dirs[sizes[0]], extra, args.importtime):
            print(f"  {us:>9,d}  {name}")


if __name__ == "__main__":
    main()
