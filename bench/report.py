"""One bench that says it all: every figure of the performance goals, compiled and pure Python.

Run: python bench/report.py [--messages 100000] [--start-messages 1000000]
                            [--key-messages 1000000] [--disk-messages 200000]
                            [--modes compiled,pure] [--phases client,wire,disk,...]

For each mode (the compiled hot path, then ES_BROKER_PURE_PYTHON=1), in
processes of their own so the mode holds everywhere, broker and bench alike:
- client: what a user sees, through the public Python client (Producer.send_batch,
  a PushConsumer, Producer.send one at a time) against redis-py (bench/client_bench.py);
- wire: produce (batches of 32, 16 in flight), consume with commits (reads
  of 32), sync send p50/p99 (async client, and a blocking socket as redis-py
  uses; and as raw frames on both sides, the servers without a client
  library) against Redis Streams with AOF everysec, and the
  broker's CPU per request and peak RSS; the server CPU per message of
  produce and of consume + commit, es-broker's process beside redis-server's
  (bench/wire_bench.py);
- disk: bytes per message in LMDB for 256 B bodies with 2 keys read by 2
  groups, beside RocketMQ 4.9.8's for the same messages (bench/disk_bench.py);
- SYNC_FLUSH produce and sync p50 against Redis with appendfsync always;
- core: puts through the broker core against raw LMDB appends (bench/core_bench.py);
- start: `es-broker serve` to ready and to a first answer with N stored (bench/start_bench.py);
- keys: a lookup by key among N stored messages (bench/key_lookup_bench.py).
Each figure is printed with its ratio and the goal next to it. The data of
start and keys is built once under --dir and reused by later runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))


def phase_wire(args) -> dict:
    import wire_bench

    es = wire_bench.run_es_broker(args.messages, 32, 16, args.sync)
    rd = wire_bench.run_redis(args.messages, 32, args.sync)
    es_sync = wire_bench.run_es_broker(
        args.sync_flush_messages, 32, 16, args.sync // 4, sync_flush=True
    )
    rd_sync = wire_bench.run_redis(args.sync_flush_messages, 32, args.sync // 4, fsync="always")
    return {"es": es, "redis": rd, "es_sync_flush": es_sync, "redis_always": rd_sync}


def phase_client(args) -> dict:
    import client_bench

    es = client_bench.run_es_broker(args.messages, args.sync, {"produce", "consume", "sync"})
    return {"es": es, "redis": client_bench.run_redis(args.messages, args.sync)}


def phase_disk(args) -> dict:
    import disk_bench

    out = disk_bench.run(args.disk_messages, 256, readmodel=False)
    n = args.disk_messages
    return {
        "lmdb": out["lmdb_total_bytes"] / n,
        "databases": {r["database"]: r["bytes"] / n for r in out["databases"] if r["bytes"]},
        "rocketmq": out["rocketmq_4_9_8_measured"]["total"],
    }


def phase_core(args) -> dict:
    import core_bench

    from es_broker.config import ASYNC_FLUSH, SYNC_FLUSH

    n = args.messages
    raw_async = core_bench.raw_append_rate(n, 1000, sync=False)
    raw_sync = core_bench.raw_append_rate(min(n, 20_000), 100, sync=True)
    put_async, _, _ = trio.run(core_bench.put_rate, n, ASYNC_FLUSH, 64)
    put_batch, _, _ = trio.run(core_bench.put_rate, n, ASYNC_FLUSH, 8, 32)
    put_sync, _, _ = trio.run(core_bench.put_rate, min(n, 20_000), SYNC_FLUSH, 64)
    return {
        "raw_async": raw_async,
        "raw_sync": raw_sync,
        "put_async": put_async,
        "put_batch32": put_batch,
        "put_sync": put_sync,
    }


def phase_start(args) -> dict:
    import start_bench

    root = Path(args.dir) / "start"
    out = {}
    for n in (0, args.start_messages):
        data_dir = start_bench.data_dir_for(root, n)
        runs = [start_bench.one_start(data_dir, n, ["--readmodel-url", "none"]) for _ in range(3)]
        out[str(n)] = {
            "ready": statistics.median(r[0] for r in runs),
            "answered": statistics.median(r[1] for r in runs),
        }
    return out


def phase_keys(args) -> dict:
    import key_lookup_bench

    data_dir = Path(args.dir) / f"keys-{args.key_messages}"
    if not (data_dir / "complete").exists():
        trio.run(key_lookup_bench.fill, str(data_dir), args.key_messages)
        (data_dir / "complete").write_text("")
    # ms each
    by_keys, by_uniq = key_lookup_bench.time_lookups(str(data_dir), args.key_messages, 400)
    lookups = by_keys + by_uniq
    return {
        "p50_ms": key_lookup_bench.percentile(lookups, 0.5),
        "p99_ms": key_lookup_bench.percentile(lookups, 0.99),
    }


PHASES = {
    "client": phase_client,
    "wire": phase_wire,
    "disk": phase_disk,
    "core": phase_core,
    "start": phase_start,
    "keys": phase_keys,
}


def run_phase(name: str, mode: str, args) -> dict:
    env = dict(os.environ, ES_BROKER_PURE_PYTHON="1" if mode == "pure" else "0")
    argv = [
        sys.executable,
        __file__,
        "--phase",
        name,
        "--messages",
        str(args.messages),
        "--sync",
        str(args.sync),
        "--sync-flush-messages",
        str(args.sync_flush_messages),
        "--start-messages",
        str(args.start_messages),
        "--key-messages",
        str(args.key_messages),
        "--disk-messages",
        str(args.disk_messages),
        "--dir",
        args.dir,
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(name: str, value: str, ratio: str = "", goal: str = "") -> None:
    print(f"  {name:44s}{value:>16s}{ratio:>10s}  {goal}")


def report(mode: str, results: dict) -> None:
    print(f"\n== {mode}")
    client = results.get("client", {})
    if "es" in client:  # what a user sees: the public client against redis-py
        es, rd = client["es"], client["redis"]
        row(
            "produce, Producer.send_batch (msg/s)",
            f"{es['produce']:,.0f}",
            f"{es['produce'] / rd['produce']:.2f}x",
            f"Redis pipelines of 32 XADD ({rd['produce']:,.0f})",
        )
        row(
            "consume, PushConsumer (msg/s)",
            f"{es['consume']:,.0f}",
            f"{es['consume'] / rd['consume']:.2f}x",
            f"XREADGROUP + XACK ({rd['consume']:,.0f})",
        )
        row(
            "Producer.send p50 / p99 (ms)",
            f"{es['p50'] * 1000:.3f} / {es['p99'] * 1000:.3f}",
            f"{es['p50'] / rd['p50']:.2f}x",
            f"<= 2x Redis XADD ({rd['p50'] * 1000:.3f} / {rd['p99'] * 1000:.3f})",
        )
    elif client:
        row("client", "failed", "", str(client.get("error")))
    wire = results.get("wire", {})
    if "es" in wire:
        es, rd = wire["es"], wire["redis"]
        row(
            "produce, batches of 32 (msg/s)",
            f"{es['produce']:,.0f}",
            f"{es['produce'] / rd['produce']:.2f}x",
            f">= 1.5x Redis ({rd['produce']:,.0f})",
        )
        row(
            "consume + commit, reads of 32 (msg/s)",
            f"{es['consume']:,.0f}",
            f"{es['consume'] / rd['consume']:.2f}x",
            f">= 1.5x Redis ({rd['consume']:,.0f})",
        )
        row(
            "sync send p50 (ms)",
            f"{es['p50'] * 1000:.3f}",
            f"{es['p50'] / rd['p50']:.2f}x",
            f"<= 0.8x Redis ({rd['p50'] * 1000:.3f})",
        )
        row(
            "sync send p99 (ms)",
            f"{es['p99'] * 1000:.3f}",
            f"{es['p99'] / rd['p99']:.2f}x",
            f"<= 1.0x Redis ({rd['p99'] * 1000:.3f})",
        )
        # like for like with redis-py: the same sends from a blocking socket (what SyncProducer uses)
        row(
            "sync send p50, blocking socket (ms)",
            f"{es['blocking p50'] * 1000:.3f}",
            f"{es['blocking p50'] / rd['p50']:.2f}x",
            f"<= 0.8x Redis ({rd['p50'] * 1000:.3f})",
        )
        row(
            "sync send p99, blocking socket (ms)",
            f"{es['blocking p99'] * 1000:.3f}",
            f"{es['blocking p99'] / rd['p99']:.2f}x",
            f"<= 1.0x Redis ({rd['p99'] * 1000:.3f})",
        )
        # the servers alone: requests encoded before the clock, on plain sockets, no client library
        row(
            "sync send p50, raw frames (ms)",
            f"{es['raw send p50'] * 1000:.3f}",
            f"{es['raw send p50'] / rd['raw p50']:.2f}x",
            f"Redis ({rd['raw p50'] * 1000:.3f}), no client library",
        )
        row(
            "sync send p99, raw frames (ms)",
            f"{es['raw send p99'] * 1000:.3f}",
            f"{es['raw send p99'] / rd['raw p99']:.2f}x",
            f"Redis ({rd['raw p99'] * 1000:.3f}), no client library",
        )
        row(
            "unserved request round trip p50 (ms)",
            f"{es['floor p50'] * 1000:.3f}",
            "",
            "the floor of a send, RemotingClient",
        )
        row(
            "unserved request round trip p50, raw (ms)",
            f"{es['raw floor p50'] * 1000:.3f}",
            "",
            "the listener's floor, raw frames",
        )
        row(
            "echo server round trip p50 (ms)",
            f"{es['echo p50'] * 1000:.3f}",
            "",
            "this machine's floor, any server",
        )
        row(
            "server CPU per message, produce (µs)",
            f"{es['cpu_produce_us']:.1f}",
            f"{es['cpu_produce_us'] / rd['cpu_produce_us']:.2f}x",
            f"<= 1.5x redis-server ({rd['cpu_produce_us']:.1f})",
        )
        row(
            "server CPU per message, consume + commit (µs)",
            f"{es['cpu_consume_us']:.1f}",
            f"{es['cpu_consume_us'] / rd['cpu_consume_us']:.2f}x",
            f"<= 1.5x redis-server ({rd['cpu_consume_us']:.1f})",
        )
        row("broker CPU per request (µs)", f"{es['cpu'] / es['requests'] * 1e6:.0f}")
        row("broker peak RSS (MiB)", f"{es['rss_mb']:.0f}")
        es_s, rd_s = wire["es_sync_flush"], wire["redis_always"]
        row(
            "SYNC_FLUSH produce (msg/s)",
            f"{es_s['produce']:,.0f}",
            f"{es_s['produce'] / rd_s['produce']:.2f}x",
            f"vs appendfsync always ({rd_s['produce']:,.0f})",
        )
        row(
            "SYNC_FLUSH sync send p50 (ms)",
            f"{es_s['p50'] * 1000:.3f}",
            f"{es_s['p50'] / rd_s['p50']:.2f}x",
            f"vs appendfsync always ({rd_s['p50'] * 1000:.3f})",
        )
    elif wire:
        row("wire", "failed", "", str(wire.get("error")))
    disk = results.get("disk", {})
    if "lmdb" in disk:
        row(
            "disk per message, 256 B + 2 keys, 2 groups (B)",
            f"{disk['lmdb']:,.0f}",
            f"{disk['lmdb'] / disk['rocketmq']:.2f}x",
            f"<= RocketMQ 4.9.8 ({disk['rocketmq']:,.0f})",
        )
        biggest = sorted(disk["databases"].items(), key=lambda kv: -kv[1])[:5]
        row("  of which", ", ".join(f"{k} {v:.0f}" for k, v in biggest))
    elif disk:
        row("disk", "failed", "", str(disk.get("error")))
    core = results.get("core", {})
    if "raw_async" in core:
        row(
            "core put ASYNC, 64 senders (msg/s)",
            f"{core['put_async']:,.0f}",
            f"{core['put_async'] / core['raw_async']:.2f}x",
            f">= 0.3x raw LMDB ({core['raw_async']:,.0f})",
        )
        row(
            "core put ASYNC, batches of 32 (msg/s)",
            f"{core['put_batch32']:,.0f}",
            f"{core['put_batch32'] / core['raw_async']:.2f}x",
            "",
        )
        row(
            "core put SYNC, 64 senders (msg/s)",
            f"{core['put_sync']:,.0f}",
            f"{core['put_sync'] / core['raw_sync']:.2f}x",
            f">= 0.3x raw LMDB sync ({core['raw_sync']:,.0f})",
        )
    start = results.get("start", {})
    for n, figures in start.items():
        if isinstance(figures, dict):
            row(
                f"serve to ready / answered, {int(n):,} stored (s)",
                f"{figures['ready']:.2f} / {figures['answered']:.2f}",
                "",
                "flat in the amount stored",
            )
    keys = results.get("keys", {})
    if "p50_ms" in keys:
        row(
            "lookup by KEYS or UNIQ_KEY p50 / p99 (ms)",
            f"{keys['p50_ms']:.3f} / {keys['p99_ms']:.3f}",
            "",
            "milliseconds",
        )
    elif keys:
        row("lookup by key", "failed", "", str(keys.get("error")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sync", type=int, default=2000)
    parser.add_argument("--sync-flush-messages", type=int, default=20_000)
    parser.add_argument("--start-messages", type=int, default=1_000_000)
    parser.add_argument("--key-messages", type=int, default=1_000_000)
    parser.add_argument("--disk-messages", type=int, default=200_000)
    parser.add_argument("--modes", default="compiled,pure")
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument(
        "--dir",
        default=os.environ.get("BENCH_DIR")
        or str(Path(tempfile.gettempdir()) / "es-broker-report"),
    )
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(PHASES[args.phase](args)))
        return
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    print(
        f"{args.messages:,} messages of 1 KiB, {os.cpu_count()} cores; start with {args.start_messages:,} "
        f"stored, key lookups among {args.key_messages:,}"
    )
    for mode in args.modes.split(","):
        report(mode, {name: run_phase(name, mode, args) for name in args.phases.split(",")})


if __name__ == "__main__":
    main()
