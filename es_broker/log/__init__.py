"""The append-only record log: append with group commit, read, tail."""

from es_broker.log.records import Record, make, pack, unpack
from es_broker.log.store import (
    AppendContext,
    LogCorruptError,
    Projection,
    RecordLog,
    StoreFullError,
    disk_full_reason,
)
from es_broker.log.writer import GroupCommitWriter, Queued, ResumeRecords, WriterClosed

__all__ = [
    "AppendContext",
    "GroupCommitWriter",
    "LogCorruptError",
    "Projection",
    "Queued",
    "Record",
    "RecordLog",
    "ResumeRecords",
    "StoreFullError",
    "WriterClosed",
    "disk_full_reason",
    "make",
    "pack",
    "unpack",
]
