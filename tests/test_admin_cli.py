"""The admin CLI against a broker in a real process: mqadmin's verbs and output, --json for scripts."""

from __future__ import annotations

import functools
import json
import re

import trio

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode, ResponseCode
from tests.ha_fixtures import Cluster, Wire, caught_up, start_cluster
from tests.helpers import cli, wait_until


def test_update_topic_then_route_and_status_show_it(served):
    out = served.admin("updateTopic", "-b", served.broker, "-t", "Orders", "-r", "4", "-w", "4")
    assert f"create topic to {served.broker} success." in out.stdout
    route = served.admin_json("topicRoute", "-t", "Orders")
    assert route["queueDatas"][0]["readQueueNums"] == 4
    status = served.admin_json("topicStatus", "-t", "Orders")
    assert [(r["queueId"], r["minOffset"], r["maxOffset"]) for r in status] == [
        (q, 0, 0) for q in range(4)
    ]
    assert (
        "#Broker Name  #QID  #Min Offset  #Max Offset  #Last Updated"
        in served.admin("topicStatus", "-t", "Orders").stdout
    )


def test_send_then_query_by_id_key_and_offset(served):
    served.admin("updateTopic", "-c", "DefaultCluster", "-t", "Orders", "-r", "2", "-w", "2")
    sent = served.admin_json(
        "sendMessage", "-t", "Orders", "-p", "hello", "-c", "TagA", "-k", "order-1", "-i", "1"
    )
    by_id = served.admin_json("queryMsgById", "-i", sent["msgId"])
    assert (by_id["body"], by_id["tags"], by_id["keys"], by_id["queueId"]) == (
        "hello",
        "TagA",
        "order-1",
        1,
    )
    (by_key,) = served.admin_json("queryMsgByKey", "-t", "Orders", "-k", "order-1")
    assert by_key["msgId"] == sent["offsetMsgId"]
    by_offset = served.admin_json(
        "queryMsgByOffset", "-t", "Orders", "-b", "broker-a", "-i", "1", "-o", "0"
    )
    assert by_offset["msgId"] == sent["offsetMsgId"]
    assert "Message Body:       hello" in served.admin("queryMsgById", "-i", sent["msgId"]).stdout


def test_b681_send_message_sets_a_unique_key_and_prints_it_as_the_msg_id(served):
    """mqadmin's sendMessage sends through a DefaultMQProducer, which gives the message a
    UNIQ_KEY (MessageClientIDSetter) and prints it as the SendResult's MsgId (B-681)."""
    served.admin("updateTopic", "-b", served.broker, "-t", "T1", "-r", "1", "-w", "1")
    sent = served.admin_json("sendMessage", "-t", "T1", "-p", "body", "-k", "key1", "-c", "tagA")
    assert re.fullmatch("[0-9A-F]{32}", sent["msgId"]) and sent["msgId"] != sent["offsetMsgId"]
    (found,) = served.admin_json("queryMsgByUniqueKey", "-i", sent["msgId"], "-t", "T1")
    assert found["properties"]["UNIQ_KEY"] == sent["msgId"]
    assert (found["offsetMsgId"], found["tags"], found["keys"]) == (
        sent["offsetMsgId"],
        "tagA",
        "key1",
    )

    header, row = served.admin("sendMessage", "-t", "T1", "-p", "again").stdout.splitlines()
    assert header.split() == ["#Broker", "Name", "#QID", "#Send", "Result", "#MsgId"]
    printed = row.split()[-1]
    assert printed != sent["msgId"]
    (again,) = served.admin_json("queryMsgByUniqueKey", "-i", printed, "-t", "T1")
    assert again["body"] == "again"


def test_update_topic_perm_is_seen_in_the_route(served):
    served.admin("updateTopic", "-b", served.broker, "-t", "Orders")
    (change,) = served.admin_json("updateTopicPerm", "-b", served.broker, "-t", "Orders", "-p", "2")
    assert (change["oldPerm"], change["perm"]) == (6, 2)
    assert served.admin_json("topicRoute", "-t", "Orders")["queueDatas"][0]["perm"] == 2


def test_consume_message_reads_from_an_offset(served):
    served.admin("updateTopic", "-b", served.broker, "-t", "Orders", "-r", "1", "-w", "1")
    for i in range(3):
        served.admin("sendMessage", "-t", "Orders", "-p", f"m{i}")
    got = served.admin_json("consumeMessage", "-t", "Orders", "-o", "1")
    assert [m["body"] for m in got] == ["m1", "m2"]


def test_sub_group_and_cluster_list(served):
    served.admin("updateSubGroup", "-b", served.broker, "-g", "G1", "-i", "1", "-w", "2")
    (row,) = served.admin_json("clusterList")
    assert (row["cluster"], row["brokerName"], row["addr"]) == (
        "DefaultCluster",
        "broker-a",
        served.broker,
    )
    assert row["peers"] == "ok"  # B-316: no refusal of what the broker sends on its own
    status = served.admin_json("brokerStatus", "-b", served.broker)
    assert int(status["recordLogLastSeq"]) > 0
    assert status["nameServerRegistration"] == "ok" and status["slaveFetch"] == "none"
    served.admin("deleteSubGroup", "-b", served.broker, "-g", "G1")


def test_consumer_progress_of_a_group_without_offsets_is_empty(served):
    progress = served.admin_json("consumerProgress", "-g", "NOBODY")
    assert progress == {"group": "NOBODY", "queues": [], "diffTotal": 0}


def test_admin_error_is_a_clear_message_and_exit_1(served):
    done = served.admin("topicStatus", "-t", "NOPE", check=False)
    assert done.returncode == 1
    assert "No topic route info in name server for the topic: NOPE" in done.stderr


