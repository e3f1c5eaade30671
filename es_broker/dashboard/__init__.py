"""`es-broker dashboard`: an operator web application over the wire (name server + brokers).

    es-broker dashboard --namesrv H:P [--listen 127.0.0.1:8080] [--allow-writes]
        [--auth-file FILE] [--tls-cert PEM --tls-key PEM] [--session-idle SECONDS]
    es-broker dashboard --hash-password NAME      (a line of an --auth-file; password on stdin)

Starlette (ASGI) served by hypercorn's trio worker, Jinja2 templates, charts
as SVG drawn on the server. Read-only unless --allow-writes. With ACL on the
brokers every operator signs in with an access key and secret; with an
--auth-file its operators sign in (the brokers then see --access-key/--secret-key,
or ES_BROKER_ACCESS_KEY/ES_BROKER_SECRET_KEY). Writes on a non-loopback address
need a sign-in (B-344). The broker process never imports this package.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `es-broker dashboard` on the command's subparsers."""
    p = sub.add_parser("dashboard", help="the operator web dashboard (over the wire)")
    p.add_argument("--namesrv", "-n", help="name server(s), H:P[;H:P] (required to serve)")
    p.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT (port 0: any free one)")
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="show and accept writes (create topic, perm, reset, re-drive); read-only without it",
    )
    p.add_argument("--access-key", default=os.environ.get("ES_BROKER_ACCESS_KEY"))
    p.add_argument("--secret-key", default=os.environ.get("ES_BROKER_SECRET_KEY"))
    p.add_argument(
        "--auth-file",
        type=Path,
        help="operator accounts, lines NAME:scrypt$... (see --hash-password): sign-in required",
    )
    p.add_argument(
        "--hash-password",
        metavar="NAME",
        help="print an --auth-file line for NAME (the password is read from the terminal or stdin)",
    )
    p.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", type=Path, help="the certificate's private key (PEM)")
    p.add_argument(
        "--session-idle",
        type=float,
        default=900.0,
        help="seconds a signed-in session lives without a request (default 900)",
    )
    p.set_defaults(func=run)


def hash_password_line(name: str) -> int:
    from es_broker.dashboard.security import hash_password

    if ":" in name or not name.strip():
        raise ValueError(f"operator name {name!r}: not empty, no ':'")
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != password:
            raise ValueError("the two passwords differ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise ValueError("an empty password")
    print(f"{name}:{hash_password(password)}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted; prints `dashboard listening on http://H:P`."""
    if args.hash_password is not None:
        return hash_password_line(args.hash_password)
    try:
        import trio  # noqa: F401
        from hypercorn.trio import serve  # noqa: F401
    except ImportError as exc:
        print(
            f"es-broker dashboard needs its extra ({exc.name} is missing): "
            "pip install 'es-broker[dashboard]'",
            file=sys.stderr,
        )
        return 2
    # loaded here, not at the top: the dashboard's extra (starlette, hypercorn) may be missing
    from es_broker.dashboard.serving import serve_dashboard

    return serve_dashboard(args)
