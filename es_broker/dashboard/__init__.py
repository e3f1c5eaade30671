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
import logging
import os
import socket
import ssl
import sys
from pathlib import Path

CERTIFICATE_CHECK_SECONDS = (
    2.0  # how often --tls-cert/--tls-key are looked at for a renewal (B-400)
)


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
    from es_broker.dashboard.app import create_app
    from es_broker.dashboard.security import is_loopback, load_auth_file
    from es_broker.dashboard.views import requester_id
    from es_broker.dashboard.web import Settings
    from es_broker.net.tls import ReloadingCertificate

    said = logging.StreamHandler()  # es_broker's own lines (hypercorn has its own handler)
    said.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("es_broker").addHandler(said)
    if not args.namesrv:
        raise ValueError("give --namesrv H:P")
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--listen {args.listen!r} is not HOST:PORT")
    if bool(args.access_key) != bool(args.secret_key):
        raise ValueError("give both --access-key and --secret-key, or neither")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("give both --tls-cert and --tls-key, or neither")
    credentials = Credentials(args.access_key, args.secret_key) if args.access_key else None
    accounts = load_auth_file(args.auth_file) if args.auth_file else None
    loopback = is_loopback(host)
    tls = args.tls_cert is not None
    if args.allow_writes and not loopback and accounts is None:
        # open to whoever reaches the port, unless the brokers' ACL makes every operator sign in
        acl = trio.run(_acl_on, args.namesrv, credentials)
        if acl is not True:
            why = (
                "the brokers do not have ACL on"
                if acl is False
                else f"could not ask the brokers whether ACL is on ({acl})"
            )
            raise ValueError(
                f"refusing --allow-writes on {host}, a non-loopback address, without a sign-in: "
                f"{why}. Listen on 127.0.0.1, or give --auth-file FILE of operator accounts "
                "(and --tls-cert/--tls-key so their passwords do not cross the network in clear)"
            )
    if not loopback and not tls and (accounts is not None or args.allow_writes):
        print(
            f"warning: serving plain HTTP on {host}: sign-in secrets cross the network in clear "
            "(give --tls-cert/--tls-key)",
            file=sys.stderr,
            flush=True,
        )
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host.strip("[]"), int(port)))
    except OSError as exc:  # one line, as `serve` says it, not a traceback
        listener.close()
        raise ValueError(f"the dashboard cannot listen on {host}:{port}: {exc.strerror}") from None
    listener.listen(128)
    bound_port = listener.getsockname()[1]
    bound = f"{host}:{bound_port}"
    settings = Settings(
        namesrv=args.namesrv,
        allow_writes=args.allow_writes,
        credentials=credentials,
        client_id=requester_id(bound),
        accounts=accounts,
        tls=tls,
        session_idle=args.session_idle,
        cookie_name=f"es_dashboard_{bound_port}",
        loopback=loopback,
    )
    reloads: list[ReloadingCertificate] = []

    class _Config(Config):
        def create_ssl_context(self) -> ssl.SSLContext | None:
            context = super().create_ssl_context()
            if context is not None and self.certfile is not None:
                reloads.append(
                    ReloadingCertificate(
                        context,
                        self.certfile,
                        self.keyfile,
                        None,
                        side="dashboard",
                        name="dashboard",
                    )
                )
            return context

    config = _Config()
    config.bind = [f"fd://{listener.fileno()}"]
    config.accesslog = None
    config.graceful_timeout = 1.0
    if tls:
        config.certfile = str(args.tls_cert)
        config.keyfile = str(args.tls_key)
    who = "operators of the auth file sign in" if accounts is not None else "ACL decides sign-in"
    print(
        f"dashboard listening on {'https' if tls else 'http'}://{bound} "
        f"({'writes allowed' if args.allow_writes else 'read-only'}; {who}), "
        f"name server {args.namesrv}",
        flush=True,
    )
    app = create_app(settings)

    async def serve_and_watch() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, app, config)
            while True:  # a renewed certificate serves from the next handshake on (B-400)
                for reload in reloads:
                    reload.check()
                await trio.sleep(CERTIFICATE_CHECK_SECONDS)

    try:
        trio.run(serve_and_watch)
    except KeyboardInterrupt:
        pass
    finally:
        listener.close()
    return 0


async def _acl_on(namesrv: str, credentials: object) -> bool | str:
    """Whether the brokers have ACL on (ACCOUNT_SCOPE); the failure in words if none answers."""
    import trio

    from es_broker.acl.signing import Credentials
    from es_broker.client.admin import Admin, AdminError
    from es_broker.dashboard.views import acl_refusal
    from es_broker.net.remoting_client import RemotingError

    assert credentials is None or isinstance(credentials, Credentials)
    try:
        with trio.fail_after(30):
            async with Admin.open(namesrv, credentials=credentials) as admin:
                try:  # inside: Admin.open's task group would wrap it in an ExceptionGroup
                    answers = await admin.account_scope()
                except AdminError as exc:
                    return True if acl_refusal(exc) is not None else str(exc)
                except (OSError, ValueError, RemotingError) as exc:
                    return str(exc) or type(exc).__name__
    except trio.TooSlowError:
        return "no answer within 30 s"
    if not answers:
        return "no broker is registered with the name server"
    return any(a.body.acl_enabled for a in answers)
