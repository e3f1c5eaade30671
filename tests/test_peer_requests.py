"""No silent failure of a request a process sends on its own (B-314..B-317).

A broker's registration refused by a separately run ACL name server, a
client's heartbeat refused by an ACL broker: each is logged at ERROR once with
the peer, the code and the remark, and shown where an operator looks
(brokerStatus, the client's state).
"""

from __future__ import annotations

import logging

import trio

from es_broker.client import ClientConfig, ConsumeResult, PushConsumer, ReceivedMessage
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.peer_outcomes import PeerRequests, peer_problems
from tests.acl_fixtures import ACL_EXCEPTION, ADMIN, PRODUCER, acl_conf, topics
from tests.ha_fixtures import _NAMESRV, Wire, start, start_master, write_conf
from tests.helpers import FAST
from tests.process_fixtures import serve
from tests.waiting import poll_until


# ---------------------------------------------------------------------- the tracker
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _answer(code: int, remark: str | None = None) -> RemotingCommand:
    return RemotingCommand(code=code, remark=remark)


def test_b315_a_lasting_refusal_is_logged_once_then_once_a_minute_and_its_end_once(caplog):
    """B-315: ERROR at the first refusal, again only after 60 s while it lasts, INFO when the peer answers again."""
    clock = Clock()
    requests = PeerRequests("registration with name server", logging.getLogger("t"), clock=clock)
    assert requests.state() == "not yet"
    with caplog.at_level(logging.INFO, logger="t"):
        assert requests.answered("ns:9876", _answer(ResponseCode.SUCCESS))
        assert requests.state() == "ok"
        for _ in range(5):
            clock.now += 10
            assert not requests.answered("ns:9876", _answer(1, "no\naccount"))
        assert requests.state() == "refused by ns:9876: 1 no account"
        clock.now += 20  # 60 s after the first ERROR
        requests.answered("ns:9876", _answer(1, "no account"))
        requests.no_answer("other:9876", TimeoutError("timed out"))
        assert requests.state() == (
            "refused by ns:9876: 1 no account; no answer from other:9876: timed out"
        )
        requests.answered("ns:9876", _answer(ResponseCode.SUCCESS))
        assert requests.state() == "no answer from other:9876: timed out"
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("ERROR", "registration with name server refused by ns:9876: 1 no account"),
        (
            "ERROR",
            "registration with name server refused by ns:9876: 1 no account "
            "(still failing: 6 times in 60 s)",
        ),
        ("ERROR", "registration with name server no answer from other:9876: timed out"),
        (
            "INFO",
            "registration with name server ns:9876: ok again (6 failure(s) before, "
            "the last: refused by ns:9876: 1 no account)",
        ),
    ]


def test_b316_only_failing_peer_fields_are_problems():
    """B-316: clusterList and the dashboard show the fields that are neither ok, not yet nor none."""
    runtime = {
        "nameServerRegistration": "ok",
        "slaveFetch": "refused by m:10911: 1 denied",
        "slaveOffsetMerge": "not yet",
        "transactionCheck": "none",
    }
    assert peer_problems(runtime) == ["slaveFetch: refused by m:10911: 1 denied"]


# ---------------------------------------------------------------------- a separate name server
async def test_b314_b316_a_broker_without_an_admin_account_is_refused_by_an_acl_name_server(
    tmp_path, nursery
):
    """B-314: the name server says what a broker needs; B-315, B-316: the refusal is logged once and shown."""
    conf, acl_file = acl_conf(tmp_path, peer=None)
    namesrv = await start(
        "namesrv",
        tmp_path,
        ["--role", "namesrv", "--namesrv-listen", "127.0.0.1:0", "--config", str(conf)],
        _NAMESRV,
    )
    procs = [namesrv]
    try:
        need = await poll_until(
            lambda: [line for line in namesrv.text().splitlines() if "aclEnable:" in line],
            what="the name server's ACL line",
        )
        assert "WARNING" in need[0] and "peer_access_key / peer_secret_key" in need[0]
        assert "admin accounts: AdminKey01" in need[0] and str(acl_file) in need[0]
        assert "AdminSecret01" not in namesrv.text()
        broker = await start_master(tmp_path, namesrv.addr, write_conf(tmp_path / "plain.conf"))
        procs.append(broker)
        client = Wire(RemotingClient(nursery))
        status = (await client.runtime(broker.addr))["nameServerRegistration"]
        assert status == (
            f"refused by {namesrv.addr}: 1 {ACL_EXCEPTION}No accessKey is configured, "
            "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate"
            "(PlainPermissionManager.java:664)"
        )
        # each topic change registers again (its answer waits for that registration)
        await client.create_topic(broker.addr, "T1", 1)
        await client.create_topic(broker.addr, "T2", 1)
        errors = [line for line in broker.text().splitlines() if " ERROR " in line]
        assert errors == [
            line for line in errors if "registration with name server refused by" in line
        ]
        assert len(errors) == 1 and "No accessKey is configured" in errors[0]
    finally:
        for proc in reversed(procs):
            proc.stop()


# ---------------------------------------------------------------------- the client's heartbeat
async def test_b317_a_refused_heartbeat_is_logged_at_error_by_the_client(tmp_path, nursery, caplog):
    """B-317: a consumer whose account may not SUB its group logs the broker's refusal of its heartbeat."""
    conf, _ = acl_conf(tmp_path)
    with serve(tmp_path / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        await topics(nursery, broker, "TopicA")

        async def nothing(msgs: list[ReceivedMessage]) -> ConsumeResult:
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            broker.namesrv,
            "GroupB",  # PRODUCER's account: defaultGroupPerm DENY
            nothing,
            subscriptions={"TopicA": "*"},
            client_ip="127.0.0.1",
            config=FAST,
            client_config=ClientConfig(credentials=PRODUCER),
        )
        with caplog.at_level(logging.INFO, logger="es_broker.client"):
            await consumer.start(nursery)
            try:
                heartbeats = consumer.instance.heartbeats
                await poll_until(heartbeats.failing, what="a refused heartbeat")
                assert heartbeats.state() == (
                    f"refused by {broker.broker}: 1 {ACL_EXCEPTION}No default permission for "
                    "group:GroupB, org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm"
                    "(PlainPermissionManager.java:606)"
                )
            finally:
                with trio.move_on_after(10):
                    await consumer.shutdown()
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors and errors[0].startswith(f"heartbeat to broker refused by {broker.broker}")
        assert all(ADMIN.secret_key not in r.getMessage() for r in caplog.records)
