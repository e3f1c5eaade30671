"""A running broker killed at each step of its own sealing (B-463): `es-broker serve` processes,
the kill injected at each step's end (ES_BROKER_SEAL_CRASH_AT), then a restart. The segments are
either hot or archived and recorded, never lost or half removed; `verify` and `verify --full` pass."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import trio

from es_broker.config import BrokerConfig
from es_broker.history import seal as sealing
from es_broker.history.archive import read_manifest
from es_broker.net.remoting_client import RemotingClient
from es_broker.store import Store
from tests.ha_fixtures import Wire
from tests.helpers import cli, cli_ok, wait_until
from tests.process_fixtures import serve

SEGMENT = 8
FAR = "4102444800000"  # 2100-01-01: every record is before it
TOPIC = "KillT"
CONF = [f"history_segment_records={SEGMENT}"]
NO_READMODEL = ("--readmodel-url", "none")  # no follower: nothing but the cut-off bounds sealing


def _state(data_dir: Path) -> tuple[int, int, int, list[dict]]:
    """(first hot seq, last seq, sealed up to, the sealed segments) of a stopped broker's directory."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        first = next(iter(store.log.read()))[0]
        with store.read() as txn:
            segments = list(store.history.segments(txn))
            return first, store.log.last_seq, store.history.sealed_upto(txn), segments
    finally:
        store.close()


def _archived_whole(segments: list[dict]) -> None:
    """Every recorded segment is in the archive whole, as its record says."""
    for s in segments:
        manifest, digest = read_manifest(s["location"])
        assert digest == s["manifest_sha256"]
        assert (manifest["first_seq"], manifest["last_seq"]) == (s["first_seq"], s["last_seq"])


@pytest.mark.parametrize("step", sealing.STEPS)
async def test_b463_a_running_broker_killed_at_each_step_of_its_sealing(tmp_path, nursery, step):
    data_dir = tmp_path / "data"
    w = Wire(RemotingClient(nursery))
    env = {sealing.CRASH_ENV: step}
    with serve(data_dir, *NO_READMODEL, conf=CONF, env=env, log_file=tmp_path / "a.log") as b:
        await w.create_topic(b.broker, TOPIC, 2)
        for i in range(30):
            await w.send(b.broker, TOPIC, i % 2, b"k%d" % i)
        asked = await trio.to_thread.run_sync(
            lambda: cli("archive", "-b", b.broker, "--before", FAR, "--json")
        )
        assert asked.returncode != 0, asked.stdout  # the broker died before it answered
        code = await trio.to_thread.run_sync(lambda: b.process.wait(30))
        assert code == 137, (tmp_path / "a.log").read_text()
    first, last, upto, segments = _state(data_dir)
    if sealing.STEPS.index(step) >= sealing.STEPS.index("recorded"):
        assert upto == segments[-1]["last_seq"] > 0 and first == upto + 1
        _archived_whole(segments)
    else:
        assert (first, upto, segments) == (1, 0, [])  # every record still hot
    await cli_ok("verify", "--data-dir", str(data_dir))
    await cli_ok("verify", "--data-dir", str(data_dir), "--full")

    # restarted (no kill this time): it serves, and seals the rest whole
    with serve(data_dir, *NO_READMODEL, conf=CONF, log_file=tmp_path / "b.log") as b:
        await w.send(b.broker, TOPIC, 0, b"after")
        done = await cli_ok("archive", "-b", b.broker, "--before", FAR, "--json")
        assert json.loads(done.stdout)["sealed"] or upto >= last - SEGMENT
    first, last, upto, segments = _state(data_dir)
    assert upto > 0 and first == upto + 1 and last - upto < 3 * SEGMENT
    assert [s["first_seq"] for s in segments] == [1 + SEGMENT * i for i in range(len(segments))]
    _archived_whole(segments)
    assert len(list((data_dir / "history").glob("*snapshot-*"))) == 1
    await cli_ok("verify", "--data-dir", str(data_dir))
    await cli_ok("verify", "--data-dir", str(data_dir), "--full")


def _sealing_processes(parent: int) -> list[int]:
    """The pids of a broker's sealing processes (B-675) running now."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if ppid == parent and b"es_broker.server.seal_process" in command:
            found.append(int(stat.parent.name))
    return found


async def test_b675_the_sealing_process_killed_loses_nothing_and_the_broker_serves_on(
    tmp_path, nursery
):
    data_dir = tmp_path / "data"
    w = Wire(RemotingClient(nursery))
    with serve(data_dir, *NO_READMODEL, conf=CONF, log_file=tmp_path / "a.log") as b:
        await w.create_topic(b.broker, TOPIC, 2)
        for i in range(30):
            await w.send(b.broker, TOPIC, i % 2, b"k%d" % i)
        asked: list = []

        async def archive() -> None:
            args = ("archive", "-b", b.broker, "--before", FAR, "--json")
            asked.append(await trio.to_thread.run_sync(lambda: cli(*args)))

        async with trio.open_nursery() as tasks:
            tasks.start_soon(archive)
            found = await wait_until(
                "the sealing's process", lambda: _sealing_processes(b.process.pid)
            )
            os.kill(found[0], signal.SIGKILL)  # kill -9 of that one process of the broker
        [first] = asked
        assert first.returncode != 0
        assert "sealing failed: the sealing's process exited with -9" in first.stderr
        # nothing recorded, every record hot, and the broker serves on
        await w.send(b.broker, TOPIC, 0, b"after the kill")
        done = await cli_ok("archive", "-b", b.broker, "--before", FAR, "--json")
        sealed = json.loads(done.stdout)["sealed"]
        assert sealed and sealed[0]["first_seq"] == 1
    first_hot, last, upto, segments = _state(data_dir)
    assert upto == segments[-1]["last_seq"] and first_hot == upto + 1 and last - upto < 3 * SEGMENT
    _archived_whole(segments)
    await cli_ok("verify", "--data-dir", str(data_dir))
    await cli_ok("verify", "--data-dir", str(data_dir), "--full")
