"""The `es-broker` command: serve, replay, verify, and the admin verbs."""

from __future__ import annotations

import argparse
import json
import sys

from es_broker.config import BrokerConfig
from es_broker.server.main import default_data_dir


def _cmd_replay(args: argparse.Namespace) -> int:
    from es_broker.commands.replay import replay

    last = replay(args.data_dir, args.into)
    print(f"replayed {last} records from {args.data_dir} into {args.into}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from es_broker.commands.replay import compare, verify

    differences = compare(args.data_dir, args.against) if args.against else verify(args.data_dir)
    if args.json:
        print(
            json.dumps(
                {"identical": not differences, "differences": [d.describe() for d in differences]}
            )
        )
    elif differences:
        for d in differences:
            print(d.describe())
    else:
        what = f"{args.against}" if args.against else "a replay of its log"
        print(f"OK: every projection of {args.data_dir} equals {what}")
    return 1 if differences else 0


def _fmt_ts(ms: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def _cmd_explain(args: argparse.Namespace) -> int:
    from es_broker.commands.explain import explain
    from es_broker.commands.store import Store

    store = Store.open(args.data_dir, BrokerConfig(storePathRootDir=args.data_dir), readonly=True)
    try:
        report = explain(store, args.group, args.topic)
    finally:
        store.close()
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"group {report['group']}, topic {report['topic']}: consumers {report['clients'] or '(none seen)'}, "
        f"consumeFromWhere {report['consume_from_where'] or '(not seen)'}"
    )
    if not report["queues"]:
        print("  no record of this group on this topic")
    for q in report["queues"]:
        print(f"queue {q['queue_id']}: offset now {q['current_offset']}")
        start = q["start"]
        if start:
            verdict = {True: "in memory", False: "on disk", None: "no message at 0"}[
                start["head_in_memory"]
            ]
            print(
                f"  started {_fmt_ts(start['ts'])}: {start['requester']} asked QUERY_CONSUMER_OFFSET with no "
                f"offset stored; min {start['min_offset']}, head {verdict} (phyMax {start['phy_max']}): "
                f"{start['why']}"
            )
        elif q["first_change"]:
            print(
                "  the group already had an offset here when its consumers asked: they resumed from it (B-46)"
            )
        latest = q["latest_change"]
        if latest:
            print(
                f"  latest change {_fmt_ts(latest['ts'])}: {latest['old']} -> {latest['new']} by "
                f"{latest['requester'] or '(unknown)'} ({latest['cause']}); {q['changes']} changes in all"
            )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="es-broker", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("replay", help="rebuild every projection from the log into a new directory")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--into", required=True)
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser(
        "verify", help="replay the log and compare every projection with the live one"
    )
    p.add_argument("--data-dir", required=True)
    p.add_argument("--against", help="compare with another data directory instead (e.g. a slave)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser(
        "explain", help="why a group started where it did, and who moved its offsets last"
    )
    p.add_argument("--data-dir", default=default_data_dir())
    p.add_argument("--group", "-g", required=True)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_explain)

    from es_broker.admin_cli import add_admin_parser

    add_admin_parser(sub)
    from es_broker.server.main import add_serve_parser

    add_serve_parser(sub)
    from es_broker.timetravel_cli import add_parsers as add_timetravel_parsers

    add_timetravel_parsers(sub)  # offsets, history, export, readmodel
    from es_broker.dashboard import add_parser as add_dashboard_parser

    add_dashboard_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        print(f"es-broker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
