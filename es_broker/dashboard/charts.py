"""Charts as SVG, drawn on the server: nothing to download, nothing to build."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from es_broker.remoting.query_bodies import HistoryRow
from es_broker.timetravel.timeparse import format_time

WIDTH, HEIGHT = 960, 334
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 34, 40  # the title sits in the band above the plot

#: how a history entry's cause is drawn: (colour, label). The keys are the cause strings of the
#: history rows the broker sends (query_bodies.py): the dashboard speaks the wire, not the log.
CAUSE_STYLE: dict[str, tuple[str, str]] = {
    "reset_requested": ("#d9480f", "reset"),
    "reset": ("#d9480f", "reset"),
    "slave_offsets_merged": ("#7048e8", "merge after fail-over"),
    "pull_offset_moved": ("#1098ad", "retention correction"),
    "commitlog_expired": ("#868e96", "retention"),
    "offset_commit_ignored": ("#e67700", "commit ignored"),
    "clone": ("#5c940d", "clone"),
    "admin": ("#c2255c", "admin"),
    "redrive": ("#5f3dc4", "re-drive"),
    "import": ("#2b8a3e", "imported from RocketMQ"),  # import rocketmq (B-520)
}


def cause_label(cause: str) -> str:
    return CAUSE_STYLE.get(cause, ("#495057", cause))[1]


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    colour: str
    points: list[tuple[int, int | None]]  # (time ms, value); None: no value then (a gap)
    kind: str = ""
    dash: str = ""  # stroke-dasharray ("": solid)
    index: int = 0  # its place among the lines: which SPREAD offset it is drawn at


#: dash patterns cycled through the queues' lines, so lines of one colour family differ
DASHES = ("", "7,3", "2,3", "10,3,2,3", "4,4", "1,2")
#: pixels a queue's line is drawn above or below its value, so equal lines lie side by side
SPREAD = (0.0, 2.0, -2.0, 4.0, -4.0)


def queue_dash(i: int) -> str:
    return DASHES[i % len(DASHES)]


def queue_colour(i: int, n: int) -> str:
    """Distinct colours for n lines: hues spread by the golden angle, two lightness bands."""
    hue = (i * 137.508) % 360
    light = 38 if i % 2 == 0 else 52
    return f"hsl({hue:.0f},70%,{light}%)"


def _scale(lo: float, hi: float, out_lo: float, out_hi: float) -> Callable[[float], float]:
    span = hi - lo or 1
    return lambda v: out_lo + (v - lo) * (out_hi - out_lo) / span


def cause_legend(events: Sequence[HistoryRow]) -> list[dict[str, Any]]:
    """Each cause on the chart: its colour, label, how many marks and by whom."""
    found: dict[str, dict[str, Any]] = {}
    for e in events:
        colour, label = CAUSE_STYLE.get(e.cause, ("#495057", e.cause))
        entry = found.setdefault(
            e.cause,
            {"cause": e.cause, "colour": colour, "label": label, "count": 0, "authors": []},
        )
        entry["count"] += 1
        who = e.requester or "(unknown)"
        if who not in entry["authors"]:
            entry["authors"].append(who)
    return list(found.values())


def _path(
    points: list[tuple[int, int | None]], x: Callable[[float], float], y: Callable[[float], float]
) -> str:
    out: list[str] = []
    pen_up = True
    for t, v in points:
        if v is None:
            pen_up = True
            continue
        out.append(f"{'M' if pen_up else 'L'}{x(t):.1f},{y(v):.1f}")
        pen_up = False
    return " ".join(out)


def _value_step(top: float) -> int:
    """A grid step of 1, 2 or 5 times a power of ten, giving at most four steps up to `top`."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if top <= 4 * step * m:
                return step * m
        step *= 10


