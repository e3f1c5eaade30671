"""What `brokerStatus` and /metrics say of the history (B-466): the hot log, the horizon, the archive.

- hot records: the records still in LMDB's `log` database (the last seq less the last sealed one);
- hot log bytes: the pages that database takes (branch, leaf and overflow, times the page size);
- sealed up to / horizon time: the last sealed seq and the broker time of its record (-1: nothing
  sealed);
- archive bytes: the files under the archive location, when it is a local folder (-1 for a
  pyarrow filesystem URI such as `s3://`, whose listing costs a round trip per call). The archive
  only changes when a segment is sealed, so its size is measured once per sealed seq.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_broker.history.seal import archive_location

_ARCHIVE_BYTES: dict[tuple[str, int], int] = {}  # (location, sealed up to) -> bytes


@dataclass(frozen=True, slots=True)
class HistoryStatus:
    hot_records: int
    hot_log_bytes: int
    sealed_upto: int
    horizon_time: int
    archive_bytes: int

    def runtime_fields(self) -> dict[str, int]:
        """The `brokerStatus` (GET_BROKER_RUNTIME_INFO) keys."""
        return {
            "historyHotRecords": self.hot_records,
            "historyHotLogBytes": self.hot_log_bytes,
            "historySealedUpto": self.sealed_upto,
            "historyHorizonTime": self.horizon_time,
            "historyArchiveBytes": self.archive_bytes,
        }


def history_status(store: Any, data_dir: str | Path, configured_archive: str) -> HistoryStatus:
    """The history's figures for a store (a master's or a slave's: both apply the sealings)."""
    log = store.log
    with store.read() as txn:
        latest = store.history.latest(txn)
        stat = txn.stat(log.log_db)
    sealed = int(latest["last_seq"]) if latest else 0
    pages = stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
    location = archive_location(data_dir, configured_archive)
    return HistoryStatus(
        hot_records=max(log.last_seq - sealed, 0),
        hot_log_bytes=pages * stat["psize"],
        sealed_upto=sealed,
        horizon_time=int(latest["last_time"]) if latest else -1,
        archive_bytes=_archive_bytes(location, sealed),
    )


def _archive_bytes(location: str, sealed: int) -> int:
    if "://" in location:
        return -1
    key = (location, sealed)
    found = _ARCHIVE_BYTES.get(key)
    if found is None:
        root = Path(location)
        found = (
            sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.exists() else 0
        )
        _ARCHIVE_BYTES.clear()  # only the newest sealing's figure is asked for again
        _ARCHIVE_BYTES[key] = found
    return found
