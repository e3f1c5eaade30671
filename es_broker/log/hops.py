"""Where a request spends its time inside the broker: hop timestamps, for benchmarks only.

`ES_BROKER_TRACE_HOPS=PATH` in the environment of `es-broker serve` turns it
on: every request gets a `Trace`, the listener, the send processor and the
writer stamp `time.perf_counter_ns()` into it as the request passes, and at
exit the per-hop p50/p99 of each request code are written to PATH as JSON
(`-` prints them).

`ON` is the one switch, read once at import: it picks the implementation of
each probe (`begin`, `mark`, `current`, `stamp_batch`, `stamped`, `RECEIVE_CLOCK`).
Off, they are no-ops that return None (or their argument), so a probe site need
not test a flag and no `Trace` is ever made; a site that holds a request's trace
tests that local for None, which is all it costs.

`HOPS` names the stamps in the order a synchronous send passes them; a
request that skips one (a heartbeat never reaches the writer) has 0 there,
and the table counts each hop from the previous stamped one.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any, Protocol

import trio

HOPS = (
    "received",  # the read that brought the frame's last bytes returned
    "decoded",  # the frame came out of the sans-IO connection as a command
    "dispatched",  # the handler's task (or the inline call) began
    "checked",  # declared shape (and ACL) checked, the processor is called
    "parsed",  # the send processor read the header and built the messages
    "submitted",  # the job entered the writer's queue (after its arrival turn)
    "picked",  # the writer took the batch holding the job
    "committed",  # the batch's transaction committed (and fsynced with SYNC_FLUSH)
    "woken",  # the caller resumed with its job's result
    "answered",  # the processor returned its response
    "encoded",  # the response frame's bytes are built; the write begins
    "sent",  # the socket took the bytes
)
(
    RECEIVED,
    DECODED,
    DISPATCHED,
    CHECKED,
    PARSED,
    SUBMITTED,
    PICKED,
    COMMITTED,
    WOKEN,
    ANSWERED,
    ENCODED,
    SENT,
) = range(len(HOPS))

_TARGET = os.environ.get("ES_BROKER_TRACE_HOPS", "")
ON = bool(_TARGET)
MAX_SAMPLES = 1_000_000  # per request code; later requests are not kept

now = time.perf_counter_ns


class Trace:
    """The hop timestamps (ns) of one request."""

    __slots__ = ("code", "at")

    def __init__(self, code: int, received: int) -> None:
        self.code = code
        self.at = [0] * len(HOPS)
        self.at[RECEIVED] = received

    def mark(self, hop: int) -> None:
        self.at[hop] = now()


_CURRENT: ContextVar[Trace | None] = ContextVar("es_broker_hop_trace", default=None)
_samples: dict[int, list[list[int]]] = {}


class _Stamped(Protocol):
    trace: Trace | None


def _begin(code: int, channel: Any) -> Trace:
    """A decoded request's trace, bound to the read loop (its tasks inherit it), stamped up to dispatch."""
    received = channel.received_at or channel.stream.received_at
    trace = Trace(code, received)
    trace.at[DECODED] = trace.at[DISPATCHED] = now()
    _CURRENT.set(trace)  # the read loop's, until the next request
    return trace


def _mark(hop: int) -> Trace | None:
    """Stamp `hop` on the current task's trace, if it has one; that trace."""
    trace = _CURRENT.get()
    if trace is not None:
        trace.at[hop] = now()
    return trace


def _current() -> Trace | None:
    return _CURRENT.get()


def _stamp_batch(batch: Iterable[_Stamped], hop: int) -> None:
    """Stamp `hop` on the traces of a writer batch's jobs."""
    at = now()
    for pending in batch:
        if pending.trace is not None:
            pending.trace.at[hop] = at


