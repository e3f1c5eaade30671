"""Driving the npm client ali-ons (tests/interop) against a broker: skips, the node scripts, probes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.command import RemotingCommand, request
from tests.waiting import poll_until_sync

INTEROP_DIR = Path(__file__).parent / "interop"
NODE = shutil.which("node")
ALI_ONS = INTEROP_DIR / "node_modules" / "ali-ons"

NEEDS_ALI_ONS = [
    pytest.mark.skipif(
        NODE is None, reason="node is not installed (ali-ons interop tests need Node.js)"
    ),
    pytest.mark.skipif(
        not ALI_ONS.is_dir(), reason="ali-ons is not installed: run `npm ci --prefix tests/interop`"
    ),
]
SCRIPT_TIMEOUT = 60  # hard timeout handed to the node scripts (seconds)
OFFSET_TIMEOUT = 60.0  # for committed offsets to show up at the broker


@dataclass
class BrokerProcess:
    process: subprocess.Popen[str]
    namesrv_addr: str
    broker_addr: str


# ---------------------------------------------------------------------------- remoting helpers
def remoting_call(addr: str, code: int, fields: dict[str, Any] | None = None) -> RemotingCommand:
    """One request/response round trip with our own remoting client."""

    async def call() -> RemotingCommand:
        async with trio.open_nursery() as nursery:
            client = RemotingClient(nursery)
            try:
                return await client.invoke(addr, request(code, fields or {}), timeout=10.0)
            finally:
                await client.aclose()
                nursery.cancel_scope.cancel()

    return trio.run(call)


def poll(
    what: str,
    probe: Callable[[], Any],
    done: Callable[[Any], bool],
    timeout: float = OFFSET_TIMEOUT,
    evidence: Callable[[], str] | None = None,
) -> Any:
    """Call probe until done(result) or timeout; bounded polling of broker state. A timeout names
    the last result, and what `evidence` returns (say, the broker's own account of it)."""
    hit: list[Any] = []

    def check() -> bool:
        result = probe()
        hit[:] = [result]
        return done(result)

    try:
        poll_until_sync(check, timeout, what)
    except AssertionError:
        extra = f"\n{evidence()}" if evidence is not None else ""
        raise AssertionError(
            f"{what}: not reached within {timeout} s; last: {hit[0]!r}{extra}"
        ) from None
    return hit[0]


# ---------------------------------------------------------------------------- node scripts
def run_node(script: str, *args: str, timeout: int = SCRIPT_TIMEOUT) -> list[dict[str, Any]]:
    """Run a script of tests/interop; its stdout JSON lines, asserting exit status 0."""
    env = dict(os.environ)
    env.pop("NODE_OPTIONS", None)
    started = time.monotonic()
    proc = subprocess.run(
        [NODE, script, *args, "--timeout", str(timeout)],
        cwd=INTEROP_DIR,
        capture_output=True,
        text=True,
        timeout=timeout + 30,
        env=env,
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, (
        f"{script} exited with {proc.returncode} after {took:.1f} s\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
