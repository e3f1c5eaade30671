"""The edge link's messages (es_broker/server/edge/link.py, B-671): split wherever the reads cut them."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from es_broker.server.edge.link import (
    CLOSE,
    DATA,
    HEAD,
    OPEN,
    READY,
    LinkBroken,
    LinkReader,
    addresses,
    message,
    parse_addresses,
)
from tests.process_fixtures import ROOT


def test_b671_messages_cut_at_every_byte_come_out_whole_and_in_order():
    sent = [
        (OPEN, 1, addresses(("10.0.0.7", 51234), ("0.0.0.0", 10911))),
        (DATA, 1, b"x" * 1000),
        (DATA, 2, b""),
        (CLOSE, 1, b""),
    ]
    stream = b"".join(message(*m) for m in sent)
    for cut in range(len(stream) + 1):
        reader = LinkReader()
        got = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert got == sent
        assert reader.buffered == 0


def test_b671_an_open_carries_the_clients_address_and_the_edges():
    peer, local = parse_addresses(addresses(("::1", 40000), ("127.0.0.1", 10911)))
    assert (peer, local) == (("::1", 40000), ("127.0.0.1", 10911))
    with pytest.raises(LinkBroken):
        parse_addresses(b"not an address")


@pytest.mark.parametrize(
    "head", [HEAD.pack(9, 1, 0), HEAD.pack(DATA, 1, 64 * 1024 * 1024 + 1)], ids=["kind", "length"]
)
def test_b671_bytes_that_are_not_link_messages_break_the_link(head):
    with pytest.raises(LinkBroken):
        LinkReader().feed(head)


def test_b671_an_edge_says_ready_once_it_accepts_then_relays_each_connection():
    """The edge's first link message is READY (the writer says it listens once every edge sent
    it); a client connecting after it is accepted and relayed: OPEN, then what it sent."""
    listener = socket.create_server(("127.0.0.1", 0))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds = (listener.fileno(), theirs.fileno())
    command = [sys.executable, "-m", "es_broker.server.edge.relay"]
    command += ["--listen-fd", str(fds[0]), "--link-fd", str(fds[1])]
    edge = subprocess.Popen(command, pass_fds=fds, cwd=ROOT)
    theirs.close()
    try:
        ours.settimeout(30)
        reader, got = LinkReader(), []

        def until(count: int) -> list[tuple[int, int, bytes]]:
            while len(got) < count:
                data = ours.recv(1 << 16)
                assert data, "the edge closed its link"
                got.extend(reader.feed(data))
            return got

        assert until(1)[0] == (READY, 0, b"")
        with socket.create_connection(listener.getsockname(), timeout=30) as client:
            client.sendall(b"hello")
            kinds = [(kind, payload) for kind, _, payload in until(3)[1:3]]
        assert (
            kinds[0][0] == OPEN and parse_addresses(kinds[0][1])[1][1] == listener.getsockname()[1]
        )
        assert kinds[1] == (DATA, b"hello")
    finally:
        ours.close()  # the link's end: the edge exits
        edge.wait(timeout=30)
        listener.close()