class _StampedStream(trio.abc.Stream):
    """A connection's stream that notes when reads return and writes begin and end.

    The notes are the connection's latest, so the hop table is exact for one
    request at a time per connection (the benchmark's synchronous sends).
    """

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.transport_stream = stream
        self.received_at = 0
        self.sent_at = (0, 0)

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.transport_stream.receive_some(max_bytes)
        self.received_at = now()
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        began = now()
        await self.transport_stream.send_all(data)
        self.sent_at = (began, now())

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.transport_stream.send_eof()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


# the probes when off: nothing made, nothing stamped (exact signatures: no argument packing)
def _no_begin(code: int, channel: Any) -> None:
    return None


def _no_mark(hop: int) -> None:
    return None


def _no_current() -> None:
    return None


def _no_stamp_batch(batch: Iterable[_Stamped], hop: int) -> None:
    return None


def _unchanged(stream: trio.abc.Stream) -> trio.abc.Stream:
    return stream


# the probes, chosen once by the switch
begin: Callable[[int, Any], Trace | None] = _begin if ON else _no_begin
mark: Callable[[int], Trace | None] = _mark if ON else _no_mark
current: Callable[[], Trace | None] = _current if ON else _no_current
stamp_batch: Callable[[Iterable[_Stamped], int], None] = _stamp_batch if ON else _no_stamp_batch
stamped: Callable[[trio.abc.Stream], trio.abc.Stream] = _StampedStream if ON else _unchanged
RECEIVE_CLOCK: Callable[[], int] | None = now if ON else None  # a channel's clock for `received_at`


def done(trace: Trace) -> None:
    """Keep a finished request's stamps for the table."""
    kept = _samples.setdefault(trace.code, [])
    if len(kept) < MAX_SAMPLES:
        kept.append(trace.at)


def _percentile(values: list[int], p: float) -> int:
    return values[min(len(values) - 1, int(len(values) * p))]


def table() -> dict[str, dict[str, Any]]:
    """Per request code: count, and per hop the p50/p99/mean µs since the previous stamped hop."""
    out: dict[str, dict[str, Any]] = {}
    for code, samples in sorted(_samples.items()):
        rows = {}
        for hop in range(1, len(HOPS)):
            deltas = []
            for at in samples:
                if not at[hop] or not at[RECEIVED]:
                    continue
                prev = max((at[h] for h in range(hop) if at[h]), default=0)
                if prev:
                    deltas.append(at[hop] - prev)
            if deltas:
                deltas.sort()
                rows[HOPS[hop]] = {
                    "p50": _percentile(deltas, 0.5) / 1000,
                    "p99": _percentile(deltas, 0.99) / 1000,
                    "mean": sum(deltas) / len(deltas) / 1000,
                    "n": len(deltas),
                }
        totals = sorted(max(at) - at[RECEIVED] for at in samples if at[RECEIVED])
        if not totals:
            continue
        rows["total"] = {
            "p50": _percentile(totals, 0.5) / 1000,
            "p99": _percentile(totals, 0.99) / 1000,
            "mean": sum(totals) / len(totals) / 1000,
            "n": len(totals),
        }
        out[str(code)] = {"count": len(samples), "hops": rows}
    return out


def format_table(hops: dict[str, dict[str, Any]]) -> str:
    """One code's table as text: hop, p50, p99, mean (µs)."""
    lines = [f"{'hop (since the previous one)':30s}{'p50 µs':>10s}{'p99 µs':>10s}{'mean µs':>10s}"]
    for name, row in hops.items():
        lines.append(f"{name:30s}{row['p50']:10.1f}{row['p99']:10.1f}{row['mean']:10.1f}")
    return "\n".join(lines)


def _write_at_exit() -> None:
    result = table()
    if _TARGET == "-":
        for code, entry in result.items():
            print(
                f"request code {code}, {entry['count']} requests\n{format_table(entry['hops'])}",
                file=sys.stderr,
            )
    else:
        with open(_TARGET, "w") as f:
            json.dump(result, f, indent=1)


if ON:
    atexit.register(_write_at_exit)
