"""The edge link's messages (es_broker/server/edge/link.py, B-671): split wherever the reads cut them."""

from __future__ import annotations

import pytest

from es_broker.server.edge.link import (
    CLOSE,
    DATA,
    HEAD,
    OPEN,
    LinkBroken,
    LinkReader,
    addresses,
    message,
    parse_addresses,
)


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
