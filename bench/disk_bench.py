"""Disk bench: bytes per message in each LMDB database, against RocketMQ 4.9.8's store.

Run: python bench/disk_bench.py [--messages 200000] [--body 256] [--no-readmodel] [--json]

The workload goes through the broker's public path: an `es-broker serve`
process (tests/process_fixtures.py), `Producer.send_batch` (batches of 32, 16
in flight) of N messages with a BODY-byte body and two keys each, then two
`PushConsumer` groups (CONSUME_FROM_FIRST_OFFSET) that consume everything
and commit their offsets. The broker is stopped (SIGTERM), the read model
brought up to date (`es-broker readmodel sync`), and each LMDB database's
stat() gives its pages: (branch_pages + leaf_pages + overflow_pages) * psize.

RocketMQ's commit-log figure is CommitLog#calMsgLength (4.9.8) of the same
message: 4 TOTALSIZE + 4 MAGICCODE + 4 BODYCRC + 4 QUEUEID + 4 FLAG + 8
QUEUEOFFSET + 8 PHYSICALOFFSET + 4 SYSFLAG + 8 BORNTIMESTAMP + 8 BORNHOST (IPv4)
+ 8 STORETIMESTAMP + 8 STOREHOSTADDRESS (IPv4) + 4 RECONSUMETIMES + 8 Prepared
Transaction Offset + 4 + body + 1 + topic + 2 + properties = 99 + body + topic
+ properties. es-broker stores exactly that layout, so the bench reads the
topic and properties lengths of the stored messages (and checks TOTALSIZE).
Its consume queue is 20 bytes a unit; its index file (IndexService) 20 bytes
a key (hash slots are 4 bytes per slot, 5,000,000 slots per 20,000,000
entries: 1 byte an entry), UNIQ_KEY and each KEYS token.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import lmdb
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_broker.client import (  # noqa: E402
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
)
from es_broker.log import chunks  # noqa: E402
from es_broker.remoting import message as wire  # noqa: E402
from tests.process_fixtures import serve  # noqa: E402

TOPIC = "DiskBench"
QUEUES = 8
BATCH = 32
WINDOW = 16
GROUPS = 2
CQ_UNIT = 20  # ConsumeQueue.CQ_STORE_UNIT_SIZE
INDEX_ENTRY = 20  # IndexFile: hash 4, phy offset 8, time diff 4, next index 4
INDEX_SLOT_PER_ENTRY = 4 * 5_000_000 / 20_000_000  # maxHashSlotNum * 4 / maxIndexNum
LMDB_DIR = "lmdb"


def cal_msg_length(body: int, topic: int, properties: int, sys_flag: int = 0) -> int:
    """CommitLog#calMsgLength of RocketMQ 4.9.8."""
    bornhost = 8 if sys_flag & wire.FLAG_BORNHOST_V6 == 0 else 20
    storehost = 8 if sys_flag & wire.FLAG_STOREHOST_V6 == 0 else 20
    return (
        4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + bornhost + 8 + storehost + 4 + 8
        + 4 + max(body, 0)
        + 1 + topic
        + 2 + max(properties, 0)
    )  # fmt: skip


# ---------------------------------------------------------------------- the workload


async def produce(namesrv: str, n: int, body: bytes) -> None:
    async with Producer(namesrv, "DiskBenchProducer", client_ip="127.0.0.1") as producer:
        window = trio.Semaphore(WINDOW)
        counter = 0

        async def one(batch: list[Message]) -> None:
            try:
                await producer.send_batch(TOPIC, batch)
            finally:
                window.release()

        async with trio.open_nursery() as nursery:
            while counter < n:
                size = min(BATCH, n - counter)
                batch = [
                    Message(body, keys=[f"order-{counter + i}", f"user-{(counter + i) % 9973}"])
                    for i in range(size)
                ]
                counter += size
                await window.acquire()
                nursery.start_soon(one, batch)


