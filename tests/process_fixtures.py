"""A broker in a real process (`es-broker serve`) and the admin CLI run as a command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_NAMESRV = re.compile(r"name server listening on (\S+)")
_BROKER = re.compile(r"listening on (\S+), data in")


@dataclass
class ServedBroker:
    process: subprocess.Popen
    namesrv: str
    broker: str
    data_dir: Path

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv

    @property
    def addr(self) -> str:
        return self.broker

    def admin(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run `es-broker admin -n NAMESRV ...` and return the finished process."""
        done = subprocess.run(
            [sys.executable, "-m", "es_broker.cli", "admin", "-n", self.namesrv, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
        )
        if check and done.returncode != 0:
            raise AssertionError(f"admin {args} failed: {done.stderr}")
        return done

    def admin_json(self, *args: str):
        return json.loads(self.admin(*args, "--json").stdout)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT))


@contextmanager
def serve(
    data_dir: Path,
    *extra: str,
    log_file: Path | None = None,
    conf: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[ServedBroker]:
    """Start `es-broker serve` on free ports; waits for its ready lines, SIGTERMs it at the end.

    With `log_file` everything the process prints goes to that file (read it for
    tracebacks); otherwise to a pipe that is read up to the ready lines only.
    `conf`: broker.conf lines, written next to the data directory and passed as --config.
    `env`: environment variables over the test's (ROCKETMQ_HOME, ...). `cwd`: where it runs
    (`python -m` puts that directory first on its path: elsewhere than a checkout, for another
    checkout's es_broker on PYTHONPATH to be the one that runs).
    """
    if conf:
        conf_file = data_dir.parent / f"{data_dir.name}.conf"
        conf_file.write_text("\n".join(conf) + "\n")
        extra = ("--config", str(conf_file), *extra)
    args = [
        sys.executable,
        "-m",
        "es_broker.cli",
        "serve",
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--namesrv-listen",
        "127.0.0.1:0",
        *extra,
    ]
    sink = open(log_file, "a") if log_file is not None else None  # noqa: SIM115 (closed in finally)
    process = subprocess.Popen(
        args,
        stdout=sink or subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**_env(), **(env or {})},
        cwd=cwd,
    )
    try:
        lines = _log_lines(process, log_file) if log_file is not None else process.stdout
        namesrv = broker = None
        for line in lines:
            if m := _NAMESRV.search(line):
                namesrv = m.group(1)
            elif m := _BROKER.search(line):
                broker = m.group(1)
                break
        if namesrv is None or broker is None:
            raise RuntimeError(f"es-broker serve did not start (exit {process.wait()})")
        yield ServedBroker(process, namesrv, broker, data_dir)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if sink is not None:
            sink.close()


def _log_lines(process: subprocess.Popen, log_file: Path, timeout: float = 60.0) -> Iterator[str]:
    """The lines of a process's log file as they are written, until the process exits or timeout."""
    deadline = time.monotonic() + timeout
    with open(log_file) as log:
        while time.monotonic() < deadline:
            line = log.readline()
            if line:
                yield line
            elif process.poll() is not None:
                return
            else:
                # the file has no event to wait on: re-read it, bounded by the deadline
                time.sleep(0.02)


@pytest.fixture
def served(tmp_path) -> Iterator[ServedBroker]:
    with serve(tmp_path / "data") as broker:
        yield broker


@dataclass
class ProcessRunning:
    """A broker process seen through the in-process fixture's interface (tests/server_fixtures.Running)."""

    served: ServedBroker
    client: object

    @property
    def namesrv_addr(self) -> str:
        return self.served.namesrv

    @property
    def addr(self) -> str:
        return self.served.broker

    async def call(self, code: int, fields: dict | None = None, body: bytes = b"", **kw):
        from es_broker.remoting.command import request

        return await self.client.invoke(self.addr, request(code, fields or {}, body, **kw))

    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> None:
        from es_broker.remoting.codes import RequestCode

        response = await self.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            },
        )
        assert response.code == 0, response.remark


@pytest.fixture
async def process_running(tmp_path, nursery) -> Iterator[ProcessRunning]:
    """`es-broker serve` in a real process, with a remoting client in the test's nursery."""
    from es_broker.net.remoting_client import RemotingClient

    with serve(tmp_path / "data") as broker:
        yield ProcessRunning(broker, RemotingClient(nursery))
        nursery.cancel_scope.cancel()
