"""Master and slave brokers in process: log shipping, master roles, slave reads and refusals (B-111..B-120).

Each broker runs in a cancel scope of its own, so a test can stop and start
either one; LMDB environments are compared only once both are closed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from es_broker.commands.slave_journal import JOURNAL_DIR, SlaveOffsetJournal
from es_broker.config import BrokerConfig
from es_broker.core.replay import compare, replay
from es_broker.ha import slave as slave_replication
from es_broker.ha.protocol import FetchRequest, record_crc
from es_broker.log import records
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.server.main import BrokerServer
from es_broker.server.namesrv import NameServerRole
from tests.ha_fixtures import Wire, bodies
from tests.helpers import wait_until

TOPIC = "T"
RAM = 1024**3


@dataclass
class Node:
    server: BrokerServer
    scope: trio.CancelScope
    stopped: trio.Event

    @property
    def addr(self) -> str:
        return self.server.addr

    async def stop(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()


class Brokers:
    """Starts brokers of broker-a in process against one name server."""

    def __init__(self, nursery: trio.Nursery, tmp: Path, namesrv: str) -> None:
        self.nursery, self.tmp, self.namesrv = nursery, tmp, namesrv
        self.w = Wire(RemotingClient(nursery))

    async def start(
        self, name: str, *, master_addr: str | None = None, port: int = 0, **settings
    ) -> Node:
        config = BrokerConfig(
            storePathRootDir=str(self.tmp / name),
            listenPort=port,
            **{"total_physical_memory_bytes": RAM, **settings},
        )

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            stopped = trio.Event()
            try:
                with trio.CancelScope() as scope:
                    server = BrokerServer(config, [self.namesrv], master_addr=master_addr)
                    async with trio.open_nursery() as inner:
                        await inner.start(server.run, "127.0.0.1")
                        task_status.started(Node(server, scope, stopped))
            finally:
                stopped.set()

        return await self.nursery.start(run)

    async def master(self, role: str = "SYNC_MASTER", **settings) -> Node:
        return await self.start("master", brokerRole=role, **settings)

    async def slave(self, master: Node | None, **settings) -> Node:
        return await self.start(
            "slave",
            master_addr=master.addr if master else None,
            brokerRole="SLAVE",
            brokerId=1,
            **settings,
        )

    async def caught_up(self, master: Node, slave: Node) -> None:
        await wait_until("the slave caught up", lambda: _same_seq(master, slave))


async def _same_seq(master: Node, slave: Node) -> bool:
    """The slave holds the master's last record, its catch-up record included (appended as it arrives)."""
    replicator = slave.server.replicator
    sessions = master.server.replication.sessions.values()
    return bool(
        replicator
        and replicator.connected
        and any(x.caught_up_seq is not None for x in sessions)
        and slave.server.broker.store.log.last_seq == master.server.broker.store.log.last_seq
    )


@pytest.fixture
async def brokers(tmp_path, nursery) -> AsyncIterator[Brokers]:
    port = await nursery.start(NameServerRole().run, "127.0.0.1", 0)
    yield Brokers(nursery, tmp_path, f"127.0.0.1:{port}")
    nursery.cancel_scope.cancel()


async def _send(
    b: Brokers, node: Node, n: int, queue_id: int = 0, properties: dict | None = None
) -> list:
    return [
        await b.w.send(node.addr, TOPIC, queue_id, f"m{i}".encode(), properties) for i in range(n)
    ]


# ---------------------------------------------------------------------- log shipping


