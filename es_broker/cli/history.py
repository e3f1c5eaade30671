"""`es-broker archive`: seal the old segments of a stopped broker's log (B-401..B-406), or ask a
running master to (`-b`, B-411)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from es_broker.cli.credentials import add_credential_options
from es_broker.timetravel.timeparse import format_time, parse_time


def _archive_over_the_wire(args: argparse.Namespace) -> int:
    """`-b ADDR`: the running master seals, bound by its slaves and read model (B-411, B-412)."""
    import os

    import trio

    from es_broker.cli.admin import admin_tls
    from es_broker.cli.credentials import CredentialsError, admin_credentials
    from es_broker.client.admin import Admin, AdminError
    from es_broker.net.remoting_client import RemotingError

    try:
        credentials = admin_credentials(args, os.environ)
        tls = admin_tls(args)
    except ValueError as exc:  # CredentialsError, an unusable CA
        print(f"es-broker archive: {exc}", file=sys.stderr)
        return 2
    before = parse_time(args.before)

    async def main() -> dict[str, Any] | Exception:
        async with Admin.open("", credentials=credentials, tls=tls) as admin:
            try:
                return await admin.history_archive(args.brokerAddr, before, args.timeout)
            except (AdminError, RemotingError, CredentialsError) as exc:
                return exc

    answer = trio.run(main)
    if isinstance(answer, Exception):
        print(f"es-broker archive: {answer}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(answer))
        return 0
    for s in answer["sealed"]:
        print(
            f"sealed records {s['first_seq']}..{s['last_seq']} ({s['records']}, "
            f"{format_time(s['first_time'])} .. {format_time(s['last_time'])}) to "
            f"{s['location']}, recorded as #{s['seq']}"
        )
    if not answer["sealed"]:
        why = held_back_text(answer.get("held_back"), before)
        print(f"nothing to seal before {format_time(before)} on {args.brokerAddr}{why}")
    return 0


def held_back_text(held: dict[str, Any] | None, before: int) -> str:
    """`: <the condition that held the next segment back>` (sealing.held_back), or ""."""
    if not held:
        return ""
    span = f"the next segment, records {held['first_seq']}..{held['last_seq']},"
    if held["reason"] == "not_full":
        return f": {span} is not full (the log ends at #{held['log_end']})"
    if held["reason"] == "consumers":
        who = ", ".join(held["who"])
        return f": {span} is not yet read by {who} (at #{held['position']})"
    return (
        f": {span} ends with a record of {format_time(held['last_time'])}, "
        f"not before {format_time(before)}"
    )


def _cmd_archive(args: argparse.Namespace) -> int:
    if args.brokerAddr:
        if args.to or args.config or args.export_dir:
            print(
                "es-broker archive: -b seals with the broker's own broker.conf and consumers; "
                "--to, --config and --export-dir are for --data-dir",
                file=sys.stderr,
            )
            return 2
        return _archive_over_the_wire(args)
    from es_broker.cli.datadir import open_log_readonly
    from es_broker.config import BrokerConfig, load_broker_conf
    from es_broker.history import seal as sealing
    from es_broker.log.dirlock import holding
    from es_broker.store import Store

    data_dir = args.data_dir
    config = BrokerConfig(storePathRootDir=data_dir)
    if args.config:
        config = load_broker_conf(args.config, config)
    open_log_readonly(data_dir).close()  # FileNotFoundError without broker data
    before = parse_time(args.before)
    location = args.to or sealing.archive_location(data_dir, config.history_archive)
    with holding(data_dir):  # a stopped broker's: DataDirInUse while one serves it (B-490)
        limit, limited_by = sealing.consumers_position(data_dir, args.export_dir or [])
        store = Store.open(data_dir, config)
        try:
            # a master's slaves, as its log recorded them (B-462)
            limit, limited_by = sealing.lowest((limit, limited_by), sealing.recorded_slaves(store))
            segments = sealing.plan(store, before, config.history_segment_records, limit)
            sealed = sealing.seal(store, Path(data_dir), location, segments)
            remaining = store.log.last_seq
            held = sealing.held_back(
                store, before, config.history_segment_records, limit, limited_by
            )
        finally:
            store.close()
    if args.json:
        print(
            json.dumps(
                {
                    "sealed": [s.to_json() for s in sealed],
                    "limited_by": limited_by,
                    "consumers_position": limit,
                    "held_back": None if sealed else held,
                }
            )
        )
        return 0
    if not sealed:
        why = held_back_text(held, before)
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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "archive",
        help="seal the segments of a stopped broker's log wholly before TIME into the archive",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", help="a stopped broker's data directory")
    where.add_argument(
        "-b", "--brokerAddr", help="a running master: it seals, waiting for its slaves (B-411)"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for -b's answer")
    p.add_argument("--to", help="the archive (a folder or a pyarrow filesystem URI)")
    p.add_argument("--before", required=True, help="TIME: now | epoch ms | ISO 8601 | ...")
    p.add_argument("--config", help="the broker.conf (history_archive, history_segment_records)")
    p.add_argument(
        "--export-dir",
        action="append",
        help="a Parquet export of this log: nothing it has not exported is sealed (repeatable)",
    )
    p.add_argument("--json", action="store_true")
    add_credential_options(p, None)
    p.add_argument("--tls", action="store_true", help="-b over TLS")
    p.add_argument("--tls-ca", help="the CA file to check the broker's certificate with")
    p.set_defaults(func=_cmd_archive)
