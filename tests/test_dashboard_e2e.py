"""The operator dashboard end to end: a broker process with real traffic, the dashboard process,
and Debian's chromium driven by Playwright (B-250..B-254).

The traffic is raw RocketMQ requests (tests/test_retry_process.Session): a
group that consumed part of a topic, and a message that failed until it was
dead-lettered. The browser reads the pages; the numbers are compared with what
the command line prints for the same question. Screenshots of the main pages
are saved under the test's tmp dir (and copied to docs/dashboard/ when
ES_BROKER_DASHBOARD_SCREENSHOTS is set).
"""

from __future__ import annotations

import html
import http.cookiejar
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
import trio

from es_broker.acl.signing import Credentials
from es_broker.net.remoting_client import RemotingClient
from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf
from tests.acl_fixtures import wire as acl_wire
from tests.dashboard_fixtures import Operator, dashboard
from tests.ha_fixtures import Cluster, Wire, caught_up, start_cluster
from tests.helpers import wait_until
from tests.process_fixtures import ROOT, ServedBroker, _env, serve
from tests.wire_session import Session, conf, on_wire

playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        "Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True
    )
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = ROOT / "docs" / "dashboard"


@dataclass
class World:
    served: ServedBroker
    read_only: str
    writes: str
    dead_msg_id: str
    before_reset: int  # a moment after the group's commits, before anything else moved it
    shots: Path


