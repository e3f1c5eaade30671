"""The broker's edge processes (`edge_processes` in broker.conf): its connections served on more cores.

With `edge_processes=N` the broker's listening socket is made here, in the
writer process, which never accepts on it: N edge processes
(es_broker/server/edge/relay.py) inherit it and accept its connections,
each owning the sockets (and their TLS) of the connections the kernel gave
it, and relay their bytes to the writer on a link of their own
(es_broker/server/edge/link.py). The writer serves every relayed connection
with the listener's own read loop (es_broker/server/edge/relayed.py), so
order, checks, ACL, metrics, long polls and the broker's own requests to
clients are what they are for a socket of its own.

An edge that exits (or is killed) loses nothing acknowledged: an answer is
only relayed after the writer has committed what it acknowledges. Its
clients' connections close, the writer forgets them (the client registry's
`on_close`), the clients reconnect to the other edges, and this supervisor
starts the edge again after a pause that doubles up to 30 s (back to the
first once an edge has run for a minute). When the writer stops, its edges
stop with it; when it is killed, each edge sees its link end and exits.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import socket
import sys

import trio

from es_broker.config import BrokerConfig
from es_broker.server.children import stop_child
from es_broker.server.edge.relay import TLS_ENV
from es_broker.server.edge.relayed import EdgeLink
from es_broker.server.edge.remoting_server import CannotListen, RemotingServer

log = logging.getLogger(__name__)

FIRST_PAUSE = 0.5  # s before an edge that exited is started again
LONGEST_PAUSE = 30.0
STEADY = 60.0  # s an edge must have run for the pause to start again from FIRST_PAUSE
# s the writer waits for its edges to accept before it says it listens (it listens anyway then)
EDGES_READY_WITHIN = 30.0


class EdgeProcesses:
    """The writer's edge processes and their links."""

    def __init__(self, server: RemotingServer, count: int, config: BrokerConfig, tls: bool) -> None:
        if count <= 0:
            raise ValueError(f"edge_processes must be positive to start edges, got {count}")
        self.server = server
        self.count = count
        self.links: dict[int, EdgeLink] = {}  # by slot, while its edge runs
        self._accepting: set[int] = set()  # the slots whose edge said it accepts (READY), once
        self._all_accepting = trio.Event()
        self._env = dict(os.environ)
        if tls:  # the edges do the TLS handshakes with the writer's settings
            settings = {
                f.name: getattr(config, f.name)
                for f in dataclasses.fields(config)
                if f.name.startswith("tls")
            }
            self._env[TLS_ENV] = json.dumps(settings)

    def status(self) -> dict[str, object]:
        """For GET_BROKER_RUNTIME_INFO: the edges running and the connections each relays."""
        return {
            "edgeProcesses": self.count,
            "edgeConnections": ",".join(
                f"{link.pid}:{link.connections}" for _, link in sorted(self.links.items())
            ),
        }

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on host:port (0: any free port, reported through task_status) and run the edges."""
        try:
            listeners = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            raise CannotListen.at("broker", host, port, exc) from exc
        try:
            bound = listeners[0].socket.getsockname()[1]
            log.info("broker listening on %s:%d through %d edge processes", host, bound, self.count)
            fds = [listener.socket.fileno() for listener in listeners]
            async with trio.open_nursery() as nursery:
                for slot in range(self.count):
                    nursery.start_soon(self._supervise, slot, fds)
                # "listening" once every edge accepts: a client connecting then is served by any
                with trio.move_on_after(EDGES_READY_WITHIN) as waited:
                    await self._all_accepting.wait()
                if waited.cancelled_caught:
                    log.warning(
                        "%d of %d edge processes accept after %g s; listening anyway",
                        len(self._accepting),
                        self.count,
                        EDGES_READY_WITHIN,
                    )
                task_status.started(bound)
        finally:
            for listener in listeners:
                listener.socket.close()

    def _accepts(self, slot: int) -> None:
        """The edge of `slot` accepts on the listening socket (its link's READY)."""
        self._accepting.add(slot)
        if len(self._accepting) >= self.count:
            self._all_accepting.set()

    def _command(self, fds: list[int], link_fd: int) -> list[str]:
        limits = self.server.limits
        command = [sys.executable, "-m", "es_broker.server.edge.relay", "--link-fd", str(link_fd)]
        for fd in fds:
            command += ["--listen-fd", str(fd)]
        command += ["--idle-timeout", str(limits.idle_timeout)]
        command += ["--read-timeout", str(limits.read_timeout)]
        command += ["--max-connections", str(limits.max_connections)]
        command += ["--log-level", str(logging.getLogger("es_broker").getEffectiveLevel())]
        return command

    async def _supervise(self, slot: int, fds: list[int]) -> None:
        pause = FIRST_PAUSE
        while True:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            began = trio.current_time()
            try:
                process = await trio.lowlevel.open_process(
                    self._command(fds, theirs.fileno()),
                    pass_fds=(*fds, theirs.fileno()),
                    env=self._env,
                )
            finally:
                theirs.close()
            link = EdgeLink(
                trio.SocketStream(trio.socket.from_stdlib_socket(ours)),
                self.server,
                process.pid,
                on_ready=functools.partial(self._accepts, slot),
            )
            self.links[slot] = link
            try:
                await link.run()
            finally:
                self.links.pop(slot, None)
                await stop_child(process)
            code = await process.wait()
            if trio.current_time() - began >= STEADY:
                pause = FIRST_PAUSE
            log.warning(
                "edge process %d (pid %d) exited with %s; starting it again in %g s",
                slot,
                process.pid,
                code,
                pause,
            )
            await trio.sleep(pause)  # a pause between restarts, not a wait for a condition
            pause = min(pause * 2, LONGEST_PAUSE)
