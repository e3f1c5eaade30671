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
* CLOSE (both ways): the client went away, or the writer closed the connection.

The bytes are relayed as they are read: the frames are split, checked and
decoded by the writer's channel, under the listener's limits, so a
connection's requests reach the writer in the order the client wrote them
and every request meets the same checks, ACL and metrics as on a socket of
the writer's own.
"""

from __future__ import annotations

import struct

HEAD = struct.Struct(">BII")
OPEN, DATA, CLOSE = 1, 2, 3
KINDS = (OPEN, DATA, CLOSE)
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
