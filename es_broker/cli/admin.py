"""`es-broker admin -n HOST:PORT VERB ...`: mqadmin's verbs and short options, over the wire.

Human tables by default, as mqadmin prints them; `--json` on every verb for scripts.

Requests are signed (RocketMQ's AclClientRPCHook) with the first of:
`--access-key`/`--secret-key`, the environment (ES_BROKER_ACCESS_KEY and
ES_BROKER_SECRET_KEY), a tools.yml (`--tools-yml PATH`, else mqadmin's
`$ROCKETMQ_HOME/conf/tools.yml` when it exists) with `accessKey:`/`secretKey:`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import trio

# isort: off
# the verbs register in this order, which is the order `es-broker admin --help` lists them in
from es_broker.cli import admin_ops, admin_stats, admin_trace  # noqa: F401
from es_broker.cli import admin_topics, admin_offsets, admin_messages, admin_cluster  # noqa: F401

# isort: on
from es_broker.cli import ADMIN_HELP
from es_broker.cli.admin_cluster import ha_columns
from es_broker.cli.admin_messages import fmt_ms, message_view, render_message, render_trace
from es_broker.cli.admin_offsets import parse_reset_time
from es_broker.cli.admin_verbs import VERBS, table
from es_broker.cli.credentials import CredentialsError, add_credential_options, admin_credentials
from es_broker.client.admin import Admin, AdminError
from es_broker.net.remoting_client import RemotingError
from es_broker.net.tls import TlsClientSettings, TlsSetupError
from es_broker.remoting.body_view import json_view

# what other modules and the tests read from here
__all__ = [
    "add_parser",
    "admin_tls",
    "fmt_ms",
    "ha_columns",
    "message_view",
    "parse_reset_time",
    "render_message",
    "render_trace",
    "run_admin",
    "table",
]

# ---------------------------------------------------------------------- entry


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("admin", help=ADMIN_HELP)
    p.add_argument("-n", "--namesrvAddr", default="127.0.0.1:9876", help="name server HOST:PORT")
    add_credential_options(p, None)
    add_tls_options(p, None)
    verbs = p.add_subparsers(dest="verb", required=True)
    for name, registered in VERBS.items():
        vp = verbs.add_parser(name)
        registered.add_options(vp)
        vp.add_argument("--json", action="store_true", help="print JSON instead of a table")
        # SUPPRESS: a verb that is not given them keeps what came before the verb
        add_credential_options(vp, argparse.SUPPRESS)
        add_tls_options(vp, argparse.SUPPRESS)
    p.set_defaults(func=run_admin)


def add_tls_options(p: argparse.ArgumentParser, default: Any) -> None:
    """--tls, --tls-ca; before the verb and after it (B-354)."""
    p.add_argument(
        "--tls",
        action="store_true",
        default=default if default is not None else False,
        help="speak TLS to the name server and the brokers, verifying their certificates",
    )
    p.add_argument(
        "--tls-ca",
        default=default,
        metavar="FILE",
        help="the PEM CA bundle the servers' certificates chain to (implies --tls; else the "
        "system store)",
    )


def admin_tls(args: argparse.Namespace) -> TlsClientSettings | None:
    """The TLS settings --tls / --tls-ca ask for (None: plain TCP); TlsSetupError on an unusable CA."""
    ca = getattr(args, "tls_ca", None)
    if not getattr(args, "tls", False) and not ca:
        return None
    settings = TlsClientSettings(ca_file=ca)
    settings.context()  # an unusable CA file is an error now, not at the first connection
    return settings


def run_admin(args: argparse.Namespace) -> int:
    registered = VERBS[args.verb]
    try:
        credentials = admin_credentials(args, os.environ)
        tls = admin_tls(args)
    except (CredentialsError, TlsSetupError) as exc:
        print(f"es-broker admin {args.verb}: {exc}", file=sys.stderr)
        return 2

    async def main() -> tuple[object, Exception | None]:
        async with Admin.open(args.namesrvAddr, credentials=credentials, tls=tls) as admin:
            try:
                return await registered.run(admin, args), None
            except (AdminError, RemotingError, ValueError, KeyError) as exc:
                return None, exc

    result, error = trio.run(main)
    if error is not None:
        print(f"es-broker admin {args.verb}: {error}", file=sys.stderr)
        return 1
    # --json: a body the broker sent is printed as it sent it (json_view), anything else as text
    print(json.dumps(result, default=json_view) if args.json else registered.render(result))
    return 0
