"""This host's addresses as a peer should be told them.

A broker that listens on every interface (`--listen 0.0.0.0:P`) still has to register one
address its clients can reach: RocketMQ's `brokerIP1`, whose default is the host's own address
(`RemotingUtil.getLocalAddress`), never the wildcard it binds. Clients name themselves the same
way (their client id's IP).
"""

from __future__ import annotations

import contextlib
import socket

# what a listener binds to take every interface: an address no peer can connect to
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def local_ip() -> str:
    """This host's outward IPv4 address (no packet is sent), else 127.0.0.1."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only selects the outgoing interface
        host: str = probe.getsockname()[0]
        return host
    return "127.0.0.1"
