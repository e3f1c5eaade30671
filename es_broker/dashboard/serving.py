"""`es-broker dashboard` serving: the arguments checked, the socket bound, hypercorn run.

Loaded only once the dashboard's extra (starlette, hypercorn) is known to be installed.
"""

from __future__ import annotations

import argparse
import logging
import socket
import ssl
import sys
from dataclasses import dataclass

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from es_broker.acl.signing import Credentials
from es_broker.client.admin import Admin, AdminError
from es_broker.dashboard.app import create_app
from es_broker.dashboard.security import is_loopback, load_auth_file
from es_broker.dashboard.views import acl_refusal, requester_id
from es_broker.dashboard.web import Settings
from es_broker.net.remoting_client import RemotingError
from es_broker.net.tls import ReloadingCertificate

CERTIFICATE_CHECK_SECONDS = (
    2.0  # how often --tls-cert/--tls-key are looked at for a renewal (B-400)
)


@dataclass(frozen=True, slots=True)
class _Listen:
    """What the arguments say about where and for whom the dashboard listens."""

    host: str
    port: str
    credentials: Credentials | None
    accounts: dict[str, str] | None
    loopback: bool
    tls: bool


def serve_dashboard(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted; prints `dashboard listening on http://H:P`."""
    _log_to_stderr()
    listen = _checked(args)
    if args.allow_writes and not listen.loopback and listen.accounts is None:
        _refuse_open_writes(args.namesrv, listen)
    if (
        not listen.loopback
        and not listen.tls
        and (listen.accounts is not None or args.allow_writes)
    ):
        print(
            f"warning: serving plain HTTP on {listen.host}: sign-in secrets cross the network "
            "in clear (give --tls-cert/--tls-key)",
            file=sys.stderr,
            flush=True,
        )
    listener = _bound(listen.host, listen.port)
    bound_port = listener.getsockname()[1]
    bound = f"{listen.host}:{bound_port}"
    settings = Settings(
        namesrv=args.namesrv,
        allow_writes=args.allow_writes,
        credentials=listen.credentials,
        client_id=requester_id(bound),
        accounts=listen.accounts,
        tls=listen.tls,
        session_idle=args.session_idle,
        cookie_name=f"es_dashboard_{bound_port}",
        loopback=listen.loopback,
    )
    reloads: list[ReloadingCertificate] = []
    config = _hypercorn_config(args, listener, reloads)
    who = (
        "operators of the auth file sign in"
        if listen.accounts is not None
        else "ACL decides sign-in"
    )
    print(
        f"dashboard listening on {'https' if listen.tls else 'http'}://{bound} "
        f"({'writes allowed' if args.allow_writes else 'read-only'}; {who}), "
        f"name server {args.namesrv}",
        flush=True,
    )
    app = create_app(settings)
    try:
        trio.run(_serve_and_watch, app, config, reloads)
    except KeyboardInterrupt:
        pass
    finally:
        listener.close()
    return 0


def _log_to_stderr() -> None:
    said = logging.StreamHandler()  # es_broker's own lines (hypercorn has its own handler)
    said.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("es_broker").addHandler(said)


def _checked(args: argparse.Namespace) -> _Listen:
    """The listen address, accounts and keys of the arguments, or ValueError saying what is wrong."""
    if not args.namesrv:
        raise ValueError("give --namesrv H:P")
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--listen {args.listen!r} is not HOST:PORT")
    if bool(args.access_key) != bool(args.secret_key):
        raise ValueError("give both --access-key and --secret-key, or neither")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("give both --tls-cert and --tls-key, or neither")
    return _Listen(
        host=host,
        port=port,
        credentials=Credentials(args.access_key, args.secret_key) if args.access_key else None,
        accounts=load_auth_file(args.auth_file) if args.auth_file else None,
        loopback=is_loopback(host),
        tls=args.tls_cert is not None,
    )


def _refuse_open_writes(namesrv: str, listen: _Listen) -> None:
    """Writes on a non-loopback address without --auth-file need the brokers' ACL (B-344):
    open to whoever reaches the port otherwise."""
    acl = trio.run(_acl_on, namesrv, listen.credentials)
    if acl is True:
        return
    why = (
        "the brokers do not have ACL on"
        if acl is False
        else f"could not ask the brokers whether ACL is on ({acl})"
    )
    raise ValueError(
        f"refusing --allow-writes on {listen.host}, a non-loopback address, without a sign-in: "
        f"{why}. Listen on 127.0.0.1, or give --auth-file FILE of operator accounts "
        "(and --tls-cert/--tls-key so their passwords do not cross the network in clear)"
    )


def _bound(host: str, port: str) -> socket.socket:
    """The listening socket, or ValueError in one line, as `serve` says it, not a traceback."""
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host.strip("[]"), int(port)))
    except OSError as exc:
        listener.close()
        raise ValueError(f"the dashboard cannot listen on {host}:{port}: {exc.strerror}") from None
    listener.listen(128)
    return listener


class _Config(Config):
    """hypercorn's configuration, keeping a `ReloadingCertificate` of each TLS context it makes."""

    def __init__(self, reloads: list[ReloadingCertificate]) -> None:
        super().__init__()
        self._reloads = reloads

    def create_ssl_context(self) -> ssl.SSLContext | None:
        context = super().create_ssl_context()
        if context is not None and self.certfile is not None:
            self._reloads.append(
                ReloadingCertificate(
                    context, self.certfile, self.keyfile, None, side="dashboard", name="dashboard"
                )
            )
        return context


def _hypercorn_config(
    args: argparse.Namespace, listener: socket.socket, reloads: list[ReloadingCertificate]
) -> Config:
    config = _Config(reloads)
    config.bind = [f"fd://{listener.fileno()}"]
    config.accesslog = None
    config.graceful_timeout = 1.0
    if args.tls_cert is not None:
        config.certfile = str(args.tls_cert)
        config.keyfile = str(args.tls_key)
    return config


async def _serve_and_watch(
    app: object, config: Config, reloads: list[ReloadingCertificate]
) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(serve, app, config)
        while True:  # a renewed certificate serves from the next handshake on (B-400)
            for reload in reloads:
                reload.check()
            await trio.sleep(CERTIFICATE_CHECK_SECONDS)


async def _acl_on(namesrv: str, credentials: Credentials | None) -> bool | str:
    """Whether the brokers have ACL on (ACCOUNT_SCOPE); the failure in words if none answers."""
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
