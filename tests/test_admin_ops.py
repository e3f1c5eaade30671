"""mqadmin 4.9.8's operator verbs in `es-broker admin`, against a broker process (B-260..B-266).

Each verb is run as a command, as an operator runs it: its human output is
mqadmin's, `--json` gives the same facts to scripts, and its option names are
mqadmin's (the table below was read from 4.9.8's command classes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from es_broker.cli import build_parser
from es_broker.client import Producer, PushConsumer
from tests.helpers import FAST, Collector, admin_json, cli_ok, topic_ready
from tests.process_fixtures import ServedBroker, serve
from tests.waiting import poll_until_sync

# (short, long) of each verb's options in mqadmin 4.9.8, tools/src/main/java/org/apache/rocketmq/
# tools/command/.../*.java, buildCommandlineOptions. printMsg's and consumeMessage's long names
# end in a space there ("charsetName "), which no command line can type: es-broker drops it.
MQADMIN_OPTIONS = {
    "getBrokerConfig": [("-b", "--brokerAddr"), ("-c", "--clusterName")],
    "updateBrokerConfig": [
        ("-b", "--brokerAddr"),
        ("-c", "--clusterName"),
        ("-k", "--key"),
        ("-v", "--value"),
    ],
    "deleteExpiredCommitLog": [("-b", "--brokerAddr"), ("-c", "--cluster")],
    "cloneGroupOffset": [
        ("-s", "--srcGroup"),
        ("-d", "--destGroup"),
        ("-t", "--topic"),
        ("-o", "--offline"),
    ],
    "producerConnection": [("-g", "--producerGroup"), ("-t", "--topic")],
    "consumerStatus": [
        ("-g", "--consumerGroup"),
        ("-i", "--clientId"),
        ("-b", "--brokerAddr"),
        ("-s", "--jstack"),
    ],
    "getConsumerConfig": [("-g", "--groupName")],
    "topicClusterList": [("-t", "--topic")],
    "queryMsgByUniqueKey": [
        ("-i", "--msgId"),
        ("-g", "--consumerGroup"),
        ("-d", "--clientId"),
        ("-t", "--topic"),
        ("-a", "--showAll"),
    ],
    "printMsg": [
        ("-t", "--topic"),
        ("-c", "--charsetName"),
        ("-s", "--subExpression"),
        ("-b", "--beginTimestamp"),
        ("-e", "--endTimestamp"),
        ("-d", "--printBody"),
    ],
    "consumeMessage": [
        ("-t", "--topic"),
        ("-b", "--brokerName"),
        ("-i", "--queueId"),
        ("-o", "--offset"),
        ("-g", "--consumerGroup"),
        ("-s", "--beginTimestamp"),
        ("-e", "--endTimestamp"),
        ("-c", "--MessageNumber"),
    ],
}


def _verb_parsers() -> dict[str, argparse.ArgumentParser]:
    def sub(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return action.choices

    return sub(sub(build_parser())["admin"])


@pytest.mark.parametrize("verb", sorted(MQADMIN_OPTIONS))
def test_b260_verbs_take_mqadmins_option_names(verb):
    options = {
        tuple(a.option_strings)
        for a in _verb_parsers()[verb]._actions
        if a.option_strings and a.option_strings[0] not in ("-h",)
    }
    flat = {s for names in options for s in names}
    for short, long in MQADMIN_OPTIONS[verb]:
        assert short in flat and long in flat, (verb, short, long)
        # the short and the long name are the same option
        assert any(short in names and long in names for names in options), (verb, short, long)


def test_b261_get_and_update_broker_config(served):
    out = served.admin("getBrokerConfig", "-b", served.broker).stdout
    assert out.startswith(f"============{served.broker}============\n")
    assert f"{'brokerName':<50}=  broker-a\n" in out
    assert "peer_secret_key" not in out
    done = served.admin(
        "updateBrokerConfig", "-c", "DefaultCluster", "-k", "fileReservedTime", "-v", "48"
    )
    assert done.stdout == f"update broker config success, {served.broker}\n"
    (config,) = served.admin_json("getBrokerConfig", "-c", "DefaultCluster")
    assert config["title"] == f"============Master: {served.broker}============"
    assert config["config"]["fileReservedTime"] == "48"
    refused = served.admin(
        "updateBrokerConfig", "-b", served.broker, "-k", "listenPort", "-v", "1", check=False
    )
    assert refused.returncode == 1 and "listenPort cannot be changed" in refused.stderr


def test_b262_clone_group_offset_copies_the_source_groups_offsets(served):
    served.admin("updateTopic", "-b", served.broker, "-t", "T", "-r", "1", "-w", "1")
    for i in range(3):
        served.admin("sendMessage", "-t", "T", "-p", f"m{i}")
    served.admin("updateSubGroup", "-b", served.broker, "-g", "SRC")
    served.admin(
        "resetOffset",
        "-g",
        "SRC",
        "-t",
        "T",
        "--to-offset",
        "2",
        "--mode",
        "server_side",
        "--scope",
        "read_queues",
    )
    done = served.admin("cloneGroupOffset", "-s", "SRC", "-d", "DEST", "-t", "T", "-o", "true")
    assert (
        done.stdout.strip()
        == "clone group offset success. srcGroup[SRC], destGroup=[DEST], topic[T]"
    )
    progress = served.admin_json("consumerProgress", "-g", "DEST")
    assert [(q["topic"], q["queueId"], q["consumerOffset"]) for q in progress["queues"]] == [
        ("T", 0, 2)
    ]


def test_b263_topic_cluster_list_and_consumer_config(served):
    served.admin("updateTopic", "-b", served.broker, "-t", "T")
    assert served.admin("topicClusterList", "-t", "T").stdout == "DefaultCluster\n"
    served.admin("updateSubGroup", "-b", served.broker, "-g", "G1", "-r", "3")
    out = served.admin("getConsumerConfig", "-g", "G1").stdout
    assert out.startswith("=" * 29 + "DefaultCluster:broker-a" + "=" * 29 + "\n")
    assert f"{'groupName':<40}=  G1\n" in out and f"{'retryMaxTimes':<40}=  3\n" in out
    assert served.admin("getConsumerConfig", "-g", "NOBODY").stdout.strip() == ""


@contextlib.contextmanager
def expired_files(tmp_path: Path, *conf: str) -> Iterator[ServedBroker]:
    """A broker whose topic T holds 12 messages in commit-log files of 1500 bytes, all expired
    (fileReservedTime=0), and no pass of its own by the clock."""
    away = f"{(time.localtime().tm_hour + 12) % 24:02d}"
    lines = [
        "mappedFileSizeCommitLog=1500",
        "fileReservedTime=0",
        f"deleteWhen={away}",
        "diskMaxUsedSpaceRatio=95",
        "cleanResourceInterval=3600000",
        *conf,
    ]
    with serve(tmp_path / "data", conf=lines) as served:
        served.admin("updateTopic", "-b", served.broker, "-t", "T", "-r", "1", "-w", "1")
        trio.run(_send_twelve, served.namesrv)  # one producer, not a process a message
        yield served


async def _send_twelve(namesrv: str) -> None:
    async with trio.open_nursery() as nursery:
        producer = Producer(namesrv, "PG", client_ip="127.0.0.1")
        await producer.start(nursery)
        try:
            for i in range(12):
                await producer.send("T", f"message {i} ".encode() + b"x" * 200)
        finally:
            await producer.shutdown()


def test_b264_delete_expired_commit_log_runs_a_manual_pass(tmp_path):
    with expired_files(tmp_path) as served:
        done = served.admin("deleteExpiredCommitLog", "-b", served.broker)
        assert done.stdout == "success\n"
        (status,) = served.admin_json("topicStatus", "-t", "T")
        assert status["minOffset"] > 0 and status["maxOffset"] == 12
        passes = served.admin_json("deleteExpiredCommitLog", "-c", "DefaultCluster")
        assert passes[served.broker]["reason"] == "manual"


def test_b265_print_msg_and_consume_message_read_a_topics_queues(served):
    served.admin("updateTopic", "-b", served.broker, "-t", "T", "-r", "1", "-w", "1")
    sent = [
        served.admin_json("sendMessage", "-t", "T", "-p", f"m{i}", "-c", tag)
        for i, tag in enumerate(["TagA", "TagB", "TagA"])
    ]
    out = served.admin("printMsg", "-t", "T", "-s", "TagA").stdout.splitlines()
    assert (
        out[0] == "minOffset=0, maxOffset=3, MessageQueue [topic=T, brokerName=broker-a, queueId=0]"
    )
    assert [line.rsplit("BODY: ", 1)[1] for line in out[1:3]] == ["m0", "m2"]
    assert out[1].startswith(
        f"MSGID: {sent[0]['msgId']} MessageExt [brokerName=broker-a, queueId=0,"
    )
    assert "toString()=Message{topic='T', flag=0, properties={" in out[1]
    assert out[3] == "-" * 56
    hidden = served.admin_json("printMsg", "-t", "T", "-d", "false")
    assert hidden["printBody"] is False
    assert "NOT PRINT BODY" in served.admin("printMsg", "-t", "T", "-d", "false").stdout
    stored = [served.admin_json("queryMsgById", "-i", s["msgId"])["storeTimestamp"] for s in sent]
    got = served.admin_json(
        "consumeMessage", "-t", "T", "-s", str(stored[1]), "--MessageNumber", "1"
    )
    assert [m["body"] for m in got] == ["m1"]


async def test_b266_query_by_unique_key_producer_connection_and_consumer_status(tmp_path, nursery):
    with serve(tmp_path / "data") as broker:
        await topic_ready(broker, "T", 1)
        producer = Producer(broker.namesrv, "PG", client_ip="127.0.0.1", instance_name="p1")
        await producer.start(nursery)
        try:
            sent = await producer.send("T", b"hello", tags="TagA", keys="k1")
            connections = await cli_ok(
                "admin", "-n", broker.namesrv, "producerConnection", "-g", "PG", "-t", "T"
            )
            (line,) = connections.stdout.splitlines()
            assert line.startswith("0001  127.0.0.1@p1") and line.endswith("V4_9_8")
        finally:
            await producer.shutdown()

        done = await cli_ok(
            "admin", "-n", broker.namesrv, "queryMsgByUniqueKey", "-i", sent.msg_id, "-t", "T"
        )
        out = done.stdout
        assert f"{'Topic:':<20} T\n" in out and f"{'Tags:':<20} [TagA]\n" in out
        assert f"{'Keys:':<20} [k1]\n" in out
        body_path = out.split("Message Body Path:")[1].strip()
        assert Path(body_path).read_bytes() == b"hello"
        (found,) = await admin_json(broker, "queryMsgByUniqueKey", "-i", sent.msg_id, "-t", "T")
        assert (found["msgId"], found["offsetMsgId"]) == (sent.msg_id, sent.offset_msg_id)

        collector = Collector()
        consumer = PushConsumer(
            broker.namesrv,
            "G",
            collector,
            subscriptions={"T": "*"},
            instance_name="c1",
            client_ip="127.0.0.1",
            config=FAST,
        )
        await consumer.start(nursery)
        try:
            await collector.wait_count(1)
            status = await admin_json(broker, "consumerStatus", "-g", "G")
            (client,) = status["clients"]
            assert client["clientId"] == "127.0.0.1@c1"
            assert json.loads(Path(client["file"]).read_text())["subscriptionSet"]
            table = (
                await cli_ok("admin", "-n", broker.namesrv, "consumerStatus", "-g", "G")
            ).stdout
            assert table.splitlines()[0].split() == [
                "#Index",
                "#ClientId",
                "#Version",
                "#ConsumerRunningInfoFile",
            ]
            assert "Same subscription in the same group of consumer" in table
            one = await admin_json(broker, "consumerStatus", "-g", "G", "-i", "127.0.0.1@c1")
            assert one["runningInfo"]["subscriptionSet"]
        finally:
            await consumer.shutdown()


def test_b677_delete_expired_commit_log_answers_before_a_long_pass_ends(tmp_path):
    # every pass outlasts the answer
    with expired_files(tmp_path, "manual_pass_answer_ms=0") as served:
        answered = served.admin_json("deleteExpiredCommitLog", "-b", served.broker)
        assert answered[served.broker]["running"] is True
        assert served.admin("deleteExpiredCommitLog", "-b", served.broker).stdout == "success\n"

        def expired() -> bool:
            (status,) = served.admin_json("topicStatus", "-t", "T")
            return bool(status["minOffset"] > 0 and status["maxOffset"] == 12)

        poll_until_sync(expired, what="the pass that went on after the answer")


def test_b680_query_by_unique_key_of_no_message_fails_saying_so(served):
    """mqadmin's queryMsgByUniqueKey fails when the topic holds no message with the key
    (MQAdminImpl#queryMessage: NO_MESSAGE); it printed an empty line and exited 0 (B-680)."""
    served.admin("updateTopic", "-b", served.broker, "-t", "T1")
    served.admin("sendMessage", "-t", "T1", "-p", "another message")
    absent = "0A0A0A0A0000000000000000000000FF"
    done = served.admin("queryMsgByUniqueKey", "-i", absent, "-t", "T1", check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.strip() == (
        f"es-broker admin queryMsgByUniqueKey: no message with unique key {absent} in topic T1"
    )
