"""Interop with a real third-party client: the npm RocketMQ client ali-ons, pinned at 3.12.0.

A real `es-broker serve` process (name server + broker on free ports) is driven by the
scripts in tests/interop/ (produce.js, consume.js), which use ali-ons exactly as an
application would. What ali-ons sends and expects is in docs/protocol.md §11.

The tests need `node` and tests/interop/node_modules (`npm ci --prefix tests/interop`,
which .ci/run does); without them they are skipped.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from es_broker.remoting.codes import RequestCode
from tests.interop_fixtures import (
    NEEDS_ALI_ONS,
    BrokerProcess,
    poll,
    remoting_call,
    run_node,
)

pytestmark = NEEDS_ALI_ONS

TOPIC = "InteropTopic"
QUEUES = 4
MESSAGES = 20
STARTUP_TIMEOUT = 30.0  # for `es-broker serve` to print its listening lines


# ---------------------------------------------------------------------------- the broker process
def _pump(stream, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _expect_line(
    proc: subprocess.Popen[str],
    lines: queue.Queue[str | None],
    prefix: str,
    deadline: float,
    stderr_path: Path,
) -> str:
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(
                f"es-broker serve printed no {prefix!r} line in {STARTUP_TIMEOUT} s; "
                f"stderr:\n{stderr_path.read_text()}"
            ) from None
        if line is None:
            raise AssertionError(
                f"es-broker serve exited ({proc.wait()}) before printing {prefix!r}; "
                f"stderr:\n{stderr_path.read_text()}"
            )
        if line.startswith(prefix):
            return line


def _addr_after(line: str, marker: str) -> str:
    # "es-broker name server listening on 127.0.0.1:40123"
    # "es-broker broker-a listening on 127.0.0.1:40124, data in ..., name server ..."
    return line.split(marker, 1)[1].split(",", 1)[0].strip()


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("ali-ons-interop")
    stderr_path = root / "es-broker.stderr"
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "es_broker.cli",
                "serve",
                "--data-dir",
                str(root / "data"),
                "--listen",
                "127.0.0.1:0",
                "--namesrv-listen",
                "127.0.0.1:0",
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        ns_line = _expect_line(
            proc, lines, "es-broker name server listening on ", deadline, stderr_path
        )
        broker_line = _expect_line(
            proc, lines, "es-broker broker-a listening on ", deadline, stderr_path
        )
        yield BrokerProcess(
            proc, _addr_after(ns_line, " listening on "), _addr_after(broker_line, " listening on ")
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(
                    "es-broker serve did not stop within 30 s of SIGTERM"
                ) from None
    assert proc.returncode == 0, (
        f"es-broker serve exited with {proc.returncode}:\n{stderr_path.read_text()}"
    )


def admin(broker: BrokerProcess, *args: str) -> Any:
    """`es-broker admin -n NAMESRV <args> --json`, parsed."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "admin",
            "-n",
            broker.namesrv_addr,
            *args,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, (
        f"es-broker admin {' '.join(args)}: {proc.returncode}\n{proc.stderr}"
    )
    return json.loads(proc.stdout)


def create_topic(broker: BrokerProcess, topic: str, queues: int) -> None:
    admin(
        broker,
        "updateTopic",
        "-b",
        broker.broker_addr,
        "-t",
        topic,
        "-r",
        str(queues),
        "-w",
        str(queues),
    )
    # ali-ons cannot fall back to TBW102 (docs/protocol.md §11.2): the route must be at the name server first,
    # and the broker re-registers asynchronously after a topic change.
    poll(
        f"route of {topic} at the name server",
        lambda: (
            remoting_call(
                broker.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}
            ).code
        ),
        lambda code: code == 0,
        timeout=30.0,
    )


def consumer_progress(broker: BrokerProcess, group: str, topic: str) -> dict[int, dict[str, int]]:
    """queueId -> {brokerOffset, consumerOffset, diff} of group on topic (consumerProgress)."""
    progress = admin(broker, "consumerProgress", "-g", group)
    return {
        q["queueId"]: {k: q[k] for k in ("brokerOffset", "consumerOffset", "diff")}
        for q in progress["queues"]
        if q["topic"] == topic
    }


