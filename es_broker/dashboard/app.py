"""The dashboard's ASGI application: HTML pages, each a view of the JSON API under /api.

`/groups/G` renders what `/api/groups/G` answers, and so on. Writes are POSTs
(the page's forms and the API alike); without `--allow-writes` the pages have
no write controls and every write answers 403.

Who may use it (B-340..B-344): with an `--auth-file` its operators sign in; with ACL on
the brokers each operator signs in with an access key and secret, and every page acts
with that account; otherwise the dashboard is open (writes only on loopback). Every
POST needs the session's CSRF token and a same-origin Origin (or Referer).

The routes live at module level and take the application's `Dashboard` (state.py):
the pages in pages.py (served by endpoints.py), the sign-in in signin.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from es_broker.client.admin import Admin
from es_broker.dashboard import signin
from es_broker.dashboard.endpoints import endpoint
from es_broker.dashboard.pages import PAGES
from es_broker.dashboard.state import HERE, Dashboard
from es_broker.dashboard.throttle import metrics_route
from es_broker.dashboard.web import SecureHeaders, Settings


def create_app(settings: Settings) -> Starlette:
    """The dashboard for `settings`: its routes, its lifespan (the connections to the brokers)
    and its security headers."""
    dash = Dashboard(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with Admin.open(settings.namesrv, credentials=settings.credentials) as admin:
            dash.open(admin)
            yield

    return Starlette(
        routes=routes(dash),
        lifespan=lifespan,
        middleware=[Middleware(SecureHeaders, settings=settings)],
    )


def routes(dash: Dashboard) -> list[Route | Mount]:
    """Every page twice (the page, and its JSON under /api), then sign-in, metrics, static."""
    found: list[Route | Mount] = []
    for path, handler, methods, write in PAGES:
        api, page = endpoint(dash, handler, write=write)
        found.append(Route("/api" + ("" if path == "/" else path) or "/api", api, methods=methods))
        found.append(Route(path, page, methods=methods))
    return [
        *found,
        Route("/login", partial(signin.login_page, dash), methods=["GET"]),
        Route("/login", partial(signin.login, dash), methods=["POST"]),
        Route("/logout", partial(signin.logout, dash), methods=["POST"]),
        Route("/api/session", partial(signin.session_api, dash), methods=["GET"]),
        metrics_route(dash.registry),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
