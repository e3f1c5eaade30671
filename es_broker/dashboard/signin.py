"""Sign-in, sign-out and the browser's session (B-340, B-344): routes that take the `Dashboard`.

An operator of the --auth-file signs in with a name and password; with ACL on the brokers,
with an access key and secret the brokers themselves check. Refused sign-ins are throttled
per account and address (B-513).
"""

from __future__ import annotations

import secrets
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)

from es_broker.acl.signing import Credentials
from es_broker.client.admin import AdminError
from es_broker.dashboard.security import Session, hash_password, verify_password
from es_broker.dashboard.state import Dashboard
from es_broker.dashboard.views import acl_refusal
from es_broker.dashboard.web import PageError, client_address, form, safe_next
from es_broker.net.remoting_client import RemotingError

#: checked against when the name is unknown, so an unknown name costs what a wrong password does
UNKNOWN_OPERATOR = hash_password(secrets.token_urlsafe(16))


async def login_page(dash: Dashboard, request: Request) -> Response:
    """GET /login: the sign-in form (with a fresh anonymous session for its CSRF token)."""
    mode = await dash.login_mode()
    if mode is None:
        return RedirectResponse("/", status_code=303)
    session = dash.session_of(request)
    token = None
    if session is None or dash.anonymous.due(session):
        token, session = dash.anonymous.new()
    next_ = safe_next(request.query_params.get("next"))
    page = dash.render("login.html", session, request, mode=mode, next=next_, error=None)
    response = HTMLResponse(page)
    if token is not None:
        dash.set_cookie(response, token)
    return response


async def login(dash: Dashboard, request: Request) -> Response:
    """POST /login: a new signed-in session if the operator's name and secret hold."""
    mode = await dash.login_mode()
    if mode is None:
        return JSONResponse({"error": "this dashboard has no sign-in"}, status_code=404)
    session = dash.session_of(request)
    refused = await dash.refusal_of_post(request, session)
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
        next_ = safe_next(fields.get("next"))
        page = dash.render("login.html", session, request, mode=mode, next=next_, error=error)
        return HTMLResponse(page, status_code=status, headers=headers)

    wait = dash.throttle.retry_after(account, address)
    if wait:  # B-513: answered at once, the secret not checked
        why = f"sign-in refused: too many refused sign-ins; try again in {wait} s"
        return refused_page(why, 429, **{"retry-after": str(wait)})
    try:
        who = await check_operator(dash, mode, fields)
    except (AdminError, RemotingError, OSError, ValueError) as exc:
        return PlainTextResponse(f"could not ask the brokers: {exc}", status_code=502)
    if who is None:
        dash.throttle.failed(account, address)
        return refused_page("sign-in refused: unknown name or wrong secret", 401)
    dash.throttle.succeeded(account)
    return _signed_in(dash, session, address, who, safe_next(fields.get("next")))


def _signed_in(
    dash: Dashboard, session: Session, address: str, who: dict[str, Any], next_: str
) -> Response:
    """Back to the page asked for, under a new token: none known before sign-in stays valid."""
    dash.sessions.drop(session)
    token, _ = dash.sessions.new(address, signed_in=True, **who)
    response = RedirectResponse(next_, status_code=303)
    dash.set_cookie(response, token)
    return response


async def check_operator(
    dash: Dashboard, mode: str, fields: dict[str, str]
) -> dict[str, Any] | None:
    """The new session's fields if the operator's name and secret hold, else None."""
    if mode == "file":
        accounts = dash.settings.accounts or {}
        name, password = fields.get("name", ""), fields.get("password", "")
        stored = accounts.get(name, UNKNOWN_OPERATOR)
        ok = await anyio.to_thread.run_sync(verify_password, stored, password)
        return {"operator": name} if ok and name in accounts else None
    access_key, secret = fields.get("access_key", "").strip(), fields.get("secret_key", "")
    if not access_key or not secret:
        return None
    credentials = Credentials(access_key, secret)
    try:
        answers = await dash.admin_signing_as(credentials).account_scope()
    except AdminError as exc:
        if acl_refusal(exc) is None:
            raise
        return None  # wrong secret, unknown key, or an address the rules do not admit
    return {
        "operator": access_key,
        "credentials": credentials,
        "admin": bool(answers) and all(a.body.admin for a in answers),
    }


async def logout(dash: Dashboard, request: Request) -> Response:
    """POST /logout: the session dropped and its cookie deleted."""
    session = dash.session_of(request)
    refused = await dash.refusal_of_post(request, session)
    if refused is not None:
        return PlainTextResponse(refused, status_code=403)
    assert session is not None
    dash.sessions.drop(session)
    response = RedirectResponse("/login" if await dash.login_mode() else "/", status_code=303)
    response.delete_cookie(dash.settings.cookie_name, path="/")
    return response


async def session_api(dash: Dashboard, request: Request) -> Response:
    """This browser's session: who, whether it may write, and its CSRF token (made if none)."""
    mode = await dash.login_mode()
    session = dash.session_of(request)
    token = None
    if session is None:
        token, session = dash.anonymous.new(signed_in=mode is None)
    response = JSONResponse(
        {
            "login": mode,
            "signedIn": session.signed_in,
            "operator": session.operator,
            "writes": session.signed_in and dash.may_write(session),
            "csrfToken": session.csrf,
        }
    )
    if token is not None:
        dash.set_cookie(response, token)
    return response
