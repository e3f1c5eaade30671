"""A running master's sealing writes its files in a process of its own (B-675).

Steps 1 to 3 of a sealing (`es_broker.history.seal.prepare`: the segments'
Parquet files, their read-back, the snapshot of the projections) read every
record of the segments and every entry of the projections, and encode them:
seconds of Python for a large segment. So does the archive index's catch-up
after the record (B-460: the sealed records applied to the index's own LMDB
environment). In a worker thread of the broker they held the GIL half of that
time, and the broker's requests waited for it. Here each runs in a child
process (`python -m es_broker.server.seal_process PARENT`), which opens the
data directory's store read-only, as the read-model follower does (LMDB lets
many processes read while one writes), and takes another core.

The child reads its job as JSON on stdin and answers `seal.Prepared` as JSON,
the last line of its stdout. It dies with the broker (PR_SET_PDEATHSIG), so no
orphan writes archive files that a restarted broker writes too. A child that
fails (an exception, a kill) fails the sealing as a failure in the thread did:
nothing is recorded, the segments stay hot, and the broker goes on serving.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

from es_broker.config import BrokerConfig
from es_broker.history import horizon
from es_broker.history import seal as sealing
from es_broker.history.archive import Written
from es_broker.readmodel.process import die_with_parent
from es_broker.store import Store

# the child's read-only map: larger than the data file will grow while it works, so that none of
# its transactions meets a map the broker grew meanwhile (MDB_MAP_RESIZED); address space only
READ_MAP_SIZE = 1 << 40
STDERR_KEPT = 2000  # characters of a failed child's stderr kept in the error


class SealingProcessFailed(Exception):
    """The sealing's child process ended without its answer: nothing was recorded.

    Its text is the exit status and the last line the child wrote to stderr (an exception's);
    `detail` keeps the end of its stderr (the traceback), for the broker's log.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def from_json(data: dict[str, Any]) -> sealing.Prepared:
    """The `seal.Prepared` a child answered (`dataclasses.asdict` of it, as JSON)."""
    return sealing.Prepared(
        [Written(w["location"], w["manifest"], w["manifest_sha256"]) for w in data["written"]],
        int(data["snapshot_seq"]),
        str(data["snapshot_sha256"]),
    )


async def prepare_apart(
    data_dir: Path, location: str, segments: list[tuple[int, int]]
) -> sealing.Prepared:
    """`seal.prepare` of `segments` in a child process; raises SealingProcessFailed if it fails.

    Cancelled, the child is killed (trio.run_process): its files are left as a kill leaves them.
    """
    job = {"data_dir": str(data_dir), "location": location, "segments": segments}
    return from_json(json.loads(await _run(job)))


async def catch_up_apart(data_dir: Path) -> None:
    """`horizon.catch_up` in a child process: the archive index applies the segments just sealed
    (B-460) without the broker's GIL. The index is its own LMDB environment, which the broker
    reads; raises SealingProcessFailed if the child fails (the index is a cache: the first
    question catches it up then)."""
    await _run({"data_dir": str(data_dir), "catch_up": True})


async def _run(job: dict[str, Any]) -> str:
    """Run `job` in a child process; the last line of its stdout."""
    done = await trio.run_process(
        [sys.executable, "-m", __name__, str(os.getpid())],
        stdin=json.dumps(job).encode(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    if done.returncode != 0:
        sealing.crash_passed_on(done.returncode)
        stderr = done.stderr.decode(errors="replace").strip()[-STDERR_KEPT:]
        last = stderr.splitlines()[-1] if stderr else "(nothing on stderr)"
        raise SealingProcessFailed(
            f"the sealing's process exited with {done.returncode}: {last}", stderr
        )
    lines = done.stdout.decode().strip().splitlines()
    if not lines:
        raise SealingProcessFailed("the sealing's process gave no answer")
    return lines[-1]


def main(argv: list[str]) -> int:
    die_with_parent(int(argv[0]))
    job = json.loads(sys.stdin.buffer.read())
    data_dir = job["data_dir"]
    config = BrokerConfig(storePathRootDir=data_dir, initial_map_size=READ_MAP_SIZE)
    store = Store.open(data_dir, config, readonly=True)
    try:
        if job.get("catch_up"):
            horizon.catch_up(store)
            answer: dict[str, Any] = {"caught_up": True}
        else:
            segments = [(int(first), int(last)) for first, last in job["segments"]]
            # the dataclasses as they are: Prepared, its Written segments (`from_json` reads it)
            answer = asdict(sealing.prepare(store, data_dir, job["location"], segments))
    finally:
        store.close()
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
