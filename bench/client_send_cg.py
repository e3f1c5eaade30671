"""The Python client's own instructions a synchronous send (`Producer.send`), under callgrind.

A broker runs in its own process (`es-broker serve`, read model off); the client runs under
valgrind's callgrind twice, with N and 2N sends of 1 KiB with a tag and a key, and the difference
over N is what one send costs the client: building the request, writing it, waiting for the
answer and reading it. The broker's side is not counted (see bench/shape_cg.py for it).

    PYTHONPATH=$PWD python bench/client_send_cg.py --sends 500
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from es_broker.client import Producer  # noqa: E402
from tests.process_fixtures import serve  # noqa: E402

BODY = b"x" * 1024
TOPIC = "ClientSendCost"
WARM_UP = 20


async def _send(namesrv: str, sends: int) -> None:
    async with Producer(namesrv, "ClientSendCost", client_ip="127.0.0.1") as producer:
        for _ in range(WARM_UP + sends):
            await producer.send(TOPIC, BODY, tags="A", keys="k")


def _counted(namesrv: str, sends: int) -> int:
    """Instructions of a client process that sends `sends` messages after its warm-up."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/cg.out",
                sys.executable,
                __file__,
                "--client",
                namesrv,
                "--sends",
                str(sends),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sends", type=int, default=500)
    p.add_argument("--client", metavar="NAMESRV", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.client:
        trio.run(_send, args.client, args.sends)
        return
    with (
        tempfile.TemporaryDirectory() as tmp,
        serve(Path(tmp) / "data", "--readmodel-url", "none") as broker,
    ):
        subprocess.run(  # the bytecode cached first, so that neither counted run compiles it
            [sys.executable, __file__, "--client", broker.namesrv, "--sends", "1"],
            check=True,
            env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        )
        one = _counted(broker.namesrv, args.sends)
        two = _counted(broker.namesrv, 2 * args.sends)
    print(f"client instructions a sync send: {(two - one) / args.sends / 1000:.1f}k")


if __name__ == "__main__":
    main()
