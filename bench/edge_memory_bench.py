"""Edge memory: connections that send most of a big frame and stall, then close.

Run: python bench/edge_memory_bench.py [--connections 40] [--sent-mib 15] [--config broker.conf]

Starts `es-broker serve` (no read model), reads its VmRSS from
/proc/PID/status at the start, once every connection has sent its part of a
16 MiB frame (or been closed by the broker), and after all of them closed.
Prints the three figures in MiB. Linux only.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.process_fixtures import serve  # noqa: E402

MIB = 1024 * 1024


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def stall(
    addr: tuple[str, int], sent: int, frame: int, done: threading.Barrier, release: threading.Event
) -> None:
    """Send `sent` bytes of a `frame`-byte frame, then hold the connection until released."""
    sock = socket.create_connection(addr)
    with contextlib.suppress(OSError):  # the broker closed us: its cap at work
        sock.sendall(struct.pack(">ii", frame - 4, 2) + b"{}" + b"x" * (sent - 10))
    done.wait()
    release.wait()
    sock.close()


def settle(pid: int, rounds: int = 10, pause: float = 0.5) -> float:
    """RSS once it stops falling (the broker notices closes asynchronously)."""
    last = rss_mib(pid)
    for _ in range(rounds):
        time.sleep(pause)
        now = rss_mib(pid)
        if abs(now - last) < 1:
            return now
        last = now
    return last


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=40)
    parser.add_argument("--sent-mib", type=float, default=15)
    parser.add_argument("--frame-mib", type=float, default=16)
    parser.add_argument("--config", help="broker.conf for the broker")
    args = parser.parse_args()
    extra = ["--readmodel-url", "none"] + (["--config", args.config] if args.config else [])
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp) / "data", *extra) as broker:
        pid = broker.process.pid
        host, port = broker.broker.rsplit(":", 1)
        start = settle(pid)
        done = threading.Barrier(args.connections + 1)
        release = threading.Event()
        threads = [
            threading.Thread(
                target=stall,
                args=(
                    (host, int(port)),
                    int(args.sent_mib * MIB),
                    int(args.frame_mib * MIB),
                    done,
                    release,
                ),
            )
            for _ in range(args.connections)
        ]
        for t in threads:
            t.start()
        done.wait()
        held = settle(pid)
        release.set()
        for t in threads:
            t.join()
        after = settle(pid)
        print(
            f"connections={args.connections} sent={args.sent_mib} MiB of {args.frame_mib} MiB: "
            f"VmRSS start {start:.0f} MiB, while held {held:.0f} MiB, after close {after:.0f} MiB"
        )


if __name__ == "__main__":
    main()
