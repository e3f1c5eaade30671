"""Bounded resources at the edge, against a broker process (`es-broker serve`).

Each test ends with a fresh connection getting an answer: no peer holding
partial frames, stalling, or opening too many connections takes the broker
down. Closes the broker decided are read from its log, which is its own
statement of why; memory is read from its /proc/PID/status.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from es_broker.net.channel import next_opaque
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.connection import NEED_DATA, Connection
from tests.process_fixtures import ServedBroker, serve
from tests.waiting import poll_until_sync

MIB = 1024 * 1024
BOUND = 30.0  # seconds: a failure bound for every wait, never a measure of success
OVER_CAP = "partial frames of all connections"
STALLED = "a frame stalled after"
REFUSED = "new connection(s)"


class BrokerLog:
    """The broker's output lines, read as they come; waits on a condition, not a clock."""

    def __init__(self, broker: ServedBroker) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, args=(broker.process.stdout,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def count(self, text: str) -> int:
        with self._changed:
            return sum(text in line for line in self.lines)

    def wait_for(self, text: str, at_least: int = 1) -> int:
        """The number of lines containing `text`, once it is at least `at_least`."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.count(text) >= at_least, timeout=BOUND):
                raise AssertionError(
                    f"{at_least} log lines with {text!r} not seen; log: {self.lines}"
                )
            return self.count(text)


@contextmanager
def broker_with(tmp_path: Path, **settings: int) -> Iterator[tuple[ServedBroker, BrokerLog]]:
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    with serve(tmp_path / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        yield broker, BrokerLog(broker)


def rss(broker: ServedBroker) -> int:
    """The broker process's resident set size in bytes."""
    for line in Path(f"/proc/{broker.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def connect(broker: ServedBroker) -> socket.socket:
    host, port = broker.broker.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=BOUND)


def frame_start(total: int) -> bytes:
    """The first bytes of a `total`-byte frame: length prefix, JSON serialize type, 2-byte header."""
    return struct.pack(">ii", total - 4, 2) + b"{}"


def closed_by_broker(sock: socket.socket) -> bool:
    """True once the broker has closed `sock` (EOF or reset); fails after BOUND if it stays open."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def ask(sock: socket.socket) -> RemotingCommand:
    """Send GET_BROKER_RUNTIME_INFO on `sock` and read the answer with the remoting codec."""
    conn = Connection()
    sock.sendall(conn.send(request(RequestCode.GET_BROKER_RUNTIME_INFO, opaque=next_opaque())))
    while (event := conn.next_event()) is NEED_DATA:
        conn.receive_data(sock.recv(65536))
    assert isinstance(event, RemotingCommand), event
    return event


def assert_served(broker: ServedBroker) -> None:
    assert broker.process.poll() is None, "the broker process exited"
    with connect(broker) as sock:
        assert ask(sock).code == ResponseCode.SUCCESS


pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/PID/status"
)


def test_partial_frames_over_the_cap_close_the_connections_that_grow_them_and_memory_returns(
    tmp_path,
):
    # 20 peers each send 15 MiB of a 16 MiB frame and stall; the listener holds at most
    # 192 MiB of partial frames, so at most 12 can be held and at least 8 must be closed.
    cap = 192 * MIB
    with broker_with(tmp_path, partial_frame_bytes_max=cap, frame_read_timeout_ms=600_000) as (
        broker,
        log,
    ):
        start = rss(broker)
        payload = memoryview(frame_start(16 * MIB) + b"x" * (15 * MIB - 10))
        socks = [connect(broker) for _ in range(20)]

        def send(sock: socket.socket) -> None:
            with contextlib.suppress(OSError):  # closed by the broker mid-send: the cap at work
                sock.sendall(payload)

        senders = [threading.Thread(target=send, args=(sock,)) for sock in socks]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(BOUND)
        assert log.wait_for(OVER_CAP, at_least=8) <= 20
        assert_served(broker)

        for sock in socks:  # the held ones go too; the broker drops their partial frames
            sock.close()
        poll_until_sync(
            lambda: rss(broker) <= start + 64 * MIB,
            BOUND,
            f"RSS back within 64 MiB of its start ({start // MIB} MiB)",
        )
        assert log.count(STALLED) == 0
        assert_served(broker)


def test_frames_that_stall_are_closed_after_the_read_timeout_and_memory_returns(tmp_path):
    with broker_with(tmp_path, frame_read_timeout_ms=500) as (broker, log):
        start = rss(broker)
        # between frames: the idle timeout (120 s) applies, not the read timeout
        idle = connect(broker)
        assert ask(idle).code == ResponseCode.SUCCESS
        payload = frame_start(16 * MIB) + b"x" * (15 * MIB - 10)
        stalled = [connect(broker) for _ in range(8)]
        for sock in stalled:
            with contextlib.suppress(OSError):  # a stall of the sender itself closes it early
                sock.sendall(payload)
        for sock in stalled:
            assert closed_by_broker(sock)
            sock.close()
        assert log.wait_for(STALLED, at_least=8) == 8
        poll_until_sync(
            lambda: rss(broker) <= start + 64 * MIB,
            BOUND,
            f"RSS back within 64 MiB of its start ({start // MIB} MiB)",
        )
        assert ask(idle).code == ResponseCode.SUCCESS
        idle.close()
        assert_served(broker)


def test_a_length_prefix_over_frame_max_length_closes_the_connection_before_the_body(tmp_path):
    with broker_with(tmp_path, frameMaxLength=1 * MIB) as (broker, _log):
        with connect(broker) as sock:
            sock.sendall(frame_start(1 * MIB + 1))  # only the prefix and header: no body follows
            assert closed_by_broker(sock)
        with connect(broker) as sock:  # a frame within the limit is still read
            conn = Connection()
            big = request(RequestCode.GET_BROKER_RUNTIME_INFO, opaque=1, remark="r" * (MIB // 2))
            sock.sendall(conn.send(big))
            while (event := conn.next_event()) is NEED_DATA:
                conn.receive_data(sock.recv(65536))
            assert isinstance(event, RemotingCommand) and event.opaque == 1, _log.lines
        assert_served(broker)


def test_connections_over_the_limit_are_closed_at_once_and_the_others_still_served(tmp_path):
    with broker_with(tmp_path, max_connections=4) as (broker, log):
        first = [connect(broker) for _ in range(4)]
        for sock in first:  # answered, so accepted and counted before the next ones arrive
            assert ask(sock).code == ResponseCode.SUCCESS
        extra = [connect(broker) for _ in range(5)]
        for sock in extra:
            assert closed_by_broker(sock)
            sock.close()
        log.wait_for(REFUSED)
        for sock in first:
            assert ask(sock).code == ResponseCode.SUCCESS
        first.pop().close()  # a place frees up
        poll_until_sync(
            lambda: _served_once(broker), BOUND, "a new connection served after one closed"
        )
        for sock in first:
            sock.close()


def _served_once(broker: ServedBroker) -> bool:
    # the broker notices the close asynchronously: a connection made before that is refused
    with connect(broker) as sock:
        try:
            return ask(sock).code == ResponseCode.SUCCESS
        except (OSError, AssertionError):
            return False
