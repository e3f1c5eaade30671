"""The dashboard's pages: each handler answers (template, data) from the request's `Views`.

`endpoints.endpoint` serves every one twice, as the page and as JSON under /api; `PAGES`
is the table of their paths, methods and whether they write.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request

from es_broker.client.admin_timetravel import BrokerAnswer
from es_broker.dashboard.endpoints import Handler
from es_broker.dashboard.security import CSRF_FIELD
from es_broker.dashboard.throughput import WINDOWS, shortest_step, throughput_page
from es_broker.dashboard.timeline_page import timeline_page
from es_broker.dashboard.views import Views, now_ms
from es_broker.dashboard.web import PageError, _int, _time, form
from es_broker.remoting.es_headers import RESET_KINDS, RESET_MODES
from es_broker.remoting.query_bodies import OffsetTimelineBody
from es_broker.remoting.requests import LEGAL_NAME, TOPIC_BYTES_MAX

#: the query fields of the messages page's searches
MESSAGE_FIELDS = ("msgId", "topic", "key", "broker", "queueId", "offset")
#: the fields of a search by queue and offset, in words
BY_OFFSET = {
    "topic": "a topic",
    "broker": "a broker",
    "queueId": "a queueId",
    "offset": "an offset",
}


def views(request: Request) -> Views:
    """The views acting for this request's operator (set by `endpoints.answer_of`)."""
    found: Views = request.state.views
    return found


async def cluster(request: Request) -> tuple[str, dict[str, Any]]:
    return "cluster.html", await views(request).cluster()


async def topics(request: Request) -> tuple[str, dict[str, Any]]:
    return "topics.html", await views(request).topics()


async def topic(request: Request) -> tuple[str, dict[str, Any]]:
    return "topic.html", await views(request).topic(request.path_params["topic"])


async def create_topic(request: Request) -> tuple[str, dict[str, Any]]:
    f = await form(request)
    name = f.get("topic", "").strip()
    if not name:
        raise PageError(400, "give the topic's name")
    if len(name) > TOPIC_BYTES_MAX or not LEGAL_NAME.match(name):
        raise PageError(
            400,
            f"topic name {name!r}: at most {TOPIC_BYTES_MAX} of the letters, digits and"
            " % | _ - (RocketMQ's TopicValidator)",
        )
    queues = _int(f.get("queues"), "queues") or 8
    if queues < 1:
        raise PageError(400, f"queues is 1 or more, not {queues}")
    perm = _checked_perm(_int(f.get("perm"), "perm") or 6)
    done = await views(request).create_topic(name, queues, perm)
    return "done.html", {"title": f"topic {name} created", "result": done}


async def topic_perm(request: Request) -> tuple[str, dict[str, Any]]:
    f = await form(request)
    perm = _int(f.get("perm"), "perm")
    if perm is None:
        raise PageError(400, "give the new perm (2 W, 4 R, 6 RW)")
    _checked_perm(perm)
    topic_name = request.path_params["topic"]
    done = await views(request).update_topic_perm(topic_name, perm)
    return "done.html", {"title": f"perm of {topic_name} changed", "result": done}


def _checked_perm(perm: int) -> int:
    """A perm the brokers take: PermName's bits, 0..7 (2 W, 4 R, 6 RW)."""
    if not 0 <= perm <= 7:
        raise PageError(400, f"perm is 0..7 (2 W, 4 R, 6 RW), not {perm}")
    return perm


async def groups(request: Request) -> tuple[str, dict[str, Any]]:
    return "groups.html", await views(request).groups()


async def group(request: Request) -> tuple[str, dict[str, Any]]:
    return "group.html", await views(request).group(request.path_params["group"])


async def explain(request: Request) -> tuple[str, dict[str, Any]]:
    topic_name = request.query_params.get("topic")
    if not topic_name:
        raise PageError(400, "give ?topic=")
    return "explain.html", await views(request).explain(request.path_params["group"], topic_name)


async def timeline(request: Request) -> tuple[str, dict[str, Any]]:
    group_name = request.path_params["group"]
    p = request.query_params
    since, until = _time(p.get("since"), "since"), _time(p.get("until"), "until")
    at = _time(p.get("at"), "at")
    points = min(max(_int(p.get("points"), "points") or 120, 2), 1000)
    data = await views(request).timeline(group_name, since, until, points)
    answers: list[BrokerAnswer[OffsetTimelineBody]] = data["brokers"]
    samples = [s for b in answers for s in b.body.samples]
    window = (min(s.at for s in samples), max(s.at for s in samples)) if samples else None
    chosen = at if at is not None else (window[1] if window else now_ms())
    table = await views(request).offsets_at(group_name, chosen)
    data.update(at=chosen, table=table, window=window)
    base = f"/groups/{quote(group_name, safe='')}/timeline?"
    if since is not None:
        base += f"since={since}&"
    if until is not None:
        base += f"until={until}&"
    data.update(timeline_page(data, chosen=chosen, base=base, show_noop=p.get("noop") == "1"))
    return "timeline.html", data


async def offsets_at(request: Request) -> tuple[str, dict[str, Any]]:
    at = _time(request.query_params.get("at"), "at")
    if at is None:
        raise PageError(400, "give ?at= (now, epoch millis, yyyy-MM-dd#HH:mm:ss:SSS or ISO 8601)")
    return "offsets.html", await views(request).offsets_at(request.path_params["group"], at)


