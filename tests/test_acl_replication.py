"""Log shipping under ACL (B-174, B-175): a master with aclEnable serves records to admin accounts only.

RocketMQ 4.x replicates over its HA port with no authentication at all;
es-broker replicates over the remoting port, so the master checks it as any
other request, and a slave signs its fetches with peer_access_key/peer_secret_key.
"""

from __future__ import annotations

import pytest

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import ResponseCode
from tests.acl_fixtures import ACL_EXCEPTION, ACL_YAML, ADMIN, PRODUCER
from tests.ha_fixtures import Wire, caught_up, start_cluster
from tests.helpers import wait_until
from tests.waiting import poll_until


async def _cluster(tmp_path, slave_keys: dict[str, str]):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_YAML)
    return await start_cluster(
        tmp_path,
        master={"aclEnable": True, "acl_plain_file": acl_file, "brokerRole": "ASYNC_MASTER"},
        slave=slave_keys,
    )


async def _refused_runtime(nursery, slave: str) -> dict[str, str] | None:
    runtime = await Wire(RemotingClient(nursery)).runtime(slave)
    return runtime if runtime["slaveFetch"].startswith("refused by") else None


async def _send_one(nursery, master: str) -> None:
    admin = Wire(RemotingClient(nursery, credentials=ADMIN))
    await admin.create_topic(master, "TopicA", 1)
    r = await Wire(RemotingClient(nursery, credentials=PRODUCER)).send(
        master, "TopicA", 0, b"replicate me"
    )
    assert r.code == ResponseCode.SUCCESS, r.remark


@pytest.mark.parametrize(
    ("keys", "remark"),
    [
        pytest.param({}, "No accessKey is configured", id="unsigned"),
        pytest.param(
            {"peer_access_key": PRODUCER.access_key, "peer_secret_key": PRODUCER.secret_key},
            "Need admin permission for request code=9280, but accessKey=ProducerKey is not",
            id="non-admin",
        ),
    ],
)
async def test_b174_a_slave_without_an_admin_account_gets_no_records(
    tmp_path, nursery, keys, remark
):
    """B-174; B-318: the refusal is logged at ERROR once and shown as the slave's slaveFetch."""
    cluster = await _cluster(tmp_path, keys)
    try:
        await _send_one(nursery, cluster.master.addr)
        slave = await poll_until(
            lambda: _refused_runtime(nursery, cluster.slave.addr), 30, "the slave's refused fetch"
        )
        master = cluster.master.addr
        assert slave["slaveFetch"].startswith(f"refused by {master}: 1 {ACL_EXCEPTION}{remark}")
        assert slave["haReplicatedRecords"] == "0" and slave["haAppliedSeq"] == "0"
        errors = [line for line in cluster.slave.text().splitlines() if " ERROR " in line]
        assert len(errors) == 1, errors
        assert f"replication fetch from master refused by {master}: 1 " in errors[0]
        assert remark in errors[0]
        # clusterList names the refusal in the slave's row (the master's needs a signed request)
        rows = {r["brokerId"]: r for r in cluster.admin_json("clusterList")}
        assert rows[1]["peers"] == f"slaveFetch: {slave['slaveFetch']}"
    finally:
        cluster.stop_all()


async def test_b175_a_slave_with_an_admin_account_replicates(tmp_path, nursery):
    cluster = await _cluster(
        tmp_path, {"peer_access_key": ADMIN.access_key, "peer_secret_key": ADMIN.secret_key}
    )
    try:
        await _send_one(nursery, cluster.master.addr)
        admin = Wire(RemotingClient(nursery, credentials=ADMIN))
        await wait_until(
            "the slave caught up",
            lambda: caught_up(admin, cluster.master.addr, cluster.slave.addr),
            30,
        )
        runtime = await admin.runtime(cluster.slave.addr)
        assert int(runtime["haReplicatedRecords"]) > 0
        assert runtime["slaveFetch"] == "ok" and runtime["nameServerRegistration"] == "ok"
    finally:
        cluster.stop_all()
