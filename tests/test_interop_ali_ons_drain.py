"""Add and drain (B-531) with ali-ons, the npm RocketMQ client, as the application's client.

The cluster is the one of tests/test_rocketmq_cluster.py's B-531 test (tests/cluster_fixtures.py:
a `serve --role namesrv` and two `serve --role broker` processes); the producer is one ali-ons
Producer kept alive through the drain (tests/interop/drain.js), the consumer ali-ons' push
Consumer (tests/interop/consume.js). Skipped without node or tests/interop/node_modules.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.cluster_fixtures import admin, drain_cluster, route_perms
from tests.interop_fixtures import INTEROP_DIR, NEEDS_ALI_ONS, NODE, poll, run_node

pytestmark = NEEDS_ALI_ONS

TOPIC = "MIG_ALI"
POLL_MS = 500  # ali-ons' pollNameServerInteval (30 s by default)
HEARTBEAT_MS = 500  # its heartbeatBrokerInterval (30 s), which also forgets offline brokers
ANSWER_TIMEOUT = 30.0  # for drain.js to answer one command


class DrainProducer:
    """tests/interop/drain.js: one ali-ons Producer, asked one JSON command at a time."""

    def __init__(self, proc: subprocess.Popen[str], stderr: Path) -> None:
        self.proc = proc
        self.stderr = stderr
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=ANSWER_TIMEOUT)
        except queue.Empty:
            line = None
        assert line is not None, f"drain.js gave no answer to {command}:\n{self.stderr.read_text()}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def send(self, prefix: str, count: int) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = self.ask(op="send", prefix=prefix, count=count)["sent"]
        return sent


@contextmanager
def drain_producer(namesrv: str, log: Path) -> Iterator[DrainProducer]:
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            [NODE or "node", "drain.js", "--namesrv", namesrv, "--topic", TOPIC]
            + ["--poll-ms", str(POLL_MS), "--heartbeat-ms", str(HEARTBEAT_MS), "--timeout", "120"],
            cwd=INTEROP_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        producer = DrainProducer(proc, log)
        yield producer
        assert producer.ask(op="close") == {"closed": True}
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _brokers(sent: list[dict[str, Any]]) -> set[str]:
    return {s["brokerName"] for s in sent}


def test_b531_add_and_drain_with_ali_ons(tmp_path):
    """ali-ons through RocketMQ's move of a cluster: sends on both brokers; the old one made
    read-only (brokerPermission 4); after ali-ons' route refresh it sends to the new one alone,
    at the first try; its push consumer receives every message from both; the old one stops."""
    with drain_cluster(tmp_path, TOPIC) as cluster:
        namesrv = cluster.namesrv
        # ali-ons takes the topic's route from the name server only (no TBW102 fallback)
        poll(
            "both brokers' queues in the route",
            lambda: route_perms(namesrv, TOPIC),
            lambda perms: perms == {"broker-old": 6, "broker-new": 6},
            timeout=30.0,
        )
        with drain_producer(namesrv, tmp_path / "drain.js.log") as producer:
            before = producer.send("before", 40)
            assert _brokers(before) == {"broker-old", "broker-new"}

            admin(
                namesrv,
                "updateBrokerConfig",
                "-b",
                cluster.old,
                "-k",
                "brokerPermission",
                "-v",
                "4",
            )
            assert route_perms(namesrv, TOPIC) == {"broker-old": 4, "broker-new": 6}
            # ali-ons' next route refresh: it keeps perm 4 in its route table and leaves the
            # old broker's queues out of those it sends to (writable queue datas only)
            route = poll(
                "ali-ons' route refreshed",
                lambda: producer.ask(op="route"),
                lambda r: r["perms"] == {"broker-old": 4, "broker-new": 6},
                timeout=30.0,
            )
            assert set(route["publish"]) == {"broker-new"} and len(route["publish"]) == 4
            after = producer.send("after", 40)
            # every send went to the new broker at its first try (no NO_PERMISSION retry)
            assert [s["tried"] for s in after] == [["broker-new"]] * 40

            # an ali-ons push consumer, started now, pulls the old broker's queues too (perm 4
            # is readable) and receives every message of both brokers, once each
            sent = before + after
            received = run_node(
                "consume.js",
                "--namesrv",
                namesrv,
                "--topic",
                TOPIC,
                "--group",
                "interop_drain",
                "--expect",
                str(len(sent)),
            )
            assert len(received) == len(sent), "duplicate deliveries"
            assert {m["msgId"]: m["body"] for m in received} == {
                s["msgId"]: s["body"] for s in sent
            }
            assert any(s["brokerName"] == "broker-old" for s in sent)

            # the old broker stopped: the name server forgets it, ali-ons' route follows, and
            # sends go on to the new broker
            cluster.stop_old()
            poll(
                "the old broker gone from the name server's route",
                lambda: route_perms(namesrv, TOPIC),
                lambda perms: perms == {"broker-new": 6},
                timeout=30.0,
            )
            # (its heartbeat task then forgets the old broker's address: ali-ons' close()
            # unregisters from every broker it keeps and, unlike the Java client, fails when one
            # is unreachable)
            poll(
                "the old broker gone from ali-ons' route and broker table",
                lambda: producer.ask(op="route"),
                lambda r: r["perms"] == {"broker-new": 6} and r["brokers"] == ["broker-new"],
                timeout=30.0,
            )
            stopped = producer.send("stopped", 10)
            assert [s["tried"] for s in stopped] == [["broker-new"]] * 10