def cli_json(*args: str):
    done = subprocess.run(
        [sys.executable, "-m", "es_broker.cli", *args, "--json"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def traffic(s: Session) -> str:
    """Group G consumed 6 of T's 10 messages; P's only message failed 3 times and is a dead letter."""
    await s.create_topic("T")
    await s.create_topic("P")
    await s.heartbeat("G", ["T", "P", "%RETRY%G"])
    for n in range(10):
        await s.send("T", f"m{n}".encode(), {"UNIQ_KEY": f"U-T-{n}", "KEYS": f"k{n}"})
    assert len(await s.pull("T", 0)) == 10
    await s.commit("T", 6)
    sent = await s.send("P", b"poison", {"UNIQ_KEY": "U-POISON", "KEYS": "poison"})
    (message,) = await s.pull("P", 0)
    for retry_offset in (0, 1, None):  # max 2 reconsumes: the third failure dead-letters it (B-91)
        await s.send_back(message, "P", max_times=2)
        if retry_offset is not None:
            (message,) = await s.pull("%RETRY%G", retry_offset, hold_ms=20_000)
    await s.wait_for_route("%DLQ%G")
    await s.commit("P", 1)
    return sent.ext_fields["msgId"]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("dashboard")
    with serve(tmp / "data", "--config", conf(tmp, "1s 1s 1s 1s 1s 1s")) as served:
        dead_msg_id = on_wire(served, traffic)  # its connection closes: G is offline from here on
        before_reset = time.time_ns() // 1_000_000
        with (
            dashboard(served.namesrv, log=tmp / "ro.log") as read_only,
            dashboard(served.namesrv, "--allow-writes", log=tmp / "rw.log") as writes,
        ):
            yield World(served, read_only, writes, dead_msg_id, before_reset, tmp / "shots")


@pytest.fixture(scope="module")
def browser(world) -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser):
    """A fresh browser context's page; at the end, no page it showed broke the CSP (B-342)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    violations: list[str] = []
    try:
        page = context.new_page()
        page.on(
            "console",
            lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
        )
        yield page
    finally:
        context.close()
    assert violations == []


def sign_in(page, base: str, credentials: Credentials) -> None:
    """The sign-in form, filled as an operator does; ends on the page it was asked for."""
    page.goto(f"{base}/login")
    page.fill("#login input[name=access_key]", credentials.access_key)
    page.fill("#login input[name=secret_key]", credentials.secret_key)
    page.click("#login button")


def shot(world: World, page, name: str) -> None:
    world.shots.mkdir(parents=True, exist_ok=True)
    path = world.shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("ES_BROKER_DASHBOARD_SCREENSHOTS"):
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SHOTS / path.name)


def cells(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        selector, "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText.trim()))"
    )


def post(url: str) -> tuple[int, str]:
    req = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_b250_the_group_page_shows_the_lag_consumer_progress_prints(world, page):
    page.goto(f"{world.read_only}/groups/G")
    shown = cells(page, "#progress tr[data-topic]")
    expected = cli_json("admin", "-n", world.served.namesrv, "consumerProgress", "-g", "G")
    assert [r[:6] for r in shown] == [
        [
            q["topic"],
            q["brokerName"],
            str(q["queueId"]),
            str(q["brokerOffset"]),
            str(q["consumerOffset"]),
            str(q["diff"]),
        ]
        for q in expected["queues"]
    ]
    assert page.inner_text("#diff-total") == str(expected["diffTotal"])
    assert shown and "T" in [r[0] for r in shown]
    shot(world, page, "group")
    page.goto(f"{world.read_only}/")
    shot(world, page, "cluster")
    page.goto(f"{world.read_only}/topics")
    assert "T" in [r[0] for r in cells(page, "#topics tr")]
    shot(world, page, "topics")
    page.goto(f"{world.read_only}/groups/G/explain?topic=T")
    assert page.locator("#explain").count() == 1
    shot(world, page, "explain")


def test_b251_read_only_shows_no_write_controls_and_its_write_endpoints_refuse(world, page):
    for path, control in (
        ("/topics", "#create-topic"),
        ("/topics/T", "#change-perm"),
        ("/groups/G/dlq", "#redrive-dry"),
        ("/groups/G/reset", "#reset-dry"),
    ):
        page.goto(world.read_only + path)
        assert page.inner_text("#mode") == "read-only"
        assert page.locator(control).count() == 0, path
        page.goto(world.writes + path)
        assert page.locator(control).count() == 1, path
    waiting = cli_json("admin", "-n", world.served.namesrv, "redriveDLQ", "-g", "G", "--dry-run")
    progress = cli_json("admin", "-n", world.served.namesrv, "consumerProgress", "-g", "G")
    for path in (
        "/api/topics?topic=X",
        "/api/topics/T/perm?perm=4",
        "/api/groups/G/dlq/redrive?confirm=yes",
        "/api/groups/G/reset?topic=T&kind=earliest&confirm=yes",
        "/topics?topic=X",
        "/groups/G/dlq/redrive?confirm=yes",
    ):
        status, body = post(world.read_only + path)
        assert status == 403 and "read-only dashboard" in body, path
    # nothing moved: the same dead letters wait, the offsets are as they were, no topic X
    assert cli_json("admin", "-n", world.served.namesrv, "redriveDLQ", "-g", "G", "--dry-run") == (
        waiting
    )
    assert cli_json("admin", "-n", world.served.namesrv, "consumerProgress", "-g", "G") == progress
    assert "X" not in cli_json("admin", "-n", world.served.namesrv, "topicList")


def test_b252_a_dead_letters_journey_shows_send_deliveries_send_backs_and_dead_lettering(
    world, page
):
    page.goto(f"{world.read_only}/messages?msgId={world.dead_msg_id}")
    assert "poison" in page.inner_text("#messages")
    page.goto(f"{world.read_only}/messages/{world.dead_msg_id}/trace")
    events = page.eval_on_selector_all("#journey li", "items => items.map(i => i.dataset.event)")
    assert events[:9] == [
        "sent",
        "delivered",
        "sent_back",
        "delay_delivered",
        "delivered",
        "sent_back",
        "delay_delivered",
        "delivered",
        "dead_lettered",
    ]
    assert "max_reconsume_times" in page.inner_text("#journey")
    shot(world, page, "journey")
    page.goto(f"{world.read_only}/messages?topic=T&key=k3")
    assert [r[3] for r in cells(page, "#messages tr")[1:]] == ["3"]


def test_b253_offline_reset_by_time_shows_on_the_timeline_with_its_requester_and_the_table_at_a_moment_equals_offsets_at(
    world, page
):
    # the reset from the dashboard: a dry run first, then confirm (G has no consumer online)
    page.goto(f"{world.writes}/groups/G/reset")
    page.fill("#reset-dry input[name=topic]", "T")
    page.select_option("#reset-dry select[name=kind]", "earliest")
    page.click("#reset-dry button")
    plan = cells(page, ".reset-plan tr")[1:]
    assert plan == [["0", "6", "0", "0", plan[0][4]]]
    progress = cli_json("admin", "-n", world.served.namesrv, "consumerProgress", "-g", "G")
    # a dry run changes nothing
    assert [q["consumerOffset"] for q in progress["queues"] if q["topic"] == "T"] == [6]
    shot(world, page, "reset-dry-run")
    page.click("#reset-confirm button")
    assert page.inner_text("h2") == "Done"
    progress = cli_json("admin", "-n", world.served.namesrv, "consumerProgress", "-g", "G")
    assert [q["consumerOffset"] for q in progress["queues"] if q["topic"] == "T"] == [0]

    page.goto(f"{world.read_only}/groups/G/timeline")
    resets = page.locator("#events tr.event[data-cause=reset_requested] .requester")
    assert resets.count() == 1
    assert resets.inner_text().startswith("dashboard@")
    marker = page.locator("svg.chart g.event[data-cause=reset_requested]").first
    assert marker.get_attribute("data-requester").startswith("dashboard@")
    assert page.locator("#changes tr[data-cause=reset]").count() == 1
    # B-294: each offset change once (the reset record beside its change is in #events only)
    changes = [(r[1], r[2], r[3]) for r in cells(page, "#changes tr[data-cause]")]
    assert changes and len(set(changes)) == len(changes), changes
    assert all(queue != "" for _, _, queue in changes), changes
    # B-292: one line per queue the group holds offsets on, in the offset chart and the lag chart
    api = json.loads(urllib.request.urlopen(f"{world.read_only}/api/groups/G/timeline").read())
    queues = sorted(f"{q['topic']} #{q['queue_id']}" for b in api["brokers"] for q in b["queues"])
    assert "T #0" in queues and "P #0" in queues
    for kind in ("offset", "lag"):
        drawn = page.eval_on_selector_all(
            f"svg.chart path.series[data-kind={kind}]", "ps => ps.map(p => p.dataset.series)"
        )
        assert sorted(drawn) == queues, kind
    # the reset is marked on both charts and named, with its author, in the legend of causes
    assert page.locator("svg.chart g.event[data-cause=reset_requested]").count() == 2
    legend = page.inner_text("#cause-legend [data-cause=reset_requested]")
    assert "reset" in legend and "dashboard@" in legend
    shot(world, page, "timeline")

    # the time control: the whole table at a moment before the reset, as `es-broker offsets --at`
    page.fill("#at-text", str(world.before_reset))
    page.click("#time-control button")
    shown = cells(page, "#offsets-at tr[data-topic]")
    expected = cli_json(
        "offsets",
        "--data-dir",
        str(world.served.data_dir),
        "--group",
        "G",
        "--at",
        str(world.before_reset),
    )
    assert [[r[0], r[2], r[3], r[4], r[5], r[7], r[8], r[9]] for r in shown] == [
        [
            q["topic"],
            str(q["queue_id"]),
            str(q["offset"]),
            str(q["max_offset"]),
            "-" if q["lag"] is None else str(q["lag"]),
            q["cause"],
            q["requester"] or "-",
            str(q["seq"]),
        ]
        for q in expected["queues"]
    ]
    assert ["T", "0", "6", "10", "4"] in [[r[0], r[2], r[3], r[4], r[5]] for r in shown]
    shot(world, page, "timeline-at")


def test_b254_a_redrive_from_the_page_puts_the_dead_letter_back_and_the_page_shows_it(world, page):
    page.goto(f"{world.writes}/groups/G/dlq")
    assert len(cells(page, "#dead-letters tr")[1:]) == 1
    shot(world, page, "dead-letters")
    page.click("#redrive-dry button")
    (planned,) = cells(page, "#redrive tr")[1:]
    assert planned[3] == "%RETRY%G" and planned[4] == ""  # a plan: nothing sent yet
    page.click("#redrive-confirm button")
    (done,) = cells(page, "#redrive tr")[1:]
    new_msg_id = done[4]
    assert new_msg_id
    shot(world, page, "redriven")
    # it is back: the broker has the copy in %RETRY%G, and the dead letter's journey says so
    copy = cli_json("admin", "-n", world.served.namesrv, "queryMsgById", "-i", new_msg_id)
    assert (copy["topic"], copy["body"]) == ("%RETRY%G", "poison")
    page.goto(f"{world.writes}/groups/G/dlq")
    assert page.locator("#no-dead-letters").count() == 1
    page.goto(f"{world.read_only}/messages/{world.dead_msg_id}/trace")
    events = page.eval_on_selector_all("#journey li", "items => items.map(i => i.dataset.event)")
    assert events[-1] == "redriven"
    assert new_msg_id in page.inner_text("#journey")


# ------------------------------------------------------------------ ACL on (B-290, B-291)
@dataclass
class AclWorld:
    served: ServedBroker
    limited: str  # a dashboard with writes allowed: operators sign in (ProducerKey: TopicA, GroupA)
    admin: str  # a read-only dashboard, where the admin account signs in


async def _acl_traffic(served: ServedBroker) -> None:
    """As the admin: topics TopicA and TopicB, groups GroupA and GroupB with an offset each."""
    async with trio.open_nursery() as nursery:
        admin = acl_wire(nursery, ADMIN)
        for topic in ("TopicA", "TopicB"):
            await admin.create_topic(served.broker, topic, 4)
        await admin.send(served.broker, "TopicA", 0, b"a")
        await admin.send(served.broker, "TopicB", 0, b"b")
        await admin.pull(served.broker, "GroupA", "TopicA", 0, 0)
        await admin.commit(served.broker, "GroupA", "TopicA", 0, 1)
        await admin.pull(served.broker, "GroupB", "TopicB", 0, 0)
        await admin.commit(served.broker, "GroupB", "TopicB", 0, 1)
        nursery.cancel_scope.cancel()


@pytest.fixture(scope="module")
def acl_world(tmp_path_factory) -> Iterator[AclWorld]:
    tmp = tmp_path_factory.mktemp("dashboard-acl")
    conf_file, _ = acl_conf(tmp)
    with serve(tmp / "data", "--config", str(conf_file), "--readmodel-url", "none") as served:
        trio.run(_acl_traffic, served)
        with (
            dashboard(served.namesrv, "--allow-writes", log=tmp / "limited.log") as limited,
            dashboard(served.namesrv, log=tmp / "admin.log") as admin,
        ):
            yield AclWorld(served, limited, admin)


def signed_in(base: str, credentials: Credentials) -> Operator:
    operator = Operator(base)
    answer = operator.sign_in(access_key=credentials.access_key, secret_key=credentials.secret_key)
    assert answer.status == 200 and operator.get("/api/session").json()["signedIn"], answer.body
    return operator


def test_b290_an_account_sees_only_the_topics_and_groups_its_rules_grant(acl_world, world, page):
    sign_in(page, acl_world.limited, PRODUCER)
    page.goto(f"{acl_world.limited}/topics")
    listed = [r[0] for r in cells(page, "#topics tr")[1:]]
    assert "TopicA" in listed and "TopicB" not in listed
    assert page.inner_text("#account") == PRODUCER.access_key
    shot(world, page, "topics-acl")
    page.goto(f"{acl_world.limited}/groups")
    groups = [r[0] for r in cells(page, "#groups tr")[1:]]
    assert "GroupA" in groups and "GroupB" not in groups
    # the admin account, on the same broker, sees both
    sign_in(page, acl_world.admin, ADMIN)
    page.goto(f"{acl_world.admin}/topics")
    assert {"TopicA", "TopicB"} <= {r[0] for r in cells(page, "#topics tr")[1:]}


def test_b290_the_page_of_a_topic_or_group_the_account_may_not_see_answers_403(acl_world, page):
    producer = signed_in(acl_world.limited, PRODUCER)
    for path, what in (
        ("/topics/TopicB", "topic TopicB"),
        ("/groups/GroupB", "group GroupB"),
        ("/groups/GroupB/timeline", "group GroupB"),
        ("/api/topics/TopicB", "topic TopicB"),
    ):
        answer = producer.get(path)
        status, body = answer.status, answer.body
        assert status == 403, (path, status, body)
        assert f"ProducerKey may not see {what}" in body and "its perm there is DENY" in body
    sign_in(page, acl_world.limited, PRODUCER)
    response = page.goto(f"{acl_world.limited}/topics/TopicB")
    assert response.status == 403
    assert "may not see topic TopicB" in page.inner_text("#error")
    assert producer.get("/topics/TopicA").status == 200


def test_b291_a_write_the_account_has_no_right_to_shows_the_brokers_refusal(acl_world):
    producer = signed_in(acl_world.limited, PRODUCER)
    answer = producer.post("/api/topics/TopicA/perm?perm=4")
    assert answer.status == 403, answer.body
    assert "refused this for the dashboard's account ProducerKey" in answer.body
    assert "Need admin permission" in answer.body
    # nothing changed: TopicA is still RW
    topic = signed_in(acl_world.admin, ADMIN).get("/api/topics/TopicA").json()
    assert [q["perm"] for q in topic["route"]["queueDatas"]] == [6]


def test_b293_the_cluster_page_shows_each_brokers_role_version_rates_disk_lag_and_read_model(
    world, page
):
    page.goto(f"{world.read_only}/")
    (row,) = page.eval_on_selector_all(
        "#brokers tr[data-broker]",
        "rows => rows.map(r => Object.fromEntries(Array.from(r.cells).map("
        "(c, i) => [c.className || String(i), c.innerText.trim()])))",
    )
    runtime = cli_json(
        "admin", "-n", world.served.namesrv, "brokerStatus", "-b", world.served.broker
    )
    table = runtime.get("table", runtime)
    assert row["1"] == "broker-a" and row["num broker-id"] == "0"
    assert row["role"] == table["brokerRole"] == "ASYNC_MASTER"
    assert row["version"] == table["brokerVersionDesc"]
    rate = r"(–|\d+\.\d)"
    assert re.fullmatch(rf"{rate} · {rate} · {rate}", row["num put-tps"]), row
    assert re.fullmatch(rf"{rate} · {rate} · {rate}", row["num get-tps"]), row
    assert re.match(r"\d+% used", row["disk"]) and "Total :" in row["disk"]
    assert row["slave-lag"] == "no slave connected"
    assert row["read-model"].startswith("running (pid "), row
    # B-316: nothing the broker sent on its own was refused
    assert row["peer-requests"] == "ok" and table["nameServerRegistration"] == "ok"


# ---------------------------------------------------------------------- a master and its slave


@dataclass
class HaWorld:
    cluster: Cluster
    dashboard: str


async def _ha_runtime(cluster: Cluster, *addrs: str) -> list[dict[str, str]]:
    async with trio.open_nursery() as nursery:
        w = Wire(RemotingClient(nursery))
        tables = [await w.runtime(addr) for addr in addrs]
        nursery.cancel_scope.cancel()
    return tables


async def _ha_traffic(cluster: Cluster) -> None:
    """A topic and a few messages on the master; wait (bounded) until the slave holds them all."""
    async with trio.open_nursery() as nursery:
        w = Wire(RemotingClient(nursery))
        await w.create_topic(cluster.master.addr, "HaTopic", 2)
        for n in range(5):
            r = await w.send(cluster.master.addr, "HaTopic", n % 2, f"ha-{n}".encode())
            assert r.code == 0, r.remark
        await wait_until(
            "the slave caught up",
            lambda: caught_up(w, cluster.master.addr, cluster.slave.addr),
            30,
        )
        nursery.cancel_scope.cancel()


@pytest.fixture(scope="module")
def ha_world(tmp_path_factory) -> Iterator[HaWorld]:
    tmp = tmp_path_factory.mktemp("dashboard-ha")
    cluster = trio.run(partial(start_cluster, tmp, master={"brokerRole": "ASYNC_MASTER"}, slave={}))
    try:
        trio.run(_ha_traffic, cluster)
        with dashboard(cluster.namesrv.addr, log=tmp / "ha.log") as url:
            yield HaWorld(cluster, url)
    finally:
        cluster.stop_all()


def _broker_rows(page) -> dict[str, dict[str, str]]:
    rows = page.eval_on_selector_all(
        "#brokers tr[data-broker]",
        "rows => rows.map(r => Object.fromEntries(Array.from(r.cells).map("
        "(c, i) => [c.className || String(i), c.innerText.trim()])))",
    )
    return {row["num broker-id"]: row for row in rows}


def test_b295_the_cluster_page_shows_the_slave_with_its_role_and_its_lag_as_the_broker_reports_it(
    ha_world, world, page
):
    cluster = ha_world.cluster
    addrs = (cluster.master.addr, cluster.slave.addr)
    before = trio.run(_ha_runtime, cluster, *addrs)
    page.goto(f"{ha_world.dashboard}/")
    rows = _broker_rows(page)
    master, slave = trio.run(_ha_runtime, cluster, *addrs)
    # nothing replicated while the page was drawn: the page and these answers tell one state
    keys = ("recordLogLastSeq", "commitLogMaxOffset", "haSlaveAckedSeq", "haSlaveCount")
    keys += ("haAppliedSeq", "haMasterLastSeq", "haConnected")
    assert [[t.get(k) for k in keys] for t in (master, slave)] == [
        [t.get(k) for k in keys] for t in before
    ]
    assert set(rows) == {"0", "1"}
    assert rows["1"]["role"] == slave["brokerRole"] == "SLAVE"
    assert rows["0"]["role"] == master["brokerRole"] == "ASYNC_MASTER"
    assert rows["1"]["1"] == rows["0"]["1"] == "broker-a"
    # the slave's lag in words: records and commit-log bytes behind, from GET_BROKER_RUNTIME_INFO
    behind = int(slave["haMasterLastSeq"]) - int(slave["haAppliedSeq"])
    gap = int(master["commitLogMaxOffset"]) - int(slave["commitLogMaxOffset"])
    assert slave["haConnected"] == "True" and behind == 0 and gap == 0
    assert rows["1"]["slave-lag"] == (
        f"{behind} records behind the master, {gap} commit-log bytes (caught up)"
    )
    acked = int(master["haSlaveAckedSeq"])
    assert master["haSlaveCount"] == "1"
    assert rows["0"]["slave-lag"] == (
        f"1 slave; acknowledged up to record {acked} "
        f"({int(master['recordLogLastSeq']) - acked} behind)"
    )
    assert rows["1"]["num"] == slave["recordLogLastSeq"] == master["recordLogLastSeq"]
    shot(world, page, "cluster-ha")


# ---------------------------------------------------------------------- B-340..B-343: safe to leave running
@contextmanager
def other_site(html: str) -> Iterator[str]:
    """Another origin: a page served on another port of this host (what an attacker's site does)."""
    body = html.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def auto_submit(action: str, fields: dict[str, str]) -> str:
    inputs = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
        for k, v in fields.items()
    )
    return (
        f'<!doctype html><form id="f" method="post" action="{html.escape(action)}">{inputs}'
        "</form><script>document.getElementById('f').submit()</script>"
    )


def cookie_of(page, base: str) -> dict:
    port = base.rsplit(":", 1)[1]
    (cookie,) = [c for c in page.context.cookies(base) if c["name"] == f"es_dashboard_{port}"]
    return cookie


def test_b340_under_acl_every_page_asks_for_sign_in_and_then_acts_with_that_account(
    acl_world, page
):
    """B-340: with ACL on, an operator signs in with access key and secret (checked by the
    brokers' ACCOUNT_SCOPE); the cookie holds a token only (HttpOnly, SameSite=Strict), the
    secret is in no page; sign-out ends the session."""
    page.goto(f"{acl_world.limited}/topics")
    assert "/login?next=" in page.url and page.locator("#login").count() == 1
    anonymous = Operator(acl_world.limited).get("/api/topics")
    assert anonymous.status == 401 and "sign in" in anonymous.body
    # a wrong secret is refused by the brokers' ACL: still no session
    page.fill("#login input[name=access_key]", PRODUCER.access_key)
    page.fill("#login input[name=secret_key]", "NotTheSecret")
    with page.expect_response(lambda r: r.url.endswith("/login")) as refused:
        page.click("#login button")
    assert refused.value.status == 401
    assert "sign-in refused" in page.inner_text("#error")
    page.fill("#login input[name=access_key]", PRODUCER.access_key)
    page.fill("#login input[name=secret_key]", PRODUCER.secret_key)
    page.click("#login button")
    assert page.url == f"{acl_world.limited}/topics"  # the page asked for, as ProducerKey
    assert page.inner_text("#operator") == PRODUCER.access_key
    listed = [r[0] for r in cells(page, "#topics tr")[1:]]
    assert "TopicA" in listed and "TopicB" not in listed
    cookie = cookie_of(page, acl_world.limited)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and not cookie["secure"]
    assert PRODUCER.secret_key not in cookie["value"]
    for path in ("/topics", "/topics/TopicA", "/groups", "/"):
        page.goto(acl_world.limited + path)
        assert PRODUCER.secret_key not in page.content(), path
    # the session's token works from another client too (it is the session) ... until sign-out
    stolen = Operator(acl_world.limited)
    stolen.jar.set_cookie(_cookie(cookie))
    assert stolen.get("/api/topics").status == 200
    page.click("#logout button")
    assert "/login" in page.url
    page.goto(f"{acl_world.limited}/topics")
    assert "/login?next=" in page.url
    assert stolen.get("/api/topics").status == 401


def _cookie(c: dict) -> http.cookiejar.Cookie:
    return http.cookiejar.Cookie(
        0, c["name"], c["value"], None, False, c["domain"], True, False, c["path"], True,
        False, None, False, None, None, {},
    )  # fmt: skip


def test_b341_a_form_posted_from_another_origin_is_refused_and_changes_nothing(world, page):
    """B-341: a form on another site that posts to the dashboard (the browser sends the
    session cookie: another port of the same host is the same site) is answered 403 and
    changes nothing: no CSRF token of the session, and an Origin that is not the dashboard's."""
    page.goto(f"{world.writes}/topics")  # the operator has the dashboard open: a live session
    assert page.locator("#create-topic").count() == 1
    perm_before = cli_json("admin", "-n", world.served.namesrv, "topicRoute", "-t", "T")
    progress = cli_json("admin", "-n", world.served.namesrv, "consumerProgress", "-g", "G")
    for action, fields in (
        ("/topics", {"topic": "CsrfTopic", "queues": "4", "perm": "6"}),
        ("/api/topics", {"topic": "CsrfTopic", "csrf_token": "guessed"}),
        ("/topics/T/perm", {"perm": "2"}),
        (
            "/groups/G/reset",
            {"topic": "T", "kind": "latest", "confirm": "yes", "force": "true"},
        ),
    ):
        with (
            other_site(auto_submit(world.writes + action, fields)) as evil,
            page.expect_response(
                lambda r, a=action: r.url == world.writes + a and r.request.method == "POST"
            ) as answer,
        ):
            page.goto(evil)
        assert answer.value.status == 403, action
        assert "did not come from the dashboard" in answer.value.text(), action
    assert "CsrfTopic" not in cli_json("admin", "-n", world.served.namesrv, "topicList")
    assert cli_json("admin", "-n", world.served.namesrv, "topicRoute", "-t", "T") == perm_before
    assert cli_json("admin", "-n", world.served.namesrv, "consumerProgress", "-g", "G") == progress


def test_b341_a_post_needs_the_sessions_csrf_token_and_the_dashboards_origin(world):
    """B-341: same origin without the token, the token with another Origin or Referer, or no
    Origin and no Referer at all: 403, nothing created; the token with its Origin (or, without
    Origin, a Referer of the dashboard) is accepted. GETs change nothing."""
    operator = Operator(world.writes)
    token = operator.csrf()
    other = Operator(world.writes)  # another browser: a session of its own
    refused = [
        operator.post("/api/topics", {"topic": "NoToken"}, token=None),
        operator.post("/api/topics", {"topic": "NoToken"}, token="x" * 43),
        operator.post("/api/topics", {"topic": "NoToken"}, token=other.csrf()),
        operator.post("/api/topics", {"topic": "NoToken"}, origin="http://evil.example"),
        operator.post("/api/topics", {"topic": "NoToken"}, origin="null"),
        operator.post("/api/topics", {"topic": "NoToken"}, origin=None),
        operator.post(
            "/api/topics",
            {"topic": "NoToken"},
            origin=None,
            referer="http://evil.example/page",
        ),
        Operator(world.writes).post("/api/topics", {"topic": "NoToken"}, token=token),
    ]
    assert [a.status for a in refused] == [403] * len(refused), [a.body for a in refused]
    # a GET with a write's fields is a page, never a write
    assert operator.get("/topics?topic=NoToken&queues=4&perm=6").status == 200
    assert operator.request("GET", "/api/groups/G/dlq/redrive?confirm=yes").status == 405
    assert "NoToken" not in cli_json("admin", "-n", world.served.namesrv, "topicList")
    # the token in the X-CSRF-Token header, the dashboard's Referer instead of an Origin
    done = operator.request(
        "POST",
        "/api/topics",
        {"topic": "HeaderToken", "queues": "2"},
        {"X-CSRF-Token": token, "Referer": world.writes + "/topics"},
    )
    assert done.status == 200, done.body
    assert "HeaderToken" in cli_json("admin", "-n", world.served.namesrv, "topicList")


def test_b342_every_answer_carries_the_security_headers(world, acl_world):
    """B-342: CSP without inline script, no framing, no sniffing, a Referrer-Policy; no-store
    on everything but the static files. (The page fixture checks no page breaks the CSP.)"""
    operator = Operator(world.read_only)
    answers = {
        path: operator.get(path)
        for path in ("/", "/topics", "/api/topics", "/groups/G/timeline", "/nothing-here")
    }
    answers["/login (ACL)"] = Operator(acl_world.limited).get("/login")
    answers["/api/topics (ACL, not signed in)"] = Operator(acl_world.limited).get("/api/topics")
    answers["/static/style.css"] = operator.get("/static/style.css")
    for path, answer in answers.items():
        csp = answer.headers.get("content-security-policy", "")
        assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp, path
        assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp, path
        assert answer.headers.get("x-frame-options") == "DENY", path
        assert answer.headers.get("x-content-type-options") == "nosniff", path
        assert answer.headers.get("referrer-policy") == "same-origin", path
        no_store = answer.headers.get("cache-control") == "no-store"
        assert no_store == (path != "/static/style.css"), path
    assert answers["/nothing-here"].status == 404
    assert "<script>" not in answers["/groups/G/timeline"].body
    assert "onchange=" not in answers["/groups/G/timeline"].body
    # a Host that is not loopback on a loopback dashboard (DNS rebinding) is refused
    rebound = operator.request("GET", "/topics", headers={"Host": "evil.example"})
    assert rebound.status == 400


def test_b343_an_account_without_admin_sees_no_write_controls_and_its_forged_post_is_refused(
    acl_world, page
):
    """B-343: on a dashboard that allows writes, an ACL account without admin (whose writes
    the brokers refuse) is shown read-only; a POST it forges with its own valid session and
    token is answered 403 and changes nothing. The admin account sees the controls."""
    sign_in(page, acl_world.limited, PRODUCER)
    for path, control in (
        ("/topics", "#create-topic"),
        ("/topics/TopicA", "#change-perm"),
        ("/groups/GroupA/reset", "#reset-dry"),
    ):
        page.goto(acl_world.limited + path)
        assert page.inner_text("#mode") == "read-only", path
        assert page.locator(control).count() == 0, path
    forged = signed_in(acl_world.limited, PRODUCER)
    assert forged.get("/api/session").json()["writes"] is False
    for path, fields in (
        ("/topics", {"topic": "ForgedTopic", "queues": "4", "perm": "6"}),
        ("/api/topics/TopicA/perm", {"perm": "2"}),
    ):
        answer = forged.post(path, fields)
        assert answer.status == 403, (path, answer.body)
        assert "Need admin permission" in answer.body, path
    admin = signed_in(acl_world.limited, ADMIN)
    assert "ForgedTopic" not in [t["topic"] for t in admin.get("/api/topics").json()["topics"]]
    route = admin.get("/api/topics/TopicA").json()["route"]
    assert [q["perm"] for q in route["queueDatas"]] == [6]
    sign_in(page, acl_world.limited, ADMIN)
    page.goto(acl_world.limited + "/topics")
    assert page.inner_text("#mode") == "writes allowed"
    assert page.locator("#create-topic").count() == 1


def test_b344_with_acl_on_writes_on_a_non_loopback_address_start_and_ask_for_sign_in(
    acl_world, tmp_path
):
    """B-344: the brokers' ACL makes every operator sign in, so --allow-writes on a
    non-loopback address starts (with a warning that secrets cross in clear without TLS)."""
    log = tmp_path / "open.log"
    with dashboard(acl_world.served.namesrv, "--allow-writes", listen="0.0.0.0:0", log=log) as url:
        assert Operator(url).get("/api/topics").status == 401
        assert "sign-in secrets cross the network in clear" in log.read_text()
        producer = signed_in(url, PRODUCER)
        assert "TopicA" in [t["topic"] for t in producer.get("/api/topics").json()["topics"]]
