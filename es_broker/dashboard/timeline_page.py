"""The dashboard's offset timeline page (B-292, B-514): OFFSET_TIMELINE answers drawn as SVG.

Each queue is a line of its own colour and dash, drawn a pixel or two off the others
(`charts.SPREAD`), so queues with equal offsets stay distinguishable; the legend shows
each line as drawn. The time box shows the chosen moment as a readable local time (ISO
8601, which it also takes); offset changes that move nothing (old = new) are hidden
unless asked for (`?noop=1`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from es_broker.client.admin_timetravel import BrokerAnswer
from es_broker.dashboard import charts
from es_broker.remoting.query_bodies import OffsetHistoryBody, OffsetTimelineBody


def input_time(ms: int) -> str:
    """A moment as the time box shows it and parse_time reads it back: local ISO 8601, ms."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone()
    return moment.isoformat(sep=" ", timespec="milliseconds")


def timeline_page(
    data: dict[str, Any], *, chosen: int, base: str, show_noop: bool
) -> dict[str, Any]:
    """The charts, legends and change rows of `Views.timeline`'s answer at moment `chosen`."""
    answers: list[BrokerAnswer[OffsetTimelineBody]] = data["brokers"]
    samples = [s for b in answers for s in b.body.samples]
    events = [e for b in answers for e in b.body.events]
    lines = []
    several = len(answers) > 1
    for b in answers:
        moments = [s.at for s in b.body.samples]
        for q in b.body.queues:
            name = f"{q.topic} #{q.queue_id}" + (f" @{b.broker_name}" if several else "")
            lines.append((name, moments, q))
    lines.sort(key=lambda line: line[0])
    offset_series, lag_series = [], []
    for i, (name, moments, q) in enumerate(lines):
        colour = charts.queue_colour(i, len(lines))
        dash = charts.queue_dash(i)
        offsets = list(zip(moments, q.offsets, strict=True))
        offset_series.append(charts.Series(name, colour, offsets, "offset", dash, i))
        lags = list(zip(moments, q.lags, strict=True))
        lag_series.append(charts.Series(name, colour, lags, "lag", dash, i))
    moments = sorted({s.at for s in samples})
    charted = {}
    for key, series, title in (
        ("chart", offset_series, "consumer offset per queue"),
        ("lag_chart", lag_series, "lag per queue (max offset - consumer offset)"),
    ):
        svg = charts.timeline_svg(
            series, events, chosen=chosen, link=base + "at=", moments=moments, title=title
        )
        charted[key] = Markup(svg)
    history: list[BrokerAnswer[OffsetHistoryBody]] = data["history"]
    entries = [e for h in history for e in reversed(h.body.entries)]
    changes = [e for e in entries if show_noop or not is_noop(e.old, e.new, e.queue_id)]
    return {
        **charted,
        "queue_legend": [
            {"name": s.name, "colour": s.colour, "dash": s.dash} for s in offset_series
        ],
        "cause_legend": charts.cause_legend(events),
        "base": base,
        "at_text": input_time(chosen),
        "changes": changes,
        "noop_hidden": len(entries) - len(changes),
        "show_noop": show_noop,
        "more_history": any(h.body.more for h in history),
    }


def is_noop(old: int | None, new: int | None, queue_id: int | None) -> bool:
    """A queue's offset change that moves nothing (a commit of the offset it already had)."""
    return queue_id is not None and old is not None and old == new
