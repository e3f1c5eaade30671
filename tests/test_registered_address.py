"""A broker listening on every interface registers an address its clients can reach (B-682).

Behaviour: docs/semantics.md "The address a broker listening on every interface registers (B-682)".
"""

from __future__ import annotations

import pytest

from es_broker.net.hosts import WILDCARDS, local_ip
from es_broker.remoting.message import parse_offset_msg_id
from tests.process_fixtures import serve


@pytest.mark.parametrize(
    ("conf", "expected"),
    [((), None), (("brokerIP1=127.0.0.9",), "127.0.0.9")],
    ids=["this-host", "broker-conf"],
)
def test_b682_a_broker_on_every_interface_registers_brokerip1_not_the_wildcard(
    tmp_path, conf, expected
):
    """B-682: `--listen 0.0.0.0:P` binds every interface and registers broker.conf's brokerIP1,
    else this host's outward address; clients reach it there (a send through the route) and its
    messages' offset ids name it."""
    with serve(tmp_path / "data", "--listen", "0.0.0.0:0", conf=conf) as served:
        host, port = served.broker.rsplit(":", 1)
        assert host not in WILDCARDS
        assert host == (expected or local_ip())
        served.admin("updateTopic", "-b", served.broker, "-t", "T", "-r", "1", "-w", "1")
        sent = served.admin_json("sendMessage", "-t", "T", "-p", "m")  # through the name server
        assert parse_offset_msg_id(sent["offsetMsgId"])[0] == (host, int(port))
        assert served.admin_json("queryMsgById", "-i", sent["offsetMsgId"])["body"] == "m"
