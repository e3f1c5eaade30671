"""The broker's /metrics count RocketMQ 5 clients' traffic as they count 4.x clients' (B-640).

One broker process with `metricsExporterType=PROM` and the gRPC proxy in front of it. Side
by side, a 4.x producer and push consumer (the project's client) and a 5.x producer and
SimpleConsumer (the official Python client through the proxy) each send 10 messages to a
topic of one queue, consume and acknowledge them, then send 5 more that nobody consumes.
A scrape answers the same families, labels and values for both. Every count is written before
the request that made it is answered (the send's store, the pop, the ack's commit), so one scrape
after the clients are done reads them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.helpers import numbered
from tests.proxy_fixtures import Proxied, proxied
from tests.test_metrics_prometheus import CONF, lagging_group, metrics_url, sample, scrape
from tests.test_proxy_receive import consumer as consumer5
from tests.test_proxy_receive import receive_until, send5

POP_MESSAGE, ACK_MESSAGE = "200050", "200051"


@pytest.fixture(scope="module")
def px(tmp_path_factory) -> Iterator[Proxied]:
    tmp: Path = tmp_path_factory.mktemp("proxymetrics")
    with proxied(tmp, conf=CONF) as p:
        yield p


def consumed_by_5x(px: Proxied) -> None:
    """T5: 10 messages sent through the proxy, received and acked by G5, then 5 more not received."""
    px.topic("T5", queues=1)
    send5(px, "T5", numbered("a", 10))
    c = consumer5(px, "G5", "T5")
    try:
        receive_until(c, 10)
    finally:
        c.shutdown()
    send5(px, "T5", numbered("b", 5))


def group_samples(text: str, topic: str, group: str) -> dict[str, float]:
    return {
        name: sample(text, name, topic=topic, consumer_group=group, is_retry="false")
        for name in (
            "rocketmq_messages_out_total",
            "rocketmq_throughput_out_bytes_total",
            "rocketmq_consumer_lag_messages",
        )
    }


async def test_b640_5x_sends_and_receives_count_as_4x_ones(px, nursery):
    await lagging_group(px.broker, nursery, px.broker.data_dir.parent, "T4", "G4", queues=1)
    await trio.to_thread.run_sync(consumed_by_5x, px)
    url = metrics_url(px.broker.data_dir.parent / "broker.log")
    text = scrape(url)
    for topic in ("T4", "T5"):
        assert sample(text, "rocketmq_messages_in_total", topic=topic, message_type="normal") == 15
        assert sample(text, "rocketmq_message_size_bytes_count", topic=topic) == 15
    for topic, group in (("T4", "G4"), ("T5", "G5")):
        got = group_samples(text, topic, group)
        assert got["rocketmq_messages_out_total"] == 10, (topic, got)
        assert got["rocketmq_consumer_lag_messages"] == 5, (topic, got)
        # the 10 first of 15 messages of one stored size each
        size_in = sample(text, "rocketmq_throughput_in_bytes_total", topic=topic)
        assert got["rocketmq_throughput_out_bytes_total"] == size_in * 10 / 15, (topic, got)
    assert sample(text, "esbroker_consumer_queue_lag_messages", consumer_group="G5") == 5
    assert sample(text, "rocketmq_consumer_lag_latency_seconds", consumer_group="G5") > 0
    for code in (POP_MESSAGE, ACK_MESSAGE):
        assert sample(text, "rocketmq_rpc_latency_seconds_count", request_code=code) > 0