async def messages(request: Request) -> tuple[str, dict[str, Any]]:
    """The messages page's three searches (by id, by key, by queue and offset); a search with
    a field missing is refused with the field it needs, never answered with nothing."""
    p = request.query_params
    fields = {k: (p.get(k) or "").strip() or None for k in MESSAGE_FIELDS}
    if fields["msgId"] is None:
        if any(fields[k] is not None for k in ("broker", "queueId", "offset")):
            missing = [words for k, words in BY_OFFSET.items() if fields[k] is None]
            if missing:
                raise PageError(
                    400,
                    f"give {' and '.join(missing)}: a search by queue and offset needs "
                    + ", ".join(BY_OFFSET.values()),
                )
        elif fields["key"] is not None and fields["topic"] is None:
            raise PageError(400, "give a topic: a key is looked up in one topic")
        elif fields["topic"] is not None and fields["key"] is None:
            raise PageError(400, "give a key, or a broker name, queue and offset, with the topic")
    data = await views(request).find_messages(
        msg_id=fields["msgId"],
        topic=fields["topic"],
        key=fields["key"],
        broker=fields["broker"],
        queue_id=_int(fields["queueId"], "queueId"),
        offset=_int(fields["offset"], "offset"),
    )
    data["query"] = dict(p)
    return "messages.html", data


async def trace(request: Request) -> tuple[str, dict[str, Any]]:
    return "trace.html", await views(request).trace(request.path_params["msg_id"])


async def dead_letters(request: Request) -> tuple[str, dict[str, Any]]:
    return "dlq.html", await views(request).dead_letters(request.path_params["group"])


async def redrive(request: Request) -> tuple[str, dict[str, Any]]:
    f = await form(request)
    target = f.get("target") or "retry"
    if target not in ("retry", "original"):
        raise PageError(400, "target is retry or original")
    dry_run = f.get("confirm") != "yes"
    data = await views(request).redrive(request.path_params["group"], target, dry_run)
    return "redrive.html", data


async def throughput(request: Request) -> tuple[str, dict[str, Any]]:
    """In/out TPS per broker and per topic over a window, from the records (B-368)."""
    p = request.query_params
    window = p.get("window") or "1h"
    if window not in WINDOWS:
        raise PageError(400, f"window is one of {', '.join(WINDOWS)}")
    until = _time(p.get("until"), "until") or now_ms()
    since = _time(p.get("since"), "since") or until - WINDOWS[window] * 60_000
    if since >= until:
        raise PageError(400, "since must come before until")
    step = _int(p.get("step"), "step (minutes)")
    if step is not None and not 1 <= step <= 1440:
        raise PageError(400, "step is 1..1440 minutes")
    shown_window, _, shown_step = (p.get("stepFor") or "").partition("/")
    if shown_window and shown_window != window and shown_step == str(step):
        step = None  # the step the form echoed was the old window's: the new one picks its own
    if step is not None:
        step = max(step, shortest_step(since, until))
    topic_name = (p.get("topic") or "").strip() or None
    data = await views(request).throughput(since, until, step, topic_name)
    data.update(throughput_page(data), window=window, windows=list(WINDOWS))
    data.update(request_since=p.get("since"), request_until=p.get("until"))
    return "throughput.html", data


async def reset_form(request: Request) -> tuple[str, dict[str, Any]]:
    group_name = request.path_params["group"]
    return "reset.html", {"group": group_name, "plan": None, "fields": {}}


async def reset(request: Request) -> tuple[str, dict[str, Any]]:
    f = await form(request)
    group_name = request.path_params["group"]
    topic_name = f.get("topic", "").strip()
    kind = f.get("kind") or "time"
    if not topic_name or kind not in RESET_KINDS:
        raise PageError(400, f"give a topic and a kind: {', '.join(RESET_KINDS)}")
    value = (
        _time(f.get("value"), "time") if kind == "time" else (_int(f.get("value"), "value") or 0)
    )
    if value is None:
        raise PageError(400, "give the time to reset to")
    mode = f.get("mode") or None
    if mode not in (None, *RESET_MODES):
        raise PageError(400, f"mode is {' or '.join(RESET_MODES)}")
    dry_run = f.get("confirm") != "yes"
    plan = await views(request).reset(
        group_name,
        topic_name,
        kind,
        value,
        force=f.get("force", "true") != "false",
        mode=mode,
        dry_run=dry_run,
    )
    fields = {**f, "value": str(value)}
    fields.pop("confirm", None)
    fields.pop(CSRF_FIELD, None)
    return "reset.html", {"group": group_name, "plan": plan, "fields": fields}


#: path, handler, methods, whether it writes (refused unless --allow-writes)
PAGES: list[tuple[str, Handler, list[str], bool]] = [
    ("/", cluster, ["GET"], False),
    ("/throughput", throughput, ["GET"], False),
    ("/topics", topics, ["GET"], False),
    ("/topics", create_topic, ["POST"], True),
    ("/topics/{topic}", topic, ["GET"], False),
    ("/topics/{topic}/perm", topic_perm, ["POST"], True),
    ("/groups", groups, ["GET"], False),
    ("/groups/{group}", group, ["GET"], False),
    ("/groups/{group}/explain", explain, ["GET"], False),
    ("/groups/{group}/timeline", timeline, ["GET"], False),
    ("/groups/{group}/offsets", offsets_at, ["GET"], False),
    ("/groups/{group}/dlq", dead_letters, ["GET"], False),
    ("/groups/{group}/dlq/redrive", redrive, ["POST"], True),
    ("/groups/{group}/reset", reset_form, ["GET"], False),
    ("/groups/{group}/reset", reset, ["POST"], True),
    ("/messages", messages, ["GET"], False),
    ("/messages/{msg_id}/trace", trace, ["GET"], False),
]
