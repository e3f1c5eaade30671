"""The dashboard's web plumbing under its pages: settings, request fields, the secure-headers middleware."""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from es_broker.acl.signing import Credentials
from es_broker.dashboard.security import SECURITY_HEADERS, host_name, is_loopback
from es_broker.timetravel.timeparse import parse_time


@dataclass(frozen=True, slots=True)
class Settings:
    namesrv: str
    allow_writes: bool = False
    credentials: Credentials | None = None  # the dashboard's own account (None: unsigned)
    client_id: str = "dashboard"
    #: operator name -> `scrypt$...`: sign-in with these (the brokers see `credentials`)
    accounts: dict[str, str] | None = None
    tls: bool = False
    session_idle: float = 900.0
    cookie_name: str = "es_dashboard"
    #: it listens on a loopback address: a request naming another host is refused (DNS rebinding)
    loopback: bool = True


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


async def form(request: Request, *, body_only: bool = False) -> dict[str, str]:
    """The POSTed fields (urlencoded form or JSON object), and the query string's."""
    fields = {} if body_only else {k: v for k, v in request.query_params.items()}
    raw = await request.body()
    if not raw:
        return fields
    try:
        if request.headers.get("content-type", "").startswith("application/json"):
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise PageError(400, "a JSON body must be an object of fields")
            fields.update({str(k): str(v) for k, v in body.items()})
        else:
            fields.update({k: v[-1] for k, v in parse_qs(raw.decode()).items()})
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PageError(400, f"the body is not a form or JSON object: {exc}") from None
    return fields


def safe_next(target: str | None) -> str:
    """A path of this dashboard only (`//host` and `/\\host` would lead elsewhere)."""
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/"
    return "/" if "\\" in target or any(ord(c) < 32 for c in target) else target


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else ""


class SecureHeaders:
    """ASGI middleware: the headers of B-342 on every answer, and the Host check of B-341."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), *SECURITY_HEADERS]
                if not path.startswith("/static/"):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        host = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")
        if self.settings.loopback and not is_loopback(host_name(host)):
            refusal = PlainTextResponse(
                "this dashboard listens on a loopback address: "
                "open it as http://127.0.0.1:PORT or http://localhost:PORT",
                status_code=400,
            )
            await refusal(scope, receive, send_secured)
            return
        await self.app(scope, receive, send_secured)
