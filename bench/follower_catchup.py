"""The read-model follower's cost per message, repeatably: CPU seconds to catch up on a fixed log.

The live figure (bench/rocketmq_shape.py, the broker tree minus the broker process) moves with the
machine's load; this one does not. First record a log once under RocketMQ's benchmark shape:

    python bench/follower_catchup.py record /tmp/shape-log --inflight 8 --seconds 20

then catch a fresh SQLite read model up on it, as many times as wanted:

    python bench/follower_catchup.py catchup /tmp/shape-log [--batch 2000] [--repeat 3]

It prints the records and messages in the log, the follower's CPU seconds (this process's user +
system time around `Follower.catch_up`, the engine opened and the schema migrated beforehand) and
that per message and per record, plus a digest of the tables' contents so that two versions of
the follower can be compared for the same log. Under callgrind (bench/shape_cg.py's way) the
`catchup` command gives instructions instead of seconds; with `--instr-atstart=no` and
`--count-catchup` it turns callgrind's collection on around `Follower.catch_up` alone (through
`callgrind_control`), so that opening the log, counting its messages, creating the database and
migrating its schema are not counted:

    valgrind --tool=callgrind --instr-atstart=no python bench/follower_catchup.py \
        catchup /tmp/shape-log-s --no-digest --count-catchup   # instructions / messages
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from es_broker.log import RecordLog  # noqa: E402
from es_broker.schema.families import DEFAULT_SOURCE  # noqa: E402

LMDB_DIR = "lmdb"


def record(out: Path, inflight: int, seconds: float) -> None:
    from bench.rocketmq_shape import Run, create_topic
    from tests.process_fixtures import serve

    if out.exists():
        raise SystemExit(f"{out} exists")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        with serve(data, log_file=Path(tmp) / "broker.log") as broker:
            create_topic(broker.broker)
            Run(broker.broker, inflight).run(1.0, seconds, [])
        shutil.copytree(data / LMDB_DIR, out / LMDB_DIR)
    print(f"recorded {out}")


def table_digest(url: str) -> str:
    """A digest of every read-model table's rows in key order (what two followers must agree on)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    h = hashlib.sha256()
    with engine.connect() as conn:
        names = [
            r[0]
            for r in conn.execute(
                text("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
            )
        ]
        for name in names:
            if name == "alembic_version":
                continue
            h.update(name.encode())
            for row in conn.execute(text(f'SELECT * FROM "{name}" ORDER BY 1, 2, 3')):
                h.update(repr(tuple(row)).encode())
    engine.dispose()
    return h.hexdigest()[:16]


def count_messages(log: RecordLog) -> tuple[int, int]:
    records = messages = 0
    for _seq, rec in log.read(1):
        records += 1
        if rec.get("type") == "messages_stored":
            messages += len(rec.get("units") or ())
    return records, messages


def _collect(on: bool) -> None:
    """Turn callgrind's collection in this process on or off (the process runs under callgrind)."""
    flag = "--instr=on" if on else "--instr=off"
    subprocess.run(["callgrind_control", flag, str(os.getpid())], check=True, capture_output=True)


def catchup(
    path: Path, batch: int, keep: bool, digest: bool = True, count: bool = False
) -> dict[str, object]:
    from es_broker.readmodel.follower import open_follower

    log = RecordLog(path / LMDB_DIR, readonly=True)
    records, messages = count_messages(log)
    tmp = tempfile.mkdtemp()
    url = f"sqlite:///{tmp}/readmodel.sqlite"
    follower = open_follower(url, log, DEFAULT_SOURCE, batch=batch)
    if count:
        _collect(True)
    t0 = os.times()
    w0 = time.monotonic()
    applied = follower.catch_up()
    t1 = os.times()
    if count:
        _collect(False)
    wall = time.monotonic() - w0
    follower.engine.dispose()
    cpu = (t1.user - t0.user) + (t1.system - t0.system)
    out = {
        "records": records,
        "messages": messages,
        "applied": applied,
        "batch": batch,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "us_per_msg": round(1e6 * cpu / max(1, messages), 1),
        "us_per_record": round(1e6 * cpu / max(1, records), 1),
        "digest": table_digest(url) if digest else None,
    }
    log.close()
    if not keep:
        shutil.rmtree(tmp)
    else:
        out["db"] = url
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record a log under the benchmark shape")
    r.add_argument("out", type=Path)
    r.add_argument("--inflight", type=int, default=8)
    r.add_argument("--seconds", type=float, default=20.0)
    c = sub.add_parser("catchup", help="catch a fresh read model up on a recorded log")
    c.add_argument("log", type=Path)
    c.add_argument("--batch", type=int, default=2000)
    c.add_argument("--repeat", type=int, default=1)
    c.add_argument("--keep", action="store_true", help="keep the database and print its URL")
    c.add_argument(
        "--no-digest",
        action="store_true",
        help="skip the tables' digest (callgrind: count the catch-up, not the digest's reads)",
    )
    c.add_argument(
        "--count-catchup",
        action="store_true",
        help="under callgrind started with --instr-atstart=no: collect during the catch-up only",
    )
    args = p.parse_args()
    if args.cmd == "record":
        record(args.out, args.inflight, args.seconds)
    else:
        for _ in range(args.repeat):
            print(
                json.dumps(
                    catchup(args.log, args.batch, args.keep, not args.no_digest, args.count_catchup)
                )
            )


if __name__ == "__main__":
    main()
