"""History benchmark (B-418): a steady-state log with sealing on; LMDB space in use and audit-verb latency.

Run: python bench/history_bench.py [--sizes 100000,300000,1000000] [--segment 50000]
                                   [--hot 100000] [--retention BYTES] [--png history_bench.png]
                                   [--dir D]

The log is written through the real record log and every projection, in
transactions of 10 000 records, 1 ms of broker time per round. A round is a
client's steady state: a send (`messages_stored`, 4 messages), a pull of them
(`messages_delivered`) and a commit (`offset_committed`), by 20 groups on 2
topics of 8 queues; each group's consumers announce themselves and ask their
start offset once. Every `--segment` records, the segments older than the
last `--hot` records' time are sealed (es_broker/history/seal.py: Parquet
archive, snapshot, `history_archived`), as `history_hot_days` would.

At each size it prints:

- LMDB in use: the pages of every database (`stat()`: branch + leaf + overflow
  pages, times the page size) and the `log` database's share; data.mdb's file
  size is printed for contrast only (LMDB never shrinks its file, it reuses
  freed pages);
- latency, median over repeated calls: `explain` (the audit index, B-415),
  `explain` by scanning the records (the archive's and the hot log's, what it
  did before B-415; one call), `history` (one group, the last minute: its
  rows are printed too, the answer grows with the traffic of that minute), a
  page of it (`timeline.recent_changes`, the newest 100: what the dashboard
  and `history --max-entries` read) and
  `offsets --at` (one group, a random moment; and a random moment after the
  horizon, "hot");
- the archive index's and the archive's sizes on disk (B-460).

Sealing and retention records carry the broker's (manual) time, as a broker's
own would, so effective time stays the rounds' time.

Messages' bytes are not written (the commit-log payloads are not what is
measured); every record and projection entry is. With `--retention BYTES`
they are (100 bytes each, with their store time), in commit-log files of
BYTES, and after each `--segment` a retention pass (es_broker/commands/
retention.py, `fileReservedTime` 0 on a manual clock at the broker time)
expires every file but the newest, as a steady-state broker's retention does:
the consume queues' minimums move, and sealing removes what expired (B-461).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from es_broker.acl.plain import combine, parse_file
from es_broker.cli.timetravel import acl_answer_in
from es_broker.clock import ManualClock
from es_broker.commands.acl_audit import denial_record, load_fields
from es_broker.commands.explain import explain, explain_by_scan
from es_broker.commands.retention import retention_job
from es_broker.config import BrokerConfig
from es_broker.history import seal as sealing
from es_broker.log import make, types
from es_broker.log.types import RecordType
from es_broker.remoting import message as wire
from es_broker.store import Store
from es_broker.timetravel import timeline
from es_broker.timetravel.query import TimeTravel

START = 1_700_000_000_000
BENCH_ACL = combine(
    [
        parse_file(
            "/etc/plain_acl.yml",
            b"accounts:\n- accessKey: ProducerKey\n  secretKey: ProducerSecret\n"
            b"  defaultTopicPerm: DENY\n  topicPerms: [T1=PUB]\n",
        )
    ]
)
GROUPS = [f"G{i:02d}" for i in range(20)]
TOPICS = ["T1", "T2"]
QUEUES = 8
PER_TXN = 10_000
UNITS = 4


class Writer:
    """Rounds of send, pull, commit, appended through the record log."""

    def __init__(self, store: Store, bodies: bool = False) -> None:
        self.store = store
        self.bodies = bodies
        self.payloads: list[tuple[int, bytes]] = []
        self.rnd = random.Random(7)
        self.tops = {(t, q): 0 for t in TOPICS for q in range(QUEUES)}
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.phy = 0
        self.ts = START
        self.seen: set[tuple[str, str, int]] = set()
        self.acl_version = 0

    def round(self) -> list[dict[str, Any]]:
        self.ts += 1
        rnd, ts = self.rnd, self.ts
        topic, qid, group = rnd.choice(TOPICS), rnd.randrange(QUEUES), rnd.choice(GROUPS)
        out: list[dict[str, Any]] = []
        key = (group, topic, qid)
        if key not in self.seen:  # a consumer's first pull of this queue: it asks where to start
            self.seen.add(key)
            out.append(
                types.ConsumerGroupChanged(
                    group=group,
                    clients=[f"10.0.0.{rnd.randrange(1, 9)}@1"],
                    consume_from_where="CONSUME_FROM_LAST_OFFSET",
                    message_model="CLUSTERING",
                    subscriptions={topic: "*"},
                ).to_record(ts)
            )
            out.append(
                types.OffsetQueried(
                    group=group,
                    topic=topic,
                    queue_id=qid,
                    row=3,
                    offset=-1,
                    code=22,
                    min_offset=0,
                    head_in_memory=True,
                    phy_max=self.phy,
                    requester="10.0.0.1@1",
                ).to_record(ts)
            )
        first = self.tops[(topic, qid)]
        out.append(
            types.MessagesStored(
                topic=topic,
                queue_id=qid,
                queue_offset=first,
                units=[[self.phy + i * 100, 100, 0] for i in range(UNITS)],
                producer_group="P",
                requester="producer",
            ).to_record(ts)
        )
        if self.bodies:
            body = bytearray(100)
            body[wire.STORE_TIMESTAMP_AT : wire.STORE_TIMESTAMP_AT + 8] = ts.to_bytes(8, "big")
            self.payloads += [(self.phy + i * 100, bytes(body)) for i in range(UNITS)]
        self.phy += 100 * UNITS
        self.tops[(topic, qid)] = first + UNITS
        old = self.offsets.get(key, -1)
        start = max(old, 0)
        got = list(range(start, min(first + UNITS, start + 32)))  # a pull's 32 at most
        out.append(
            types.MessagesDelivered(
                group=group,
                topic=topic,
                queue_id=qid,
                offset=start,
                offsets=got,
                next_offset=got[-1] + 1,
                client="10.0.0.1@1",
            ).to_record(ts)
        )
        self.offsets[key] = got[-1] + 1
        out.append(
            types.OffsetCommitted(
                group=group,
                topic=topic,
                queue_id=qid,
                offset=got[-1] + 1,
                old=old,
                cause=types.Cause.CLIENT_COMMIT,
                requester="10.0.0.1@1",
            ).to_record(ts)
        )
        return out

    def write(self, upto: int) -> None:
        # an operator's ACL reload and a minute of refusals per chunk, as `acl --at` reads them
        self.acl_version += 1
        audit = [
            make(
                RecordType.ACL_LOADED,
                self.ts,
                **load_fields(BENCH_ACL, "admin request", "ops", self.acl_version, b"s" * 32),
            ),
            denial_record(
                {("ProducerKey", "10.0.0.7", 10): 3},
                self.ts - 60_000,
                self.ts,
                60,
                self.acl_version,
            ),
        ]
        self.store.log.write_batch([lambda ctx: [ctx.append(r) for r in audit]])
        while self.store.log.last_seq < upto:
            batch: list[dict[str, Any]] = []
            while len(batch) < min(PER_TXN, upto - self.store.log.last_seq):
                batch += self.round()

            payloads, self.payloads = self.payloads, []

            def job(
                ctx: Any,
                batch: list[dict[str, Any]] = batch,
                payloads: list[tuple[int, bytes]] = payloads,
            ) -> None:
                if payloads:
                    ctx.put_payloads(payloads)
                for record in batch:
                    ctx.append(record)

            self.store.log.write_batch([job])


def in_use(store: Store) -> dict[str, int]:
    """Bytes of the pages of each database (and of LMDB's main database, `(main)`)."""
    env = store.log.env
    main = env.stat()
    out = {"(main)": (main["branch_pages"] + main["leaf_pages"] + main["overflow_pages"])}
    out["(main)"] *= main["psize"]
    with env.begin() as txn:
        for name in store.log.database_names():
            db = store.log.db(name)
            if db is None:
                continue
            s = txn.stat(db)
            out[name] = (s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"]) * s["psize"]
    return out


def median_ms(fn: Any, n: int) -> float:
    samples = []
    for _ in range(n):
        began = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def measure(store: Store, data_dir: Path, rnd: random.Random) -> dict[str, float]:
    travel = TimeTravel(store)
    with store.read() as txn:
        end = travel.time_of(txn, store.log.last_seq)
        sealed = store.history.sealed_upto(txn)
    sizes = in_use(store)
    biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:6]
    print("  largest databases (MB): " + ", ".join(f"{n} {b / 2**20:.1f}" for n, b in biggest))

    def one_explain() -> None:
        explain(store, rnd.choice(GROUPS), rnd.choice(TOPICS))

    def one_scan() -> None:
        explain_by_scan(store, rnd.choice(GROUPS), rnd.choice(TOPICS))

    def one_history() -> None:
        with store.read() as txn:
            travel.history(txn, rnd.choice(GROUPS), since=end - 60_000, until=end)

    def one_page() -> None:  # the newest 100 of the same minute: the dashboard's, `--max-entries`
        with store.read() as txn:
            timeline.recent_changes(
                travel, txn, rnd.choice(GROUPS), since=end - 60_000, until=end, limit=100
            )

    with store.read() as txn:
        history_rows = len(travel.history(txn, GROUPS[0], since=end - 60_000, until=end))

    def one_acl_at() -> None:
        acl_answer_in(store, rnd.randint(START, end), rnd.choice(TOPICS), None, 600_000)

    def one_offsets_at() -> None:
        with store.read() as txn:
            travel.offsets_at(txn, rnd.randint(START, end), group=rnd.choice(GROUPS))

    with store.read() as txn:
        horizon_time = travel.time_of(txn, sealed) if sealed else START

    def one_offsets_at_hot() -> None:
        with store.read() as txn:
            travel.offsets_at(txn, rnd.randint(horizon_time, end), group=rnd.choice(GROUPS))

    t0 = time.perf_counter()
    one_offsets_at()  # the archive index catches up with the segments sealed since last time
    catch_up_s = time.perf_counter() - t0

    return {
        "records": store.log.last_seq,
        "sealed": sealed,
        "lmdb_mb": sum(sizes.values()) / 2**20,
        "log_mb": sizes.get("log", 0) / 2**20,
        "file_mb": (data_dir / "lmdb" / "data.mdb").stat().st_size / 2**20,
        "explain_ms": median_ms(one_explain, 200),
        "explain_scan_ms": median_ms(one_scan, 1),
        "history_ms": median_ms(one_history, 50),
        "history_rows": history_rows,
        "page_ms": median_ms(one_page, 200),
        "offsets_at_ms": median_ms(one_offsets_at, 200),
        "acl_at_ms": median_ms(one_acl_at, 200),
        "offsets_at_hot_ms": median_ms(one_offsets_at_hot, 200),
        "catch_up_s": catch_up_s,
        "index_mb": _du(data_dir / "history" / "index") / 2**20,
        "archive_mb": _du(data_dir / "archive") / 2**20,
    }


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def run(
    data_dir: Path, sizes: list[int], segment: int, hot: int, retention: int = 0
) -> list[dict[str, float]]:
    config = BrokerConfig(
        storePathRootDir=str(data_dir),
        initial_map_size=1 << 30,
        history_segment_records=segment,
        mappedFileSizeCommitLog=retention or 1024**3,
        fileReservedTime=0,
    )
    clock = ManualClock(START)
    store = Store.open(data_dir, config, clock)
    writer = Writer(store, bodies=retention > 0)
    location = sealing.archive_location(data_dir)
    rnd = random.Random(11)
    rows = []
    seal_s = 0.0
    began = time.perf_counter()
    try:
        for size in sizes:
            while store.log.last_seq < size:
                writer.write(min(size, store.log.last_seq + segment))
                clock.set(writer.ts)  # the broker's time: retention and sealing records carry it
                if retention:
                    store.log.write_batch([retention_job(store, manual=True)])
                # what `history_hot_days` does: seal what is older than the hot window
                with store.read() as txn:
                    before = sealing.time_of(store, txn, max(store.log.last_seq - hot, 0))
                t0 = time.perf_counter()
                segments = sealing.plan(store, before, segment, None)
                sealing.seal(
                    store, data_dir, location, segments, requester="bench", now=clock.now_ms
                )
                seal_s += time.perf_counter() - t0
            store.log.flush()
            row = measure(store, data_dir, rnd)
            row["write_s"] = time.perf_counter() - began - seal_s
            row["seal_s"] = seal_s
            rows.append(row)
            print_row(row)
    finally:
        store.close()
    return rows


HEADER = (
    f"{'records':>9} {'sealed':>9} {'LMDB MB':>8} {'log MB':>7} {'file MB':>8} "
    f"{'explain':>8} {'scan':>9} {'history':>8} {'rows':>5} {'page':>6} {'off@':>7} {'off@hot':>7} {'acl@':>6} {'write s':>8} "
    f"{'seal s':>7} {'index MB':>8} {'arch MB':>8}"
)


def print_row(r: dict[str, float]) -> None:
    if r is not None and not getattr(print_row, "headed", False):
        print(HEADER + "   (latencies: median ms)")
        print_row.headed = True  # type: ignore[attr-defined]
    print(
        f"{r['records']:>9.0f} {r['sealed']:>9.0f} {r['lmdb_mb']:>8.1f} {r['log_mb']:>7.1f} "
        f"{r['file_mb']:>8.1f} {r['explain_ms']:>8.3f} {r['explain_scan_ms']:>9.1f} "
        f"{r['history_ms']:>8.3f} {r['history_rows']:>5.0f} {r['page_ms']:>6.2f} {r['offsets_at_ms']:>7.3f} {r['offsets_at_hot_ms']:>7.3f} {r.get('acl_at_ms', 0):>6.2f} "
        f"{r['write_s']:>8.1f} {r['seal_s']:>7.1f} {r['index_mb']:>8.1f} {r['archive_mb']:>8.1f}",
        flush=True,
    )


COLUMNS = [
    "records",
    "sealed",
    "lmdb_mb",
    "log_mb",
    "file_mb",
    "explain_ms",
    "explain_scan_ms",
    "history_ms",
    "history_rows",
    "page_ms",
    "offsets_at_ms",
    "offsets_at_hot_ms",
    "write_s",
    "seal_s",
    "index_mb",
    "archive_mb",
]


def rows_from_log(path: Path) -> list[dict[str, float]]:
    """The table rows `print_row` wrote to a log."""
    rows = []
    for line in path.read_text().splitlines():
        cells = line.split()
        if len(cells) == len(COLUMNS) and cells[0].isdigit():
            rows.append(dict(zip(COLUMNS, map(float, cells), strict=True)))
    return rows


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [r["records"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 5))
    a.plot(n, [r["lmdb_mb"] for r in rows], "o-", label="LMDB in use")
    a.plot(n, [r["log_mb"] for r in rows], "o-", label="`log` database")
    a.plot(n, [r["file_mb"] for r in rows], "o--", label="data.mdb file")
    a.set_xlabel("records written")
    a.set_ylabel("MB")
    a.legend()
    a.set_title("space, sealing on")
    for key, label in (
        ("explain_ms", "explain (index)"),
        ("explain_scan_ms", "explain (scan)"),
        ("history_ms", "history (1 min)"),
        ("page_ms", "history page (newest 100)"),
        ("offsets_at_ms", "offsets --at (any moment)"),
        ("offsets_at_hot_ms", "offsets --at (hot)"),
    ):
        b.plot(n, [r[key] for r in rows], "o-", label=label)
    b.set_yscale("log")
    b.set_xlabel("records written")
    b.set_ylabel("median ms")
    b.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    b.set_title("verb latency")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,300000,1000000")
    p.add_argument("--segment", type=int, default=50_000)
    p.add_argument("--hot", type=int, default=100_000, help="records kept hot (by their time)")
    p.add_argument(
        "--retention",
        type=int,
        default=0,
        help="write bodies in commit-log files of this many bytes and expire all but the newest",
    )
    p.add_argument("--png", help="write a chart here")
    p.add_argument("--dir", help="the data directory (default: a temporary one)")
    p.add_argument(
        "--plot-log",
        metavar="LOG",
        help="only draw --png from the table rows a run printed to LOG (a run cut short)",
    )
    args = p.parse_args()
    if args.plot_log:
        plot(rows_from_log(Path(args.plot_log)), Path(args.png or "history_bench.png"))
        return 0
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if args.dir:
        rows = run(Path(args.dir), sizes, args.segment, args.hot, args.retention)
    else:
        with tempfile.TemporaryDirectory(prefix="history-bench-") as tmp:
            rows = run(Path(tmp) / "data", sizes, args.segment, args.hot, args.retention)
    if args.png:
        plot(rows, Path(args.png))
        print(f"chart: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
