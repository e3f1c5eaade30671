"""What each projection costs the single writer, by record type, under RocketMQ's benchmark shape.

Run: python bench/applier_costs.py [--messages 20000] [--rows 2] [--pure]

`bench/writer_ceiling.py` gives the writer's CPU a message with every projection; this splits
the part the projections take. It runs the same row (default: the shape's records, a send of one
message and a pull recording its delivery and its commit for each message) with every call the
log makes to apply a record (`RecordLog.apply`, one per projection that keeps something of the
record's type) timed by `time.perf_counter_ns`, and prints, per record type and projection, the
microseconds a message and the calls a message; then the projections' settles a commit, the
group commits' whole time (`RecordLog.write_batch`: the jobs, their records, the commits) and the
writer's CPU a message. The timer's own cost (measured on an empty call, and taken off each call) is
left out; the total CPU includes it, so it reads a little higher than writer_ceiling's.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

if "--pure" in sys.argv:
    os.environ["ES_BROKER_PURE_PYTHON"] = "1"

import writer_ceiling  # noqa: E402

from es_broker.core.broker import Broker  # noqa: E402
from es_broker.log import RecordLog  # noqa: E402

ROWS = {0: (1, False), 1: (32, False), 2: (1, True)}


def _timer_cost() -> float:
    """Nanoseconds the timing wrapper adds to one call (an empty one, timed the same way)."""

    def nothing(txn: Any, seq: int, record: Any) -> None:
        return None

    spent = [0]

    def timed(txn: Any, seq: int, record: Any) -> None:
        t = time.perf_counter_ns()
        nothing(txn, seq, record)
        spent[0] += time.perf_counter_ns() - t

    n = 200_000
    for _ in range(n):
        timed(None, 0, None)
    return spent[0] / n


class Timed:
    """Every applier of a log timed: nanoseconds and calls by (record type, applier)."""

    def __init__(self, log: RecordLog, overhead_ns: float) -> None:
        self.ns: collections.Counter[tuple[str, str]] = collections.Counter()
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        self.overhead_ns = overhead_ns
        appliers_of = log._appliers_of

        def timed_appliers_of(kind: str) -> tuple[Callable[..., None], ...]:
            found = tuple(self._timed(kind, call) for call in appliers_of(kind))
            log._appliers[kind] = found
            return found

        log._appliers_of = timed_appliers_of  # type: ignore[method-assign]
        log._appliers.clear()
        # what a commit costs besides its records: the projections' settles, and the commit itself
        log._settlers = tuple(
            self._timed("(each commit) settle", settle) for settle in log._settlers
        )
        self.batch_ns = 0
        write_batch = log.write_batch

        def timed_write_batch(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter_ns()
            try:
                return write_batch(*a, **kw)
            finally:
                self.batch_ns += time.perf_counter_ns() - t

        log.write_batch = timed_write_batch  # type: ignore[method-assign]

    def _timed(self, kind: str, call: Callable[..., None]) -> Callable[..., None]:
        owner = getattr(call, "__self__", None)
        name = (kind, f"{type(owner).__name__}.{getattr(call, '__name__', '?')}")
        ns, calls, perf = self.ns, self.calls, time.perf_counter_ns

        def timed(*args: Any) -> None:
            t = perf()
            call(*args)
            ns[name] += perf() - t
            calls[name] += 1

        return timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rows", type=int, default=2, choices=sorted(ROWS))
    parser.add_argument("--window", type=int, default=64, help="messages queued before a commit")
    parser.add_argument("--pure", action="store_true", help="ES_BROKER_PURE_PYTHON=1")
    args = parser.parse_args()
    overhead = _timer_cost()
    timers: list[Timed] = []
    opened = Broker.open

    def open_timed(*a: Any, **kw: Any) -> Broker:
        broker = opened(*a, **kw)
        timers.append(Timed(broker.store.log, overhead))
        return broker

    Broker.open = open_timed  # type: ignore[method-assign]
    per_record, pulls = ROWS[args.rows]
    cpu, messages, _ = trio.run(writer_ceiling._run, args.messages, per_record, pulls, args.window)
    (timer,) = timers
    print(
        f"row {args.rows}, {messages} messages, {'pure Python' if args.pure else 'compiled'}; "
        f"timer {overhead:.0f} ns a call, taken off"
    )
    print(f"{'µs/msg':>8} {'calls/msg':>9}  record type: projection applier")
    total = 0.0
    rows = []
    for key, ns in timer.ns.items():
        calls = timer.calls[key]
        us = max(ns - calls * overhead, 0) / messages / 1000
        total += us
        rows.append((us, calls / messages, key))
    for us, calls, (kind, name) in sorted(rows, reverse=True):
        if us >= 0.05:
            print(f"{us:8.2f} {calls:9.2f}  {kind}: {name}")
    writer = cpu / messages * 1e6
    batches = timer.batch_ns / messages / 1000
    print(f"{total:8.2f} µs/msg in the appliers and settles")
    print(f"{batches:8.2f} µs/msg in the group commits (`write_batch`: jobs, records, commits)")
    print(
        f"{writer:8.2f} µs/msg of the writer's CPU (the puts' checks and queueing, the pulls' reads)"
    )


if __name__ == "__main__":
    main()
