"""`es-broker dashboard`: an operator web application over the wire (name server + brokers).

    es-broker dashboard --namesrv H:P [--listen 127.0.0.1:8080] [--allow-writes]

Starlette (ASGI) served by hypercorn's trio worker, Jinja2 templates, charts
as SVG drawn on the server. Read-only unless --allow-writes. With ACL on it
signs with --access-key/--secret-key (or ES_BROKER_ACCESS_KEY/ES_BROKER_SECRET_KEY).
The broker process never imports this package.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `es-broker dashboard` on the command's subparsers."""
    p = sub.add_parser("dashboard", help="the operator web dashboard (over the wire)")
    p.add_argument("--namesrv", "-n", required=True, help="name server(s), H:P[;H:P]")
    p.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT (port 0: any free one)")
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="show and accept writes (create topic, perm, reset, re-drive); read-only without it",
    )
    p.add_argument("--access-key", default=os.environ.get("ES_BROKER_ACCESS_KEY"))
    p.add_argument("--secret-key", default=os.environ.get("ES_BROKER_SECRET_KEY"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted; prints `dashboard listening on http://H:P`."""
    try:
        import trio
        from hypercorn.config import Config
        from hypercorn.trio import serve
    except ImportError as exc:
        print(
            f"es-broker dashboard needs its extra ({exc.name} is missing): "
            "pip install 'es-broker[dashboard]'",
            file=sys.stderr,
        )
        return 2
    from es_broker.acl.signing import Credentials
    from es_broker.dashboard.app import Settings, create_app
    from es_broker.dashboard.views import requester_id

    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--listen {args.listen!r} is not HOST:PORT")
    if bool(args.access_key) != bool(args.secret_key):
        raise ValueError("give both --access-key and --secret-key, or neither")
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host.strip("[]"), int(port)))
    listener.listen(128)
    bound = f"{host}:{listener.getsockname()[1]}"
    settings = Settings(
        namesrv=args.namesrv,
        allow_writes=args.allow_writes,
        credentials=Credentials(args.access_key, args.secret_key) if args.access_key else None,
        client_id=requester_id(bound),
    )
    config = Config()
    config.bind = [f"fd://{listener.fileno()}"]
    config.accesslog = None
    config.graceful_timeout = 1.0
    print(
        f"dashboard listening on http://{bound} ({'writes allowed' if args.allow_writes else 'read-only'}), "
        f"name server {args.namesrv}",
        flush=True,
    )
    app = create_app(settings)
    try:
        trio.run(serve, app, config)  # type: ignore[arg-type]
    except KeyboardInterrupt:
        pass
    finally:
        listener.close()
    return 0
