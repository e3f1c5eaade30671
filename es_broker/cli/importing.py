"""`es-broker import rocketmq`: build a new data directory from a RocketMQ 4.9.8 store (B-520)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _cmd_import_rocketmq(args: argparse.Namespace) -> int:
    from es_broker.cli.datadir import broker_config
    from es_broker.cli.progress import progress
    from es_broker.commands.rocketmq_store import StoreCorrupt
    from es_broker.core.rocketmq_import import import_store

    config = broker_config(args)
    try:
        with progress("import: messages") as tell:
            summary = import_store(
                Path(args.store),
                Path(args.data_dir),
                config,
                tell,
                skip_corrupt=args.skip_corrupt,
            )
    except StoreCorrupt as exc:
        print(f"es-broker: import refused, nothing was written: {exc}", file=sys.stderr)
        return 2
    rate = summary.messages / summary.seconds if summary.seconds > 0 else 0.0
    print(
        f"imported {summary.messages} messages ({len(summary.per_topic)} topics with messages), "
        f"{summary.topics} topic configs, {summary.groups} subscription groups, "
        f"{summary.offsets} committed offsets, {summary.open_transactions} open transactions "
        f"from {Path(args.store).resolve()} into {summary.target} in {summary.seconds:.1f} s "
        f"({rate:.0f} messages a second)"
    )
    if summary.file_size and summary.file_size != config.mappedFileSizeCommitLog:
        print(
            f"note: the store's commit-log files are {summary.file_size} bytes, the target's "
            f"mappedFileSizeCommitLog is {config.mappedFileSizeCommitLog}: set it in the "
            "target's broker.conf for the same file boundaries (retention deletes whole files)"
        )
    if summary.skipped:
        print(
            f"skipped {summary.skipped} corrupt items ({summary.skipped_units} consume-queue units "
            "kept without their message): each is an import_skipped record naming its file, "
            "byte offset and why"
        )
    for what, count in sorted(summary.not_carried.items()):
        print(
            f"not carried: {count} {what.replace('_', ' ')} (see README, Migrating from RocketMQ)"
        )
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("import", help="build a new data directory from another broker's store")
    kinds = p.add_subparsers(dest="kind", required=True)
    r = kinds.add_parser(
        "rocketmq",
        help="a RocketMQ 4.9.8 store (its storePathRootDir), read without writing to it",
    )
    r.add_argument("--store", required=True, help="the RocketMQ broker's store root directory")
    r.add_argument(
        "--data-dir", required=True, help="the new es-broker data directory (new or empty)"
    )
    r.add_argument("--config", help="the target broker's broker.conf")
    r.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="record each corrupt message or unit (an import_skipped record: file, offset, why) "
        "and go on, instead of refusing the import",
    )
    r.set_defaults(func=_cmd_import_rocketmq)
