"""What the offline commands share: the data directory option, its broker.conf, its store."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from es_broker.config import BrokerConfig, default_data_dir, load_broker_conf
from es_broker.log.dirlock import holding

if TYPE_CHECKING:
    from es_broker.log import RecordLog
    from es_broker.schema.families import Source
    from es_broker.store import Store


def broker_config(args: argparse.Namespace) -> BrokerConfig:
    """The broker's config for --data-dir: defaults, then --config's broker.conf, if given."""
    config = BrokerConfig(storePathRootDir=args.data_dir)
    if getattr(args, "config", None):
        config = load_broker_conf(args.config, config).replace(storePathRootDir=args.data_dir)
    return config


def source(config: BrokerConfig) -> Source:
    """The read-model source a broker's records are stamped with: its name and role."""
    from es_broker.schema.families import Source

    return Source(config.brokerName, config.brokerRole, config.brokerId)


@contextmanager
def open_store(args: argparse.Namespace) -> Iterator[Store]:
    """The data directory, read-only; its time index is built first if an older es-broker wrote it."""
    from es_broker.store import Store
    from es_broker.timetravel.query import IndexMissing, TimeTravel

    config = broker_config(args)
    store = Store.open(args.data_dir, config, readonly=True)
    try:
        TimeTravel(store)
    except IndexMissing:
        store.close()
        # builds the index in one write transaction, as the one writer of the directory (B-490):
        # a broker serving it built the index when it started, so this is a stopped directory
        with holding(args.data_dir):
            Store.open(args.data_dir, config).close()
        store = Store.open(args.data_dir, config, readonly=True)
    try:
        yield store
    finally:
        store.close()


def open_log_readonly(data_dir: str) -> RecordLog:
    """The record log of a data directory, read-only (FileNotFoundError if there is none)."""
    from es_broker.log import RecordLog
    from es_broker.store import LMDB_DIR, require_broker_data

    require_broker_data(data_dir)
    return RecordLog(Path(data_dir) / LMDB_DIR, readonly=True)


def add_data_dir(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    """--data-dir (default: the serve default) and --config (the broker.conf)."""
    if required:
        p.add_argument("--data-dir", required=True)
    else:
        p.add_argument(
            "--data-dir",
            default=default_data_dir(),
            help=f"broker data directory (default {default_data_dir()})",
        )
    p.add_argument(
        "--config", help="the broker's broker.conf (broker name and role, persist interval)"
    )
