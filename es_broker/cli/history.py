"""`es-broker archive`: seal the old segments of a stopped broker's log into the archive (B-401..B-406)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from es_broker.timetravel.timeparse import format_time, parse_time


def _cmd_archive(args: argparse.Namespace) -> int:
    from es_broker.cli.datadir import open_log_readonly
    from es_broker.commands.store import Store
    from es_broker.config import BrokerConfig, load_broker_conf
    from es_broker.history import seal as sealing

    data_dir = args.data_dir
    config = BrokerConfig(storePathRootDir=data_dir)
    if args.config:
        config = load_broker_conf(args.config, config)
    open_log_readonly(data_dir).close()  # FileNotFoundError without broker data
    before = parse_time(args.before)
    location = args.to or sealing.archive_location(data_dir, config.history_archive)
    limit, limited_by = sealing.consumers_position(data_dir, args.export_dir or [])
    store = Store.open(data_dir, config)
    try:
        segments = sealing.plan(store, before, config.history_segment_records, limit)
        sealed = sealing.seal(store, Path(data_dir), location, segments)
        remaining = store.log.last_seq
    finally:
        store.close()
    if args.json:
        print(
            json.dumps(
                {
                    "sealed": [
                        {
                            "first_seq": s.first_seq,
                            "last_seq": s.last_seq,
                            "records": s.records,
                            "first_time": s.first_time,
                            "last_time": s.last_time,
                            "location": s.location,
                            "manifest_sha256": s.manifest_sha256,
                            "seq": s.seq,
                        }
                        for s in sealed
                    ],
                    "limited_by": limited_by,
                    "consumers_position": limit,
                }
            )
        )
        return 0
    if not sealed:
        why = f" (consumers at {limit}: {', '.join(limited_by)})" if limited_by else ""
        print(f"nothing to seal before {format_time(before)} in {data_dir}{why}")
        return 0
    for s in sealed:
        print(
            f"sealed records {s.first_seq}..{s.last_seq} ({s.records}, "
            f"{format_time(s.first_time)} .. {format_time(s.last_time)}) to {s.location}, "
            f"manifest {s.manifest_sha256[:16]}, recorded as #{s.seq}"
        )
    print(f"{len(sealed)} segments sealed; the hot log now ends at #{remaining}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "archive",
        help="seal the segments of a stopped broker's log wholly before TIME into the archive",
    )
    p.add_argument("--data-dir", required=True)
    p.add_argument("--to", help="the archive (a folder or a pyarrow filesystem URI)")
    p.add_argument("--before", required=True, help="TIME: now | epoch ms | ISO 8601 | ...")
    p.add_argument("--config", help="the broker.conf (history_archive, history_segment_records)")
    p.add_argument(
        "--export-dir",
        action="append",
        help="a Parquet export of this log: nothing it has not exported is sealed (repeatable)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_archive)
