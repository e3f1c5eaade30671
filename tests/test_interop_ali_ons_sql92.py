"""A SQL92 subscription of the npm client ali-ons 3.12.0 (B-216): it subscribes with
`{expressionType: 'SQL92', subString}`, sends the expression in every pull, and the broker
(enablePropertyFilter=true) delivers only the messages whose properties match. Skipped without
node and ali-ons, like test_interop_ali_ons.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.process_fixtures import serve
from tests.test_interop_ali_ons import BrokerProcess, pytestmark, run_node
from tests.test_interop_ali_ons_retry import create_topic

__all__ = ["pytestmark"]  # the node / ali-ons skips of the interop module

TOPIC = "InteropSql"


def test_ali_ons_sql92_subscription_receives_only_matching_messages(tmp_path: Path):
    planned = [
        {"tags": "TagA", "body": f"b{i}", "properties": {"price": str(i * 10), "region": region}}
        for i, region in enumerate(["eu", "us", "eu", "eu", "us", "apac"])
    ]
    wanted = {p["body"] for p in planned if p["properties"]["region"] == "eu"}
    wanted &= {p["body"] for p in planned if int(p["properties"]["price"]) >= 20}
    with serve(tmp_path / "data", conf=["enablePropertyFilter=true"]) as served:
        broker = BrokerProcess(served.process, served.namesrv, served.broker)
        create_topic(broker, served, TOPIC, 2)
        sent = run_node(
            "produce.js",
            "--namesrv",
            served.namesrv,
            "--topic",
            TOPIC,
            "--group",
            "sql_producer",
            "--messages",
            json.dumps(planned),
        )
        assert len(sent) == len(planned)
        pull_log = tmp_path / "pulled.jsonl"
        received = run_node(
            "consume.js",
            "--namesrv",
            served.namesrv,
            "--topic",
            TOPIC,
            "--group",
            "interop_sql",
            "--sql",
            "region = 'eu' AND price >= 20",
            "--expect",
            str(len(wanted)),
            "--pull-log",
            str(pull_log),
        )
    assert sorted(m["body"] for m in received) == sorted(wanted)
    # the broker did the filtering: the pulls brought back nothing else
    pulled = [json.loads(line) for line in pull_log.read_text().splitlines()]
    by_id = {s["msgId"]: s["body"] for s in sent}
    assert {by_id[p["msgId"]] for p in pulled} == wanted
