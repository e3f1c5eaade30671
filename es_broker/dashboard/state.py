"""`Dashboard`: what every route of the dashboard reads, built once per application.

The settings, the templates, the operators' sessions, the sign-in throttle, and what the
lifespan opens: the shared `Admin` over the name server and the lock writes queue on.
Routes (pages.py, signin.py) take it as their first argument.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CollectorRegistry
from starlette.requests import Request
from starlette.responses import Response

from es_broker.acl.signing import Credentials
from es_broker.client.admin import Admin, AdminError
from es_broker.dashboard import charts
from es_broker.dashboard.security import (
    CSRF_FIELD,
    CSRF_HEADER,
    AnonymousTokens,
    Session,
    SessionStore,
    csrf_matches,
    same_origin,
)
from es_broker.dashboard.throttle import LoginThrottle
from es_broker.dashboard.views import acl_refusal
from es_broker.dashboard.web import Settings, form
from es_broker.remoting.body_view import json_view
from es_broker.timetravel.timeparse import format_time

HERE = Path(__file__).parent  # templates/ and static/


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"])
    )
    env.filters["time"] = lambda ms: format_time(int(ms)) if ms and int(ms) > 0 else "-"
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, default=json_view)
    env.filters["cause"] = charts.cause_label
    return env


class Dashboard:
    """The state of one dashboard application; `admin` and `writes` are set by its lifespan."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.env = _templates()
        self.sessions = SessionStore(settings.session_idle)  # signed-in operators only (B-512)
        self.anonymous = AnonymousTokens(settings.session_idle)
        self.registry = CollectorRegistry(auto_describe=True)
        self.throttle = LoginThrottle(self.registry)
        self.admin: Admin | None = None
        self.writes: anyio.Lock | None = None
        # whether the brokers have ACL on; None until a broker has answered
        self.acl: bool | None = None

    def open(self, admin: Admin) -> None:
        """Start serving over `admin`, the lifespan's connections to the name server and brokers."""
        self.admin = admin
        self.writes = anyio.Lock()  # one write at a time, named by its operator

    @property
    def write_lock(self) -> anyio.Lock:
        assert self.writes is not None, "the dashboard's lifespan has not started"
        return self.writes

    @property
    def shared_admin(self) -> Admin:
        """The dashboard's own `Admin` (its --access-key, or unsigned), open while it serves."""
        assert self.admin is not None, "the dashboard's lifespan has not started"
        return self.admin

    def admin_signing_as(self, credentials: Credentials | None) -> Admin:
        """An `Admin` over the shared connections that signs with an operator's own account."""
        return Admin(self.shared_admin.client.signing_as(credentials), self.settings.namesrv)

    async def acl_on(self) -> bool:
        """Whether the brokers have ACL on (ACCOUNT_SCOPE, asked once a broker answers)."""
        if self.acl is None:
            try:
                answers = await self.shared_admin.account_scope()
            except AdminError as exc:
                if acl_refusal(exc) is None:
                    raise
                self.acl = True  # an unsigned (or unknown) dashboard account is refused
            else:
                if not answers:
                    return False  # no broker yet: nothing to act on, ask again next time
                self.acl = any(a.body.acl_enabled for a in answers)
        return self.acl

    async def login_mode(self) -> str | None:
        """ "file": operators of --auth-file; "acl": the operator's own access key; None: open."""
        if self.settings.accounts:
            return "file"
        return "acl" if await self.acl_on() else None

    @property
    def is_open(self) -> bool:
        """No sign-in at all: no --auth-file, and the brokers are known to have ACL off."""
        return self.settings.accounts is None and self.acl is False

    def session_of(self, request: Request) -> Session | None:
        token = request.cookies.get(self.settings.cookie_name)
        return self.sessions.get(token) or self.anonymous.get(token, signed_in=self.is_open)

    def set_cookie(self, response: Response, token: str) -> None:
        response.set_cookie(
            self.settings.cookie_name,
            token,
            httponly=True,
            samesite="strict",
            secure=self.settings.tls,
            path="/",
        )

    def may_write(self, session: Session | None) -> bool:
        return self.settings.allow_writes and (session is None or session.admin)

    async def refusal_of_post(self, request: Request, session: Session | None) -> str | None:
        """Why a POST is refused (B-341): another origin, no session, or no matching CSRF token."""
        own_origin = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if not same_origin(
            own_origin, request.headers.get("origin"), request.headers.get("referer")
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

    def render(self, template: str, session: Session | None, request: Request, **data: Any) -> str:
        return self.env.get_template(template).render(
            **data,
            allow_writes=self.may_write(session),
            namesrv=self.settings.namesrv,
            client_id=self.settings.client_id,
            path=request.url.path,
            csrf=session.csrf if session is not None else "",
            operator=session.operator if session is not None and session.signed_in else None,
            signed_in=session is not None and session.signed_in,
            login=bool(self.settings.accounts) or self.acl is True,
        )
