"""The broker's child processes (its gRPC proxy, its edge processes): stopped when it stops."""

from __future__ import annotations

import signal

import trio

GRACE = 10.0  # s a child has to exit after SIGTERM before it is killed


async def stop_child(process: trio.Process, grace: float = GRACE) -> None:
    """SIGTERM a child that still runs, SIGKILL it after `grace` s; done even when the caller is
    being cancelled (the broker stopping)."""
    if process.returncode is not None:
        return
    with trio.CancelScope(shield=True):
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(grace):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