async def consume(namesrv: str, group: str, n: int) -> None:
    """A group from the first offset until it saw n messages and committed offsets cover them."""
    seen = 0
    done = trio.Event()

    async def handle(msgs) -> ConsumeResult:
        nonlocal seen
        seen += len(msgs)
        if seen >= n:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        namesrv,
        group,
        handle,
        subscriptions={TOPIC: "*"},
        client_ip="127.0.0.1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    async with trio.open_nursery() as nursery:
        await consumer.start(nursery)
        await done.wait()
        while sum(o for mq, o in consumer.offset_store.offsets().items() if mq.topic == TOPIC) < n:
            await trio.sleep(0.01)
        await consumer.shutdown()  # persists the offsets to the broker


async def consume_all(namesrv: str, n: int) -> None:
    tag = uuid.uuid4().hex[:6]
    async with trio.open_nursery() as nursery:
        for g in range(GROUPS):
            nursery.start_soon(consume, namesrv, f"DiskBenchGroup{g}_{tag}", n)


# ---------------------------------------------------------------------- measuring


def lmdb_stats(path: Path) -> tuple[list[dict], dict]:
    """Per named database: entries and bytes of pages in use; the sample message's lengths."""
    env = lmdb.open(str(path), readonly=True, max_dbs=128, lock=False)
    rows = []
    sample: dict = {}
    try:
        with env.begin() as txn:
            names = [bytes(k) for k, _ in txn.cursor()]
        for name in names:
            db = env.open_db(name, create=False)
            with env.begin() as txn:
                st = txn.stat(db)
                if name == chunks.DATABASE.encode():
                    count = total = props = topic = 0
                    for _, raw in chunks.messages(txn, db):
                        sys_flag, topic_at, start, end = wire.property_span(raw)
                        body = int.from_bytes(raw[wire.BODY_LENGTH_AT : wire.BODY_LENGTH_AT + 4])
                        stored_total = int.from_bytes(raw[:4])
                        calc = cal_msg_length(body, start - 2 - topic_at, end - start, sys_flag)
                        assert calc == stored_total == len(raw), (calc, stored_total, len(raw))
                        count += 1
                        total += calc
                        props += end - start
                        topic = start - 2 - topic_at
                    if count:
                        sample = {
                            "cal_msg_length": total / count,
                            "properties": props / count,
                            "topic": topic,
                        }
            pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            rows.append(
                {
                    "database": name.decode(),
                    "entries": st["entries"],
                    "bytes": pages * st["psize"],
                    "depth": st["depth"],
                }
            )
        info = env.info()
        env_stat = env.stat()
        used = (info["last_pgno"] + 1) * env_stat["psize"]
    finally:
        env.close()
    main = {"database": "(main: names)", "entries": len(names), "bytes": 0, "depth": 0}
    rows.append(main)
    return rows, {**sample, "env_pages_bytes": used}


def readmodel_size(data_dir: Path) -> dict | None:
    files = sorted(data_dir.glob("readmodel.sqlite*"))
    if not files:
        return None
    import sqlite3

    size = sum(f.stat().st_size for f in files)
    conn = sqlite3.connect(str(data_dir / "readmodel.sqlite"))
    try:
        page = conn.execute("pragma page_size").fetchone()[0]
        count = conn.execute("pragma page_count").fetchone()[0]
        free = conn.execute("pragma freelist_count").fetchone()[0]
    finally:
        conn.close()
    return {"files_bytes": size, "pages_in_use_bytes": (count - free) * page}


# ---------------------------------------------------------------------- the run