def offset_history(broker: BrokerProcess, group: str) -> str:
    """`es-broker history -n NAMESRV --group G`: every offset change of the group, with its cause
    and requester, as the broker recorded them (for a failure message)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "history",
            "-n",
            broker.namesrv_addr,
            "--group",
            group,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return f"es-broker history --group {group}:\n{proc.stdout}{proc.stderr}"


def planned_messages() -> list[dict[str, Any]]:
    return [
        {
            "tags": "TagA" if i % 2 == 0 else "TagB",
            "keys": [f"key-{i}", f"order-{i % 3}"],
            "body": f"interop body {i} \u00e9\u4e2d",
        }
        for i in range(MESSAGES)
    ]


@pytest.fixture(scope="module")
def produced(broker_process: BrokerProcess) -> list[dict[str, Any]]:
    """The topic, filled by ali-ons' Producer: one send result per message, in send order."""
    create_topic(broker_process, TOPIC, QUEUES)
    planned = planned_messages()
    results = run_node(
        "produce.js",
        "--namesrv",
        broker_process.namesrv_addr,
        "--topic",
        TOPIC,
        "--group",
        "interop_producer",
        "--messages",
        json.dumps(planned),
    )
    assert len(results) == len(planned)
    for sent, want in zip(results, planned, strict=True):
        assert sent["sendStatus"] == "SEND_OK"
        assert (sent["tags"], sent["keys"], sent["body"]) == (
            want["tags"],
            want["keys"],
            want["body"],
        )
        assert 0 <= sent["queueId"] < QUEUES
    # every message got its own (queue, offset) slot, and offsets are dense per queue
    per_queue: dict[int, list[int]] = {}
    for sent in results:
        per_queue.setdefault(sent["queueId"], []).append(sent["queueOffset"])
    for offsets in per_queue.values():
        assert offsets == list(range(len(offsets)))
    assert len({s["msgId"] for s in results}) == len(results)
    return results


def consume(
    broker: BrokerProcess, group: str, expression: str, expect: int, pull_log: Path | None = None
) -> list[dict[str, Any]]:
    args = [
        "--namesrv",
        broker.namesrv_addr,
        "--topic",
        TOPIC,
        "--group",
        group,
        "--expression",
        expression,
        "--expect",
        str(expect),
    ]
    if pull_log is not None:
        args += ["--pull-log", str(pull_log)]
    return run_node("consume.js", *args)


def as_delivered(sent: dict[str, Any]) -> dict[str, Any]:
    """What consume.js should print for a message produce.js reported."""
    return {
        "topic": TOPIC,
        "tags": sent["tags"],
        "keys": sent["keys"],
        "body": sent["body"],
        "queueId": sent["queueId"],
        "queueOffset": sent["queueOffset"],
        "msgId": sent["msgId"],
        "reconsumeTimes": 0,
    }


def by_msg_id(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["msgId"]: m for m in messages}


# ---------------------------------------------------------------------------- tests
def test_new_group_receives_every_message_and_commits_to_the_end(broker_process, produced):
    group = "interop_all"
    received = consume(broker_process, group, "*", len(produced))

    # every message exactly once, with body, tags, keys, queue slot and msgId as sent: the
    # pulled record's STOREHOST/PHYSICALOFFSET give back the send response's msgId (docs/protocol.md §11.9)
    assert len(received) == len(produced), "duplicate deliveries"
    assert by_msg_id(received) == by_msg_id([as_delivered(s) for s in produced])
    # per queue, in queue-offset order
    for q in range(QUEUES):
        offsets = [m["queueOffset"] for m in received if m["queueId"] == q]
        assert offsets == sorted(offsets)

    # ali-ons persisted its offsets on close: the group is at the end of every queue (lag 0)
    per_queue = {q: sum(1 for s in produced if s["queueId"] == q) for q in range(QUEUES)}
    want = {
        q: {"brokerOffset": n, "consumerOffset": n, "diff": 0} for q, n in per_queue.items() if n
    }
    poll(
        f"offsets of {group} (consumerProgress)",
        lambda: consumer_progress(broker_process, group, TOPIC),
        lambda progress: (
            {q: v for q, v in progress.items() if q in want} == want
            and all(v["diff"] == 0 for v in progress.values())
        ),
        evidence=lambda: offset_history(broker_process, group),
    )


def test_tag_subscription_receives_only_its_tag(broker_process, produced, tmp_path):
    group = "interop_tag_a"
    tag_a = [s for s in produced if s["tags"] == "TagA"]
    assert 0 < len(tag_a) < len(produced)
    pull_log = tmp_path / "pulled.jsonl"
    received = consume(broker_process, group, "TagA", len(tag_a), pull_log=pull_log)

    assert len(received) == len(tag_a), "duplicate deliveries"
    assert by_msg_id(received) == by_msg_id([as_delivered(s) for s in tag_a])
    # the broker filtered by tag itself: ali-ons' own client-side filter had nothing to drop
    pulled = (
        [json.loads(line) for line in pull_log.read_text().splitlines()]
        if pull_log.exists()
        else []
    )
    assert {p["msgId"] for p in pulled} == {s["msgId"] for s in tag_a}
    assert all(p["tags"] == "TagA" for p in pulled)

    # the committed offsets cover every TagA message (TagB-only tails may be committed later)
    need = {}
    for s in tag_a:
        need[s["queueId"]] = max(need.get(s["queueId"], 0), s["queueOffset"] + 1)
    poll(
        f"offsets of {group}",
        lambda: consumer_progress(broker_process, group, TOPIC),
        lambda p: all(q in p and p[q]["consumerOffset"] >= n for q, n in need.items()),
        evidence=lambda: offset_history(broker_process, group),
    )
