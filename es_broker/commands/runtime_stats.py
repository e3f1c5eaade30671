"""Messages put and delivered per second, counted from the records as they are applied.

GET_BROKER_RUNTIME_INFO reports `putTps`, `getFoundTps` and `getTransferedTps`
as RocketMQ 4.9.8's StoreStatsService does: three rates separated by spaces,
over the last 10 s, 1 min and 10 min (an empty rate while the broker has not
run that long). The counts come from the records themselves, bucketed by the
broker time each record carries (`ts`): a `messages_stored` record puts one
message per unit, a `messages_delivered` record is one pull that found
messages and transfers its offsets. So the rates are the log's facts, the same
for whoever asks, whenever. They live in memory (a window of the last
10 minutes, filled from the start of this process), like 4.9.8's samples.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import lmdb

from es_broker.log.types import MessagesDeliveredRecord, MessagesStoredRecord, RecordType
from es_broker.projections.dispatch import Dispatching, handlers

WINDOWS_S = (10, 60, 600)  # StoreStatsService#getPutTps(10), (60), (600)
KEEP_S = WINDOWS_S[-1] + 2


class RecordRates(Dispatching):
    """A record-log observer (a projection without databases): counts per second of broker time."""

    name = "runtime_rates"
    databases: tuple[str, ...] = ()

    def __init__(self, started_ms: int) -> None:
        self.started_ms = started_ms
        # second of broker time -> [messages put, pulls that found messages, messages transferred]
        self.buckets: dict[int, list[int]] = {}

    def bind(self, log: Any) -> None:
        """Nothing to open: the counts are kept in memory."""

    # every record passes here: the dict views, not the classes (see log/types.py)
    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        self._bucket(stored["ts"])[0] += len(stored["units"])

    def _delivered(
        self, txn: lmdb.Transaction[bytes], seq: int, delivered: MessagesDeliveredRecord
    ) -> None:
        bucket = self._bucket(delivered["ts"])
        bucket[1] += 1
        bucket[2] += len(delivered["offsets"])

    HANDLERS = handlers(
        {RecordType.MESSAGES_STORED: _stored, RecordType.MESSAGES_DELIVERED: _delivered}
    )

    def _bucket(self, ts: int) -> list[int]:
        """The counts of the second of broker time `ts` (ms); a new second forgets the oldest."""
        second = ts // 1000
        bucket = self.buckets.get(second)
        if bucket is None:
            bucket = self.buckets[second] = [0, 0, 0]
            if len(self.buckets) > KEEP_S:
                for old in sorted(self.buckets)[: len(self.buckets) - KEEP_S]:
                    del self.buckets[old]
        return bucket

    def rates(self, now_ms: int) -> dict[str, str]:
        """putTps, getFoundTps, getTransferedTps at `now_ms`: "10s 1min 10min" per second."""
        now_s = now_ms // 1000
        ran_s = (now_ms - self.started_ms) // 1000
        out = {}
        for key, which in (("putTps", 0), ("getFoundTps", 1), ("getTransferedTps", 2)):
            parts = []
            for window in WINDOWS_S:
                if ran_s < window:
                    parts.append("")  # 4.9.8: no rate until it has that many samples
                    continue
                total = sum(
                    b[which] for s, b in self.buckets.items() if now_s - window < s <= now_s
                )
                parts.append(repr(total / window))
            out[key] = " ".join(parts)
        return out


def _human(n: int) -> str:
    """MixAll.humanReadableByteCount(n, false): 1024-based, one decimal, KiB..EiB."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp - 1]}iB"


def dir_capacity(path: Path) -> str:
    """commitLogDirCapacity as 4.9.8 words it: "Total : X, Free : Y." of the store's file system."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return ""
    return f"Total : {_human(usage.total)}, Free : {_human(usage.free)}."


def store_size(path: Path) -> int:
    """Bytes the data directory's LMDB files take on disk (allocated blocks, not the map size)."""
    total = 0
    for name in ("data.mdb", "lock.mdb"):
        with contextlib.suppress(OSError):
            total += (path / name).stat().st_blocks * 512
    return total