async def test_b111_slave_projections_equal_the_masters_byte_for_byte_at_the_same_sequence(
    brokers, tmp_path
):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    w = brokers.w
    await w.create_topic(m.addr, TOPIC, 4)
    for q in range(4):
        await _send(brokers, m, 5, q)
    await w.ok(
        m.addr,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        body=fastjson.dumps(
            {"groupName": "G", "brokerId": 1, "whichBrokerWhenConsumeSlowly": 1}
        ).encode(),
    )
    await w.pull(m.addr, "G", TOPIC, 0, 0)
    await w.commit(m.addr, "G", TOPIC, 1, 3)
    await w.create_topic(m.addr, "Gone", 1)
    await w.ok(m.addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Gone"})
    await brokers.caught_up(m, s)
    # metadata came with the log (B-121..B-125)
    assert s.server.broker.group_config("G").broker_id == 1
    assert s.server.broker.topic_config("Gone") is None  # deletions too (S-14)
    await s.stop()
    await m.stop()
    assert compare(tmp_path / "master", tmp_path / "slave") == []


async def test_b475_a_slave_started_after_retention_holds_the_masters_chunks(brokers, tmp_path):
    """The master's first chunk has zeros below phyMin; a slave that gets the surviving messages
    only (the bytes below went before it connected) writes the same chunks (B-475, B-476)."""
    m = await brokers.master("ASYNC_MASTER", mappedFileSizeCommitLog=3000, fileReservedTime=0)
    await brokers.w.create_topic(m.addr, TOPIC, 2)
    for q in range(2):
        await _send(brokers, m, 40, q)
    done = await m.server.broker.retention_pass(manual=True)
    assert done.phy_min % 2022 and done.deleted_files  # phyMin inside a chunk
    await _send(brokers, m, 5, 1)
    s = await brokers.slave(m)
    await brokers.caught_up(m, s)
    await s.stop()
    await m.stop()
    assert compare(tmp_path / "master", tmp_path / "slave") == []


async def test_b111_a_restarted_slave_resumes_from_its_last_applied_sequence(brokers, tmp_path):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    await _send(brokers, m, 10)
    await brokers.caught_up(m, s)
    held = s.server.broker.store.log.last_seq
    await s.stop()
    await _send(brokers, m, 10)  # written while the slave is away
    s = await brokers.slave(m)
    await brokers.caught_up(m, s)
    assert s.server.replicator.applied_records == m.server.broker.store.log.last_seq - held
    await s.stop()
    await m.stop()
    assert compare(tmp_path / "master", tmp_path / "slave") == []


async def test_b121_a_slave_without_master_address_learns_it_from_the_name_server(brokers):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(None)
    await brokers.caught_up(m, s)
    assert s.server.replicator.master_addr == m.addr


async def test_each_catch_up_of_a_slave_is_a_record_on_the_master(brokers):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    await brokers.caught_up(m, s)
    await s.stop()
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    s = await brokers.slave(m)

    async def two_catch_ups() -> list:
        caught = [r for _, r in m.server.broker.store.log.read() if r["type"] == "slave_caught_up"]
        return caught if len(caught) == 2 else []

    first, second = await wait_until("the second catch-up record", two_catch_ups)
    assert (first["broker_id"], second["broker_id"]) == (1, 1)
    # the second connection shipped what was new since: the first catch-up record was sent in the first one
    assert second["seq"] == first["seq"] + 2 and second["records_shipped"] == 1


async def test_a_slave_whose_log_is_not_the_masters_history_is_refused(brokers):
    # the slave's directory holds a history of its own (another cluster's system topics)
    other = await brokers.start(
        "slave", brokerRole="ASYNC_MASTER", brokerClusterName="OtherCluster"
    )
    await other.stop()
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    await wait_until("a refused fetch", lambda: _refused(s))
    assert not s.server.replicator.connected
    assert not [r for _, r in m.server.broker.store.log.read() if r["type"] == "slave_caught_up"]
    store = s.server.broker.store
    with store.read() as txn:
        last = txn.get(records.seq_key(store.log.last_seq), db=store.log.log_db)
    fetch = FetchRequest(1, s.addr, store.log.last_seq + 1, record_crc(last), 0, 0).to_command()
    r = await brokers.w.call(m.addr, fetch.code, fetch.ext_fields)
    assert r.code == ResponseCode.SYSTEM_ERROR and "diverged" in r.remark


async def _refused(s: Node) -> bool:
    # B-318: the master's refusal is the slave's slaveFetch state
    return s.server.replicator.fetches.state().startswith("refused by")


# ---------------------------------------------------------------------- master roles


async def test_b111_async_master_answers_send_ok_without_any_slave(brokers):
    m = await brokers.master("ASYNC_MASTER")
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    (r,) = await _send(brokers, m, 1)
    assert r.code == ResponseCode.SUCCESS


async def test_b111_sync_master_without_slave_answers_slave_not_available_and_keeps_the_message(
    brokers,
):
    m = await brokers.master("SYNC_MASTER")
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    (r,) = await _send(brokers, m, 1)
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE and r.remark is None
    # stored on the master all the same
    assert r.require_long("queueOffset") == 0 and r.get_str("msgId")
    assert [x.body for x in bodies(await brokers.w.pull(m.addr, "G", TOPIC, 0, 0))] == [b"m0"]


async def test_b111_sync_master_message_with_wait_false_does_not_wait_for_a_slave(brokers):
    m = await brokers.master("SYNC_MASTER")
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    (r,) = await _send(brokers, m, 1, properties={"WAIT": "false"})
    assert r.code == ResponseCode.SUCCESS


async def test_b111_sync_master_answers_send_ok_once_the_slave_holds_the_record(brokers):
    m = await brokers.master("SYNC_MASTER")
    s = await brokers.slave(m)
    await brokers.caught_up(m, s)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    for r in await _send(brokers, m, 5):
        assert r.code == ResponseCode.SUCCESS
        # the answer came after the slave acknowledged the record holding this message
        assert s.server.broker.max_offset(TOPIC, 0) > r.require_long("queueOffset")


async def test_b111_sync_master_answers_flush_slave_timeout_when_the_slave_stops_acknowledging(
    brokers,
):
    m = await brokers.master("SYNC_MASTER", slaveTimeout=200)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    # a slave that fetches once (so it is connected) and never acknowledges anything after
    first = FetchRequest(1, "127.0.0.1:1", 1, 0, 0, 0).to_command()
    assert (await brokers.w.call(m.addr, first.code, first.ext_fields)).code == ResponseCode.SUCCESS
    with trio.fail_after(5):
        (r,) = await _send(brokers, m, 1)
    assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT and r.require_long("queueOffset") == 0


# ---------------------------------------------------------------------- reads from the slave


async def test_b120_slave_refuses_stores_and_topic_or_group_changes(brokers):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    await brokers.caught_up(m, s)
    (r,) = await _send(brokers, s, 1)
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
    for code, fields, body in [
        (
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": "X", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
            b"",
        ),
        (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": TOPIC}, b""),
        (
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            fastjson.dumps({"groupName": "G"}).encode(),
        ),
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G"}, b""),
    ]:
        r = await brokers.w.call(s.addr, code, fields, body)
        assert (r.code, r.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "Can't modify topic or subscription group from "
            "slave broker, please execute it from master broker.",
        ), code
    assert s.server.broker.store.log.last_seq == m.server.broker.store.log.last_seq


async def test_b116_slave_with_read_disabled_serves_pulls_with_suggestion_master(brokers):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    await _send(brokers, m, 3)
    await brokers.caught_up(m, s)
    r = await brokers.w.pull(s.addr, "G", TOPIC, 0, 0)
    assert r.code == ResponseCode.SUCCESS and r.require_int("suggestWhichBrokerId") == 0
    assert [x.body for x in bodies(r)] == [b"m0", b"m1", b"m2"]
    # no delivery record
    assert s.server.broker.store.log.last_seq == m.server.broker.store.log.last_seq


async def test_b061_b119_slave_never_corrects_an_offset_and_suggests_the_groups_broker(brokers):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    await brokers.w.ok(
        m.addr,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        body=fastjson.dumps({"groupName": "G", "brokerId": 3}).encode(),
    )
    await _send(brokers, m, 3)
    await brokers.caught_up(m, s)
    on_master = await brokers.w.pull(m.addr, "G", TOPIC, 0, 10)
    assert (
        on_master.code == ResponseCode.PULL_OFFSET_MOVED
        and on_master.require_long("nextBeginOffset") == 3
    )
    # beyond the slave's max, as a lagging slave
    r = await brokers.w.pull(s.addr, "G", TOPIC, 0, 10)
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert r.require_long("nextBeginOffset") == 10  # the requested offset: no correction
    assert r.require_int("suggestWhichBrokerId") == 3  # the group's brokerId


async def test_b118_slave_ignores_a_commit_piggybacked_on_a_pull(brokers):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    await _send(brokers, m, 3)
    await brokers.caught_up(m, s)
    r = await brokers.w.call(
        s.addr,
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": TOPIC,
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 0x5,
            "commitOffset": 2,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        },
    )
    assert r.code == ResponseCode.SUCCESS
    assert await brokers.w.query(s.addr, "G", TOPIC, 0) == 0  # B-37 row 2: nothing stored
    assert s.server.broker.journal.pending() == []


async def test_b120_slave_computes_a_reset_for_its_clients_and_records_nothing(brokers):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    await _send(brokers, m, 5)
    await brokers.w.commit(m.addr, "G", TOPIC, 0, 5)
    await brokers.caught_up(m, s)
    await brokers.w.heartbeat(s.addr, "client-1", "G", TOPIC)
    held = s.server.broker.store.log.last_seq
    r = await brokers.w.call(
        s.addr,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": TOPIC, "group": "G", "timestamp": 0, "isForce": True},
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert list(fastjson.loads(r.body)["offsetTable"].values()) == [0]
    assert s.server.broker.store.log.last_seq == held


@pytest.mark.parametrize(
    ("read_enable", "offset", "expected"),
    [
        (False, 0, 0),  # slaveReadEnable=false: always the master (B-114)
        (True, 0, 2),  # slow: whichBrokerWhenConsumeSlowly
        (True, 36, 5),  # in memory: the group's brokerId
    ],
)
async def test_b114_b115_suggest_which_broker_id(brokers, read_enable, offset, expected):
    # RAM 10 000 bytes: units more than 4 000 bytes behind the head are on disk (B-38)
    m = await brokers.master(
        "ASYNC_MASTER", slaveReadEnable=read_enable, total_physical_memory_bytes=10_000
    )
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    await brokers.w.ok(
        m.addr,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        body=fastjson.dumps(
            {"groupName": "G", "brokerId": 5, "whichBrokerWhenConsumeSlowly": 2}
        ).encode(),
    )
    for i in range(40):
        await brokers.w.send(m.addr, TOPIC, 0, b"x" * 400 + bytes([i]))
    r = await brokers.w.pull(m.addr, "G", TOPIC, 0, offset, 2)
    assert r.code == ResponseCode.SUCCESS and r.require_int("suggestWhichBrokerId") == expected


# ---------------------------------------------------------------------- offsets while the master is down


async def test_b030_s005_slave_takes_commits_alone_keeps_them_across_restarts_and_merges_them_back(
    brokers,
):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    w = brokers.w
    await w.create_topic(m.addr, TOPIC, 2)
    await _send(brokers, m, 10)
    await w.commit(m.addr, "G", TOPIC, 0, 2)
    await brokers.caught_up(m, s)
    port = m.server.port
    await m.stop()

    await w.commit(s.addr, "G", TOPIC, 0, 7)  # accepted by the slave (B-30), into its journal
    assert await w.query(s.addr, "G", TOPIC, 0) == 7
    stats = fastjson.loads(
        (await w.ok(s.addr, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G"})).body
    )
    assert [v["consumerOffset"] for v in stats["offsetTable"].values()] == [7]
    await s.stop()
    s = await brokers.slave(None)  # no master to follow: its journal still answers
    assert await w.query(s.addr, "G", TOPIC, 0) == 7
    await s.stop()

    m = await brokers.start("master", brokerRole="ASYNC_MASTER", port=port)
    s = await brokers.slave(m)
    await wait_until("the merge", lambda: _merged(s))
    assert m.server.broker.stored_offset("G", TOPIC, 0) == 7
    (change,) = [c for c in _changes(m) if c.cause == "slave_merge"]
    assert (change.old, change.new) == (2, 7)


async def _merged(s: Node) -> bool:
    return bool(s.server.replicator.merge_seqs) and not s.server.broker.journal.pending()


def _changes(node: Node):
    store = node.server.broker.store
    with store.read() as txn:
        return list(store.offsets.changes(txn, TOPIC, "G", 0))


async def test_s005_commits_to_a_slave_while_the_master_is_up_reach_the_master(brokers):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    await brokers.caught_up(m, s)
    # a client whose route still points at the slave
    await brokers.w.commit(s.addr, "G", TOPIC, 0, 4)
    await wait_until("the merge", lambda: _merged(s))
    assert m.server.broker.stored_offset("G", TOPIC, 0) == 4
    await brokers.caught_up(m, s)
    assert await brokers.w.query(s.addr, "G", TOPIC, 0) == 4


async def test_s005_deliveries_a_slave_serves_while_the_master_is_down_are_recorded_on_the_master(
    brokers, tmp_path, monkeypatch
):
    monkeypatch.setattr(slave_replication, "SHIP_BATCH", 3)  # the journal goes back in two requests
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m)
    w = brokers.w
    await w.create_topic(m.addr, TOPIC, 2)
    sent = await _send(brokers, m, 5, 0)
    await _send(brokers, m, 3, 1)
    await brokers.caught_up(m, s)
    port = m.server.port
    await m.stop()

    pulls = [(0, 0, 3), (0, 3, 32), (1, 1, 32), (1, 3, 32)]  # the last finds nothing: no delivery
    answers = [await w.pull(s.addr, "G", TOPIC, q, offset, n) for q, offset, n in pulls]
    assert [r.code for r in answers] == [ResponseCode.SUCCESS] * 3 + [ResponseCode.PULL_NOT_FOUND]
    await w.commit(s.addr, "G", TOPIC, 0, 5)
    journal = s.server.broker.journal
    assert [(d.queue_id, d.offsets) for d in journal.pending_deliveries()] == [
        (0, (0, 1, 2)),
        (0, (3, 4)),
        (1, (1, 2)),
    ]
    assert [c.local_seq for c in journal.pending()] == [4]  # one counter for both

    # the slave reconnects by itself
    m = await brokers.start("master", brokerRole="ASYNC_MASTER", port=port)
    await wait_until("the merge", lambda: _journal_forgotten(s))
    log = list(m.server.broker.store.log.read())
    delivered = [r for _, r in log if r["type"] == "messages_delivered"]
    assert [(r["queue_id"], r["offset"], r["offsets"], r["next_offset"]) for r in delivered] == [
        (0, 0, [0, 1, 2], 3),
        (0, 3, [3, 4], 5),
        (1, 1, [1, 2], 3),
    ]
    assert {r["served_by"]["broker_id"] for r in delivered} == {1}
    assert {r["served_by"]["addr"] for r in delivered} == {s.addr}
    assert [r["served_by"]["local_seq"] for r in delivered] == [1, 2, 3]
    # served before the master recorded them
    assert all(r["served_by"]["ts"] <= r["ts"] for r in delivered)
    # one without commits: it covers deliveries
    merged = [r for _, r in log if r["type"] == "slave_offsets_merged"]
    assert [(r["journal_upto"], r["deliveries"], len(r["commits"])) for r in merged] == [
        (3, 3, 0),
        (4, 0, 1),
    ]
    assert m.server.broker.stored_offset("G", TOPIC, 0) == 5
    ev = [
        e
        for e in m.server.broker.message_journey(sent[1].require_str("msgId"))["events"]
        if e["event"] == "delivered"
    ]
    assert [(e["servedBy"]["brokerId"], e["pullOffset"]) for e in ev] == [(1, 0)]
    await brokers.caught_up(m, s)
    assert journal.pending_all() == ([], [])
    await s.stop()
    await m.stop()
    assert compare(tmp_path / "master", tmp_path / "slave") == []


async def test_s005_a_delivery_a_slave_serves_while_the_master_is_up_reaches_the_master(brokers):
    m = await brokers.master("ASYNC_MASTER", slaveReadEnable=True)
    s = await brokers.slave(m, slaveReadEnable=True)
    await brokers.w.create_topic(m.addr, TOPIC, 1)
    await _send(brokers, m, 2)
    await brokers.caught_up(m, s)
    # slaveReadEnable: a consumer reading from the slave
    r = await brokers.w.pull(s.addr, "G", TOPIC, 0, 0)
    assert r.code == ResponseCode.SUCCESS
    await wait_until("the merge", lambda: _journal_forgotten(s))
    (delivered,) = [
        r for _, r in m.server.broker.store.log.read() if r["type"] == "messages_delivered"
    ]
    assert (delivered["offsets"], delivered["served_by"]["broker_id"]) == ([0, 1], 1)


async def _journal_forgotten(s: Node) -> bool:
    return bool(s.server.replicator.merge_seqs) and s.server.broker.journal.pending_all() == (
        [],
        [],
    )


# ---------------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    ("conf", "argv", "role", "broker_id"),
    [
        ({}, ["--role", "slave"], "SLAVE", 1),
        ({}, ["--role", "slave", "--broker-id", "2"], "SLAVE", 2),
        ({}, ["--role", "broker"], "ASYNC_MASTER", 0),
        (
            {"brokerRole": "SLAVE", "brokerId": 3},
            ["--role", "broker"],
            "SLAVE",
            3,
        ),  # broker.conf decides
        (
            {"brokerRole": "SYNC_MASTER", "brokerId": 3},
            ["--role", "broker"],
            "SYNC_MASTER",
            0,
        ),  # masters are 0
    ],
)
def test_serve_role_and_broker_id(conf, argv, role, broker_id):
    from es_broker.cli import build_parser
    from es_broker.server.serve_options import with_role as _with_role

    config = _with_role(BrokerConfig(**conf), build_parser().parse_args(["serve", *argv]))
    assert (config.brokerRole, config.brokerId) == (role, broker_id)


@pytest.mark.parametrize(
    "argv", [["--role", "slave", "--broker-id", "0"], ["--role", "broker", "--master", "h:1"]]
)
def test_serve_refuses_a_slave_with_broker_id_0_and_a_master_with_a_master(argv):
    from es_broker.cli import build_parser
    from es_broker.server.serve_options import with_role as _with_role

    with pytest.raises(ValueError):
        _with_role(BrokerConfig(), build_parser().parse_args(["serve", *argv]))


@pytest.mark.parametrize("policy", ["latest_wins", "compat_overwrite"])
async def test_s005_a_slave_promoted_to_master_records_what_it_took_alone(
    brokers, tmp_path, policy
):
    m = await brokers.master("ASYNC_MASTER")
    s = await brokers.slave(m, slave_offset_merge=policy)
    w = brokers.w
    await w.create_topic(m.addr, TOPIC, 1)
    await _send(brokers, m, 10)
    await w.commit(m.addr, "G", TOPIC, 0, 2)
    await brokers.caught_up(m, s)
    await m.stop()  # for good

    r = await w.pull(s.addr, "G", TOPIC, 0, 2, 5)
    assert [msg.queue_offset for msg in bodies(r)] == [2, 3, 4, 5, 6]
    await w.commit(s.addr, "G", TOPIC, 0, 7)
    await s.stop()

    # the operator restarts the slave's data directory as the master of broker-a
    promoted = await brokers.start(
        "slave", brokerRole="ASYNC_MASTER", brokerId=0, slave_offset_merge=policy
    )
    broker = promoted.server.broker
    # RocketMQ's promoted slave keeps its table, too
    assert broker.stored_offset("G", TOPIC, 0) == 7
    delivered, merged = [record for _, record in broker.store.log.read(1)][-2:]
    assert delivered["type"] == "messages_delivered" and delivered["offsets"] == [2, 3, 4, 5, 6]
    assert merged["type"] == "slave_offsets_merged" and merged["promotion"] is True
    assert [q[5] for q in merged["queues"]] == ["applied"]
    last = broker.store.log.last_seq
    await promoted.stop()
    journal = SlaveOffsetJournal(tmp_path / "slave" / JOURNAL_DIR)
    assert journal.pending_all() == ([], [])  # merged once: the next start records nothing more
    journal.close()
    again = await brokers.start(
        "slave", brokerRole="ASYNC_MASTER", brokerId=0, slave_offset_merge=policy
    )
    assert again.server.broker.store.log.last_seq == last
    await again.stop()
    replay(tmp_path / "slave", tmp_path / "replayed")
    assert compare(tmp_path / "slave", tmp_path / "replayed") == []