def timeline_svg(
    series: list[Series],
    events: Sequence[HistoryRow],
    *,
    chosen: int | None,
    link: str,
    moments: list[int] | None = None,
    title: str = "offsets and lag over time",
) -> str:
    """One line per series (a queue's offset or lag); a vertical mark per event (cause, author).

    `chosen` is drawn dashed. Each sample moment is a link (`link` + its time)
    that shows the whole offset table at that moment.
    """
    times = [t for s in series for t, _ in s.points] + [e.time for e in events]
    if chosen is not None:
        times.append(chosen)
    if not times:
        return '<p class="empty">no offsets recorded for this group yet</p>'
    t0, t1 = min(times), max(times)
    values = [v for s in series for _, v in s.points if v is not None] or [0]
    step_v = _value_step(max(max(values), 1))
    v1 = step_v * -(-max(max(values), 1) // step_v)  # the top grid line: a whole number of steps
    x = _scale(t0, t1, LEFT, WIDTH - RIGHT)
    y = _scale(0, v1, HEIGHT - BOTTOM, TOP)
    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(title)}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{HEIGHT - TOP - BOTTOM}" '
        'fill="#fbfcfd" stroke="#ced4da"/>',
        f'<text x="{LEFT}" y="{TOP - 12}" class="axis title">{escape(title)}</text>',
    ]
    for v in range(0, int(v1) + 1, int(step_v)):  # value grid, on whole offsets
        yy = y(v)
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e9ecef"/>'
            f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" class="axis">{v}</text>'
        )
    for i in range(5):  # time axis: the end labels align inwards, so none runs off the chart
        t = t0 + (t1 - t0) * i // 4
        xx = x(t)
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        out.append(
            f'<text x="{xx:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="{anchor}" class="axis">'
            f"{escape(format_time(t)[11:19])}</text>"
        )
    out.append(
        f'<text x="{LEFT}" y="{HEIGHT - 6}" class="axis">{escape(format_time(t0))} .. '
        f"{escape(format_time(t1))}</text>"
    )
    step = (WIDTH - LEFT - RIGHT) / max(len(moments or ()), 1)
    for t in moments or ():  # the time control: a click on a column shows the table then
        out.append(
            f'<a href="{escape(link)}{t}" class="moment"><rect x="{x(t) - step / 2:.1f}" y="{TOP}" '
            f'width="{step:.1f}" height="{HEIGHT - TOP - BOTTOM}" fill="transparent">'
            f"<title>offset table at {escape(format_time(t))}</title></rect></a>"
        )
    for s in series:
        path = _path(s.points, x, y)
        if not path:
            continue
        last = next((v for _, v in reversed(s.points) if v is not None), None)
        dy = SPREAD[s.index % len(SPREAD)]
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        out.append(
            f'<path d="{path}" fill="none" stroke="{s.colour}" stroke-width="1.8"{dash} '
            f'transform="translate(0,{dy:g})" '
            f'class="series" data-series="{escape(s.name)}" data-kind="{escape(s.kind)}">'
            f"<title>{escape(s.name)} {escape(s.kind)}: {last} at the end</title></path>"
        )
    for n, e in enumerate(events):
        colour, label = CAUSE_STYLE.get(e.cause, ("#495057", e.cause))
        xx = x(e.time)
        who = e.requester or "(unknown)"
        out.append(
            f'<g class="event" data-cause="{escape(e.cause)}" data-requester="{escape(who)}">'
            f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="{colour}" '
            'stroke-width="2"/>'
            f'<polygon points="{xx - 5:.1f},{TOP} {xx + 5:.1f},{TOP} {xx:.1f},{TOP + 8}" fill="{colour}"/>'
            f'<text x="{xx + 4 if xx < WIDTH / 2 else xx - 4:.1f}" y="{TOP + 14 + 14 * (n % 4)}" '
            f'text-anchor="{"start" if xx < WIDTH / 2 else "end"}" fill="{colour}" class="marker">'
            f"{escape(label)} by {escape(who)}</text>"
            f"<title>#{e.seq} {escape(label)} by {escape(who)} at {escape(format_time(e.time))}"
            "</title></g>"
        )
    if chosen is not None:
        xx = x(chosen)
        out.append(
            f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="#212529" '
            'stroke-dasharray="5,4" class="chosen"/>'
        )
    out.append("</svg>")
    return "".join(out)


def throughput_svg(series: list[Series], step_ms: int, *, title: str, chart_id: str) -> str:
    """Messages per second per interval, one line per series (a broker's or a topic's in or out).

    Each point is the interval's count over its seconds, drawn at the interval's start; the
    circle of a point carries the interval (`data-time`, millis), its count (`data-count`)
    and the rate drawn (`data-tps`), and says them in its tooltip.
    """
    times = [t for s in series for t, _ in s.points]
    if not times:
        return f'<p class="empty" id="{escape(chart_id)}">no messages counted in the window</p>'
    seconds = step_ms / 1000
    t0, t1 = min(times), max(times) + step_ms
    rates = [v / seconds for s in series for _, v in s.points if v is not None] or [0.0]
    top = max(max(rates), 1.0)
    grid = _value_step(top) if top >= 4 else 1
    v1 = grid * -(-top // grid)
    x = _scale(t0, t1, LEFT, WIDTH - RIGHT)
    y = _scale(0, v1, HEIGHT - BOTTOM, TOP)
    out = [
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{escape(title)}" data-step="{step_ms}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{HEIGHT - TOP - BOTTOM}" '
        'fill="#fbfcfd" stroke="#ced4da"/>',
        f'<text x="{LEFT}" y="{TOP - 12}" class="axis title">{escape(title)}</text>',
    ]
    for v in range(0, int(v1) + 1, int(grid)):
        yy = y(v)
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e9ecef"/>'
            f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" class="axis">{v}/s</text>'
        )
    for i in range(5):
        t = t0 + (t1 - t0) * i // 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        out.append(
            f'<text x="{x(t):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="{anchor}" class="axis">'
            f"{escape(format_time(t)[11:16])}</text>"
        )
    out.append(
        f'<text x="{LEFT}" y="{HEIGHT - 6}" class="axis">{escape(format_time(t0))} .. '
        f"{escape(format_time(t1))}, intervals of {step_ms // 60_000} min</text>"
    )
    for s in series:
        counted = [(t, v) for t, v in s.points if v is not None]
        path = " ".join(
            f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(v / seconds):.1f}"
            for i, (t, v) in enumerate(counted)
        )
        dash = ' stroke-dasharray="6,3"' if s.kind == "out" else ""
        out.append(
            f'<g class="series" data-series="{escape(s.name)}" data-kind="{escape(s.kind)}">'
            f'<path d="{path}" fill="none" stroke="{s.colour}" stroke-width="1.6"{dash}/>'
        )
        for t, v in counted:
            r = v / seconds
            out.append(
                f'<circle cx="{x(t):.1f}" cy="{y(r):.1f}" r="2.5" fill="{s.colour}" class="point" '
                f'data-time="{t}" data-count="{v}" data-tps="{r:.4f}">'
                f"<title>{escape(s.name)} {escape(s.kind)} {escape(format_time(t))}: {v} messages, "
                f"{r:.2f}/s</title></circle>"
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)