def test_delete_topic_removes_it_from_the_route(served):
    served.admin("updateTopic", "-b", served.broker, "-t", "Gone")
    served.admin("deleteTopic", "-c", "DefaultCluster", "-t", "Gone")
    assert "Gone" not in served.admin_json("topicList")


# ---------------------------------------------------------------------- a broker name without its master


async def _admin(cluster: Cluster, *args: str):
    """`es-broker admin -n NAMESRV ARGS`, finished, run in a thread so the test's tasks go on."""
    return await trio.to_thread.run_sync(
        functools.partial(cli, "admin", "-n", cluster.namesrv.addr, *args)
    )


async def _by_offset(cluster: Cluster, topic: str, broker: str, queue_id: int, offset: int):
    """`admin queryMsgByOffset ... --json`: the message at `offset` of one queue."""
    return await _admin(
        cluster,
        "queryMsgByOffset",
        *("-t", topic, "-b", broker, "-i", str(queue_id), "-o", str(offset), "--json"),
    )


async def _routed_to(w: Wire, namesrv: str, topic: str, addrs: dict[int, str]) -> bool:
    r = await w.call(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if r.code != ResponseCode.SUCCESS:
        return False
    return [
        {int(k): v for k, v in d["brokerAddrs"].items()} for d in json.loads(r.body)["brokerDatas"]
    ] == [addrs]


async def test_send_message_to_a_route_of_slaves_only_fails_in_one_line_saying_why(
    tmp_path, nursery
):
    """A producer sends to masters only: with broker-a's master gone (a fail-over gap) there is
    nowhere to send, and sendMessage says so instead of a bare KeyError "0"."""
    cluster = await start_cluster(tmp_path, master={}, slave={})
    try:
        w = Wire(RemotingClient(nursery))
        m, s = cluster.master.addr, cluster.slave.addr
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        await w.create_topic(m, "T1", 1)
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        cluster.master.stop()
        await wait_until(
            "a route of the slave only", lambda: _routed_to(w, cluster.namesrv.addr, "T1", {1: s})
        )

        refused = await _admin(cluster, "sendMessage", "-t", "T1", "-p", "body")
        assert (refused.returncode, refused.stdout) == (1, "")
        assert refused.stderr == (
            "es-broker admin sendMessage: no master of topic T1 in its route: sends need a master"
            " (brokers: broker-a has only slaves 1)\n"
        )
    finally:
        cluster.stop_all()


async def test_consume_message_and_query_by_offset_read_a_slave_only_route_from_the_slave(
    tmp_path, nursery
):
    """mqadmin pulls from any broker of the name: the master, else a slave."""
    cluster = await start_cluster(tmp_path, master={}, slave={})
    try:
        w = Wire(RemotingClient(nursery))
        m, s = cluster.master.addr, cluster.slave.addr
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        await w.create_topic(m, "T1", 1)
        for body in (b"m0", b"m1"):
            assert (await w.send(m, "T1", 0, body)).code == ResponseCode.SUCCESS
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        cluster.master.stop()
        await wait_until(
            "a route of the slave only", lambda: _routed_to(w, cluster.namesrv.addr, "T1", {1: s})
        )

        consumed = await _admin(
            cluster, "consumeMessage", "-t", "T1", "-b", "broker-a", "-i", "0", "-o", "0", "--json"
        )
        assert consumed.returncode == 0, consumed.stderr
        assert [msg["body"] for msg in json.loads(consumed.stdout)] == ["m0", "m1"]
        by_offset = await _by_offset(cluster, "T1", "broker-a", 0, 1)
        assert by_offset.returncode == 0, by_offset.stderr
        assert json.loads(by_offset.stdout)["body"] == "m1"  # its master stopped: the slave's copy

        unknown = await _admin(
            cluster, "queryMsgByOffset", "-t", "T1", "-b", "broker-x", "-i", "0", "-o", "0"
        )
        assert (unknown.returncode, unknown.stderr) == (
            1,
            "es-broker admin queryMsgByOffset: broker broker-x has no address in the route of"
            " topic T1 (brokers: broker-a)\n",
        )
    finally:
        cluster.stop_all()


async def test_send_message_to_a_sync_master_without_its_slave_prints_slave_not_available(
    tmp_path, nursery
):
    """MQClientAPIImpl#processSendResponse: SLAVE_NOT_AVAILABLE (as FLUSH_SLAVE_TIMEOUT and
    FLUSH_DISK_TIMEOUT) means stored on the master; mqadmin prints it as the send's status."""
    cluster = await start_cluster(tmp_path, master={"brokerRole": "SYNC_MASTER"}, slave={})
    try:
        w = Wire(RemotingClient(nursery))
        m, s = cluster.master.addr, cluster.slave.addr
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        await w.create_topic(m, "T1", 1)
        cluster.slave.stop()

        async def slave_gone() -> bool:  # the master answers a send without a slave
            return (await w.send(m, "T1", 0, b"probe")).code == ResponseCode.SLAVE_NOT_AVAILABLE

        await wait_until("the master without its slave", slave_gone)

        sent = await _admin(cluster, "sendMessage", "-t", "T1", "-p", "kept", "--json")
        assert sent.returncode == 0, sent.stderr
        result = json.loads(sent.stdout)
        assert (result["brokerName"], result["sendStatus"]) == ("broker-a", "SLAVE_NOT_AVAILABLE")
        shown = await _admin(cluster, "sendMessage", "-t", "T1", "-p", "again")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[1].split()[:3] == ["broker-a", "0", "SLAVE_NOT_AVAILABLE"]
        stored = await _by_offset(cluster, "T1", "broker-a", 0, result["queueOffset"])
        assert json.loads(stored.stdout)["body"] == "kept"
    finally:
        cluster.stop_all()
