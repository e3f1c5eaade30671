"""One handler, two routes: the page (its template) and the JSON API under /api.

A handler (pages.py) answers (template, data) for a request whose `Views` acts as the
operator; `answer` first signs in, checks a POST and picks the account, and turns the
errors a handler raises into the status they mean.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from es_broker.client.admin import Admin, AdminError
from es_broker.dashboard.security import Session
from es_broker.dashboard.state import Dashboard
from es_broker.dashboard.views import Forbidden, Views, acl_refusal, acting_as
from es_broker.dashboard.web import PageError
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.body_view import json_view
from es_broker.remoting.codes import ResponseCode

READ_ONLY = "read-only dashboard: start it with --allow-writes to change anything"

Handler = Callable[[Request], Awaitable[tuple[str, dict[str, Any]]]]
Endpoint = Callable[[Request], Awaitable[Response]]


def endpoint(
    dash: Dashboard, handler: Handler, *, write: bool = False
) -> tuple[Endpoint, Endpoint]:
    """The same data as JSON and as a page; `write`: a POST refused unless writes are allowed."""
    return partial(api, dash, handler, write), partial(page, dash, handler, write)


async def api(dash: Dashboard, handler: Handler, write: bool, request: Request) -> Response:
    """The handler's data as JSON: the bodies the brokers sent, as they sent them (json_view)."""
    answer = await answer_of(dash, handler, write, request)
    if isinstance(answer, Response):
        return answer
    return JSONResponse(json.loads(json.dumps(answer[1], default=json_view)))


async def page(dash: Dashboard, handler: Handler, write: bool, request: Request) -> Response:
    """The handler's data through its template, or the error page; an open dashboard's first
    page also gives the browser its (unstored) session, for the CSRF token of its forms."""
    answer = await answer_of(dash, handler, write, request)
    if isinstance(answer, RedirectResponse):
        return answer
    session = getattr(request.state, "session", None) or dash.session_of(request)
    token = None
    if (session is None or dash.anonymous.due(session)) and dash.is_open:
        token, session = dash.anonymous.new(signed_in=True)
    if isinstance(answer, Response):
        error = json.loads(bytes(answer.body))["error"]
        response: Response = HTMLResponse(
            dash.render("error.html", session, request, error=error),
            status_code=answer.status_code,
        )
    else:
        template, data = answer
        response = HTMLResponse(dash.render(template, session, request, **data, data=data))
    if token is not None:
        dash.set_cookie(response, token)
    return response


async def answer_of(
    dash: Dashboard, handler: Handler, write: bool, request: Request
) -> tuple[str, dict[str, Any]] | Response:
    """What the handler answers for this request, or the response that refuses it."""
    if write and not dash.settings.allow_writes:
        return JSONResponse({"error": READ_ONLY}, status_code=403)
    session = dash.session_of(request)
    try:
        mode = await dash.login_mode()
        if mode is None:  # the open dashboard's anonymous session, now known to be open
            session = dash.session_of(request)
        if mode is not None and (session is None or not session.signed_in):
            return _sign_in_first(request)
        if request.method == "POST":
            refused = await dash.refusal_of_post(request, session)
            if refused is not None:
                return JSONResponse({"error": refused}, status_code=403)
        request.state.session = session
        request.state.views = _views_for(dash, mode, session)
        return await handler(request)
    except PageError as exc:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    except Forbidden as exc:
        return JSONResponse({"error": str(exc)}, status_code=403)
    except AdminError as exc:
        return _admin_error(dash, exc, session)
    except (RemotingError, OSError, UnicodeError, json.JSONDecodeError) as exc:
        return JSONResponse({"error": str(exc)}, status_code=502)  # a broker unreachable or garbled
    except KeyError as exc:  # a name the admin client looked up and did not find
        return JSONResponse({"error": f"no such name: {exc.args[0] if exc.args else exc}"}, 400)
    except ValueError as exc:  # the admin client's refusal of the question as asked
        return JSONResponse({"error": str(exc)}, status_code=400)


def _sign_in_first(request: Request) -> Response:
    """A page asked without a sign-in goes to /login and back; the API answers 401."""
    if request.method == "GET" and not request.url.path.startswith("/api"):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
    return JSONResponse({"error": "sign in first (/login)"}, status_code=401)


def _views_for(dash: Dashboard, mode: str | None, session: Session | None) -> Views:
    """The views a handler reads, acting with the operator's account under ACL sign-in."""
    admin: Admin = (
        dash.admin_signing_as(session.credentials)
        if mode == "acl" and session is not None
        else dash.shared_admin
    )
    operator = session.operator if session is not None and session.signed_in else None
    return Views(admin, acting_as(dash.settings.client_id, operator), dash.write_lock)


#: the response codes that say what was asked does not exist or may not be done, as a status
_CODE_STATUS: dict[int, int] = {
    ResponseCode.TOPIC_NOT_EXIST: 404,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: 404,
    ResponseCode.QUERY_NOT_FOUND: 404,
    ResponseCode.NO_PERMISSION: 403,
}


def _admin_error(dash: Dashboard, exc: AdminError, session: Session | None) -> Response:
    """The broker's ACL saying no is the account's rights (403); a code that says "no such
    topic or group" or "not allowed" its status; anything else a fault (502: SYSTEM_ERROR's
    remarks mix bad input with faults)."""
    refused = acl_refusal(exc)
    if refused is None:
        return JSONResponse({"error": str(exc)}, status_code=_CODE_STATUS.get(exc.code, 502))
    credentials = dash.settings.credentials
    who = (
        session.operator
        if session is not None and session.credentials is not None
        else credentials.access_key
        if credentials
        else "(none)"
    )
    error = f"the broker refused this for the dashboard's account {who}: {refused}"
    return JSONResponse({"error": error}, status_code=403)
