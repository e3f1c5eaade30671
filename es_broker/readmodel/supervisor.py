"""The broker's side of the read-model follower: a child process, restarted when it exits.

`es-broker serve` runs `es-broker readmodel follow` as a child and this task
watches it: an exit is logged and the child started again after a back-off
(1 s doubling to 60 s, back to 1 s once a child ran for a minute). When the
broker stops, the task is cancelled and the child gets SIGTERM, then SIGKILL
after a grace period. The child runs in a session of its own, so a Ctrl-C in
the terminal reaches the broker only, which stops the child in order.

Nothing here imports SQLAlchemy or the follower: none of it runs in the broker.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import trio

logger = logging.getLogger("es_broker.readmodel")

RESTART_FIRST = 1.0  # seconds before a child that exited is started again...
RESTART_MAX = 60.0  # ...doubling up to this
HEALTHY_AFTER = 60.0  # a child that ran this long resets the back-off
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL when the broker stops
# the child's scheduling priority: on a busy box the request path wins the CPU and the read model
# catches up when there is room (its lag is in GET_BROKER_RUNTIME_INFO); at nice 10 CFS gives it
# about a tenth of a core it contends for with the broker
FOLLOWER_NICE = 10


@dataclass(frozen=True, slots=True)
class FollowerCommand:
    """What the child follows: a data directory into a database, under a source name and role."""

    data_dir: str
    url: str
    broker_name: str
    broker_role: str
    verbose: bool = False
    nice: int = FOLLOWER_NICE

    def argv(self, parent: int) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "es_broker.cli",
            "readmodel",
            "follow",
            "--data-dir",
            self.data_dir,
            "--readmodel-url",
            self.url,
            "--broker-name",
            self.broker_name,
            "--broker-role",
            self.broker_role,
            "--exit-with-parent",
            str(parent),
            "--nice",
            str(self.nice),
        ]
        return [*argv, "-v"] if self.verbose else argv


def child_env() -> dict[str, str]:
    """The broker's environment, with this es_broker first on the path, so the child runs the same code."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=root if not path else os.pathsep.join([root, path]))


@dataclass(slots=True)
class FollowerSupervisor:
    """Runs the follower child for as long as the task runs; `pid` is the running child's, or None."""

    command: FollowerCommand
    restart_first: float = RESTART_FIRST
    restart_max: float = RESTART_MAX
    healthy_after: float = HEALTHY_AFTER
    grace: float = STOP_GRACE
    pid: int | None = None
    starts: int = 0
    exits: list[int | None] = field(default_factory=list)  # exit statuses, oldest first

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        delay = self.restart_first
        started = False
        while True:
            began = trio.current_time()
            try:
                async with trio.open_nursery() as nursery:
                    process: trio.Process = await nursery.start(self._run_child)
                    self.pid = process.pid
                    self.starts += 1
                    logger.info("read-model follower started, pid %d", process.pid)
                    if not started:
                        task_status.started()
                        started = True
            except* OSError as group:  # could not even start it: the broker goes on all the same
                logger.warning(
                    "read-model follower could not start (%s); trying again in %.0f s",
                    group.exceptions[0],
                    delay,
                )
            else:
                self.pid = None
                status = process.returncode
                self.exits.append(status)
                if trio.current_time() - began >= self.healthy_after:
                    delay = self.restart_first
                logger.warning(
                    "read-model follower (pid %d) exited with %s; starting it again in %.0f s",
                    process.pid,
                    _describe(status),
                    delay,
                )
            if not started:
                task_status.started()
                started = True
            await trio.sleep(delay)
            delay = min(delay * 2, self.restart_max)

    async def _run_child(self, *, task_status: trio.TaskStatus[trio.Process]) -> None:
        await trio.run_process(
            self.command.argv(os.getpid()),
            check=False,
            stdin=subprocess.DEVNULL,
            env=child_env(),
            start_new_session=True,
            deliver_cancel=self._stop_child,
            task_status=task_status,
        )

    async def _stop_child(self, process: trio.Process) -> None:
        """SIGTERM, then SIGKILL if the child is still there after the grace period."""
        try:
            process.terminate()
            with trio.move_on_after(self.grace):
                await process.wait()
                return
            logger.warning(
                "read-model follower (pid %d) ignored SIGTERM for %.0f s, killing it",
                process.pid,
                self.grace,
            )
            process.kill()
        except OSError:  # already gone
            pass


def _describe(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"status {status}"
