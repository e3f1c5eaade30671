"""A full disk as a state of the broker: writes refused with SERVICE_NOT_AVAILABLE, reads served.

RocketMQ marks its store DISK_FULL (RunningFlags) and refuses every put with
PutMessageStatus.SERVICE_NOT_AVAILABLE, answered as ResponseCode 14 with "the
broker's disk is full [...]" (B-150), while getMessage goes on (B-151). Here
a pull that found messages while the disk is full is answered without its
`messages_delivered` record; the deliveries are summed up per (group, topic,
queue) in memory and recorded as one `deliveries_unrecorded` record per queue
in the first write transaction that lands once space returns (B-152).
"""

from __future__ import annotations

import datetime
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from es_broker.commands.errors import ServiceNotAvailable
from es_broker.log import AppendContext, StoreFullError
from es_broker.log.types import DeliveriesUnrecorded

REASON = "disk_full"


def disk_usage(path: Path) -> float:
    """Used fraction of the filesystem holding path (RocketMQ's diskUtil, CL part)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1.0
    return usage.used / usage.total if usage.total else -1.0


def refusal(path: Path, since_ms: int | None, error: StoreFullError | None) -> ServiceNotAvailable:
    """The answer to a write while the disk is full: code 14 and a remark that says so."""
    since = (
        datetime.datetime.fromtimestamp(since_ms / 1000, datetime.UTC).isoformat(timespec="seconds")
        if since_ms is not None
        else "now"
    )
    reason = error.reason if error is not None else "ENOSPC"
    return ServiceNotAvailable(
        f"service not available now, the broker's disk is full [CL: {disk_usage(path):.2f}]: the message store "
        f"is not writable since {since} ({reason}); reads are still served, writes resume by themselves "
        "once space is freed"
    )


@dataclass(slots=True)
class _Summary:
    first_offset: int
    last_offset: int
    next_offset: int
    pulls: int
    messages: int
    first_ts: int
    last_ts: int
    clients: set[str] = field(default_factory=set)

    def merge(self, other: _Summary) -> None:
        self.first_offset = min(self.first_offset, other.first_offset)
        self.last_offset = max(self.last_offset, other.last_offset)
        self.next_offset = max(self.next_offset, other.next_offset)
        self.pulls += other.pulls
        self.messages += other.messages
        self.first_ts = min(self.first_ts, other.first_ts)
        self.last_ts = max(self.last_ts, other.last_ts)
        self.clients |= other.clients


Queue = tuple[str, str, int]  # (group, topic, queue id)


class UnrecordedDeliveries:
    """Deliveries answered while the disk was full, summed per queue until they can be recorded.

    Implements the writer's ResumeRecords: `take` hands the summaries to the
    first probe write as one job, `landed` forgets them, `refused` keeps them
    for the next probe (merged with what arrived meanwhile).
    """

    def __init__(self, now_ms: Callable[[], int], since_ms: Callable[[], int | None]) -> None:
        self._now_ms = now_ms
        self._since_ms = since_ms
        self._open: dict[Queue, _Summary] = {}
        self._in_flight: dict[Queue, _Summary] = {}
        self._since: int | None = None

    def add(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offsets: Sequence[int],
        next_offset: int,
        client: str,
        ts: int,
    ) -> None:
        """One pull that handed out `offsets` and could not be recorded."""
        if not offsets:
            return
        if self._since is None:
            self._since = self._since_ms()
        summary = _Summary(
            min(offsets), max(offsets), next_offset, 1, len(offsets), ts, ts, {client} - {""}
        )
        key = (group, topic, queue_id)
        if key in self._open:
            self._open[key].merge(summary)
        else:
            self._open[key] = summary

    @property
    def count(self) -> int:
        """Pulls answered and not yet recorded."""
        return sum(s.pulls for s in (*self._open.values(), *self._in_flight.values()))

    def pending(self) -> bool:
        return bool(self._open)

    def take(self) -> Callable[[AppendContext], int] | None:
        if not self._open:
            return None
        self._in_flight, self._open = self._open, {}
        taken = dict(self._in_flight)
        since = self._since
        now_ms = self._now_ms

        def job(ctx: AppendContext) -> int:
            ts = now_ms()
            for (group, topic, queue_id), s in sorted(taken.items()):
                ctx.append(
                    DeliveriesUnrecorded(
                        group=group,
                        topic=topic,
                        queue_id=queue_id,
                        first_offset=s.first_offset,
                        last_offset=s.last_offset,
                        next_offset=s.next_offset,
                        pulls=s.pulls,
                        messages=s.messages,
                        clients=sorted(s.clients),
                        first_ts=s.first_ts,
                        last_ts=s.last_ts,
                        reason=REASON,
                        disk_full_since=since,
                    ).to_record(ts)
                )
            return len(taken)

        return job

    def landed(self) -> None:
        self._in_flight = {}
        if not self._open:
            self._since = None

    def refused(self) -> None:
        for key, summary in self._in_flight.items():
            if key in self._open:
                summary.merge(self._open[key])
            self._open[key] = summary
        self._in_flight = {}
