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

import json
import os
import re
import shutil
import subprocess
import sys
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

from es_broker.client.remoting_client import RemotingClient
from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf
from tests.acl_fixtures import wire as acl_wire
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
_LISTENING = re.compile(r"dashboard listening on (http://\S+)")
SHOTS = ROOT / "docs" / "dashboard"


@contextmanager
def dashboard(namesrv: str, *extra: str, log: Path) -> Iterator[str]:
    """`es-broker dashboard` on a free port; its base URL once it says it listens."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "dashboard",
            "--namesrv",
            namesrv,
            "--listen",
            "127.0.0.1:0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),  # noqa: SIM115 (the process owns it; closed when it ends)
        text=True,
        env=_env(),
    )
    try:
        url = None
        for line in process.stdout:  # type: ignore[union-attr]
            if m := _LISTENING.search(line):
                url = m.group(1)
                break
        if url is None:
            raise RuntimeError(f"dashboard did not start: {log.read_text()}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


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
    limited: str  # a dashboard signing as ProducerKey (TopicA, GroupA), writes allowed
    admin: str  # a dashboard signing as the admin account


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
        keys = ("--access-key", PRODUCER.access_key, "--secret-key", PRODUCER.secret_key)
        admin_keys = ("--access-key", ADMIN.access_key, "--secret-key", ADMIN.secret_key)
        with (
            dashboard(served.namesrv, "--allow-writes", *keys, log=tmp / "limited.log") as limited,
            dashboard(served.namesrv, *admin_keys, log=tmp / "admin.log") as admin,
        ):
            yield AclWorld(served, limited, admin)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_b290_an_account_sees_only_the_topics_and_groups_its_rules_grant(acl_world, world, page):
    page.goto(f"{acl_world.limited}/topics")
    listed = [r[0] for r in cells(page, "#topics tr")[1:]]
    assert "TopicA" in listed and "TopicB" not in listed
    assert page.inner_text("#account") == PRODUCER.access_key
    shot(world, page, "topics-acl")
    page.goto(f"{acl_world.limited}/groups")
    groups = [r[0] for r in cells(page, "#groups tr")[1:]]
    assert "GroupA" in groups and "GroupB" not in groups
    # the admin account, on the same broker, sees both
    page.goto(f"{acl_world.admin}/topics")
    assert {"TopicA", "TopicB"} <= {r[0] for r in cells(page, "#topics tr")[1:]}


def test_b290_the_page_of_a_topic_or_group_the_account_may_not_see_answers_403(acl_world, page):
    for path, what in (
        ("/topics/TopicB", "topic TopicB"),
        ("/groups/GroupB", "group GroupB"),
        ("/groups/GroupB/timeline", "group GroupB"),
        ("/api/topics/TopicB", "topic TopicB"),
    ):
        status, body = get(acl_world.limited + path)
        assert status == 403, (path, status, body)
        assert f"ProducerKey may not see {what}" in body and "its perm there is DENY" in body
    response = page.goto(f"{acl_world.limited}/topics/TopicB")
    assert response.status == 403
    assert "may not see topic TopicB" in page.inner_text("#error")
    status, _ = get(acl_world.limited + "/topics/TopicA")
    assert status == 200


def test_b291_a_write_the_account_has_no_right_to_shows_the_brokers_refusal(acl_world):
    status, body = post(acl_world.limited + "/api/topics/TopicA/perm?perm=4")
    assert status == 403, body
    assert "refused this for the dashboard's account ProducerKey" in body
    assert "Need admin permission" in body
    # nothing changed: TopicA is still RW
    topic = json.loads(get(acl_world.admin + "/api/topics/TopicA")[1])
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
