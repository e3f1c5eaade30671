"""What an operator sees in the browser (B-514, B-515): Chromium driven by Playwright over a
dashboard process in front of a broker process with ACL on.

Screenshots go to $ES_BROKER_DASHBOARD_SCREENS when set (else the test's temporary directory).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import trio

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting import fastjson
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf
from tests.acl_fixtures import wire as acl_wire
from tests.dashboard_fixtures import dashboard
from tests.ha_fixtures import Wire
from tests.process_fixtures import ServedBroker, serve

playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        "Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True
    )
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
PERM_TEXT = re.compile(r"^(R|W|RW|-)(\+inherit)?$")


@dataclass
class Details:
    served: ServedBroker
    url: str  # --allow-writes; operators sign in with their account
    shots: Path


async def _traffic(served: ServedBroker) -> None:
    """TopicT (4 queues): GroupT commits 5 on each queue (four equal lines), then the same
    offset again with its pulls (no-op pull_commit changes). TopicA: a message GroupA read."""
    async with trio.open_nursery() as nursery:
        admin = acl_wire(nursery, ADMIN)
        await admin.create_topic(served.broker, "TopicT", 4)
        await admin.create_topic(served.broker, "TopicA", 4)
        for q in range(4):
            for n in range(5):
                assert (await admin.send(served.broker, "TopicT", q, b"t%d" % n)).code == 0
            await admin.commit(served.broker, "GroupT", "TopicT", q, 5)
        for _ in range(3):  # a consumer's pulls commit the offset it already has
            pulled = await admin.call(
                served.broker,
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "GroupT",
                    "topic": "TopicT",
                    "queueId": 0,
                    "queueOffset": 5,
                    "maxMsgNums": 32,
                    "sysFlag": 0x5,  # commit offset, subscription in the request
                    "commitOffset": 5,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                    "subVersion": 0,
                    "expressionType": "TAG",
                },
            )
            assert pulled.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY)
        await admin.send(served.broker, "TopicA", 0, b"a")
        await admin.pull(served.broker, "GroupA", "TopicA", 0, 0)
        await admin.commit(served.broker, "GroupA", "TopicA", 0, 1)
        nursery.cancel_scope.cancel()


@pytest.fixture(scope="module")
def details(tmp_path_factory) -> Iterator[Details]:
    tmp = tmp_path_factory.mktemp("dashboard-details")
    conf_file, _ = acl_conf(tmp)
    with serve(tmp / "data", "--config", str(conf_file), "--readmodel-url", "none") as served:
        trio.run(_traffic, served)
        with dashboard(served.namesrv, "--allow-writes", log=tmp / "dashboard.log") as url:
            shots = Path(os.environ.get("ES_BROKER_DASHBOARD_SCREENS") or tmp / "shots")
            yield Details(served, url, shots)


@pytest.fixture(scope="module")
def browser(details) -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


def sign_in(page, url: str, who) -> None:
    page.goto(f"{url}/login")
    page.fill("#login input[name=access_key]", who.access_key)
    page.fill("#login input[name=secret_key]", who.secret_key)
    page.click("#login button")
    assert page.inner_text("#operator") == who.access_key


def shot(details: Details, page, name: str) -> None:
    details.shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(details.shots / f"{name}.png"), full_page=True)


def cells(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        selector, "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText.trim()))"
    )


def test_b514_perm_is_shown_in_one_form(details, page):
    """B-514: the perm columns show R/W letters everywhere (TBW102's 7 as RW+inherit), never
    a number beside letters."""
    sign_in(page, details.url, ADMIN)
    page.goto(f"{details.url}/topics")
    perms = {row[0]: row[4] for row in cells(page, "#topics tr")[1:]}
    assert perms["TopicT"] == "RW" and perms["TBW102"] == "RW+inherit", perms
    assert all(PERM_TEXT.match(p) for p in perms.values()), perms
    shot(details, page, "b514-topics-perm")
    page.goto(f"{details.url}/topics/TBW102")
    route = [row[3] for row in cells(page, "table tr")[1:2]]
    assert route == ["RW+inherit"]


def _consumers_online(addr: str, stop: threading.Event, online: threading.Event) -> None:
    """GroupT's consumer (CLUSTERING) and GroupBC's (BROADCASTING) online until `stop`."""

    def body(group: str, model: str) -> bytes:
        consumer = {
            "groupName": group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": model,
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "unitMode": False,
            "subscriptionDataSet": [
                {"topic": "TopicT", "subString": "*", "tagsSet": [], "codeSet": [],
                 "subVersion": 0, "expressionType": "TAG", "classFilterMode": False}
            ],
        }  # fmt: skip
        return fastjson.dumps(
            {"clientID": f"c-{group}", "producerDataSet": [], "consumerDataSet": [consumer]}
        ).encode()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            w = Wire(RemotingClient(nursery, credentials=ADMIN))
            await w.ok(addr, RequestCode.HEART_BEAT, body=body("GroupT", "CLUSTERING"))
            await w.ok(addr, RequestCode.HEART_BEAT, body=body("GroupBC", "BROADCASTING"))
            online.set()
            await trio.to_thread.run_sync(stop.wait)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_b514_the_groups_page_shows_each_groups_message_model(details, page):
    """B-514 (a defect: "broadcast True" on every clustering group, consumeBroadcastEnable
    shown as if it were the model): the model the group's online consumers use, or none online."""
    stop, online = threading.Event(), threading.Event()
    consumers = threading.Thread(
        target=_consumers_online, args=(details.served.broker, stop, online), daemon=True
    )
    consumers.start()
    try:
        assert online.wait(30)
        sign_in(page, details.url, ADMIN)
        page.goto(f"{details.url}/groups")
        rows = {row[0]: row[3] for row in cells(page, "#groups tr")[1:]}
        assert rows["GroupT"] == "CLUSTERING", rows
        assert rows["GroupBC"] == "BROADCASTING", rows
        assert rows["GroupA"] == "no consumer online", rows
        assert "True" not in rows.values()
        shot(details, page, "b514-groups-model")
    finally:
        stop.set()
        consumers.join(30)


def test_b514_the_timeline_draws_equal_queues_apart_names_the_operator_and_hides_noops(
    details, page
):
    """B-514 (defects: equal queues hidden under one line, the time box in epoch millis, the
    change table flooded with no-op pull_commit rows, a reset marker naming the connection's
    address, not the signed-in account): each queue's line has its own dash and offset, the
    legend shows them; the time box shows a readable time and takes one; no-op changes are
    hidden until asked for; the reset the admin confirmed is marked with its account."""
    sign_in(page, details.url, ADMIN)
    page.goto(f"{details.url}/groups/GroupT/reset")
    page.fill("#reset-dry input[name=topic]", "TopicT")
    page.select_option("#reset-dry select[name=kind]", "earliest")
    page.click("#reset-dry button")
    page.click("#reset-confirm button")
    assert page.inner_text("h2") == "Done"

    page.goto(f"{details.url}/groups/GroupT/timeline")
    styles = page.eval_on_selector_all(
        "svg.chart path.series[data-kind=offset]",
        "ps => ps.map(p => [p.dataset.series, (p.getAttribute('stroke-dasharray') || '') + '|'"
        " + p.getAttribute('transform')])",
    )
    assert sorted(name for name, _ in styles) == [f"TopicT #{q}" for q in range(4)]
    assert len({style for _, style in styles}) == 4, styles  # four lines, each seen
    legend_dashes = page.eval_on_selector_all(
        "#queue-legend .swatch line", "ls => ls.map(l => l.getAttribute('stroke-dasharray') || '')"
    )
    assert len(set(legend_dashes)) == 4
    marker = page.locator("svg.chart g.event[data-cause=reset_requested]").first
    assert marker.get_attribute("data-requester").startswith(f"{ADMIN.access_key}@dashboard@")
    requesters = page.eval_on_selector_all(
        "#events tr.event[data-cause=reset_requested] .requester", "cs => cs.map(c => c.innerText)"
    )
    assert requesters and all(r.startswith(f"{ADMIN.access_key}@dashboard@") for r in requesters)
    shown = page.input_value("#at-text")
    assert not shown.isdigit() and datetime.fromisoformat(shown), shown
    changes = cells(page, "#changes tr[data-cause]")
    assert changes and all(row[4] != row[5] for row in changes), changes
    assert "changes that move nothing" in page.inner_text("#noop-toggle")
    shot(details, page, "b514-timeline")

    page.click("#noop-toggle a")
    noops = cells(page, "#changes tr.noop")
    assert noops and all(row[4] == row[5] and row[6] == "pull_commit" for row in noops), noops
    shot(details, page, "b514-timeline-noops")

    page.fill("#at-text", shown)  # a readable time is taken back as it is shown
    page.click("#time-control button")
    assert page.input_value("#at-text") == shown
    assert page.inner_text("#chosen").startswith(shown[:19].replace("T", " "))


def test_b515_a_normal_accounts_throughput_page_shows_the_topics_it_may_read(details, page):
    """B-515 (a defect: the page showed the broker's ACL refusal): ProducerKey, not an admin,
    sees the history of the topics it may SUB (TopicA), no other topic, and no error."""
    sign_in(page, details.url, PRODUCER)
    page.goto(f"{details.url}/throughput?window=1h")
    assert page.locator(".broker-error").count() == 0, page.inner_text("main")
    listed = [row[0] for row in cells(page, "#topic-totals tr[data-topic]")]
    assert listed == ["TopicA"], listed
    assert PRODUCER.access_key in page.inner_text("#own-topics")
    shot(details, page, "b515-throughput-normal-account")


async def test_b515_stats_history_of_one_topic_needs_sub_on_it_and_of_every_topic_admin(
    details, nursery
):
    """B-515 on the wire: STATS_HISTORY of a topic the account may SUB answers; of a topic it
    may not, or of every topic (no `topic`), it is refused (no-perm, not-admin)."""
    producer = acl_wire(nursery, PRODUCER)

    async def history(topic: str | None):
        fields: dict[str, object] = {"since": 0, "until": 3_600_000, "stepMinutes": 60}
        if topic is not None:
            fields["topic"] = topic
        return await producer.call(details.served.broker, EsRequestCode.STATS_HISTORY, fields)

    assert (await history("TopicA")).code == ResponseCode.SUCCESS
    refused = await history("TopicT")
    assert refused.code != ResponseCode.SUCCESS and "No default permission" in refused.remark
    every = await history(None)
    assert every.code != ResponseCode.SUCCESS and "Need admin permission" in every.remark
    assert (
        await acl_wire(nursery, ADMIN).call(
            details.served.broker,
            EsRequestCode.STATS_HISTORY,
            {"since": 0, "until": 3_600_000, "stepMinutes": 60},
        )
    ).code == ResponseCode.SUCCESS
