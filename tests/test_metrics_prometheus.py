"""/metrics scraped by a real Prometheus server (B-355..B-362).

A broker process with `metricsExporterType=PROM` serves RocketMQ 5's metric names
counted from its records, and es-broker's own `esbroker_` gauges; Prometheus scrapes
it, and its HTTP API answers what `es-broker admin` says. The counters are the log's
totals, so a restart continues them. promtool accepts the alert rules in
monitoring/ and a scrape.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import (
    Collector,
    admin_json,
    consumer,
    numbered,
    produce,
    topic_ready,
    wait_until,
)
from tests.process_fixtures import ROOT, ServedBroker, serve
from tests.waiting import poll_until_sync

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
METRICS_LINE = re.compile(r"metrics on (http://\S+/metrics)")
CONF = ("metricsExporterType=PROM", "metricsPromExporterPort=0")

needs_prometheus = pytest.mark.skipif(
    not Path(PROMETHEUS).exists(), reason="prometheus is not installed (apt-get install prometheus)"
)
needs_promtool = pytest.mark.skipif(
    not Path(PROMTOOL).exists(), reason="promtool is not installed (apt-get install prometheus)"
)


def metrics_url(log_file: Path) -> str:
    found = METRICS_LINE.findall(log_file.read_text())
    assert found, "the broker did not say where /metrics is"
    return found[-1]


def scrape(url: str) -> str:
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200
    return response.text


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
            found = True
    assert found, f"no sample of {name} {labels}"
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, tmp: Path, target: str) -> None:
        self.port = free_port()
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files:\n  - " + str(ROOT / "monitoring" / "alerts.yml") + "\n"
            "scrape_configs:\n  - job_name: es-broker\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        self.log = open(tmp / "prometheus.log", "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def query(self, expr: str) -> list[dict]:
        r = httpx.get(
            f"http://127.0.0.1:{self.port}/api/v1/query", params={"query": expr}, timeout=10
        )
        r.raise_for_status()
        return r.json()["data"]["result"]

    def value_is(self, expr: str, wanted: float) -> bool:
        try:
            result = self.query(expr)
        except httpx.HTTPError:
            return False
        return len(result) == 1 and float(result[0]["value"][1]) == wanted

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


async def lagging_group(
    broker: ServedBroker,
    nursery,
    tmp_path: Path,
    topic: str = "T",
    group: str = "G",
    queues: int = 2,
) -> None:
    """10 messages to `topic` consumed by `group`, then 5 more it has not consumed: it lags 5."""
    await topic_ready(broker, topic, queues)
    await produce(broker, nursery, topic, numbered("a", 10))
    got = Collector()
    c = consumer(broker, group, got, {topic: "*"})
    await c.start(nursery)
    await got.wait_count(10)

    async def caught_up() -> bool:
        progress = await admin_json(broker, "consumerProgress", "-g", group)
        return progress["diffTotal"] == 0

    await wait_until(f"{group} caught up", caught_up)
    await c.shutdown()
    await produce(broker, nursery, topic, numbered("b", 5))


@needs_prometheus
async def test_prometheus_scrapes_lag_counts_and_broker_state(tmp_path, nursery):
    """Prometheus' HTTP API answers rocketmq_consumer_lag_messages per group equal to
    consumerProgress's total diff, rocketmq_messages_in_total equal to the messages sent,
    rocketmq_messages_out_total equal to those delivered, and the registration gauge ok."""
    log_file = tmp_path / "broker.log"
    with serve(tmp_path / "data", log_file=log_file, conf=CONF) as broker:
        await lagging_group(broker, nursery, tmp_path)
        url = metrics_url(log_file)
        diff = (await admin_json(broker, "consumerProgress", "-g", "G"))["diffTotal"]
        assert diff == 5
        prom = Prometheus(tmp_path, url.removeprefix("http://").removesuffix("/metrics"))
        try:
            checks = {
                'sum by (consumer_group) (rocketmq_consumer_lag_messages{consumer_group="G"})': diff,
                'sum(rocketmq_messages_in_total{topic="T"})': 15,
                'sum(rocketmq_messages_out_total{topic="T",consumer_group="G"})': 10,
                'sum(esbroker_consumer_queue_lag_messages{consumer_group="G"})': diff,
                "esbroker_nameserver_registration_ok": 1,
                'esbroker_peer_state{request="nameServerRegistration",state="ok"}': 1,
                "esbroker_disk_full": 0,
                'rocketmq_message_size_bytes_count{topic="T"}': 15,
            }
            for expr, wanted in checks.items():
                poll_until_sync(lambda e=expr, w=wanted: prom.value_is(e, w), what=expr)
        finally:
            prom.stop()


async def test_counters_continue_after_a_restart(tmp_path, nursery):
    """After a restart the counters are the log's totals: equal to before, not back to 0."""
    log_file = tmp_path / "broker.log"
    with serve(tmp_path / "data", log_file=log_file, conf=CONF) as broker:
        await lagging_group(broker, nursery, tmp_path)
        before = scrape(metrics_url(log_file))
    again = tmp_path / "broker-again.log"
    with serve(tmp_path / "data", log_file=again, conf=CONF):
        after = scrape(metrics_url(again))
    for name, labels in (
        ("rocketmq_messages_in_total", {"topic": "T"}),
        ("rocketmq_throughput_in_bytes_total", {"topic": "T"}),
        ("rocketmq_messages_out_total", {"consumer_group": "G"}),
        ("rocketmq_throughput_out_bytes_total", {"consumer_group": "G"}),
        ("rocketmq_consumer_lag_messages", {"consumer_group": "G"}),
    ):
        assert sample(after, name, **labels) == sample(before, name, **labels) > 0, name
    assert sample(after, "rocketmq_messages_in_total", topic="T") == 15


@needs_promtool
async def test_promtool_accepts_a_scrape(tmp_path, nursery):
    """`promtool check metrics` finds no problem in a scrape with traffic."""
    log_file = tmp_path / "broker.log"
    with serve(tmp_path / "data", log_file=log_file, conf=CONF) as broker:
        await lagging_group(broker, nursery, tmp_path)
        text = scrape(metrics_url(log_file))
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_accepts_the_alert_rules():
    """`promtool check rules` accepts monitoring/alerts.yml as it is."""
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(ROOT / "monitoring" / "alerts.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_exporter_type_es_broker_does_not_serve_stops_the_start(tmp_path):
    """metricsExporterType=OTLP_GRPC stops `serve` with an error naming the values it takes."""
    conf = tmp_path / "broker.conf"
    conf.write_text("metricsExporterType=OTLP_GRPC\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--config",
            str(conf),
            "--listen",
            "127.0.0.1:0",
            "--namesrv-listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode != 0
    assert "metricsExporterType='OTLP_GRPC'" in done.stderr and "PROM" in done.stderr
