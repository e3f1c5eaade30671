"""The link between an edge process and the broker's writer process: connections' bytes, multiplexed.

With `edge_processes` set (es_broker/server/edge/processes.py), the broker's
clients connect to edge processes, which own their sockets (and TLS), and the
writer process serves each of those connections as it serves a socket of its
own: the link carries, on one Unix socket per edge, what each connection sent
and what is written back to it. A link message is a 9-byte head (kind,
connection id, payload length; big-endian) and its payload:

* OPEN (edge to writer): a connection was accepted; the payload is its peer's
  and the edge's address, `host port host port` in ASCII;
* DATA (both ways): bytes the client sent, or bytes to write to it, in order;
* CLOSE (both ways): the client went away, or the writer closed the connection;
* READY (edge to writer, connection id 0, once): the edge accepts on the
  listening socket, so the writer says it listens once every edge does.

The bytes are relayed as they are read: the frames are split, checked and
decoded by the writer's channel, under the listener's limits, so a
connection's requests reach the writer in the order the client wrote them
and every request meets the same checks, ACL and metrics as on a socket of
the writer's own.
"""

from __future__ import annotations

import os
import struct

import trio

from es_broker.net.channel import READ_SIZE

HEAD = struct.Struct(">BII")
OPEN, DATA, CLOSE, READY = 1, 2, 3, 4
KINDS = (OPEN, DATA, CLOSE, READY)
# a link message's payload at most: a read of a socket (es_broker.net.channel.READ_SIZE) fits many times
MAX_PAYLOAD = 64 * 1024 * 1024


class LinkBroken(Exception):
    """The link's bytes do not parse: the other side is not an es-broker edge or writer of this version."""


def message(kind: int, conn: int, payload: bytes = b"") -> bytes:
    """One link message."""
    return HEAD.pack(kind, conn, len(payload)) + payload


def addresses(peer: tuple[str, int], local: tuple[str, int]) -> bytes:
    """An OPEN message's payload."""
    return f"{peer[0]} {peer[1]} {local[0]} {local[1]}".encode("ascii")


def parse_addresses(payload: bytes) -> tuple[tuple[str, int], tuple[str, int]]:
    """(peer, local) from an OPEN message's payload; LinkBroken if it is not one."""
    try:
        peer_host, peer_port, local_host, local_port = payload.decode("ascii").split(" ")
        return (peer_host, int(peer_port)), (local_host, int(local_port))
    except ValueError:
        raise LinkBroken(f"an OPEN message carries {payload[:80]!r}") from None


class LinkReader:
    """Splits what is read from a link into messages (sans-IO: feed it bytes, iterate the messages)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray) -> list[tuple[int, int, bytes]]:
        """The (kind, connection id, payload) of every message completed by `data`, in order."""
        buffer = self._buffer
        buffer += data
        size = len(buffer)
        at = 0
        head = HEAD.size
        messages = []
        while size - at >= head:
            kind, conn, length = HEAD.unpack_from(buffer, at)
            if kind not in KINDS or length > MAX_PAYLOAD:
                raise LinkBroken(f"a link message of kind {kind} and {length} bytes")
            end = at + head + length
            if end > size:
                break
            messages.append((kind, conn, bytes(buffer[at + head : end])))
            at = end
        del buffer[:at]
        return messages

    @property
    def buffered(self) -> int:
        return len(self._buffer)


class Outgoing:
    """Bytes for one stream, queued without waiting (`put`) and written in order by one task (`run`),
    each write taking everything that is ready; `room` waits while more than `high_water` bytes are
    queued. With `fd` (a plain socket's), a put while nothing is being written goes to the socket
    at once, without waking the task."""

    __slots__ = ("stream", "high_water", "fd", "out", "pending", "_sender", "_drained", "ended")

    def __init__(self, stream: trio.abc.SendStream, high_water: int, fd: int | None = None) -> None:
        self.stream = stream
        self.high_water = high_water
        self.fd = fd
        self.out: list[bytes] = []
        self.pending = 0  # bytes queued, not yet written
        self._sender: trio.Event | None = None  # set to wake the task waiting for bytes
        self._drained = trio.Event()
        self.ended = False  # nothing more is written: `run` returns once the queue is written

    def put(self, data: bytes) -> None:
        if self.ended:
            return
        if self.fd is not None and not self.out and self._sender is not None:
            try:  # the task waits: no write is under way
                sent = os.write(self.fd, data)
            except BlockingIOError:
                sent = 0
            except OSError:  # the peer is gone: its reader sees the end too
                self.end()
                return
            if sent == len(data):
                return
            data = data[sent:]
        self.out.append(data)
        self.pending += len(data)
        if self._sender is not None:
            self._sender.set()

    def end(self) -> None:
        """Take no more: `run` writes what is queued and returns; `room` waits no longer."""
        self.ended = True
        self._drained.set()
        if self._sender is not None:
            self._sender.set()

    async def room(self) -> None:
        """Wait while more than `high_water` bytes are queued."""
        while self.pending > self.high_water and not self.ended:
            await self._drained.wait()
        await trio.lowlevel.checkpoint()

    async def run(self) -> None:
        """Write until ended and everything queued is written, or until the stream breaks (the rest
        dropped)."""
        while True:
            if not self.out:
                if self.ended:
                    return
                self._sender = trio.Event()
                await self._sender.wait()
                self._sender = None
                continue
            out, self.out = self.out, []
            data = out[0] if len(out) == 1 else b"".join(out)
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.out.clear()
                self.end()
                return
            self.pending -= len(data)
            if self.pending <= self.high_water:
                self._drained.set()
                self._drained = trio.Event()


async def read_socket(sock: trio.socket.SocketType) -> bytes:
    """What a plain socket has next, b"" at its end (or once it is closed or reset), read with one
    scheduler pass: the wait for it to be readable, or a checkpoint after a read that found bytes
    there already (as the writer's channel reads its sockets, es_broker/net/channel.py). Both ends
    of a link read it so, and an edge its plain client sockets. A read
    whose connection is being closed (its scope cancelled) raises Cancelled before it reads, as
    trio's `receive_some` does: a client that keeps sending cannot keep it open."""
    await trio.lowlevel.checkpoint_if_cancelled()
    fd = sock.fileno()
    waited = False
    while True:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            try:
                await trio.lowlevel.wait_readable(sock)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return b""
            waited = True
            continue
        except OSError:
            return b""
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()  # the bytes are read: never lost
        return data
