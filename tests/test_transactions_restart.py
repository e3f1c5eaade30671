"""A restarted transactional producer is checked before it sends anything (B-320).

A producer process (tests/transaction_worker.py) sends half messages whose
local transactions stay UNKNOW and is killed with SIGKILL. A new process of
the same group starts and never sends: only its heartbeat at start tells the
broker it is a live producer of the group, so only then do the broker's checks
reach it. Its check listener answers COMMIT_MESSAGE; every transaction must be
checked and delivered once, none discarded to TRANS_CHECK_MAX_TIME_TOPIC.

The broker's transactionCheckMax leaves room for the checks that find no live
producer while the first process is dead and the second not yet started; the
broker records each of them, so the test shows how many were spent.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from collections.abc import Callable
from functools import partial

import trio

from es_broker.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SyncProducer,
)
from es_broker.client.admin import Admin
from es_broker.client.transaction import TransactionProducer
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.bodies import ProducerConnection, TopicStatsTable
from es_broker.remoting.codes import RequestCode, ResponseCode
from tests.helpers import FAST, Signal
from tests.process_fixtures import ROOT, ProcessRunning, ServedBroker, _env, serve
from tests.waiting import poll_until

TOPIC, GROUP = "TxRestart", "TxRestartPG"
COUNT = 200
CHECK_MAX = 50
CONF = [
    "transactionTimeOut=500",
    "transactionCheckInterval=200",
    f"transactionCheckMax={CHECK_MAX}",
]
TIMEOUT = 60.0  # an upper bound for what must happen, never a measured duration


class Events:
    """What the worker processes print, and a signal at every new line."""

    def __init__(self) -> None:
        self.lines: list[dict] = []
        self.signal = Signal()

    def add(self, event: dict) -> None:
        self.lines.append(event)
        self.signal.fire()

    async def wait_for(self, predicate: Callable[[], object]) -> None:
        await self.signal.wait_for(lambda: bool(predicate()), TIMEOUT)

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.lines if e["ev"] == kind]


async def start_worker(nursery, events: Events, *args: str) -> trio.Process:
    command = [sys.executable, "-m", "tests.transaction_worker", *args]
    process = await nursery.start(
        partial(
            trio.run_process,
            command,
            stdout=subprocess.PIPE,
            check=False,
            env=_env(),
            cwd=str(ROOT),
        )
    )

    async def read() -> None:
        buffer = b""
        async for chunk in process.stdout:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                events.add(json.loads(line))

    nursery.start_soon(read)
    return process


async def leave_unknown(nursery, served: ServedBroker) -> list[str]:
    """A producer process sends COUNT half messages left UNKNOW and is killed (kill -9)."""
    events = Events()
    first = await start_worker(nursery, events, "unknown", served.namesrv, GROUP, TOPIC, str(COUNT))
    await events.wait_for(lambda: events.of("sent"))
    first.send_signal(signal.SIGKILL)
    await first.wait()
    (sent,) = events.of("sent")
    return sent["ids"]


class Received:
    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []
        self.signal = Signal()

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.messages.extend(msgs)
        self.signal.fire()
        return ConsumeResult.SUCCESS


async def open_transactions(namesrv: str) -> list[dict]:
    async with Admin.open(namesrv) as admin:
        return await admin.open_transactions(GROUP)


async def stored_in(running: ProcessRunning, topic: str) -> int:
    """How many messages the broker holds in topic (0 when it does not exist)."""
    response = await running.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        return 0
    assert response.code == ResponseCode.SUCCESS, response.remark
    table = TopicStatsTable.decode(response.body).offset_table
    return sum(stats.max_offset - stats.min_offset for stats in table.values())


async def a_new_producer_commits_every_check(
    nursery, served: ServedBroker, running: ProcessRunning, ids: list[str]
) -> None:
    """Start a producer process of the group that never sends; every transaction must reach the consumer once."""
    received = Received()
    consumer = PushConsumer(
        served.namesrv,
        "TxRestartCG",
        received,
        subscriptions={TOPIC: "*"},
        client_ip="127.0.0.1",
        config=FAST,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    await consumer.start(nursery)
    events = Events()
    second = await start_worker(nursery, events, "commit", served.namesrv, GROUP)
    await events.wait_for(lambda: events.of("started"))

    # every transaction ends: committed by the new producer's answers, or discarded
    await poll_until(
        lambda: _none(open_transactions(served.namesrv)), TIMEOUT, "every transaction ended"
    )
    assert await stored_in(running, "TRANS_CHECK_MAX_TIME_TOPIC") == 0, "checks found no producer"
    assert await stored_in(running, TOPIC) == COUNT

    await events.wait_for(lambda: {e["id"] for e in events.of("checked")} >= set(ids))
    checked = events.of("checked")
    assert {e["body"] for e in checked} == {f"tx-{i}" for i in range(COUNT)}
    assert all(e["times"] <= CHECK_MAX for e in checked)

    await received.signal.wait_for(lambda: len(received.messages) >= COUNT, TIMEOUT)
    assert sorted(m.msg_id for m in received.messages) == sorted(ids)  # each once
    assert all("TRAN_MSG" not in m.properties for m in received.messages)

    second.send_signal(signal.SIGTERM)
    await events.wait_for(lambda: events.of("stopped"))
    await consumer.shutdown()


async def _none(rows) -> bool:
    return await rows == []


async def test_b320_a_restarted_producer_that_never_sends_is_checked_and_commits(tmp_path, nursery):
    """B-320: a new producer process of the group heartbeats the broker at start, so the
    checks of the transactions a killed process left UNKNOW reach it; all are delivered once."""
    with serve(tmp_path / "data", conf=CONF, log_file=tmp_path / "broker.log") as served:
        running = ProcessRunning(served, RemotingClient(nursery))
        await running.create_topic(TOPIC, 4)
        ids = await leave_unknown(nursery, served)
        assert len(set(ids)) == COUNT
        await a_new_producer_commits_every_check(nursery, served, running, ids)


async def test_b320_after_a_broker_crash_too_the_restarted_producer_is_checked(tmp_path, nursery):
    """B-320: as above, with the broker killed (kill -9) and restarted on its data dir between
    the producer's crash and its restart: the open transactions survive and the new producer,
    heartbeating the restarted broker at start, commits every one."""
    data = tmp_path / "data"
    with serve(data, conf=CONF, log_file=tmp_path / "broker.log") as served:
        await ProcessRunning(served, RemotingClient(nursery)).create_topic(TOPIC, 4)
        ids = await leave_unknown(nursery, served)
        served.process.send_signal(signal.SIGKILL)
        served.process.wait()
    with serve(data, conf=CONF, log_file=tmp_path / "broker2.log") as served:
        running = ProcessRunning(served, RemotingClient(nursery))
        assert len(await open_transactions(served.namesrv)) == COUNT
        await a_new_producer_commits_every_check(nursery, served, running, ids)


async def test_b321_a_refused_heartbeat_is_logged_at_error_with_broker_code_and_remark(
    tmp_path, nursery, caplog
):
    """B-321: a producer heartbeats every broker at start and checks each answer; a refusal
    (here the broker's ACL refusing a wrong signature) is an ERROR naming broker, code and remark."""
    from tests.acl_fixtures import WRONG_SECRET, acl_conf

    conf, _ = acl_conf(tmp_path)
    with serve(
        tmp_path / "data", "--config", str(conf), log_file=tmp_path / "broker.log"
    ) as served:
        producer = TransactionProducer(
            served.namesrv,
            GROUP,
            check_listener=lambda message: None,
            client_ip="127.0.0.1",
            credentials=WRONG_SECRET,
        )
        with caplog.at_level(logging.ERROR, logger="es_broker.client.instance"):
            await producer.start(nursery)
        await producer.shutdown()
    refusals = [r for r in caplog.records if "heartbeat to broker refused" in r.getMessage()]
    assert refusals, caplog.text
    (refusal, *_) = refusals
    assert refusal.levelno == logging.ERROR
    message = refusal.getMessage()
    # the broker's address, and the code 4.9.8 answers an AclException with
    assert f"refused by {served.broker}: {ResponseCode.SYSTEM_ERROR} " in message
    assert "Check signature failed for accessKey=ProducerKey" in message


async def producer_clients(running: ProcessRunning, group: str) -> set[str]:
    """The client ids the broker counts as live producers of the group."""
    response = await running.call(
        RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}
    )
    if response.code != ResponseCode.SUCCESS:
        return set()
    return {c.client_id for c in ProducerConnection.decode(response.body).connection_set}


