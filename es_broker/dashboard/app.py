"""The dashboard's ASGI application: HTML pages, each a view of the JSON API under /api.

`/groups/G` renders what `/api/groups/G` answers, and so on. Writes are POSTs
(the page's forms and the API alike); without `--allow-writes` the pages have
no write controls and every write answers 403.

Who may use it (B-340..B-344): with an `--auth-file` its operators sign in; with ACL on
the brokers each operator signs in with an access key and secret, and every page acts
with that account; otherwise the dashboard is open (writes only on loopback). Every
POST needs the session's CSRF token and a same-origin Origin (or Referer).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio.to_thread
from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from es_broker.acl.signing import Credentials
from es_broker.client.admin import Admin, AdminError
from es_broker.client.admin_timetravel import BrokerAnswer
from es_broker.dashboard import charts
from es_broker.dashboard.security import (
    CSRF_FIELD,
    CSRF_HEADER,
    AnonymousTokens,
    Session,
    SessionStore,
    csrf_matches,
    hash_password,
    same_origin,
    verify_password,
)
from es_broker.dashboard.throttle import LoginThrottle, metrics_route
from es_broker.dashboard.throughput import WINDOWS, throughput_page
from es_broker.dashboard.timeline_page import timeline_page
from es_broker.dashboard.views import Forbidden, Views, acl_refusal, acting_as, now_ms
from es_broker.dashboard.web import (
    PageError,
    SecureHeaders,
    Settings,
    _int,
    _time,
    client_address,
    form,
    safe_next,
)
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.body_view import json_view
from es_broker.remoting.es_headers import RESET_KINDS, RESET_MODES
from es_broker.remoting.query_bodies import OffsetTimelineBody
from es_broker.timetravel.timeparse import format_time

HERE = Path(__file__).parent
READ_ONLY = "read-only dashboard: start it with --allow-writes to change anything"
#: checked against when the name is unknown, so an unknown name costs what a wrong password does
UNKNOWN_OPERATOR = hash_password(secrets.token_urlsafe(16))


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"])
    )
    env.filters["time"] = lambda ms: format_time(int(ms)) if ms and int(ms) > 0 else "-"
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, default=json_view)
    env.filters["cause"] = charts.cause_label
    return env


def create_app(settings: Settings) -> Starlette:
    env = _templates()
    sessions = SessionStore(settings.session_idle)  # signed-in operators only (B-512)
    anonymous = AnonymousTokens(settings.session_idle)
    registry = CollectorRegistry(auto_describe=True)
    throttle = LoginThrottle(registry)
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with Admin.open(settings.namesrv, credentials=settings.credentials) as admin:
            state["admin"] = admin
            state["writes"] = anyio.Lock()  # one write at a time, named by its operator
            yield

    def views(request: Request) -> Views:
        found: Views = request.state.views  # set by the lifespan above
        return found

    async def acl_on() -> bool:
        """Whether the brokers have ACL on (ACCOUNT_SCOPE, asked once a broker answers)."""
        if "acl" not in state:
            admin: Admin = state["admin"]
            try:
                answers = await admin.account_scope()
            except AdminError as exc:
                if acl_refusal(exc) is None:
                    raise
                state["acl"] = True  # an unsigned (or unknown) dashboard account is refused
            else:
                if not answers:
                    return False  # no broker yet: nothing to act on, ask again next time
                state["acl"] = any(a.body.acl_enabled for a in answers)
        return bool(state["acl"])

    async def login_mode() -> str | None:
        """ "file": operators of --auth-file; "acl": the operator's own access key; None: open."""
        if settings.accounts:
            return "file"
        return "acl" if await acl_on() else None

    def session_of(request: Request) -> Session | None:
        token = request.cookies.get(settings.cookie_name)
        open_ = settings.accounts is None and state.get("acl") is False
        return sessions.get(token) or anonymous.get(token, signed_in=open_)

    def set_cookie(response: Response, token: str) -> None:
        response.set_cookie(
            settings.cookie_name,
            token,
            httponly=True,
            samesite="strict",
            secure=settings.tls,
            path="/",
        )

    def may_write(session: Session | None) -> bool:
        return settings.allow_writes and (session is None or session.admin)

    def own_origin(request: Request) -> str:
        return f"{request.url.scheme}://{request.headers.get('host', '')}"

    async def refusal_of_post(request: Request, session: Session | None) -> str | None:
        """Why a POST is refused (B-341): another origin, no session, or no matching CSRF token."""
        if not same_origin(
            own_origin(request), request.headers.get("origin"), request.headers.get("referer")
        ):
            return "refused: this request did not come from the dashboard's own pages (Origin)"
        if session is None:
            return "refused: no session (open a page of the dashboard, or sign in, first)"
        given = request.headers.get(CSRF_HEADER) or (await form(request, body_only=True)).get(
            CSRF_FIELD
        )
        if not csrf_matches(session, given):
            return "refused: the request carries no valid CSRF token of this session"
        return None

    Handler = Callable[[Request], Awaitable[tuple[str, dict[str, Any]]]]
    Endpoint = Callable[[Request], Awaitable[Response]]

    def endpoint(handler: Handler, *, write: bool = False) -> tuple[Endpoint, Endpoint]:
        """The same data as a page (template) and as JSON; `write`: a POST refused unless allowed."""

        async def run(request: Request) -> tuple[str, dict[str, Any]] | Response:
            if write and not settings.allow_writes:
                return JSONResponse({"error": READ_ONLY}, status_code=403)
            session = session_of(request)
            try:
                mode = await login_mode()
                if mode is None:  # the open dashboard's anonymous session, now known to be open
                    session = session_of(request)
                if mode is not None and (session is None or not session.signed_in):
                    if request.method == "GET" and not request.url.path.startswith("/api"):
                        target = request.url.path + (
                            f"?{request.url.query}" if request.url.query else ""
                        )
                        return RedirectResponse(
                            f"/login?next={quote(target, safe='')}", status_code=303
                        )
                    return JSONResponse({"error": "sign in first (/login)"}, status_code=401)
                if request.method == "POST":
                    refused = await refusal_of_post(request, session)
                    if refused is not None:
                        return JSONResponse({"error": refused}, status_code=403)
                request.state.session = session
                admin = (
                    Admin(state["admin"].client.signing_as(session.credentials), settings.namesrv)
                    if mode == "acl" and session is not None
                    else state["admin"]
                )
                operator = session.operator if session is not None and session.signed_in else None
                author = acting_as(settings.client_id, operator)
                request.state.views = Views(admin, author, state["writes"])
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
                    who = (
                        session.operator
                        if session is not None and session.credentials is not None
                        else settings.credentials.access_key
                        if settings.credentials
                        else "(none)"
                    )
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
            # the bodies the brokers sent, as they sent them (json_view)
            return JSONResponse(json.loads(json.dumps(answer[1], default=json_view)))

        async def page(request: Request) -> Response:
            answer = await run(request)
            if isinstance(answer, RedirectResponse):
                return answer
            session = getattr(request.state, "session", None) or session_of(request)
            token = None
            if (session is None or anonymous.due(session)) and (
                settings.accounts is None and state.get("acl") is False
            ):
                token, session = anonymous.new(signed_in=True)  # open dashboard: CSRF, unstored
            if isinstance(answer, Response):
                error = json.loads(bytes(answer.body))["error"]
                response: Response = HTMLResponse(
                    render("error.html", session, request, error=error),
                    status_code=answer.status_code,
                )
            else:
                template, data = answer
                response = HTMLResponse(render(template, session, request, **data, data=data))
            if token is not None:
                set_cookie(response, token)
            return response

        return api, page

    def render(template: str, session: Session | None, request: Request, **data: Any) -> str:
        return env.get_template(template).render(
            **data,
            allow_writes=may_write(session),
            namesrv=settings.namesrv,
            client_id=settings.client_id,
            path=request.url.path,
            csrf=session.csrf if session is not None else "",
            operator=session.operator if session is not None and session.signed_in else None,
            signed_in=session is not None and session.signed_in,
            login=bool(settings.accounts) or state.get("acl") is True,
        )

    # ------------------------------------------------------------------ sign-in (B-340, B-344)
    async def login_page(request: Request) -> Response:
        mode = await login_mode()
        if mode is None:
            return RedirectResponse("/", status_code=303)
        session = session_of(request)
        token = None
        if session is None or anonymous.due(session):
            token, session = anonymous.new()
        response = HTMLResponse(
            render(
                "login.html",
                session,
                request,
                mode=mode,
                next=safe_next(request.query_params.get("next")),
                error=None,
            )
        )
        if token is not None:
            set_cookie(response, token)
        return response

    async def check_operator(mode: str, fields: dict[str, str]) -> dict[str, Any] | None:
        """The new session's fields if the operator's name and secret hold, else None."""
        if mode == "file":
            name, password = fields.get("name", ""), fields.get("password", "")
            stored = (settings.accounts or {}).get(name, UNKNOWN_OPERATOR)
            ok = await anyio.to_thread.run_sync(verify_password, stored, password)
            return {"operator": name} if ok and name in (settings.accounts or {}) else None
        access_key, secret = fields.get("access_key", "").strip(), fields.get("secret_key", "")
        if not access_key or not secret:
            return None
        credentials = Credentials(access_key, secret)
        admin = Admin(state["admin"].client.signing_as(credentials), settings.namesrv)
        try:
            answers = await admin.account_scope()
        except AdminError as exc:
            if acl_refusal(exc) is None:
                raise
            return None  # wrong secret, unknown key, or an address the rules do not admit
        return {
            "operator": access_key,
            "credentials": credentials,
            "admin": bool(answers) and all(a.body.admin for a in answers),
        }

    async def login(request: Request) -> Response:
        mode = await login_mode()
        if mode is None:
            return JSONResponse({"error": "this dashboard has no sign-in"}, status_code=404)
        session = session_of(request)
        refused = await refusal_of_post(request, session)
        if refused is not None:
            return PlainTextResponse(refused, status_code=403)
        assert session is not None
        try:
            fields = await form(request, body_only=True)
        except PageError as exc:
            return PlainTextResponse(str(exc), status_code=exc.status)
        account = fields.get("name") or fields.get("access_key", "").strip()
        address = client_address(request)

        def refused_page(error: str, status: int, **headers: str) -> Response:
            page = render(
                "login.html",
                session,
                request,
                mode=mode,
                next=safe_next(fields.get("next")),
                error=error,
            )
            return HTMLResponse(page, status_code=status, headers=headers)

        wait = throttle.retry_after(account, address)
        if wait:  # B-513: answered at once, the secret not checked
            why = f"sign-in refused: too many refused sign-ins; try again in {wait} s"
            return refused_page(why, 429, **{"retry-after": str(wait)})
        try:
            who = await check_operator(mode, fields)
        except (AdminError, RemotingError, OSError, ValueError) as exc:
            return PlainTextResponse(f"could not ask the brokers: {exc}", status_code=502)
        if who is None:
            throttle.failed(account, address)
            return refused_page("sign-in refused: unknown name or wrong secret", 401)
        throttle.succeeded(account)
        sessions.drop(session)  # a new token once signed in: none known before sign-in stays valid
        token, _ = sessions.new(address, signed_in=True, **who)
        response = RedirectResponse(safe_next(fields.get("next")), status_code=303)
        set_cookie(response, token)
        return response

    async def logout(request: Request) -> Response:
        session = session_of(request)
        refused = await refusal_of_post(request, session)
        if refused is not None:
            return PlainTextResponse(refused, status_code=403)
        assert session is not None
        sessions.drop(session)
        response = RedirectResponse("/login" if await login_mode() else "/", status_code=303)
        response.delete_cookie(settings.cookie_name, path="/")
        return response

    async def session_api(request: Request) -> Response:
        """This browser's session: who, whether it may write, and its CSRF token (made if none)."""
        mode = await login_mode()
        session = session_of(request)
        token = None
        if session is None:
            token, session = anonymous.new(signed_in=mode is None)
        response = JSONResponse(
            {
                "login": mode,
                "signedIn": session.signed_in,
                "operator": session.operator,
                "writes": session.signed_in and may_write(session),
                "csrfToken": session.csrf,
            }
        )
        if token is not None:
            set_cookie(response, token)
        return response

    # ------------------------------------------------------------------ handlers
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
        queues = _int(f.get("queues"), "queues") or 8
        perm = _int(f.get("perm"), "perm") or 6
        done = await views(request).create_topic(name, queues, perm)
        return "done.html", {"title": f"topic {name} created", "result": done}

    async def topic_perm(request: Request) -> tuple[str, dict[str, Any]]:
        f = await form(request)
        perm = _int(f.get("perm"), "perm")
        if perm is None:
            raise PageError(400, "give the new perm (2 W, 4 R, 6 RW)")
        topic_name = request.path_params["topic"]
        done = await views(request).update_topic_perm(topic_name, perm)
        return "done.html", {"title": f"perm of {topic_name} changed", "result": done}

    async def groups(request: Request) -> tuple[str, dict[str, Any]]:
        return "groups.html", await views(request).groups()

    async def group(request: Request) -> tuple[str, dict[str, Any]]:
        return "group.html", await views(request).group(request.path_params["group"])

    async def explain(request: Request) -> tuple[str, dict[str, Any]]:
        topic_name = request.query_params.get("topic")
        if not topic_name:
            raise PageError(400, "give ?topic=")
        return "explain.html", await views(request).explain(
            request.path_params["group"], topic_name
        )

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
            raise PageError(
                400, "give ?at= (now, epoch millis, yyyy-MM-dd#HH:mm:ss:SSS or ISO 8601)"
            )
        return "offsets.html", await views(request).offsets_at(request.path_params["group"], at)

    async def messages(request: Request) -> tuple[str, dict[str, Any]]:
        p = request.query_params
        data = await views(request).find_messages(
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
            _time(f.get("value"), "time")
            if kind == "time"
            else (_int(f.get("value"), "value") or 0)
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

    pages: list[tuple[str, Handler, list[str], bool]] = [
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
    routes: list[Route | Mount] = []
    for path, handler, methods, write in pages:
        api, page = endpoint(handler, write=write)
        routes.append(Route("/api" + ("" if path == "/" else path) or "/api", api, methods=methods))
        routes.append(Route(path, page, methods=methods))
    routes += [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/api/session", session_api, methods=["GET"]),
        metrics_route(registry),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(SecureHeaders, settings=settings)],
    )
