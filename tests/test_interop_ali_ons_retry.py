"""The retry path with the npm client ali-ons 3.12.0: its handler throws, it sends the message
back, and the message returns through `%RETRY%G` (B-88, B-90, B-92, B-99; docs/protocol.md §11.5).

The broker runs in a real process with a broker.conf of 1 s delay levels; the scripts in
tests/interop/ use ali-ons as an application would. Skipped without node and ali-ons, like
test_interop_ali_ons.
"""

from __future__ import annotations

import json
from pathlib import Path

from es_broker.config import BrokerConfig
from es_broker.remoting.codes import RequestCode
from es_broker.store import Store
from tests.interop_fixtures import NEEDS_ALI_ONS, BrokerProcess, poll, remoting_call, run_node
from tests.process_fixtures import serve

pytestmark = NEEDS_ALI_ONS  # the node / ali-ons skips of the interop tests

TOPIC, GROUP = "InteropRetry", "interop_retry"


def create_topic(broker: BrokerProcess, served, topic: str, queues: int) -> None:
    served.admin(
        "updateTopic", "-b", broker.broker_addr, "-t", topic, "-r", str(queues), "-w", str(queues)
    )
    # ali-ons reads routes only at start and every 30 s: they must be at the name server first
    poll(
        f"route of {topic}",
        lambda: (
            remoting_call(
                broker.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}
            ).code
        ),
        lambda code: code == 0,
        timeout=30.0,
    )


def test_ali_ons_handler_failing_twice_gets_the_message_back_through_the_retry_topic(
    tmp_path: Path,
):
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel=1s 1s 1s 1s 1s 1s\n", encoding="utf-8")
    with serve(tmp_path / "data", "--config", str(conf)) as served:
        broker = BrokerProcess(served.process, served.namesrv, served.broker)
        create_topic(broker, served, TOPIC, 1)
        # what the first heartbeat would create (B-25)
        create_topic(broker, served, f"%RETRY%{GROUP}", 1)
        (sent,) = run_node(
            "produce.js",
            "--namesrv",
            served.namesrv,
            "--topic",
            TOPIC,
            "--group",
            "retry_producer",
            "--messages",
            json.dumps([{"tags": "TagA", "keys": ["k-1"], "body": "flaky job"}]),
        )
        deliveries = run_node(
            "retry.js",
            "--namesrv",
            served.namesrv,
            "--topic",
            TOPIC,
            "--group",
            GROUP,
            "--expect",
            "1",
            "--fail",
            "2",
        )
    assert [(d["reconsumeTimes"], d["failed"]) for d in deliveries] == [
        (0, True),
        (1, True),
        (2, False),
    ]
    # ali-ons shows a retry under its RETRY_TOPIC (B-99)
    assert {d["topic"] for d in deliveries} == {TOPIC}
    assert {d["body"] for d in deliveries} == {"flaky job"}
    assert deliveries[0]["msgId"] == sent["msgId"]
    assert [d["originMessageId"] for d in deliveries[1:]] == [sent["msgId"]] * 2
    # 1 s levels
    assert all(b["at"] - a["at"] >= 900 for a, b in zip(deliveries, deliveries[1:], strict=False))
    data = tmp_path / "data"
    store = Store.open(data, BrokerConfig(storePathRootDir=str(data)), readonly=True)
    try:
        backs = [r for _, r in store.log.read() if r["type"] == "message_sent_back"]
    finally:
        store.close()
    # the broker path (not ali-ons' producer fallback): two send-backs, each a delayed retry
    assert [(r["group"], r["decision"], r["delay_level"], r["target_topic"]) for r in backs] == [
        (GROUP, "retry", 3, f"%RETRY%{GROUP}"),
        (GROUP, "retry", 4, f"%RETRY%{GROUP}"),
    ]
    # ali-ons' maxReconsumeTimes header
    assert [r["max_reconsume_times"] for r in backs] == [
        16,
        16,
    ]
