"""What a broker logs at WARNING is what needs a person (B-510), and every ACL refusal is counted
under the check that refused it (B-511). Real `es-broker serve` processes.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from es_broker.acl.signing import Credentials
from tests.acl_fixtures import PRODUCER, WRONG_SECRET, acl_conf, topics, wire
from tests.etcd_fixtures import start_group
from tests.process_fixtures import serve
from tests.waiting import poll_until

METRICS_LINE = re.compile(r"metrics on (http://\S+/metrics)")
DENIED = re.compile(r'^esbroker_acl_denied_total\{[^}]*reason="([^"]+)"[^}]*\} (\S+)$', re.M)


def warnings(log_text: str) -> list[str]:
    return [line for line in log_text.splitlines() if " WARNING " in line]


def denied_by_reason(url: str) -> dict[str, float]:
    text = httpx.get(url, timeout=10).text
    return {reason: float(n) for reason, n in DENIED.findall(text)}


async def test_b510_b511_a_normal_acl_load_is_info_and_refusals_are_counted_by_reason(
    tmp_path, nursery
):
    """B-510: the startup load of the ACL rules is logged at INFO, and a normal start logs no
    WARNING. B-511: esbroker_acl_denied_total counts real refusals under their reason
    (no-access-key, bad-signature, no-account, no-perm, not-admin), none as "unknown"."""
    conf, _ = acl_conf(
        tmp_path,
        aclDenialSummaryInterval=1,
        metricsExporterType="PROM",
        metricsPromExporterPort=0,
    )
    log_file = tmp_path / "broker.log"
    with serve(
        tmp_path / "data", "-v", "--config", str(conf), "--readmodel-url", "none", log_file=log_file
    ) as broker:
        text = log_file.read_text()
        loaded = [line for line in text.splitlines() if "ACL rules version 1 loaded" in line]
        assert loaded and all(" INFO " in line for line in loaded), loaded
        assert warnings(text) == []
        await topics(nursery, broker, "TopicA", "TopicC")
        expected = {
            "no-access-key": wire(nursery, None).send(broker.broker, "TopicA", 0, b"x"),
            "bad-signature": wire(nursery, WRONG_SECRET).send(broker.broker, "TopicA", 0, b"x"),
            "no-account": wire(nursery, Credentials("NobodyKnowsMe", "whatever1")).send(
                broker.broker, "TopicA", 0, b"x"
            ),
            "no-perm": wire(nursery, PRODUCER).send(broker.broker, "TopicC", 0, b"x"),
            "not-admin": wire(nursery, PRODUCER).create_topic(broker.broker, "NotAdminTopic", 1),
        }
        for why, call in expected.items():
            try:
                answer = await call
            except AssertionError:  # create_topic asserts SUCCESS: refused as expected
                continue
            assert answer.code != 0, (why, answer.remark)
        url = METRICS_LINE.findall(log_file.read_text())[-1]

        def all_counted() -> dict[str, float] | None:
            counts = denied_by_reason(url)
            return counts if all(counts.get(r, 0) >= 1 for r in expected) else None

        counts = await poll_until(all_counted, 30, "every refusal counted by its reason")
        assert "unknown" not in counts, counts


async def test_b510_an_election_is_logged_at_info_not_warning(tmp_path, nursery):
    """B-510: a one-node group elects its node at start; that election is no WARNING."""
    group = await start_group(tmp_path, ["n1"])
    try:
        w = wire(nursery, None)

        async def leads() -> bool:
            rt = await w.runtime(group.nodes["n1"].addr)
            return rt.get("haLeader") == "n1" and rt.get("haFence") == ""

        await poll_until(leads, 60, "n1 leading")
        out = Path(group.nodes["n1"].output).read_text()
        assert "took the leader key" not in out
        assert warnings(out) == [], warnings(out)
    finally:
        group.stop_all()
