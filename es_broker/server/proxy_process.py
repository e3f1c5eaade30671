"""`es-broker serve --enable-proxy`: RocketMQ 5's gRPC proxy as a child process of the broker.

The proxy (`es-broker proxy`, es_broker/proxy) runs in a process of its own, so
nothing that happens to it happens to the broker: when it exits the broker
logs it and starts it again after a pause that doubles up to a minute (back to
one second once a proxy has run for a minute); when the broker stops, the proxy
is stopped with it. With aclEnable the proxy reads the broker's ACL files.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import trio

log = logging.getLogger(__name__)

FIRST_PAUSE = 1.0  # s before the first restart
LONGEST_PAUSE = 60.0
STEADY = 60.0  # s a proxy must have run for the pause to start again from FIRST_PAUSE


def proxy_command(
    namesrv: str, port: int, acl_file: Path | None, acl_dir: Path | None
) -> list[str]:
    command = [sys.executable, "-m", "es_broker.cli", "proxy", "-n", namesrv]
    command += ["--grpcServerPort", str(port)]
    if acl_file is not None:
        command += ["--acl-file", str(acl_file)]
        if acl_dir is not None:
            command += ["--acl-dir", str(acl_dir)]
    return command


async def supervise(command: list[str]) -> None:
    """Run the proxy until cancelled, starting it again whenever it exits."""
    pause = FIRST_PAUSE
    while True:
        began = trio.current_time()
        process = await trio.lowlevel.open_process(command)
        try:
            code = await process.wait()
        finally:
            if process.returncode is None:  # the broker stops: the proxy stops with it
                with trio.CancelScope(shield=True):
                    process.send_signal(signal.SIGTERM)
                    with trio.move_on_after(10):
                        await process.wait()
                    if process.returncode is None:
                        process.kill()
                        await process.wait()
        if trio.current_time() - began >= STEADY:
            pause = FIRST_PAUSE
        print(
            f"es-broker: the gRPC proxy (pid {process.pid}) exited with {code}; "
            f"starting it again in {pause:g} s",
            flush=True,
        )
        await trio.sleep(pause)  # a pause between restarts, not a wait for a condition
        pause = min(pause * 2, LONGEST_PAUSE)


__all__ = ["proxy_command", "supervise"]
