"""`es-broker readmodel sync|follow|status|retry|upgrade|offsets`: the SQL read model.

es-broker readmodel sync|follow|status|retry|upgrade|offsets --data-dir D [--readmodel-url URL]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from es_broker.cli.datadir import (
    add_data_dir,
    broker_config,
    open_log_readonly,
    open_store,
    source,
)
from es_broker.cli.timetravel import TIME_HELP, print_offsets
from es_broker.timetravel.timeparse import format_time, parse_time

if TYPE_CHECKING:  # imported where it runs, for a quick start of the other commands
    from es_broker.schema.families import Source


def _url(args: argparse.Namespace) -> str:
    from es_broker.readmodel import db

    return args.readmodel_url or db.default_url(args.data_dir)


def _database_errors(
    run: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """`run`, with what the database says (a driver not installed, a dialect SQLAlchemy does not
    know, a file it cannot open, a schema not there yet) printed as one line naming the read
    model, not a traceback."""

    @functools.wraps(run)
    def wrapped(args: argparse.Namespace) -> int:
        from es_broker.readmodel.db import engine_error

        # a URL no engine can be made for is refused first, in `serve`'s words (exit 2)
        if (error := engine_error(_url(args))) is not None:
            print(f"es-broker readmodel {args.readmodel_command}: {error}", file=sys.stderr)
            return 2
        try:
            return run(args)
        except Exception as exc:
            from sqlalchemy.exc import DBAPIError

            if not isinstance(exc, DBAPIError):
                raise
            said = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
            hint = ""
            # SQLite's and PostgreSQL's words for a table that is not there
            if "no such table" in said or ("relation" in said and "does not exist" in said):
                hint = (
                    ": its schema is not there yet (`es-broker readmodel sync` or `upgrade` "
                    "makes it)"
                )
            print(
                f"es-broker readmodel {args.readmodel_command}: the read model at "
                f"{_shown(args)}: {said}{hint}",
                file=sys.stderr,
            )
            return 1

    return wrapped


def _missing_sqlite_file(url: str) -> str | None:
    """The path of a SQLite read model's file when it is not there; None otherwise."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return None
    if path.startswith("file:") or os.path.exists(path):
        return None
    return path


def _shown(args: argparse.Namespace) -> str:
    """The read model's URL as a message shows it: without its password."""
    from es_broker.readmodel.db import shown_url

    return shown_url(_url(args))


def _cmd_readmodel_sync(args: argparse.Namespace) -> int:
    from es_broker.cli.progress import progress
    from es_broker.readmodel.follower import open_follower

    with open_store(args) as store, progress("readmodel sync") as tell:
        follower = open_follower(_url(args), store.log, source(store.config), batch=args.batch)
        try:
            applied = follower.catch_up(tell)
        finally:
            follower.engine.dispose()
    print(f"read model: applied {applied} records, checkpoint at {follower.position}")
    return 0


def _readmodel_source(args: argparse.Namespace) -> Source:
    """The source a command works on: the broker.conf's name and role, unless given."""
    from es_broker.schema.families import Source

    configured = source(broker_config(args))
    return Source(
        getattr(args, "broker_name", None) or configured.broker,
        getattr(args, "broker_role", None) or configured.role,
        configured.node,
    )


def _cmd_readmodel_follow(args: argparse.Namespace) -> int:
    import logging

    from es_broker.readmodel.process import run

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s[follower]: %(message)s",
    )
    return run(
        args.data_dir,
        _url(args),
        _readmodel_source(args),
        parent=args.exit_with_parent,
        batch=args.batch,
        nice=args.nice,
    )


def _cmd_readmodel_status(args: argparse.Namespace) -> int:
    from sqlalchemy import inspect, select

    from es_broker.readmodel import db
    from es_broker.readmodel.follower import _safe
    from es_broker.readmodel.models import Checkpoint, FailureRow

    wanted = _readmodel_source(args)
    log = open_log_readonly(args.data_dir)
    try:
        last_seq = log.last_seq
    finally:
        log.close()
    url = _url(args)
    engine = db.open_engine(url)
    try:
        tables = set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            checkpoint = (
                conn.execute(
                    select(Checkpoint.last_seq).where(Checkpoint.source == wanted.broker)
                ).scalar()
                if Checkpoint.__tablename__ in tables
                else None
            )
            failures = (
                [
                    dict(r)
                    for r in conn.execute(
                        select(
                            FailureRow.seq,
                            FailureRow.type,
                            FailureRow.error,
                            FailureRow.attempts,
                            FailureRow.version,
                            FailureRow.first_failed_at,
                            FailureRow.last_failed_at,
                        )
                        .where(FailureRow.source == wanted.broker)
                        .order_by(FailureRow.seq)
                    ).mappings()
                ]
                if FailureRow.__tablename__ in tables
                else []
            )
        revision = db.current_revision(engine)
    finally:
        engine.dispose()
    applied = checkpoint or 0
    doc = {
        "url": _safe(url),
        "source": wanted.broker,
        "schema": revision,
        "checkpoint": applied,
        "log_last_seq": last_seq,
        "lag": max(0, last_seq - applied),
        "quarantined": failures,
    }
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"read model {doc['url']}, source {wanted.broker}, schema {revision or '(none)'}")
    print(f"checkpoint {applied}, log at {last_seq}, lag {doc['lag']} records")
    if not failures:
        print("quarantined: none")
    else:
        print(
            f"quarantined: {len(failures)} records (retried after an upgrade, or by `es-broker readmodel retry`)"
        )
        for f in failures:
            print(
                f"  seq {f['seq']}  {f['type']}  attempts {f['attempts']}  es-broker {f['version']}  "
                f"last failed {format_time(f['last_failed_at'])}: {f['error']}"
            )
    return 0


