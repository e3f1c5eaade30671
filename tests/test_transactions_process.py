"""Transactional messages against a real broker process with our client (B-220..B-234).

The broker runs with transactionTimeOut, transactionCheckInterval and
transactionCheckMax made small through its broker.conf, so the check comes in
a moment; every wait is on an event of the client or, for state only the
broker process holds, a poll with a deadline.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from es_broker.client import ConsumeResult, Message, PushConsumer, ReceivedMessage
from es_broker.client.admin import Admin
from es_broker.client.transaction import LocalTransactionState, TransactionProducer
from es_broker.net.remoting_client import RemotingClient
from tests.helpers import FAST, Signal, cli
from tests.process_fixtures import ProcessRunning, serve
from tests.waiting import poll_until

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
CHECK_MAX = 3
CONF = [
    "transactionTimeOut=200",
    "transactionCheckInterval=200",
    f"transactionCheckMax={CHECK_MAX}",
]
STORY = {"prepared", "checked", "committed", "rolled_back", "discarded", "delivered"}


class Checks:
    """A check listener answering from a table, recording every check it was asked."""

    def __init__(self, answers: dict[bytes, LocalTransactionState]) -> None:
        self.answers = answers
        self.asked: list[ReceivedMessage] = []
        self.signal = Signal()

    def __call__(self, message: ReceivedMessage) -> LocalTransactionState:
        self.asked.append(message)
        self.signal.fire()
        return self.answers.get(message.body, UNKNOW)

    def count(self, body: bytes) -> int:
        return sum(1 for m in self.asked if m.body == body)


class Received:
    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []
        self.signal = Signal()

    async def __call__(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        self.messages.extend(msgs)
        self.signal.fire()
        return ConsumeResult.SUCCESS


def local(decisions: dict[bytes, LocalTransactionState]) -> Callable:
    def run(message: Message, result, arg) -> LocalTransactionState:
        return decisions[message.body]

    return run


async def no_open(namesrv: str, group: str) -> bool:
    async with Admin.open(namesrv) as admin:
        return await admin.open_transactions(group) == []


async def topic_count(namesrv: str, topic: str) -> int:
    async with Admin.open(namesrv) as admin:
        return sum(q["maxOffset"] for q in await admin.topic_status(topic))


def story(served, msg_id: str) -> list[str]:
    trace = served.admin_json("messageTrace", "-i", msg_id)
    return [e["event"] for e in trace["events"] if e["event"] in STORY]


async def test_commit_rollback_and_the_check_settle_every_transaction_B222_B226_B231_B234(
    tmp_path, nursery
):
    data = tmp_path / "data"
    decisions = {
        b"commit": COMMIT,
        b"rollback": ROLLBACK,
        b"unknown-commit": UNKNOW,
        b"unknown-rollback": UNKNOW,
    }
    checks = Checks({b"unknown-commit": COMMIT, b"unknown-rollback": ROLLBACK})
    with serve(data, conf=CONF, log_file=tmp_path / "broker.log") as served:
        await ProcessRunning(served, RemotingClient(nursery)).create_topic("TT", 4)
        received = Received()
        consumer = PushConsumer(
            served.namesrv,
            "TCG",
            received,
            subscriptions={"TT": "*"},
            client_ip="127.0.0.1",
            config=FAST,
        )
        await consumer.start(nursery)
        producer = TransactionProducer(
            served.namesrv, "TPG", check_listener=checks, client_ip="127.0.0.1"
        )
        await producer.start(nursery)
        sent = {
            body: await producer.send_in_transaction(
                "TT", Message(body, tags="tx"), local(decisions)
            )
            for body in decisions
        }
        assert {b: r.local_state for b, r in sent.items()} == decisions
        # the two committed ones arrive, each once (B-223)
        await received.signal.wait_for(lambda: len(received.messages) >= 2, 30)
        await checks.signal.wait_for(
            lambda: checks.count(b"unknown-commit") and checks.count(b"unknown-rollback"), 30
        )
        await poll_until(lambda: no_open(served.namesrv, "TPG"), what="every transaction ended")
        # the rolled-back ones never appear (B-222): the topic holds exactly two messages
        assert await topic_count(served.namesrv, "TT") == 2
        assert sorted(m.body for m in received.messages) == [b"commit", b"unknown-commit"]
        committed = next(m for m in received.messages if m.body == b"unknown-commit")
        assert "TRAN_MSG" not in committed.properties and "REAL_TOPIC" not in committed.properties
        assert committed.msg_id == sent[b"unknown-commit"].msg_id
        assert checks.asked[0].topic == "TT"  # the check shows the real topic (B-226)

        assert story(served, sent[b"commit"].msg_id) == ["prepared", "committed", "delivered"]
        assert story(served, sent[b"rollback"].msg_id) == ["prepared", "rolled_back"]
        unknown_commit = story(served, sent[b"unknown-commit"].msg_id)
        assert unknown_commit[0] == "prepared" and unknown_commit[-2:] == ["committed", "delivered"]
        assert set(unknown_commit[1:-2]) == {"checked"}
        unknown_rollback = story(served, sent[b"unknown-rollback"].msg_id)
        assert unknown_rollback[0] == "prepared" and unknown_rollback[-1] == "rolled_back"
        await producer.shutdown()
        await consumer.shutdown()
    _verify_and_replay(tmp_path)


async def test_a_producer_that_never_answers_is_checked_then_discarded_B228(tmp_path, nursery):
    data = tmp_path / "data"
    checks = Checks({})  # answers UNKNOW to every check
    with serve(data, conf=CONF, log_file=tmp_path / "broker.log") as served:
        await ProcessRunning(served, RemotingClient(nursery)).create_topic("TT", 4)
        producer = TransactionProducer(
            served.namesrv, "SILENT", check_listener=checks, client_ip="127.0.0.1"
        )
        await producer.start(nursery)
        result = await producer.send_in_transaction(
            "TT", Message(b"never"), lambda message, sent, arg: UNKNOW
        )
        await checks.signal.wait_for(lambda: checks.count(b"never") >= CHECK_MAX, 30)
        assert [m.properties["TRANSACTION_CHECK_TIMES"] for m in checks.asked] == ["1", "2", "3"]
        await poll_until(
            lambda: no_open(served.namesrv, "SILENT"), what="the transaction discarded"
        )
        assert story(served, result.msg_id) == ["prepared"] + ["checked"] * CHECK_MAX + [
            "discarded"
        ]
        assert await topic_count(served.namesrv, "TT") == 0
        await producer.shutdown()
    _verify_and_replay(tmp_path)


def _verify_and_replay(tmp_path) -> None:
    done = cli("verify", "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 0, done.stdout + done.stderr
    done = cli("replay", "--data-dir", str(tmp_path / "data"), "--into", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    done = cli("verify", "--data-dir", str(tmp_path / "data"), "--against", str(tmp_path / "r"))
    assert done.returncode == 0, done.stdout + done.stderr


async def test_nothing_visible_before_the_end_B220_B232(tmp_path, nursery):
    gate = trio.Event()
    seen = trio.Event()

    async def hold(message: Message, result, arg) -> LocalTransactionState:
        seen.set()
        await gate.wait()
        return COMMIT

    # no check while it is held: the first comes only after ten minutes
    conf = ["transactionTimeOut=600000"]
    with serve(tmp_path / "data", conf=conf, log_file=tmp_path / "broker.log") as served:
        await ProcessRunning(served, RemotingClient(nursery)).create_topic("TT", 4)
        producer = TransactionProducer(
            served.namesrv, "TPG", check_listener=Checks({}), client_ip="127.0.0.1"
        )
        await producer.start(nursery)
        outcome: list = []

        async def send() -> None:
            outcome.append(await producer.send_in_transaction("TT", Message(b"held"), hold))

        nursery.start_soon(send)
        await seen.wait()
        assert await topic_count(served.namesrv, "TT") == 0
        (row,) = served.admin_json("openTransactions", "-g", "TPG")  # B-232
        assert row["topic"] == "TT" and row["producerGroup"] == "TPG"
        assert row["transactionId"] and row["bornTimestamp"] > 0
        assert "TPG" in served.admin("openTransactions").stdout
        gate.set()
        await poll_until(
            lambda: _is(topic_count(served.namesrv, "TT"), 1), what="the commit stored"
        )
        assert outcome[0].local_state == COMMIT
        await producer.shutdown()


async def _is(count, wanted: int) -> bool:
    return await count == wanted


async def test_with_acl_a_signed_producer_answers_the_check_and_commits_B233(tmp_path, nursery):
    from es_broker.client.admin import Admin as SignedAdmin
    from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf

    conf, _ = acl_conf(
        tmp_path, transactionTimeOut=200, transactionCheckInterval=200, transactionCheckMax=3
    )
    checks = Checks({b"later": COMMIT})
    with serve(
        tmp_path / "data", "--config", str(conf), log_file=tmp_path / "broker.log"
    ) as served:
        await ProcessRunning(served, RemotingClient(nursery, credentials=ADMIN)).create_topic(
            "TopicA", 4
        )
        producer = TransactionProducer(
            served.namesrv,
            "PGA",
            check_listener=checks,
            client_ip="127.0.0.1",
            credentials=PRODUCER,
        )
        await producer.start(nursery)
        result = await producer.send_in_transaction(
            "TopicA", Message(b"later"), lambda message, sent, arg: UNKNOW
        )
        await checks.signal.wait_for(lambda: checks.count(b"later") >= 1, 30)

        async def committed() -> bool:
            async with SignedAdmin.open(served.namesrv, credentials=ADMIN) as admin:
                rows = await admin.topic_status("TopicA")
                return sum(q["maxOffset"] for q in rows) == 1

        await poll_until(committed, what="the check's commit stored")
        async with SignedAdmin.open(served.namesrv, credentials=ADMIN) as admin:
            trace = await admin.message_trace(result.msg_id)
        (commit,) = [e for e in trace["events"] if e["event"] == "committed"]
        assert commit["fromTransactionCheck"] is True  # the signed answer to the check went through
        await producer.shutdown()
