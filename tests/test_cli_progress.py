"""Long work shows its progress on a terminal and stays quiet in pipes (B-208)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from es_broker.cli.datadir import open_log_readonly
from tests.process_fixtures import ROOT, _env
from tests.replay_histories import small_history


def run_on_terminal(*args: str) -> tuple[int, str, str]:
    """Run `es-broker ARGS` with standard error on a pseudo-terminal: (exit code, stdout, terminal)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 120 columns
    done = subprocess.Popen(
        [sys.executable, "-m", "es_broker.cli", *args],
        stdout=subprocess.PIPE,
        stderr=follower,
        env=_env(),
        cwd=ROOT,
    )
    os.close(follower)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every holder of the terminal's other end has closed it
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    out = done.stdout.read().decode() if done.stdout else ""
    return done.wait(timeout=120), out, seen.decode(errors="replace")


def command(verb: str, data, out) -> list[str]:
    return {
        "verify": ["verify", "--data-dir", str(data)],
        "replay": ["replay", "--data-dir", str(data), "--into", str(out)],
        "export": ["export", "--data-dir", str(data), "--out", str(out)],
        "readmodel sync": ["readmodel", "sync", "--data-dir", str(data)],
    }[verb]


@pytest.mark.parametrize("verb", ["verify", "replay", "export", "readmodel sync"])
def test_b208_long_work_draws_progress_on_a_terminal_and_nothing_in_a_pipe(tmp_path, verb):
    if verb == "export":
        pytest.importorskip("pyarrow")
    data = tmp_path / "d"
    small_history(data)
    code, _, terminal = run_on_terminal(*command(verb, data, tmp_path / "on-terminal"))
    assert code == 0, terminal
    last = terminal.replace("\r", "\n").strip().splitlines()[-1]
    # the bar's last state: every record of the log (the start-up topics and groups 4.9.8 holds,
    # the reply topic among them, and the history's), of all, with the rate
    log = open_log_readonly(str(data))
    records = log.last_seq
    log.close()
    assert "records/s" in last and "100%" in last and f"{records}/{records}" in last, terminal

    piped = subprocess.run(
        [sys.executable, "-m", "es_broker.cli", *command(verb, data, tmp_path / "in-a-pipe")],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
    )
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr
