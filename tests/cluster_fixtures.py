"""Processes of a cluster in a test: a `serve --role namesrv`, `serve --role broker`s registering
with it, `es-broker admin` against it. The add-and-drain tests (B-531) of the project's client and
of ali-ons share them."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.process_fixtures import _env

BROKER_READY = re.compile(r"listening on (\S+), data in")
NAMESRV_READY = re.compile(r"name server listening on (\S+)")


@contextmanager
def process(args: list[str], ready: re.Pattern[str], log: Path) -> Iterator[str]:
    """`es-broker <args>` until its ready line (its address), SIGTERMed at the end."""
    sink = open(log, "w")  # noqa: SIM115 (the process owns it until it ends)
    proc = subprocess.Popen(
        [sys.executable, "-m", "es_broker.cli", *args],
        stdout=subprocess.PIPE,
        stderr=sink,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if m := ready.search(line):
                break
        else:
            raise RuntimeError(f"{args} did not start (exit {proc.wait()}): {log.read_text()}")
        yield m.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        sink.close()


def broker_process(tmp_path: Path, name: str, namesrv: str, *conf: str) -> Iterator[str]:
    """`serve --role broker` named `name`, registering with `namesrv`; yields its address."""
    conf_file = tmp_path / f"{name}.conf"
    conf_file.write_text("\n".join([f"brokerName={name}", *conf]) + "\n")
    args = [
        "serve",
        "--role",
        "broker",
        "--namesrv",
        namesrv,
        "--data-dir",
        str(tmp_path / name),
        "--listen",
        "127.0.0.1:0",
        "--readmodel-url",
        "none",
        "--config",
        str(conf_file),
    ]
    return process(args, BROKER_READY, tmp_path / f"{name}.log")


def admin(namesrv: str, *args: str) -> dict | list:
    done = subprocess.run(
        [sys.executable, "-m", "es_broker.cli", "admin", "-n", namesrv, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return json.loads(done.stdout)


def route_perms(namesrv: str, topic: str) -> dict[str, int]:
    """brokerName -> perm of `topic`'s queue datas at the name server."""
    route = admin(namesrv, "topicRoute", "-t", topic)
    return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}


@dataclass
class DrainCluster:
    """A name server and two brokers, `broker-old` and `broker-new`, each with `topic`."""

    namesrv: str
    old: str
    new: str
    stopping: contextlib.ExitStack  # closing it stops the old broker

    def stop_old(self) -> None:
        self.stopping.close()


@contextmanager
def drain_cluster(tmp_path: Path, topic: str, queues: int = 4) -> Iterator[DrainCluster]:
    """`serve --role namesrv` and two `serve --role broker --namesrv` processes, the topic made
    on both (read and write queues `queues`); every process SIGTERMed at the end."""
    ns_args = ["serve", "--role", "namesrv", "--namesrv-listen", "127.0.0.1:0"]
    with contextlib.ExitStack() as stack:
        namesrv = stack.enter_context(process(ns_args, NAMESRV_READY, tmp_path / "namesrv.log"))
        new = stack.enter_context(broker_process(tmp_path, "broker-new", namesrv))
        stopping = stack.enter_context(contextlib.ExitStack())  # the old broker, stopped first
        old = stopping.enter_context(broker_process(tmp_path, "broker-old", namesrv))
        n = str(queues)
        for addr in (old, new):
            admin(namesrv, "updateTopic", "-b", addr, "-t", topic, "-r", n, "-w", n)
        yield DrainCluster(namesrv, old, new, stopping)