async def test_b320_every_producer_kind_is_a_member_of_its_group_at_every_broker_before_sending(
    tmp_path, nursery
):
    """B-320: Producer, TransactionProducer and SyncProducer each heartbeat the broker during
    start: once start returns, the broker lists them as producers of their groups, nothing sent."""
    with serve(tmp_path / "data", log_file=tmp_path / "broker.log") as served:
        running = ProcessRunning(served, RemotingClient(nursery))
        plain = Producer(served.namesrv, "PlainPG", client_ip="127.0.0.1")
        transactional = TransactionProducer(
            served.namesrv, "TxPG", check_listener=lambda message: None, client_ip="127.0.0.1"
        )
        blocking = SyncProducer(served.namesrv, "SyncPG", client_ip="127.0.0.1")
        await plain.start(nursery)
        await transactional.start(nursery)
        await trio.to_thread.run_sync(blocking.start)
        try:
            assert await producer_clients(running, "PlainPG") == {plain.instance.client_id}
            assert await producer_clients(running, "TxPG") == {transactional.instance.client_id}
            assert await producer_clients(running, "SyncPG") == {
                blocking.producer.instance.client_id
            }
        finally:
            await trio.to_thread.run_sync(blocking.shutdown)
            await transactional.shutdown()
            await plain.shutdown()