def run(n: int, body_size: int, readmodel: bool) -> dict:
    body = b"x" * body_size
    timings = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        data = Path(d) / "data"
        extra = () if readmodel else ("--readmodel-url", "none")
        with serve(data, *extra) as broker:
            broker.admin(
                "updateTopic", "-b", broker.broker, "-t", TOPIC, "-r", str(QUEUES),
                "-w", str(QUEUES),
            )  # fmt: skip
            t = time.perf_counter()
            trio.run(produce, broker.namesrv, n, body)
            timings["produce_s"] = time.perf_counter() - t
            t = time.perf_counter()
            trio.run(consume_all, broker.namesrv, n)
            timings["consume_s"] = time.perf_counter() - t
        if readmodel:
            t = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "es_broker.cli",
                    "readmodel",
                    "sync",
                    "--data-dir",
                    str(data),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            timings["readmodel_sync_s"] = time.perf_counter() - t
        rows, sample = lmdb_stats(data / LMDB_DIR)
        rm = readmodel_size(data) if readmodel else None
        mdb_file = (data / LMDB_DIR / "data.mdb").stat().st_size
    keys = 2
    msg = sample.get("cal_msg_length", 0.0)
    index_keys = keys + 1  # UNIQ_KEY and each KEYS token
    rocketmq = {
        "commitlog": msg,
        "consume_queue": CQ_UNIT,
        "index": index_keys * (INDEX_ENTRY + INDEX_SLOT_PER_ENTRY),
    }
    rocketmq["total"] = sum(rocketmq.values())
    # the measured figures of a RocketMQ 4.9.8 broker under the same workload
    rocketmq_measured = {"commitlog": 450, "consume_queue": 20, "index": 115, "total": 585}
    return {
        "messages": n,
        "body": body_size,
        "keys": keys,
        "groups": GROUPS,
        "databases": rows,
        "lmdb_total_bytes": sum(r["bytes"] for r in rows),
        "lmdb_env_pages_bytes": sample.get("env_pages_bytes"),
        "data_mdb_file_bytes": mdb_file,
        "readmodel": rm,
        "message": {k: v for k, v in sample.items() if k != "env_pages_bytes"},
        "rocketmq_4_9_8": rocketmq,
        "rocketmq_4_9_8_measured": rocketmq_measured,
        "timings": timings,
    }


def print_table(out: dict) -> None:
    n = out["messages"]
    print(
        f"{n:,} messages, {out['body']} B bodies, {out['keys']} keys each, "
        f"{out['groups']} consumer groups"
    )
    print()
    print(f"{'database':<22}{'entries':>11}{'bytes':>14}{'B/entry':>10}{'B/msg':>9}")
    rows = sorted(out["databases"], key=lambda r: -r["bytes"])
    for r in rows:
        if r["bytes"] == 0 and r["entries"] == 0:
            continue
        per_entry = r["bytes"] / r["entries"] if r["entries"] else 0.0
        print(
            f"{r['database']:<22}{r['entries']:>11,}{r['bytes']:>14,}"
            f"{per_entry:>10.1f}{r['bytes'] / n:>9.1f}"
        )
    total = out["lmdb_total_bytes"]
    print(f"{'LMDB total':<22}{'':>11}{total:>14,}{'':>10}{total / n:>9.1f}")
    env = out["lmdb_env_pages_bytes"]
    print(f"{'  (env pages to last)':<22}{'':>11}{env:>14,}{'':>10}{env / n:>9.1f}")
    rm = out["readmodel"]
    if rm is not None:
        used = rm["pages_in_use_bytes"]
        print(f"{'read model (SQLite)':<22}{'':>11}{used:>14,}{'':>10}{used / n:>9.1f}")
        both = total + used
        print(f"{'es-broker total':<22}{'':>11}{both:>14,}{'':>10}{both / n:>9.1f}")
    r, measured = out["rocketmq_4_9_8"], out["rocketmq_4_9_8_measured"]
    m = out["message"]
    print()
    print("RocketMQ 4.9.8, bytes per message: from its format for these messages | measured")
    print(
        f"  commit log     {r['commitlog']:7.1f} | {measured['commitlog']:>4}  calMsgLength: 99 + "
        f"body {out['body']} + topic {m.get('topic', 0)} + properties {m.get('properties', 0):.1f}"
    )
    print(f"  consume queue  {r['consume_queue']:7.1f} | {measured['consume_queue']:>4}  one unit")
    print(
        f"  index          {r['index']:7.1f} | {measured['index']:>4}  {out['keys'] + 1} keys "
        "(UNIQ_KEY + KEYS) x (20 B entry + 1 B of hash slots)"
    )
    print(f"  total          {r['total']:7.1f} | {measured['total']:>4}")
    t = out["timings"]
    print()
    print("took " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--body", type=int, default=256)
    p.add_argument("--no-readmodel", action="store_true", help="run the broker without it")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args()
    out = run(args.messages, args.body, not args.no_readmodel)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out)


if __name__ == "__main__":
    main()
