"""A whole cluster audited at once: two masters and a slave exported under one root, read by Spark.

Real processes on loopback: a name server, broker-a (master and slave) and
broker-b (a master), a topic on both masters, a consumer group's commits and
an offline reset by time on each. Each node exports into the same root
(`es-broker export --cluster`); the Spark jobs on that root must give the
union of what `es-broker offsets --at` says of each broker, with the slave's
copy of broker-a's records counted once; and `offsets`, `history` and
`explain` with `--namesrv` ask every broker over the wire and give that union
too (B-209).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from es_broker.net.remoting_client import RemotingClient
from tests.ha_fixtures import _BROKER, Wire, caught_up, start, start_cluster, wait_until, write_conf
from tests.helpers import cli_checked

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
if shutil.which("java") is None:
    pytest.skip("PySpark needs a Java runtime", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "spark"))

import audit_report  # noqa: E402
import esb_spark  # noqa: E402
import offsets_at  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

TOPIC, GROUP, QUEUES = "ClusterTopic", "ClusterGroup", 4


@pytest.fixture(scope="module")
def spark():
    session = esb_spark.session("es-broker cluster tests", "local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


async def test_b207_b209_a_cluster_export_and_the_wire_give_the_union_of_the_brokers_and_count_the_slave_once(
    tmp_path, nursery, spark, capsys
):
    cluster = await start_cluster(
        tmp_path, master={"brokerName": "broker-a", "brokerRole": "SYNC_MASTER"}, slave={}
    )
    conf_b = write_conf(tmp_path / "b.conf", brokerName="broker-b")
    b = await start(
        "master-b",
        tmp_path,
        [
            "--role",
            "broker",
            "--namesrv",
            cluster.namesrv.addr,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "master-b"),
            "--config",
            str(conf_b),
            "--readmodel-url",
            "none",
        ],
        _BROKER,
    )
    cluster.procs.append(b)
    try:
        w = Wire(RemotingClient(nursery))
        m, s = cluster.master.addr, cluster.slave.addr
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        for addr in (m, b.addr):
            await w.create_topic(addr, TOPIC, QUEUES)
        # traffic on both masters, a different amount on each queue; the group commits part of it
        for n, addr in enumerate((m, b.addr)):
            for q in range(QUEUES):
                for i in range(5 + 3 * q + n):
                    r = await w.send(addr, TOPIC, q, f"{n}-{q}-{i}".encode())
                    assert r.code == 0, r.remark
                await w.commit(addr, GROUP, TOPIC, q, 4 + q + n)
        # an offline reset by time, which reaches every broker of the topic's route: back to the start
        reset = cluster.admin_json("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "0")
        assert {q["brokerName"] for q in reset["queues"]} == {"broker-a", "broker-b"}
        await w.commit(b.addr, GROUP, TOPIC, 1, 2)  # and one commit after it on broker-b
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        at = int(time.time() * 1000)
        # asked over the wire of every broker the name server knows, while they serve
        ns = cluster.namesrv.addr
        asked = "offsets", "--namesrv", ns, "--group", GROUP, "--at", str(at), "--json"
        over_wire = json.loads(cli_checked(*asked).stdout)["queues"]
        history_over_wire = json.loads(
            cli_checked("history", "--namesrv", ns, "--group", GROUP, "--json").stdout
        )
        explained = json.loads(
            cli_checked("explain", "-n", ns, "-g", GROUP, "-t", TOPIC, "--json").stdout
        )
    finally:
        cluster.stop_all()

    dirs = {
        ("broker-a", 0): tmp_path / "master",
        ("broker-a", 1): tmp_path / "slave",
        ("broker-b", 0): tmp_path / "master-b",
    }
    union = set()
    for broker, data in (("broker-a", dirs[("broker-a", 0)]), ("broker-b", dirs[("broker-b", 0)])):
        answer = json.loads(
            cli_checked(
                "offsets", "--data-dir", str(data), "--group", GROUP, "--at", str(at), "--json"
            ).stdout
        )
        union |= {(broker, GROUP, r["topic"], r["queue_id"], r["offset"]) for r in answer["queues"]}
    # the cluster's answer is the union of the brokers' own, row for row
    assert {
        (r["broker"], GROUP, r["topic"], r["queue_id"], r["offset"]) for r in over_wire
    } == union
    local_history = set()
    for broker in ("broker-a", "broker-b"):
        answer = json.loads(
            cli_checked(
                "history", "--data-dir", str(dirs[(broker, 0)]), "--group", GROUP, "--json"
            ).stdout
        )
        local_history |= {(broker, e["seq"], e["kind"]) for e in answer["entries"]}
    entries = history_over_wire["entries"]
    assert {(e["broker"], e["seq"], e["kind"]) for e in entries} == local_history
    assert [e["time"] for e in entries] == sorted(e["time"] for e in entries)
    assert [(r["brokerName"], len(r["queues"])) for r in explained["brokers"]] == [
        ("broker-a", QUEUES),
        ("broker-b", QUEUES),
    ]
    assert {(b_, q, o) for b_, _, _, q, o in union} == {
        ("broker-a", q, 0) for q in range(QUEUES)
    } | {("broker-b", q, 2 if q == 1 else 0) for q in range(QUEUES)}

    root = tmp_path / "export"
    for (broker, node), data in dirs.items():
        cli_checked(
            "export",
            "--data-dir",
            str(data),
            "--out",
            str(root),
            "--cluster",
            "--broker-name",
            broker,
            "--broker-id",
            str(node),
        )
    assert {p.name for p in (root / "offsets").iterdir()} == {"broker=broker-a", "broker=broker-b"}
    assert {p.name for p in (root / "offsets" / "broker=broker-a").iterdir()} == {
        "node=0",
        "node=1",
    }

    source = esb_spark.Input(spark, export_dir=str(root))
    rows = esb_spark.offsets_at(source, at, group=GROUP).collect()
    assert {(r.broker, r.group, r.topic, r.queue_id, r.offset) for r in rows} == union
    # the lag Spark gives is each broker's own: its max minus the group's offset there
    assert {(r.broker, r.queue_id): r.lag for r in rows} == {
        (broker, q): 5 + 3 * q + n - (2 if (broker, q) == ("broker-b", 1) else 0)
        for n, broker in enumerate(("broker-a", "broker-b"))
        for q in range(QUEUES)
    }

    # broker-a's records come from its master and its slave, and are counted once
    alone = tmp_path / "export-a"
    cli_checked("export", "--data-dir", str(dirs[("broker-a", 0)]), "--out", str(alone))
    single = esb_spark.Input(spark, export_dir=str(alone))
    for family in ("offsets", "messages", "resets"):
        combined = source.family(family).where(F.col("broker") == "broker-a")
        assert combined.count() == single.family(family).count() > 0
        assert (
            combined.select("seq").distinct().count()
            == single.family(family).select("seq").distinct().count()
        )

    report = audit_report.collect(source, group=GROUP)
    (day,) = report.values()
    group = day["groups"][GROUP]
    # the admin asked broker-a first; with no consumer online it wrote the offsets itself (B-78)
    assert [(r["broker"], r["outcome"]) for r in group["resets"]] == [
        ("broker-a", "consumer_not_online")
    ]
    assert group["commits"] == sum(n["commits"] for n in group["by_broker"].values())
    assert set(group["by_broker"]) == {"broker-a", "broker-b"}
    text = audit_report.markdown(report)
    assert f"- **reset** of group `{GROUP}` on topic `{TOPIC}` on `broker-a` at " in text
    assert f"- group `{GROUP}` by broker: `broker-a` " in text and ", `broker-b` " in text

    capsys.readouterr()
    offsets_at.main(["--input", str(root), "--at", str(at), "--group", GROUP, "--json"], spark)
    printed = json.loads(capsys.readouterr().out)
    assert {(r["broker"], r["queue_id"], r["offset"]) for r in printed["queues"]} == {
        (b_, q, o) for b_, _, _, q, o in union
    }
