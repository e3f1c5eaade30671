"""Client instructions per `Producer.send`: this process under callgrind, the broker native.

Run: python bench/client_cg.py [--sends 500] [--pure]

Wall-clock latency on a shared 2-core machine moves with whatever else runs;
the instructions the client executes for a fixed number of sends do not.
This starts `es-broker serve` natively (tests/process_fixtures.py), then
runs itself again under `valgrind --tool=callgrind --instr-atstart=no`: that
child warms up a `Producer` on trio with 50 sends, switches instrumentation
on (`callgrind_control -i on`), does `--sends` more `Producer.send` of 1 KiB,
switches it off, and the parent prints the instructions per send. The
broker's own instructions per request are bench/server_cg.py's.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_broker.client import Producer  # noqa: E402
from tests.process_fixtures import serve  # noqa: E402

BODY = b"x" * 1024
TOPIC = "ClientCg"


def _instrument(on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
        check=True,
        capture_output=True,
    )


async def _sends(namesrv: str, count: int) -> None:
    async with Producer(namesrv, "ClientCg", client_ip="127.0.0.1") as producer:
        for _ in range(50):
            await producer.send(TOPIC, BODY, tags="A")
        _instrument(True)
        for _ in range(count):
            await producer.send(TOPIC, BODY, tags="A")
        _instrument(False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sends", type=int, default=500)
    parser.add_argument("--pure", action="store_true", help="ES_BROKER_PURE_PYTHON=1 in the client")
    parser.add_argument("--namesrv", help=argparse.SUPPRESS)  # the child's
    args = parser.parse_args()
    if args.namesrv:
        trio.run(_sends, args.namesrv, args.sends)
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if args.pure:
        env["ES_BROKER_PURE_PYTHON"] = "1"
    with tempfile.TemporaryDirectory() as d, serve(Path(d) / "data") as broker:
        broker.admin("updateTopic", "-b", broker.broker, "-t", TOPIC, "-r", "8", "-w", "8")
        out = Path(d) / "callgrind.out"
        run = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--sends",
                str(args.sends),
                "--namesrv",
                broker.namesrv,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no total:\n{run.stderr}")
    total = int(found.group(1))
    mode = "pure" if args.pure else "compiled"
    print(
        f"Producer.send of 1 KiB on trio ({mode}): {total / args.sends / 1000:.1f} k instructions "
        f"per send in the client ({args.sends} sends)"
    )


if __name__ == "__main__":
    main()
