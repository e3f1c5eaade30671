"""The `es-broker` command: serve, replay, verify, explain, time travel, the read model, admin.

One module per family of subcommands; each adds its parsers to the one parser
here. A subcommand imports what it runs when it runs, so `es-broker serve`
loads the broker and not the libraries of the other commands.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from es_broker.cli.errors import reader_gone, sole_error
from es_broker.log.dirlock import DataDirInUse


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the `command` about to run (not `admin`), the admin verbs' parsers
    are left out: they import the admin client and every verb's module, which `serve` never uses."""
    from es_broker.cli import history, importing, readmodel, replay, serve, timetravel

    parser = argparse.ArgumentParser(prog="es-broker", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    replay.add_parsers(sub)  # replay, verify, explain
    if command in (None, "admin"):
        from es_broker.cli import admin

        admin.add_parser(sub)
    else:
        sub.add_parser("admin", help=ADMIN_HELP)
    serve.add_parser(sub)
    timetravel.add_parsers(sub)  # offsets, history, acl, export
    readmodel.add_parser(sub)
    history.add_parser(sub)  # archive
    importing.add_parser(sub)  # import rocketmq
    from es_broker.dashboard import add_parser as add_dashboard_parser

    add_dashboard_parser(sub)
    from es_broker.proxy import add_parser as add_proxy_parser

    add_proxy_parser(sub)
    return parser


ADMIN_HELP = "mqadmin's verbs against a running broker"


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    command = given[0] if given and not given[0].startswith("-") else None
    args = build_parser(command).parse_args(given)
    run: Callable[[argparse.Namespace], int] = args.func  # each subcommand sets its own
    try:
        return run(args)
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        print(f"es-broker: {exc}", file=sys.stderr)
        return 2
    except DataDirInUse as exc:  # B-490: another process writes the directory; nothing changed
        print(f"es-broker {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return reader_gone()
    except BaseExceptionGroup as group:  # raised out of a trio.run
        if isinstance(sole_error(group), BrokenPipeError):
            return reader_gone()
        raise
