"""Run-time changes of the broker's settings: one owner, recorded, re-applied at start (B-270..B-273)."""

from __future__ import annotations

import json

import pytest
import trio

from es_broker.core.slave_broker import SlaveBroker
from es_broker.log.types import RecordType
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.server.main import BrokerServer
from es_broker.server.namesrv import NameServerRole
from tests.helpers import cli_ok
from tests.server_fixtures import in_process_config


def config_records(store) -> list[dict]:
    return [r for _seq, r in store.log.read() if r["type"] == RecordType.BROKER_CONFIG_UPDATED]


async def test_b270_a_change_is_recorded_with_its_requester_and_every_reader_sees_it(running):
    await running.create_topic("T", queues=2)
    server = running.server
    r = await running.call(
        RequestCode.UPDATE_BROKER_CONFIG, {}, b"brokerPermission=2\nfileReservedTime=48\n"
    )
    assert r.code == ResponseCode.SUCCESS, r.remark

    (record,) = config_records(server.broker.store)
    assert record["changes"] == [
        {"key": "brokerPermission", "old": "6", "new": "2"},
        {"key": "fileReservedTime", "old": "72", "new": "48"},
    ]
    assert (record["broker_name"], record["broker_id"]) == ("broker-a", 0)
    # no heartbeat on this connection: the requester is the admin's address, as for other admin changes
    assert record["requester"].startswith("127.0.0.1:")

    # one owner: every part reads the same settings
    for config in (
        server.config,
        server.broker.config,
        server.broker.store.config,
        server.processors.config,
    ):
        assert (config.brokerPermission, config.fileReservedTime) == (2, 48)
    shown = await running.call(RequestCode.GET_BROKER_CONFIG)
    assert "brokerPermission=2\n" in shown.body.decode()
    # the perm reaches the route (B-23)
    route = await running.client.invoke(
        running.namesrv_addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    )
    assert fastjson.loads(route.body)["queueDatas"][0]["perm"] == 2


async def test_b271_a_refused_key_or_value_is_system_error_and_changes_and_records_nothing(running):
    store = running.server.broker.store
    before = store.log.last_seq
    for body, remark in (
        (b"fileReservedTime=48\nlistenPort=1\n", "listenPort cannot be changed"),
        (b"brokerPermission=rw\n", "brokerPermission must be an integer"),
        (b"slaveReadEnable=yes\n", "slaveReadEnable must be true or false"),
    ):
        r = await running.call(RequestCode.UPDATE_BROKER_CONFIG, {}, body)
        assert r.code == ResponseCode.SYSTEM_ERROR and remark in r.remark, r.remark
    assert store.log.last_seq == before
    assert (store.config.fileReservedTime, store.config.brokerPermission) == (72, 6)
    # an empty body changes nothing and records nothing, as RocketMQ answers it
    r = await running.call(RequestCode.UPDATE_BROKER_CONFIG, {}, b"# nothing\n")
    assert r.code == ResponseCode.SUCCESS and store.log.last_seq == before


async def _served_once(data_dir, namesrv: str, body: bytes | None) -> dict[str, object]:
    """Start a broker on data_dir, send it one UPDATE_BROKER_CONFIG, stop it; its settings at the end."""
    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            BrokerServer(in_process_config(data_dir), [namesrv]).run, "127.0.0.1"
        )
        seen = {"brokerPermission": server.config.brokerPermission}
        if body is not None:
            client = RemotingClient(nursery)
            r = await client.invoke(
                server.addr, request(RequestCode.UPDATE_BROKER_CONFIG, {}, body)
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
        seen["after"] = server.config.brokerPermission
        nursery.cancel_scope.cancel()
    return seen


async def test_b272_a_recorded_change_outlives_a_restart_and_replays_byte_identical(
    tmp_path, nursery
):
    namesrv = f"127.0.0.1:{await nursery.start(NameServerRole().run, '127.0.0.1', 0)}"
    data = tmp_path / "broker"
    first = await _served_once(data, namesrv, b"brokerPermission=4\n")
    assert first == {"brokerPermission": 6, "after": 4}
    second = await _served_once(data, namesrv, b"brokerPermission=6\nbrokerPermission=2\n")
    assert second == {"brokerPermission": 4, "after": 2}  # broker.conf says 6: the record wins
    third = await _served_once(data, namesrv, None)
    assert third == {"brokerPermission": 2, "after": 2}
    # a replay rebuilds every projection byte for byte with the new records in the log
    await cli_ok("verify", "--data-dir", str(data))
    # the export answers who changed what, when: every record without a family of its own is in `other`
    ds = pytest.importorskip("pyarrow.dataset")
    await cli_ok("export", "--data-dir", str(data), "--out", str(tmp_path / "export"))
    rows = ds.dataset(tmp_path / "export" / "other", format="parquet", partitioning="hive")
    exported = [json.loads(r["body"]) for r in rows.to_table().to_pylist()]
    assert [(r["type"], r["changes"]) for r in exported] == [
        (RecordType.BROKER_CONFIG_UPDATED, [{"key": "brokerPermission", "old": "6", "new": "4"}]),
        (RecordType.BROKER_CONFIG_UPDATED, [{"key": "brokerPermission", "old": "4", "new": "2"}]),
    ]
    assert all(r["requester"].startswith("127.0.0.1:") for r in exported)


async def test_b273_a_slave_changes_its_settings_in_memory_only(tmp_path):
    config = in_process_config(tmp_path / "slave", brokerRole="SLAVE", brokerId=1)
    slave = SlaveBroker.open(config.storePathRootDir, config)
    try:
        assert await slave.update_config({"offsetCheckInSlave": "true"}, "ops") is None
        assert slave.config.offsetCheckInSlave is True
        assert slave.store.log.last_seq == 0  # its log is the master's: nothing of its own
    finally:
        slave.close()