def _cmd_readmodel_retry(args: argparse.Namespace) -> int:
    from es_broker.readmodel.follower import open_follower

    log = open_log_readonly(args.data_dir)
    try:
        follower = open_follower(_url(args), log, _readmodel_source(args))
        try:
            result = follower.retry_quarantined()
        finally:
            follower.engine.dispose()
    finally:
        log.close()
    if args.json:
        print(json.dumps({"stored": result.stored, "failed": result.failed}))
    else:
        print(
            f"quarantined records retried: {len(result.stored)} stored {result.stored}, "
            f"{len(result.failed)} still failing {result.failed}"
        )
    return 0


def _cmd_readmodel_upgrade(args: argparse.Namespace) -> int:
    from es_broker.readmodel import db

    engine = db.open_engine(_url(args))
    try:
        db.upgrade(engine, args.revision)
        print(f"read model schema at {db.current_revision(engine)}")
    finally:
        engine.dispose()
    return 0


def _cmd_readmodel_offsets(args: argparse.Namespace) -> int:
    from es_broker.readmodel import db, queries

    config = broker_config(args)
    at = parse_time(args.at)
    url = _url(args)
    missing = _missing_sqlite_file(url)
    if missing is not None:  # a question makes no file: SQLite would create an empty one
        print(
            f"es-broker readmodel offsets: no read model at {missing} yet "
            "(`es-broker readmodel sync` makes it)",
            file=sys.stderr,
        )
        return 1
    engine = db.open_engine(url)
    try:
        with engine.connect() as conn:
            rows = queries.offsets_at(
                conn,
                config.brokerName,
                at,
                group=args.group,
                topic=args.topic,
                durable=args.durable,
                persist_interval=config.flushConsumerOffsetInterval,
            )
            tick = None
            if args.durable:
                from sqlalchemy import select

                from es_broker.readmodel.models import Checkpoint
                from es_broker.timetravel.query import persist_tick

                start = conn.execute(
                    select(Checkpoint.start_time).where(Checkpoint.source == config.brokerName)
                ).scalar()
                tick = persist_tick(start, at, config.flushConsumerOffsetInterval)
    finally:
        engine.dispose()
    print_offsets(
        rows,
        at=at,
        position=None,
        group=args.group,
        topic=args.topic,
        durable=args.durable,
        tick=tick,
        as_json=args.json,
        origin="the SQL read model",
    )
    return 0


# ---------------------------------------------------------------------- parser


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "readmodel",
        help="the SQL read model: sync or follow the log, its status, upgrade its schema, "
        "ask it the offsets at a moment",
    )
    rsub = p.add_subparsers(dest="readmodel_command", required=True)
    url_help = "SQLAlchemy URL (default: sqlite in the data directory, readmodel.sqlite)"
    r = rsub.add_parser("sync", help="apply every record not yet in the read model, then stop")
    add_data_dir(r, required=True)
    r.add_argument("--readmodel-url", help=url_help)
    r.add_argument("--batch", type=int, default=2000, help="records per SQL transaction")
    r.set_defaults(func=_database_errors(_cmd_readmodel_sync))
    r = rsub.add_parser(
        "follow",
        help="apply every record, then new ones as they land, until SIGTERM "
        "(what `es-broker serve` runs as a child process)",
    )
    add_data_dir(r, required=True)
    r.add_argument("--readmodel-url", help=url_help)
    r.add_argument(
        "--broker-name", help="the source name rows are stamped with (default: broker.conf's)"
    )
    r.add_argument("--broker-role", help="the role rows are stamped with (default: broker.conf's)")
    r.add_argument("--batch", type=int, default=2000, help="records per SQL transaction")
    r.add_argument("--exit-with-parent", type=int, metavar="PID", help="end when process PID ends")
    r.add_argument(
        "--nice",
        type=int,
        default=0,
        metavar="N",
        help="lower the follower's scheduling priority by N first (serve passes 10), "
        "so a busy broker's requests win the CPU",
    )
    r.add_argument("-v", "--verbose", action="store_true")
    r.set_defaults(func=_database_errors(_cmd_readmodel_follow))
    r = rsub.add_parser(
        "status", help="checkpoint, the log's last seq, lag, and the quarantined records"
    )
    add_data_dir(r, required=True)
    r.add_argument("--readmodel-url", help=url_help)
    r.add_argument("--broker-name", help="the source to show (default: broker.conf's brokerName)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_database_errors(_cmd_readmodel_status))
    r = rsub.add_parser(
        "retry", help="try the quarantined records again; those that store now leave it"
    )
    add_data_dir(r, required=True)
    r.add_argument("--readmodel-url", help=url_help)
    r.add_argument("--broker-name", help="the source to retry (default: broker.conf's brokerName)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_database_errors(_cmd_readmodel_retry))
    r = rsub.add_parser("upgrade", help="run the Alembic migrations (alembic upgrade)")
    add_data_dir(r)
    r.add_argument("--readmodel-url", help=url_help)
    r.add_argument("--revision", default="head")
    r.set_defaults(func=_database_errors(_cmd_readmodel_upgrade))
    r = rsub.add_parser(
        "offsets", help="the offset table at a moment, answered by the SQL read model"
    )
    add_data_dir(r)
    r.add_argument("--readmodel-url", help=url_help)
    r.add_argument("--group", required=True)
    r.add_argument("--topic")
    r.add_argument("--at", required=True, help=TIME_HELP)
    r.add_argument("--durable", action="store_true")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_database_errors(_cmd_readmodel_offsets))
