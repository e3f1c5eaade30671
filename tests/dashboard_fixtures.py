"""The dashboard as a process, and an operator on the wire (urllib with a cookie jar).

`dashboard()` starts `es-broker dashboard` and yields its base URL once it says it
listens; `Operator` is a non-browser client of it: it keeps the session cookie, asks
/api/session for the CSRF token, signs in and posts like the dashboard's own pages
(the Origin of the dashboard, the token in the form) unless told otherwise.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from tests.process_fixtures import _env

_LISTENING = re.compile(r"dashboard listening on (https?://\S+)")


@contextmanager
def dashboard(namesrv: str, *extra: str, log: Path, listen: str = "127.0.0.1:0") -> Iterator[str]:
    """`es-broker dashboard` on a free port; its base URL once it says it listens."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "dashboard",
            "--namesrv",
            namesrv,
            "--listen",
            listen,
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),  # noqa: SIM115 (the process owns it; closed when it ends)
        text=True,
        env=_env(),
    )
    try:
        url = None
        for line in process.stdout:  # type: ignore[union-attr]
            if m := _LISTENING.search(line):
                url = m.group(1).replace("://0.0.0.0:", "://127.0.0.1:")
                break
        if url is None:
            raise RuntimeError(f"dashboard did not start: {log.read_text()}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_refused(namesrv: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`es-broker dashboard ...` expected to stop at once (it never listens)."""
    return subprocess.run(
        [sys.executable, "-m", "es_broker.cli", "dashboard", "--namesrv", namesrv, *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )


@dataclass
class Answer:
    status: int
    body: str
    url: str  # where it ended (after redirects)
    headers: dict[str, str]
    cookies: list[str]  # the Set-Cookie lines of the last answer

    def json(self):
        return json.loads(self.body)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


class Operator:
    """One browser-like session on a dashboard, without a browser."""

    def __init__(self, base: str, *, ca: Path | None = None, follow: bool = True) -> None:
        self.base = base
        parts = urlsplit(base)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.jar = http.cookiejar.CookieJar()
        handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPCookieProcessor(self.jar)]
        if ca is not None:
            handlers.append(
                urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(ca)))
            )
        if not follow:
            handlers.append(_NoRedirect())
        self.opener = urllib.request.build_opener(*handlers)

    def request(
        self,
        method: str,
        path: str,
        fields: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> Answer:
        data = urlencode(fields).encode() if fields is not None else body
        if method == "POST" and data is None:
            data = b""
        req = urllib.request.Request(
            self.base + path, data=data, method=method, headers=headers or {}
        )
        try:
            with self.opener.open(req, timeout=60) as r:
                return Answer(
                    r.status,
                    r.read().decode(),
                    r.geturl(),
                    {k.lower(): v for k, v in r.headers.items()},
                    r.headers.get_all("set-cookie") or [],
                )
        except urllib.error.HTTPError as exc:
            return Answer(
                exc.code,
                exc.read().decode(),
                exc.geturl(),
                {k.lower(): v for k, v in exc.headers.items()},
                exc.headers.get_all("set-cookie") or [],
            )

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def csrf(self) -> str:
        return self.get("/api/session").json()["csrfToken"]

    def post(
        self,
        path: str,
        fields: dict[str, str] | None = None,
        *,
        token: str | None = "session",
        origin: str | None = "own",
        referer: str | None = None,
    ) -> Answer:
        """A POST as the dashboard's page sends it: its Origin and the session's CSRF token."""
        fields = dict(fields or {})
        if token == "session":
            token = self.csrf()
        if token is not None:
            fields["csrf_token"] = token
        headers = {}
        if origin is not None:
            headers["Origin"] = self.origin if origin == "own" else origin
        if referer is not None:
            headers["Referer"] = referer
        return self.request("POST", path, fields, headers)

    def sign_in(self, **fields: str) -> Answer:
        """POST /login with `fields` (access_key/secret_key, or name/password)."""
        return self.post("/login", fields)
