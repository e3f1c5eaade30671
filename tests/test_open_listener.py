"""Say what is open: `serve` with ACL off beyond loopback warns once; brokerStatus shows aclEnable.

Behaviours: docs/semantics.md "es-broker's bound signature and reads within perms (B-345..B-354)".
"""

from __future__ import annotations

from es_broker.config import BrokerConfig
from es_broker.remoting.bodies import KVTable
from es_broker.remoting.codes import RequestCode
from es_broker.server.serve_access import open_listener_warning
from tests.acl_fixtures import ADMIN, acl_conf, wire
from tests.process_fixtures import serve

WARNING = "aclEnable=false and listening beyond loopback"


def test_b353_the_warning_names_the_reachable_listeners_only_with_acl_off():
    """B-353: loopback listeners, or ACL on, give no warning; others are named with what anyone can do."""
    off, on = BrokerConfig(), BrokerConfig(aclEnable=True)
    assert open_listener_warning(off, {"broker": "127.0.0.1", "name server": "::1"}) is None
    assert open_listener_warning(off, {"broker": "localhost"}) is None
    assert open_listener_warning(on, {"broker": "0.0.0.0"}) is None
    text = open_listener_warning(off, {"broker": "0.0.0.0", "name server": "127.0.0.1"})
    assert text is not None and "broker on 0.0.0.0" in text and "name server on" not in text
    assert "delete topics" in text and "reset any group's offsets" in text
    assert open_listener_warning(off, {"broker": ""}) is not None  # every address
    assert open_listener_warning(off, {"broker": "broker.example"}) is not None


async def test_b353_serve_without_acl_on_every_address_warns_once_and_status_says_so(
    tmp_path, nursery
):
    """B-353: one WARNING line in the process's log; GET_BROKER_RUNTIME_INFO has aclEnable=false."""
    log_file = tmp_path / "serve.log"
    with serve(tmp_path / "data", "--listen", "0.0.0.0:0", log_file=log_file) as broker:
        port = broker.broker.rsplit(":", 1)[1]
        r = await wire(nursery, None).ok(f"127.0.0.1:{port}", RequestCode.GET_BROKER_RUNTIME_INFO)
        assert KVTable.decode(r.body).table["aclEnable"] == "false"
        warnings = [line for line in log_file.read_text().splitlines() if WARNING in line]
    assert len(warnings) == 1 and " WARNING " in warnings[0], warnings
    assert "broker on 0.0.0.0" in warnings[0]


async def test_b353_status_shows_acl_enabled(tmp_path, nursery):
    """B-353: with aclEnable=true, brokerStatus shows aclEnable=true and nothing is warned."""
    conf, _ = acl_conf(tmp_path)
    log_file = tmp_path / "serve.log"
    with serve(tmp_path / "data", "--config", str(conf), log_file=log_file) as broker:
        r = await wire(nursery, ADMIN).ok(broker.broker, RequestCode.GET_BROKER_RUNTIME_INFO)
        assert KVTable.decode(r.body).table["aclEnable"] == "true"
    assert WARNING not in log_file.read_text()
