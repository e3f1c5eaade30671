"""The append-only record log: append with group commit, read, tail."""

from es_broker.log.records import Record, make, pack, unpack
from es_broker.log.store import (
    AppendContext,
    LogCorruptError,
    Projection,
    RecordLog,
    StoreFullError,
)
from es_broker.log.writer import GroupCommitWriter, WriterClosed

__all__ = [
    "AppendContext",
    "GroupCommitWriter",
    "LogCorruptError",
    "Projection",
    "Record",
    "RecordLog",
    "StoreFullError",
    "WriterClosed",
    "make",
    "pack",
    "unpack",
]
