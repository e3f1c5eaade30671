"""`es-broker replay | verify | explain`: the log and its projections, offline."""

from __future__ import annotations

import argparse
import json
from typing import Any

from es_broker.cli.cluster import add_cluster_options
from es_broker.config import BrokerConfig, default_data_dir
from es_broker.timetravel.timeparse import format_time


def _cmd_replay(args: argparse.Namespace) -> int:
    from es_broker.cli.progress import progress
    from es_broker.core.replay import replay
    from es_broker.log.dirlock import holding
    from es_broker.store import require_broker_data

    require_broker_data(args.data_dir)  # before --into is created and locked
    with holding(args.into), progress("replay") as tell:  # the directory it writes (B-490)
        last = replay(args.data_dir, args.into, tell)
    print(f"replayed {last} records from {args.data_dir} into {args.into}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from es_broker.cli.progress import progress
    from es_broker.core.replay import compare, verify
    from es_broker.projections.store_format import OldStoreFormat

    try:
        if args.against:
            differences = compare(args.data_dir, args.against)
        else:
            with progress("verify: replay") as tell:
                differences = verify(args.data_dir, tell, full=args.full)
    except OldStoreFormat as old:  # B-470: nothing to compare until a start upgrades it
        if args.json:
            print(json.dumps({"identical": None, "old_format": old.found, "message": str(old)}))
        else:
            print(str(old))
        return 2
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
        what = (
            f"{args.against}"
            if args.against
            else "a replay of its whole history, archive and hot log"
            if args.full
            else "a replay of its log"
        )
        print(f"OK: every projection of {args.data_dir} equals {what}")
    return 1 if differences else 0


def _cmd_explain(args: argparse.Namespace) -> int:
    if args.namesrv:
        from es_broker.cli.cluster import ask
        from es_broker.remoting.body_view import json_view, plain

        answers = ask(args, lambda admin: admin.explain_group(args.group, args.topic))
        if args.json:
            print(json.dumps({"brokers": answers}, default=json_view))
            return 0
        for answer in answers:
            print(f"broker {answer.broker_name} ({answer.broker}):")
            _print_explain(
                plain(answer.body)
            )  # the report as `explain` of a data directory gives it
        return 0
    from es_broker.commands.explain import explain
    from es_broker.store import Store

    store = Store.open(args.data_dir, BrokerConfig(storePathRootDir=args.data_dir), readonly=True)
    try:
        report = explain(store, args.group, args.topic)
    finally:
        store.close()
    if args.json:
        print(json.dumps(report))
        return 0
    _print_explain(report)
    return 0


def _print_explain(report: dict[str, Any]) -> None:
    print(
        f"group {report['group']}, topic {report['topic']}: consumers {report['clients'] or '(none now)'}, "
        f"consumeFromWhere {report['consume_from_where'] or '(none now)'}"
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
                f"  started {format_time(start['ts'])}: {start['requester']} asked QUERY_CONSUMER_OFFSET with no "
                f"offset stored; min {start['min_offset']}, head {verdict} (phyMax {start['phy_max']}): "
                f"{start['why']}"
            )
        elif q["first_change"]:
            first = q["first_change"]
            print(
                f"  an offset was stored here before any consumer asked for one (first "
                f"{first['old']} -> {first['new']} by {first['requester'] or '(unknown)'} "
                f"({first['cause']}), {format_time(first['ts'])}): a consumer resumes from the "
                "offset stored (B-46)"
            )
        latest = q["latest_change"]
        if latest:
            print(
                f"  latest change {format_time(latest['ts'])}: {latest['old']} -> {latest['new']} by "
                f"{latest['requester'] or '(unknown)'} ({latest['cause']}); {q['changes']} changes in all"
            )


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("replay", help="rebuild every projection from the log into a new directory")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--into", required=True)
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser(
        "verify", help="replay the log and compare every projection with the live one"
    )
    p.add_argument("--data-dir", required=True)
    p.add_argument("--against", help="compare with another data directory instead (e.g. a slave)")
    p.add_argument(
        "--full",
        action="store_true",
        help="replay from the first record, the archive's sealed segments first (B-407)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser(
        "explain", help="why a group started where it did, and who moved its offsets last"
    )
    p.add_argument("--data-dir", default=default_data_dir())
    p.add_argument("--group", "-g", required=True)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--json", action="store_true")
    add_cluster_options(p)
    p.set_defaults(func=_cmd_explain)
