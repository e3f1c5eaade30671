"""The dashboard's throughput page (B-369): STATS_HISTORY answers drawn as SVG charts."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from es_broker.dashboard import charts

#: the windows the throughput page offers, in minutes
WINDOWS = {"15m": 15, "1h": 60, "6h": 360, "24h": 1440, "7d": 7 * 1440}
#: the most intervals a STATS_HISTORY answer has (the broker refuses a shorter step)
MAX_INTERVALS = 10_000


def shortest_step(since: int, until: int) -> int:
    """The shortest step, in minutes, the broker answers for since..until: the window's
    minutes (whole minutes from since's to until's, as STATS_HISTORY counts them) in at most
    MAX_INTERVALS intervals."""
    minutes = -(-until // 60_000) - since // 60_000
    return max(1, -(-minutes // MAX_INTERVALS))


def throughput_page(data: dict[str, Any]) -> dict[str, Any]:
    """The charts and topic totals of `Views.throughput`'s answer: the broker's in and out, and
    each topic's in and out, one point per interval (several brokers: a line each)."""
    broker_series, in_series, out_series = [], [], []
    totals: dict[str, list[int]] = {}
    step_ms = 60_000
    answered = [b for b in data["brokers"] if "history" in b]
    several = len(data["brokers"]) > 1
    for i, b in enumerate(answered):
        h = b["history"]
        step_ms = h["step"]
        moments = [h["since"] + k * h["step"] for k in range(len(h["broker"]["in_messages"]))]
        colour = charts.queue_colour(i, len(answered))
        for kind in ("in", "out"):
            counts = h["broker"][f"{kind}_messages"]
            broker_series.append(
                charts.Series(
                    b["brokerName"], colour, list(zip(moments, counts, strict=True)), kind
                )
            )
        for t in h["topics"]:
            name = t["topic"] + (f" @{b['brokerName']}" if several else "")
            acc = totals.setdefault(name, [0, 0])
            acc[0] += sum(t["in_messages"])
            acc[1] += sum(t["out_messages"])
            in_series.append((name, list(zip(moments, t["in_messages"], strict=True))))
            out_series.append((name, list(zip(moments, t["out_messages"], strict=True))))
    names = sorted(totals)
    colour_of = {n: charts.queue_colour(i, len(names)) for i, n in enumerate(names)}
    return dict(
        step=step_ms // 60_000,
        topics=[
            {"topic": n, "in": totals[n][0], "out": totals[n][1], "colour": colour_of[n]}
            for n in names
        ],
        broker_chart=Markup(
            charts.throughput_svg(
                broker_series,
                step_ms,
                title="messages in and out per broker",
                chart_id="broker-tps",
            )
        ),
        in_chart=Markup(
            charts.throughput_svg(
                [charts.Series(n, colour_of[n], pts, "in") for n, pts in in_series],
                step_ms,
                title="messages in per topic",
                chart_id="topic-in-tps",
            )
        ),
        out_chart=Markup(
            charts.throughput_svg(
                [charts.Series(n, colour_of[n], pts, "out") for n, pts in out_series],
                step_ms,
                title="messages out per topic (delivered to groups)",
                chart_id="topic-out-tps",
            )
        ),
    )
