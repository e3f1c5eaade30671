"""Time travel over the wire: `offsets`, `history` and `explain` asked of every broker of a cluster.

With `--namesrv H:P` instead of a data directory, the command asks each broker
the name server knows (its master, else a slave) with es-broker's own request
codes (OFFSETS_AT, OFFSET_HISTORY, EXPLAIN_GROUP), answered from the broker's
own projections, and prints one answer with a broker column.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from es_broker.cli.credentials import add_credential_options
from es_broker.cli.errors import sole_error

if TYPE_CHECKING:  # imported where it runs, for a quick start of the other commands
    from es_broker.client.admin import Admin

T = TypeVar("T")


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--namesrv",
        "-n",
        help="ask every broker of the cluster this name server knows, over the wire, "
        "instead of reading a data directory",
    )
    add_credential_options(p, None)


def ask(args: argparse.Namespace, question: Callable[[Admin], Awaitable[T]]) -> T:
    """`question(admin)` against the cluster of `args.namesrv` (its answers: one per broker)."""
    import trio

    from es_broker.cli.credentials import admin_credentials
    from es_broker.client.admin import Admin, AdminError
    from es_broker.net.remoting_client import RemotingError

    credentials = admin_credentials(args, os.environ)

    async def main() -> T:
        async with Admin.open(args.namesrv, credentials=credentials) as admin:
            return await question(admin)

    try:
        return trio.run(main)
    # the client's nursery may wrap what it raises in a group of one
    except (AdminError, RemotingError, BaseExceptionGroup) as raised:
        error = sole_error(raised)
        if isinstance(error, (AdminError, RemotingError)):
            raise ValueError(f"the cluster of name server {args.namesrv}: {error}") from None
        raise
