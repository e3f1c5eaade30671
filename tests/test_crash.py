"""Kill -9 a writing process: every acknowledged append survives and the projections verify.

SIGKILL ends the process, not the machine: LMDB's committed pages are in the
kernel's page cache, so ASYNC_FLUSH loses nothing here either. Its documented
window (up to flushIntervalCommitLog, 500 ms) applies to an operating-system
crash or power loss, which a test on one machine cannot produce.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.remoting.message import decode_one

CHILD = Path(__file__).with_name("crash_writer.py")


def run_and_kill(
    data_dir: Path, flush: str, acks_before_kill: int
) -> tuple[list[tuple[int, int, bytes]], list]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(data_dir), flush],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    acked, commits = [], []
    try:
        assert child.stdout.readline().strip() == "READY"
        for line in child.stdout:
            kind, *rest = line.split()
            if kind == "ACK":
                acked.append((int(rest[0]), int(rest[1]), rest[2].encode()))
            else:
                commits.append((int(rest[0]), int(rest[1])))
            if len(acked) >= acks_before_kill:
                break
        child.send_signal(signal.SIGKILL)  # mid-load: other sends are in flight
    finally:
        child.wait()
    # lines the child printed before it died are acknowledgements too
    for line in child.stdout:
        kind, *rest = line.split()
        if kind == "ACK" and len(rest) == 3:
            acked.append((int(rest[0]), int(rest[1]), rest[2].encode()))
    return acked, commits


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_sigkill_under_load_loses_no_acknowledged_append(tmp_path, flush):
    rng = random.Random()
    acks_before_kill = rng.randrange(200, 1500)
    acked, commits = run_and_kill(tmp_path, flush, acks_before_kill)
    assert len(acked) >= acks_before_kill

    broker = Broker.open(tmp_path, BrokerConfig(storePathRootDir=str(tmp_path)))
    with broker.store.read() as txn:
        for queue_id, offset, body in acked:
            unit = broker.store.cq.unit(txn, "CRASH", queue_id, offset)
            assert unit is not None, f"acknowledged message {body!r} at {queue_id}/{offset} is gone"
            message, _ = decode_one(broker.store.log.payload(txn, unit.physical_offset))
            assert message.body == body
        for queue_id, offset in commits:
            history = {c.new for c in broker.store.offsets.changes(txn, "CRASH", "G", queue_id)}
            assert offset in history, f"acknowledged commit {queue_id}/{offset} is gone"
    broker.close()
    assert verify(tmp_path) == []
