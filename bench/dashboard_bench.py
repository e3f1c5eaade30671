"""Dashboard benchmark: the pages of a group with 64 queues and many offset changes.

Run: python bench/dashboard_bench.py [--changes 1000000] [--rounds 20] [--explain]

The log is written through the real record log and every projection (as
bench/time_travel_bench.py does): group G commits on topic T's 64 queues, one
message append per 10 commits, 1 ms of broker time per record, and one reset
in the middle. Then `es-broker serve` opens that data directory, the
dashboard (`es-broker dashboard`, read-only) runs against it, and each page
is fetched over HTTP `--rounds` times after one warm-up; median and p90 of the
whole request (the dashboard's admin requests to the broker, the broker's
answers, the template) are printed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_broker.config import BrokerConfig  # noqa: E402
from es_broker.log import make  # noqa: E402
from es_broker.store import Store  # noqa: E402
from tests.process_fixtures import _env, serve  # noqa: E402

START = 1_700_000_000_000
QUEUES = 64
PER_TXN = 10_000


def build(data_dir: Path, changes: int) -> tuple[int, float]:
    store = Store.open(
        data_dir, BrokerConfig(storePathRootDir=str(data_dir), initial_map_size=1 << 30)
    )
    rnd = random.Random(7)
    offsets = [-1] * QUEUES
    tops = [0] * QUEUES
    phy, ts, written = 0, START, 0
    began = time.perf_counter()
    while written < changes:
        batch = []
        for _ in range(min(PER_TXN, changes - written)):
            ts += 1
            qid = rnd.randrange(QUEUES)
            if written % 10 == 0:
                batch.append(
                    make(
                        "messages_stored",
                        ts,
                        topic="T",
                        queue_id=qid,
                        queue_offset=tops[qid],
                        units=[[phy + i * 100, 100, 0] for i in range(5)],
                        producer_group="P",
                        requester="producer",
                    )
                )
                phy += 500
                tops[qid] += 5
            old = offsets[qid]
            new = min(max(old, 0) + rnd.randrange(0, 6), tops[qid])
            cause, requester = "client_commit", f"10.0.0.{rnd.randrange(1, 9)}@1"
            if written == changes // 2:
                new, cause, requester = 0, "reset", "ops@admin"
            offsets[qid] = new
            batch.append(
                make(
                    "offset_committed",
                    ts,
                    group="G",
                    topic="T",
                    queue_id=qid,
                    offset=new,
                    old=old,
                    cause=cause,
                    requester=requester,
                )
            )
            written += 1

        def job(ctx, batch=batch) -> None:
            for record in batch:
                ctx.append(record)

        store.log.write_batch([job])
    store.log.flush()
    records = store.log.last_seq
    store.close()
    return records, time.perf_counter() - began


def fetch(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        r.read()
        assert r.status == 200, (url, r.status)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--explain", action="store_true", help="also time explain (a log pass)")
    parser.add_argument(
        "--keep", type=Path, help="build the log in this directory once and reuse it on later runs"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.keep if args.keep is not None else Path(tmp) / "data"
        if not (data / "lmdb" / "data.mdb").exists():
            records, seconds = build(data, args.changes)
            print(
                f"log: {records} records ({args.changes} offset changes, {QUEUES} queues) "
                f"in {seconds:.1f} s"
            )
        with serve(data) as served:
            subprocess.run(
                [sys.executable, "-m", "es_broker.cli", "admin", "-n", served.namesrv,
                 "updateTopic", "-b", served.broker, "-t", "T", "-r", str(QUEUES), "-w", str(QUEUES)],
                check=True, env=_env(), capture_output=True,
            )  # fmt: skip
            dash = subprocess.Popen(
                [sys.executable, "-m", "es_broker.cli", "dashboard", "--namesrv", served.namesrv,
                 "--listen", "127.0.0.1:0"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env(),
            )  # fmt: skip
            try:
                line = dash.stdout.readline()  # type: ignore[union-attr]
                base = line.split("listening on ")[1].split()[0]
                pages = [
                    "/groups/G",
                    "/api/groups/G",
                    "/groups/G/timeline",
                    "/api/groups/G/timeline",
                ]
                if args.explain:
                    pages.append("/groups/G/explain?topic=T")
                for page in pages:
                    fetch(base + page)  # warm-up: connections, templates
                    rounds = args.rounds if "explain" not in page else 3
                    times = sorted(fetch(base + page) for _ in range(rounds))
                    p90 = times[min(int(len(times) * 0.9), len(times) - 1)]
                    print(
                        f"{page:<32} median {statistics.median(times) * 1000:7.1f} ms   "
                        f"p90 {p90 * 1000:7.1f} ms   ({rounds} rounds)"
                    )
            finally:
                dash.terminate()
                dash.wait()


if __name__ == "__main__":
    main()
