"""Lag per queue over time for one group and topic, as a PNG (matplotlib).

    python spark/lag_timeline.py --input EXPORT_DIR --group G --topic T --out lag.png [--since T1] [--until T2]
    python spark/lag_timeline.py --data-dir BROKER_DATA_DIR --group G --topic T --out lag.png

One line per queue (per broker and queue on a cluster's export): messages behind the queue's max after every offset change
and every append (downsampled by time, keeping each bucket's peak as a light
band). Resets of the group on the topic are drawn as dashed lines with who
asked and where to, so the jump they cause reads at a glance. Times are UTC.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import esb_spark  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def reset_marks(source: esb_spark.Input, group: str, topic: str) -> list[dict]:
    resets = (
        source.family("resets")
        .where((F.col("group") == group) & (F.col("topic") == topic))
        .select("broker", "time", "requester", "kind", "value", "mode", "queues")
        .orderBy("seq")
    )
    return [r.asDict(recursive=True) for r in resets.collect()]


def describe_reset(mark: dict, with_broker: bool = False) -> str:
    kind, value = mark["kind"] or "time", mark["value"]
    if kind == "time" and value not in (None, -1):
        target = "to " + _dt(value).strftime("%H:%M:%S")
    elif kind == "time":
        target = "to latest"
    else:
        target = f"{kind} {value}"
    moved = sum(1 for q in mark["queues"] or () if q["final"] != q["current"])
    where = f" on {mark['broker']}" if with_broker else ""
    return f"reset{where} {target}\nby {mark['requester'] or '?'} ({moved} queues)"


def plot(series: list[dict], marks: list[dict], group: str, topic: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    by_queue: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for point in series:
        by_queue[(point["broker"], point["queue_id"])].append(point)
    brokers = {broker for broker, _ in by_queue} | {m["broker"] for m in marks}
    many = len(brokers) > 1
    fig, ax = plt.subplots(figsize=(12, 5.5), dpi=110)
    colors = plt.get_cmap("tab10")
    for i, ((broker, queue), points) in enumerate(sorted(by_queue.items())):
        times = [_dt(p["time"]) for p in points]
        lags = [p["lag"] if p["lag"] is not None else float("nan") for p in points]
        peaks = [p["peak"] if p["peak"] is not None else float("nan") for p in points]
        color = colors(i % 10)
        ax.fill_between(times, lags, peaks, step="post", color=color, alpha=0.15, linewidth=0)
        ax.step(
            times,
            lags,
            where="post",
            color=color,
            linewidth=1.6,
            label=f"{broker} q{queue}" if many else f"queue {queue}",
        )
    top = max((p["peak"] or 0 for p in series), default=0)
    first = min((p["time"] for p in series), default=0)
    last = max((p["time"] for p in series), default=0)
    for mark in marks:
        when = _dt(mark["time"])
        ax.axvline(when, color="crimson", linestyle="--", linewidth=1.2)
        # the label goes on the side with room: left of the line in the last third of the picture
        right_side = last == first or (mark["time"] - first) / (last - first) < 0.66
        ax.annotate(
            describe_reset(mark, many),
            xy=(when, top * 0.97 if top else 1),
            xytext=(6 if right_side else -6, 0),
            ha="left" if right_side else "right",
            textcoords="offset points",
            va="top",
            fontsize=8.5,
            color="crimson",
            bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "crimson", "alpha": 0.9},
        )
    on = f" across {len(brokers)} brokers" if many else ""
    ax.set_title(f"Consumer lag of group {group} on topic {topic}{on}", fontsize=13, loc="left")
    ax.set_ylabel("lag (messages behind the queue's max)")
    ax.set_xlabel("broker time (UTC)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    if by_queue:
        ax.legend(loc="upper left", ncols=min(len(by_queue), 8), fontsize=9, frameon=False)
    else:
        ax.text(
            0.5,
            0.5,
            "no offsets recorded for this group and topic",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="gray",
        )
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None, spark=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    esb_spark.add_input_args(parser)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", default="lag.png")
    parser.add_argument("--since")
    parser.add_argument("--until")
    parser.add_argument("--points", type=int, default=1500, help="time buckets per queue at most")
    args = parser.parse_args(argv)
    spark, source, owned = esb_spark.open_input(args, "es-broker lag_timeline", spark)
    since = esb_spark.parse_at(args.since) if args.since else None
    until = esb_spark.parse_at(args.until) if args.until else None
    series = [
        r.asDict()
        for r in esb_spark.lag_series(
            source, args.group, args.topic, since=since, until=until, points=args.points
        ).collect()
    ]
    marks = [
        m
        for m in reset_marks(source, args.group, args.topic)
        if (since is None or m["time"] >= since) and (until is None or m["time"] <= until)
    ]
    plot(series, marks, args.group, args.topic, args.out)
    print(
        f"wrote {args.out}: {len({(p['broker'], p['queue_id']) for p in series})} queues, {len(series)} points, "
        f"{len(marks)} resets"
    )
    if owned:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
