"""monitoring/ ready to load: the Grafana dashboard asks only for metrics a broker exports, and
the read model's quarantine is exported for its alert (B-367).

The metric names are read from a real scrape of a broker process with the read model on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.process_fixtures import ROOT, ServedBroker, serve
from tests.test_metrics_prometheus import CONF, lagging_group, metrics_url, sample, scrape
from tests.test_readmodel_quarantine import BAD_SEQ, BEYOND_INT64, RECORDS, append, queried
from tests.waiting import poll_until_sync

DASHBOARD = ROOT / "monitoring" / "grafana-dashboard.json"
# PromQL words that are not metric names (functions are followed by "(" and left out anyway)
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or"}
KEYWORDS |= {"unless", "offset", "bool", "le", "inf", "nan"}


def exported_names(text: str) -> set[str]:
    """Every series name a scrape can hold: its samples' names, and each family's TYPE with the
    suffixes Prometheus gives it (a family without samples yet still counts)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            suffixes = {
                "counter": ("_total",),
                "histogram": ("_bucket", "_sum", "_count"),
                "summary": ("_sum", "_count"),
            }.get(kind, ())
            names.update(name + s for s in suffixes)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    if m := re.fullmatch(r"\s*label_values\((.*)\)\s*", expr):  # a Grafana variable query
        expr = m.group(1).rsplit(",", 1)[0]
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\$\w+", "", expr)  # Grafana variables
    found = re.findall(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr)
    return {name for name in found if name.lower() not in KEYWORDS}


def expressions(dashboard: dict) -> list[str]:
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    out += [v["definition"] for v in dashboard["templating"]["list"]]
    return out


@contextmanager
def monitored(tmp_path: Path) -> Iterator[tuple[ServedBroker, str]]:
    """A broker process with /metrics and a SQLite read model over a log whose record BAD_SEQ
    no BIGINT column holds (an offset beyond int64), so the follower quarantines it."""
    data = tmp_path / "data"
    append(data, [queried(i, BEYOND_INT64 if i == BAD_SEQ else i) for i in range(1, RECORDS + 1)])
    log_file = tmp_path / "broker.log"
    url = f"sqlite:///{tmp_path / 'readmodel.sqlite'}"
    with serve(data, "--readmodel-url", url, log_file=log_file, conf=CONF) as broker:
        yield broker, metrics_url(log_file)


async def test_the_grafana_dashboard_names_only_metrics_the_broker_exports(tmp_path, nursery):
    """Every PromQL expression of monitoring/grafana-dashboard.json (panels and variables) names
    only metrics a real scrape holds; the data source is the `${DS_PROMETHEUS}` import input;
    the latency histogram's count of sends equals its +Inf bucket."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    with monitored(tmp_path) as (broker, url):
        await lagging_group(broker, nursery, tmp_path)
        text = scrape(url)
    exported = exported_names(text)
    # the request latency, folded into its histogram at scrape time: every send counted once
    sends = sample(text, "rocketmq_rpc_latency_seconds_count", request_code="310")
    assert sends == sample(
        text, "rocketmq_rpc_latency_seconds_bucket", request_code="310", le="+Inf"
    )
    assert sends >= 15  # lagging_group's sends
    exprs = expressions(dashboard)
    assert len(exprs) > 20
    asked: set[str] = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= exported, (expr, names - exported)
        asked |= names
    # the panels the dashboard promises: lag per group and queue, TPS, latency, disk, slaves, read model
    for wanted in (
        "rocketmq_consumer_lag_messages",
        "esbroker_consumer_queue_lag_messages",
        "rocketmq_messages_in_total",
        "rocketmq_messages_out_total",
        "rocketmq_rpc_latency_seconds_bucket",
        "esbroker_disk_used_ratio",
        "esbroker_slave_lag_records",
        "esbroker_readmodel_lag_seconds",
        "esbroker_readmodel_quarantined_records",
    ):
        assert wanted in asked, wanted
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def test_the_expression_parser_finds_metric_names():
    """The test's own PromQL reading: names, not functions, labels, keywords or variables."""
    expr = (
        'histogram_quantile(0.99, sum by (le, request_code) (rate(x_bucket{a=~"$c", b="y z"}'
        "[$__rate_interval]))) / on (a) group_left y_total > bool 0 unless z"
    )
    assert metric_names(expr) == {"x_bucket", "y_total", "z"}
    assert metric_names('label_values(m{cluster=~"$cluster"}, node_id)') == {"m"}


async def test_the_read_models_quarantine_is_exported(tmp_path):
    """esbroker_readmodel_quarantined_records is the number of records the read model's follower
    quarantined (1 here), the value ReadModelQuarantineNotEmpty in monitoring/alerts.yml fires on."""
    with monitored(tmp_path) as (_, url):
        poll_until_sync(
            lambda: sample(scrape(url), "esbroker_readmodel_quarantined_records") == 1,
            60,
            "the follower's quarantine count on /metrics",
        )
        assert sample(scrape(url), "esbroker_readmodel_lag_records") >= 0
    alerts = (ROOT / "monitoring" / "alerts.yml").read_text()
    assert "expr: esbroker_readmodel_quarantined_records > 0" in alerts
