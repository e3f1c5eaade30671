"""The dashboard's ASGI application: HTML pages, each a view of the JSON API under /api.

`/groups/G` renders what `/api/groups/G` answers, and so on. Writes are POSTs
(the page's forms and the API alike); without `--allow-writes` the pages have
no write controls and every write answers 403.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from es_broker.acl.signing import Credentials
from es_broker.client.admin import Admin, AdminError
from es_broker.client.remoting_client import RemotingError
from es_broker.dashboard import charts
from es_broker.dashboard.views import Forbidden, Views, acl_refusal, now_ms
from es_broker.timetravel.timeparse import format_time, parse_time

HERE = Path(__file__).parent
READ_ONLY = "read-only dashboard: start it with --allow-writes to change anything"


@dataclass(frozen=True, slots=True)
class Settings:
    namesrv: str
    allow_writes: bool = False
    credentials: Credentials | None = None
    client_id: str = "dashboard"


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"])
    )
    env.filters["time"] = lambda ms: format_time(int(ms)) if ms and int(ms) > 0 else "-"
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, default=str)
    env.filters["cause"] = charts.cause_label
    return env


class PageError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _int(value: str | None, what: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise PageError(400, f"{what} must be an integer, not {value!r}") from None


def _time(value: str | None, what: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise PageError(400, f"{what}: {exc}") from None


def create_app(settings: Settings) -> Starlette:
    env = _templates()
    state: dict[str, Views] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with Admin.open(settings.namesrv, credentials=settings.credentials) as admin:
            state["views"] = Views(admin, settings.client_id)
            yield

    def views() -> Views:
        return state["views"]

    Handler = Callable[[Request], Awaitable[tuple[str, dict[str, Any]]]]

    def endpoint(handler: Handler, *, write: bool = False) -> tuple[Route, Route]:
        """The same data as a page (template) and as JSON; `write`: a POST refused unless allowed."""

        async def run(request: Request) -> tuple[str, dict[str, Any]] | Response:
            if write and not settings.allow_writes:
                return JSONResponse({"error": READ_ONLY}, status_code=403)
            try:
                return await handler(request)
            except PageError as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.status)
            except Forbidden as exc:
                return JSONResponse({"error": str(exc)}, status_code=403)
            except AdminError as exc:
                refused = acl_refusal(exc)
                if (
                    refused is not None
                ):  # the broker's ACL said no: the account's rights, not a fault
                    who = settings.credentials.access_key if settings.credentials else "(none)"
                    return JSONResponse(
                        {
                            "error": f"the broker refused this for the dashboard's account {who}: {refused}"
                        },
                        status_code=403,
                    )
                return JSONResponse({"error": str(exc)}, status_code=502)
            except (ValueError, RemotingError, OSError) as exc:
                return JSONResponse({"error": str(exc)}, status_code=502)

        async def api(request: Request) -> Response:
            answer = await run(request)
            if isinstance(answer, Response):
                return answer
            return JSONResponse(json.loads(json.dumps(answer[1], default=str)))

        async def page(request: Request) -> Response:
            answer = await run(request)
            if isinstance(answer, Response):
                error = json.loads(bytes(answer.body))["error"]
                html = env.get_template("error.html").render(
                    error=error, allow_writes=settings.allow_writes, namesrv=settings.namesrv
                )
                return HTMLResponse(html, status_code=answer.status_code)
            template, data = answer
            html = env.get_template(template).render(
                **data,
                data=data,
                allow_writes=settings.allow_writes,
                namesrv=settings.namesrv,
                client_id=settings.client_id,
                path=request.url.path,
            )
            return HTMLResponse(html)

        return api, page  # type: ignore[return-value]

    async def form(request: Request) -> dict[str, str]:
        """The POSTed fields (urlencoded form or JSON object), and the query string's."""
        fields = {k: v for k, v in request.query_params.items()}
        raw = await request.body()
        if raw:
            if request.headers.get("content-type", "").startswith("application/json"):
                fields.update({k: str(v) for k, v in json.loads(raw).items()})
            else:
                fields.update({k: v[-1] for k, v in parse_qs(raw.decode()).items()})
        return fields

    # ------------------------------------------------------------------ handlers
    async def cluster(request: Request) -> tuple[str, dict[str, Any]]:
        return "cluster.html", await views().cluster()

    async def topics(request: Request) -> tuple[str, dict[str, Any]]:
        return "topics.html", await views().topics()

    async def topic(request: Request) -> tuple[str, dict[str, Any]]:
        return "topic.html", await views().topic(request.path_params["topic"])

    async def create_topic(request: Request) -> tuple[str, dict[str, Any]]:
        f = await form(request)
        name = f.get("topic", "").strip()
        if not name:
            raise PageError(400, "give the topic's name")
        queues = _int(f.get("queues"), "queues") or 8
        perm = _int(f.get("perm"), "perm") or 6
        done = await views().create_topic(name, queues, perm)
        return "done.html", {"title": f"topic {name} created", "result": done}

    async def topic_perm(request: Request) -> tuple[str, dict[str, Any]]:
        f = await form(request)
        perm = _int(f.get("perm"), "perm")
        if perm is None:
            raise PageError(400, "give the new perm (2 W, 4 R, 6 RW)")
        topic_name = request.path_params["topic"]
        done = await views().update_topic_perm(topic_name, perm)
        return "done.html", {"title": f"perm of {topic_name} changed", "result": done}

    async def groups(request: Request) -> tuple[str, dict[str, Any]]:
        return "groups.html", await views().groups()

    async def group(request: Request) -> tuple[str, dict[str, Any]]:
        return "group.html", await views().group(request.path_params["group"])

    async def explain(request: Request) -> tuple[str, dict[str, Any]]:
        topic_name = request.query_params.get("topic")
        if not topic_name:
            raise PageError(400, "give ?topic=")
        return "explain.html", await views().explain(request.path_params["group"], topic_name)

    async def timeline(request: Request) -> tuple[str, dict[str, Any]]:
        group_name = request.path_params["group"]
        p = request.query_params
        since, until = _time(p.get("since"), "since"), _time(p.get("until"), "until")
        at = _time(p.get("at"), "at")
        points = min(max(_int(p.get("points"), "points") or 120, 2), 1000)
        data = await views().timeline(group_name, since, until, points)
        samples = [s for b in data["brokers"] for s in b["samples"]]
        events = [e for b in data["brokers"] for e in b["events"]]
        window = (min(s["at"] for s in samples), max(s["at"] for s in samples)) if samples else None
        chosen = at if at is not None else (window[1] if window else now_ms())
        table = await views().offsets_at(group_name, chosen)
        data.update(at=chosen, table=table, window=window)
        base = f"/groups/{quote(group_name, safe='')}/timeline?"
        if since is not None:
            base += f"since={since}&"
        if until is not None:
            base += f"until={until}&"
        lines = []
        several = len(data["brokers"]) > 1
        for b in data["brokers"]:
            moments = [s["at"] for s in b["samples"]]
            for q in b.get("queues", []):
                name = f"{q['topic']} #{q['queue_id']}" + (
                    f" @{b['brokerName']}" if several else ""
                )
                lines.append((name, moments, q))
        lines.sort(key=lambda line: line[0])
        offset_series, lag_series = [], []
        for i, (name, moments, q) in enumerate(lines):
            colour = charts.queue_colour(i, len(lines))
            offset_series.append(
                charts.Series(name, colour, list(zip(moments, q["offsets"], strict=True)), "offset")
            )
            lag_series.append(
                charts.Series(name, colour, list(zip(moments, q["lags"], strict=True)), "lag")
            )
        moments = sorted({s["at"] for s in samples})
        data["chart"] = Markup(
            charts.timeline_svg(
                offset_series,
                events,
                chosen=chosen,
                link=base + "at=",
                moments=moments,
                title="consumer offset per queue",
            )
        )
        data["lag_chart"] = Markup(
            charts.timeline_svg(
                lag_series,
                events,
                chosen=chosen,
                link=base + "at=",
                moments=moments,
                title="lag per queue (max offset - consumer offset)",
            )
        )
        data["queue_legend"] = [{"name": s.name, "colour": s.colour} for s in offset_series]
        data["cause_legend"] = charts.cause_legend(events)
        data["base"] = base
        return "timeline.html", data

    async def offsets_at(request: Request) -> tuple[str, dict[str, Any]]:
        at = _time(request.query_params.get("at"), "at")
        if at is None:
            raise PageError(
                400, "give ?at= (now, epoch millis, yyyy-MM-dd#HH:mm:ss:SSS or ISO 8601)"
            )
        return "offsets.html", await views().offsets_at(request.path_params["group"], at)

    async def messages(request: Request) -> tuple[str, dict[str, Any]]:
        p = request.query_params
        data = await views().find_messages(
            msg_id=p.get("msgId") or None,
            topic=p.get("topic") or None,
            key=p.get("key") or None,
            broker=p.get("broker") or None,
            queue_id=_int(p.get("queueId"), "queueId"),
            offset=_int(p.get("offset"), "offset"),
        )
        data["query"] = dict(p)
        return "messages.html", data

    async def trace(request: Request) -> tuple[str, dict[str, Any]]:
        return "trace.html", await views().trace(request.path_params["msg_id"])

    async def dead_letters(request: Request) -> tuple[str, dict[str, Any]]:
        return "dlq.html", await views().dead_letters(request.path_params["group"])

    async def redrive(request: Request) -> tuple[str, dict[str, Any]]:
        f = await form(request)
        target = f.get("target") or "retry"
        if target not in ("retry", "original"):
            raise PageError(400, "target is retry or original")
        dry_run = f.get("confirm") != "yes"
        data = await views().redrive(request.path_params["group"], target, dry_run)
        return "redrive.html", data

    async def reset_form(request: Request) -> tuple[str, dict[str, Any]]:
        group_name = request.path_params["group"]
        return "reset.html", {"group": group_name, "plan": None, "fields": {}}

    async def reset(request: Request) -> tuple[str, dict[str, Any]]:
        f = await form(request)
        group_name = request.path_params["group"]
        topic_name = f.get("topic", "").strip()
        kind = f.get("kind") or "time"
        if not topic_name or kind not in ("time", "offset", "shift", "earliest", "latest"):
            raise PageError(400, "give a topic and a kind: time, offset, shift, earliest, latest")
        value = (
            _time(f.get("value"), "time")
            if kind == "time"
            else (_int(f.get("value"), "value") or 0)
        )
        if value is None:
            raise PageError(400, "give the time to reset to")
        mode = f.get("mode") or None
        if mode not in (None, "compat", "server_side"):
            raise PageError(400, "mode is compat or server_side")
        dry_run = f.get("confirm") != "yes"
        plan = await views().reset(
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
        return "reset.html", {"group": group_name, "plan": plan, "fields": fields}

    pages: list[tuple[str, Handler, list[str], bool]] = [
        ("/", cluster, ["GET"], False),
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
    routes: list[Route | Mount] = []
    for path, handler, methods, write in pages:
        api, page = endpoint(handler, write=write)
        routes.append(Route("/api" + ("" if path == "/" else path) or "/api", api, methods=methods))
        routes.append(Route(path, page, methods=methods))
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    return Starlette(routes=routes, lifespan=lifespan)
