"""Audit report per day and group: commits, resets (who, when, from, to), perm changes,
send-backs, dead letters, messages lost to retention.

    python spark/audit_report.py --input EXPORT_DIR [--group G] [--since T1] [--until T2] [--out report.md]
    python spark/audit_report.py --data-dir BROKER_DATA_DIR
    spark-submit spark/audit_report.py --input hdfs:///es-broker/export --json

Days are UTC days of the records' effective time. Markdown by default
(readable as text), or JSON with --json. On a cluster's export, a group's
counts are the cluster's, with each broker's share under `by_broker`, and
every reset and perm change names its broker.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import esb_spark  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402


def _hms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S.") + f"{ms % 1000:03d}"


def _when(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.")
        + f"{ms % 1000:03d} UTC"
    )


def _window(frame: DataFrame, since: int | None, until: int | None) -> DataFrame:
    if since is not None:
        frame = frame.where(F.col("time") >= since)
    if until is not None:
        frame = frame.where(F.col("time") <= until)
    return frame


def collect(
    source: esb_spark.Input,
    *,
    group: str | None = None,
    since: int | None = None,
    until: int | None = None,
) -> dict:
    """Everything the report shows, as plain data: {day: {"groups": {group: {...}}, "perm_changes": [...]}}."""

    def fam(name: str) -> DataFrame:
        frame = _window(source.family(name), since, until)
        return (
            frame.where(F.col("group") == group)
            if group is not None and "group" in frame.columns
            else frame
        )

    days: dict = defaultdict(
        lambda: {
            "groups": defaultdict(
                lambda: {
                    "commits": 0,
                    "commit_causes": {},
                    "resets": [],
                    "send_backs": 0,
                    "retried": 0,
                    "dead_letters": 0,
                    "lost_to_retention": 0,
                    "offset_moved": 0,
                    "by_broker": defaultdict(lambda: defaultdict(int)),
                }
            ),
            "perm_changes": [],
        }
    )

    for r in fam("offsets").groupBy("day", "group", "cause", "broker").count().collect():
        g = days[r["day"]]["groups"][r["group"]]
        g["commits"] += r["count"]
        cause = r["cause"] or "-"
        g["commit_causes"][cause] = g["commit_causes"].get(cause, 0) + r["count"]
        g["by_broker"][r["broker"]]["commits"] += r["count"]
    for r in fam("resets").orderBy("time", "broker", "seq").collect():
        days[r["day"]]["groups"][r["group"]]["resets"].append(
            {
                "broker": r["broker"],
                "time": r["time"],
                "topic": r["topic"],
                "requester": r["requester"],
                "kind": r["kind"],
                "value": r["value"],
                "force": r["force"],
                "mode": r["mode"],
                "outcome": r["outcome"],
                "notified": list(r["notified"] or ()),
                "queues": [
                    {
                        "queue_id": q["queue_id"],
                        "from": q["current"],
                        "target": q["target"],
                        "to": q["final"],
                        "outcome": q["outcome"],
                    }
                    for q in r["queues"] or ()
                ],
            }
        )
    for r in (
        fam("send_backs")
        .groupBy("day", "group", "broker")
        .agg(F.count("*").alias("n"), F.sum(F.col("dead_letter").cast("int")).alias("dlq"))
        .collect()
    ):
        g = days[r["day"]]["groups"][r["group"] or "-"]
        g["send_backs"] += r["n"]
        g["retried"] += r["n"] - (r["dlq"] or 0)
        g["by_broker"][r["broker"]]["send_backs"] += r["n"]
    for r in (
        fam("dead_letters")
        .groupBy("day", "group", "broker")
        .agg(F.sum("count").alias("n"))
        .collect()
    ):
        g = days[r["day"]]["groups"][r["group"] or "-"]
        g["dead_letters"] += r["n"] or 0
        g["by_broker"][r["broker"]]["dead_letters"] += r["n"] or 0
    corrections = fam("corrections").where(F.col("group").isNotNull())
    for r in (
        corrections.groupBy("day", "group")
        .agg(
            F.sum(F.coalesce("lost", F.lit(0))).alias("lost"),
            F.sum(F.when(F.col("kind") == "pull_offset_moved", 1).otherwise(0)).alias("moved"),
        )
        .collect()
    ):
        g = days[r["day"]]["groups"][r["group"]]
        g["lost_to_retention"] += r["lost"] or 0
        g["offset_moved"] += r["moved"] or 0
    perms = _window(source.family("topics"), since, until).where(
        F.col("type") == "topic_perm_changed"
    )
    for r in perms.orderBy("time", "broker", "seq").collect():
        days[r["day"]]["perm_changes"].append(
            {
                "broker": r["broker"],
                "time": r["time"],
                "topic": r["topic"],
                "old_perm": r["old_perm"],
                "perm": r["perm"],
                "requester": r["requester"],
            }
        )
    return {
        day: {
            "groups": {g: _plain(v) for g, v in sorted(d["groups"].items())},
            "perm_changes": d["perm_changes"],
        }
        for day, d in sorted(days.items())
    }


def _plain(group: dict) -> dict:
    by_broker = {b: dict(sorted(n.items())) for b, n in sorted(group["by_broker"].items())}
    return {**group, "by_broker": by_broker}


def _brokers(report: dict) -> set[str]:
    return {
        b
        for data in report.values()
        for g in data["groups"].values()
        for b in [*g["by_broker"], *(r["broker"] for r in g["resets"])]
    } | {c["broker"] for data in report.values() for c in data["perm_changes"]}


def _perm(p: int | None) -> str:
    if p is None:
        return "?"
    return ("R" if p & 4 else "-") + ("W" if p & 2 else "-") + ("X" if p & 1 else "-") + f" ({p})"


def describe_target(reset: dict) -> str:
    kind, value = reset["kind"] or "time", reset["value"]
    if kind == "time":
        return "the latest offset" if value in (None, -1) else f"time {_when(value)}"
    return f"{kind} {value}"


def _outcome(reset: dict) -> str:
    if reset["notified"]:
        return "clients notified: " + ", ".join(reset["notified"])
    if reset["outcome"] == "consumer_not_online":
        return "no consumer online (CONSUMER_NOT_ONLINE)"
    return reset["outcome"] or ""


def markdown(report: dict) -> str:
    lines = ["# es-broker audit report", ""]
    cluster = len(_brokers(report)) > 1

    def on(item: dict) -> str:
        return f" on `{item['broker']}`" if cluster else ""

    if not report:
        lines.append("No records in the chosen window.")
    for day, data in report.items():
        lines += [f"## {day}", ""]
        if data["groups"]:
            lines += [
                "| group | offset changes | by cause | resets | send-backs (retried / DLQ) | dead letters "
                "| lost to retention | PULL_OFFSET_MOVED |",
                "|---|---:|---|---:|---:|---:|---:|---:|",
            ]
            for group, g in data["groups"].items():
                causes = ", ".join(f"{c} {n}" for c, n in sorted(g["commit_causes"].items()))
                sb = f"{g['send_backs']} ({g['retried']} / {g['send_backs'] - g['retried']})"
                lines.append(
                    f"| {group} | {g['commits']} | {causes or '-'} | {len(g['resets'])} | {sb} | "
                    f"{g['dead_letters']} | {g['lost_to_retention']} | {g['offset_moved']} |"
                )
            lines.append("")
        for group, g in data["groups"].items():
            if cluster and g["by_broker"]:
                shares = ", ".join(
                    f"`{broker}` {n.get('commits', 0)} offset changes, "
                    f"{n.get('send_backs', 0)} send-backs, {n.get('dead_letters', 0)} dead letters"
                    for broker, n in sorted(g["by_broker"].items())
                )
                lines.append(f"- group `{group}` by broker: {shares}")
            for reset in g["resets"]:
                lines.append(
                    f"- **reset** of group `{group}` on topic `{reset['topic']}`{on(reset)} at {_hms(reset['time'])} "
                    f"by `{reset['requester'] or '(unknown)'}`: to {describe_target(reset)}, "
                    f"{'force' if reset['force'] else 'no force'}, mode {reset['mode'] or 'compat'}; "
                    + _outcome(reset)
                )
                for q in reset["queues"]:
                    lines.append(
                        f"    - queue {q['queue_id']}: {q['from']} -> {q['to']} ({q['outcome']}"
                        + (f", target {q['target']}" if q["target"] != q["to"] else "")
                        + ")"
                    )
        for change in data["perm_changes"]:
            lines.append(
                f"- **perm** of topic `{change['topic']}`{on(change)} at {_hms(change['time'])}: "
                f"{_perm(change['old_perm'])} -> {_perm(change['perm'])} "
                f"by `{change['requester'] or '(unknown)'}`"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None, spark=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    esb_spark.add_input_args(parser)
    parser.add_argument("--group")
    parser.add_argument("--since")
    parser.add_argument("--until")
    parser.add_argument("--out", help="write the report to this file (default: print it)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    spark, source, owned = esb_spark.open_input(args, "es-broker audit_report", spark)
    report = collect(
        source,
        group=args.group,
        since=esb_spark.parse_at(args.since) if args.since else None,
        until=esb_spark.parse_at(args.until) if args.until else None,
    )
    text = json.dumps(report, indent=2) if args.json else markdown(report)
    if args.out:
        Path(args.out).write_text(text + "\n")
        print(f"wrote {args.out}: {len(report)} days")
    else:
        print(text)
    if owned:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
