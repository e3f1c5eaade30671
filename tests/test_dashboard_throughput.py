"""The dashboard's history of messages in and out (B-368, B-369): STATS_HISTORY over the wire,
and the throughput page drawn from it, read by Debian's chromium through Playwright.

The test sends known messages to a broker process and reads their store times back, so it
knows how many records each minute of broker time holds; every point of the charts must be
that count (and the count over the interval's seconds).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import trio

from es_broker.client.admin import Admin
from es_broker.remoting.codes import EsRequestCode, ResponseCode
from es_broker.remoting.command import request
from tests.dashboard_fixtures import dashboard
from tests.helpers import Collector, consumer, numbered, produce, topic_ready
from tests.process_fixtures import ServedBroker, serve

MINUTE = 60_000


async def traffic(broker: ServedBroker) -> tuple[list[int], list[int], int]:
    """T: 8 messages, consumed by G; U: 3 messages, consumed by nobody. The store times of T's
    and U's messages, and the number of T's messages G received."""
    async with trio.open_nursery() as nursery:
        await topic_ready(broker, "T", 2)
        await topic_ready(broker, "U", 1)
        sent_t = await produce(broker, nursery, "T", numbered("t", 8))
        sent_u = await produce(broker, nursery, "U", numbered("u", 3))
        got = Collector()
        c = consumer(broker, "G", got, {"T": "*"})
        await c.start(nursery)
        await got.wait_count(8)
        await c.shutdown()
        async with Admin.open(broker.namesrv_addr) as admin:
            t = [(await admin.view_message(r.offset_msg_id)).store_timestamp for r in sent_t]
            u = [(await admin.view_message(r.offset_msg_id)).store_timestamp for r in sent_u]
    return t, u, len(got.received)


def window(times: list[int]) -> tuple[int, int]:
    """A window of whole minutes from the minute before the first message to two after the last."""
    return (min(times) // MINUTE - 1) * MINUTE, (max(times) // MINUTE + 3) * MINUTE


def per_minute(times: list[int], since: int, until: int) -> list[int]:
    counts = Counter(t // MINUTE * MINUTE for t in times)
    return [counts.get(m, 0) for m in range(since, until, MINUTE)]


async def test_stats_history_counts_each_interval_from_the_records(tmp_path):
    """STATS_HISTORY answers per interval of broker time the messages put (broker and each
    topic) and delivered; longer intervals sum the minutes; bad windows get SYSTEM_ERROR."""
    with serve(tmp_path / "data") as broker:
        t_times, u_times, delivered = await traffic(broker)
        since, until = window(t_times + u_times)
        async with Admin.open(broker.namesrv_addr) as admin:
            h = await admin.stats_history(broker.addr, since, until, 1)
            assert (h.since, h.until, h.step) == (since, until, MINUTE)
            assert h.broker is not None
            assert list(h.broker.in_messages) == per_minute(t_times + u_times, since, until)
            assert sum(h.broker.out_messages) == delivered
            by_topic = {s.topic: s for s in h.topics}
            assert list(by_topic["T"].in_messages) == per_minute(t_times, since, until)
            assert list(by_topic["U"].in_messages) == per_minute(u_times, since, until)
            assert sum(by_topic["T"].out_messages) == delivered
            assert sum(by_topic["U"].out_messages) == 0
            # one interval of the whole window: the sums
            whole = await admin.stats_history(broker.addr, since, until, (until - since) // MINUTE)
            assert whole.broker is not None and list(whole.broker.in_messages) == [11]
            only_u = await admin.stats_history(broker.addr, since, until, 1, topic="U")
            assert [s.topic for s in only_u.topics] == ["U"]
            for fields, remark in (
                ({"since": until, "until": since}, "is not after since"),
                ({"since": 0, "until": until, "stepMinutes": 1}, "at most 10000"),
            ):
                r = await admin.client.invoke(
                    broker.addr, request(EsRequestCode.STATS_HISTORY, fields), 10.0
                )
                assert r.code == ResponseCode.SYSTEM_ERROR
                assert remark in (r.remark or "")


playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is missing")


def points(page, selector: str) -> list[tuple[int, int, float]]:
    """(interval start, count, rate) of each point drawn under `selector`."""
    found = page.locator(f"{selector} circle.point").evaluate_all(
        "els => els.map(e => [e.dataset.time, e.dataset.count, e.dataset.tps])"
    )
    return [(int(t), int(c), float(r)) for t, c, r in found]


@needs_chromium
def test_the_throughput_page_draws_the_counts_of_the_records(tmp_path):
    """From the cluster page's link, the throughput page's charts have one point per minute of
    the window: the broker's and each topic's messages in equal the records stored in that
    minute, drawn as count / 60 per second; out sums to the deliveries."""
    from tests.test_dashboard_e2e import CHROMIUM_ARGS

    with serve(tmp_path / "data") as broker:
        t_times, u_times, delivered = trio.run(traffic, broker)
        since, until = window(t_times + u_times)
        with (
            dashboard(broker.namesrv, log=tmp_path / "dashboard.log") as base,
            playwright_api.sync_playwright() as p,
        ):
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                violations: list[str] = []
                page.on(
                    "console",
                    lambda m: (
                        violations.append(m.text) if "Content Security Policy" in m.text else None
                    ),
                )
                page.goto(f"{base}/")
                page.click("#throughput-link")
                assert page.url.endswith("/throughput")
                assert page.locator("#broker-tps").count() == 1
                page.goto(f"{base}/throughput?since={since}&until={until}&step=1")
                minutes = list(range(since, until, MINUTE))

                def expected(times: list[int]) -> list[tuple[int, int, float]]:
                    counts = per_minute(times, since, until)
                    return [(m, c, round(c / 60, 4)) for m, c in zip(minutes, counts, strict=True)]

                assert points(page, '#broker-tps g[data-kind="in"]') == expected(t_times + u_times)
                assert points(page, '#topic-in-tps g[data-series="T"]') == expected(t_times)
                assert points(page, '#topic-in-tps g[data-series="U"]') == expected(u_times)
                out = points(page, '#broker-tps g[data-kind="out"]')
                assert [m for m, _, _ in out] == minutes
                assert sum(c for _, c, _ in out) == delivered
                assert page.locator('#topic-totals tr[data-topic="T"] td.in').inner_text() == "8"
                assert page.locator('#topic-totals tr[data-topic="T"] td.out').inner_text() == (
                    str(delivered)
                )
                page.select_option("#window", "24h")
                page.click("#window-form button[type=submit]")
                assert "window=24h" in page.url
                assert violations == []
            finally:
                browser.close()
