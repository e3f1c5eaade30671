"""Automatic fail-over on etcd (B-370..B-389): real etcd, name server and broker-a nodes as processes.

ES_HA_KILLS sets how many times the SYNC_MASTER test kills its leader (the
CI default keeps it around two minutes; the issue's acceptance is 20). Times
from a kill to the first acknowledged send on the new leader are printed
(`-s` shows them), never asserted.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import trio

from es_broker.client import ConsumeFromWhere, MessageModel, Producer, PushConsumer, SendStatus
from es_broker.client.config import ClientConfig
from es_broker.config import BrokerConfig
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.peer_outcomes import LastingCondition
from es_broker.store import Store
from tests.etcd_fixtures import Group, etcd_keys, following, leader, start_group
from tests.ha_fixtures import SLOW_MACHINE_MS, Wire, bodies
from tests.helpers import FAST, Collector, cli_checked, cli_ok, wait_until

TOPIC = "FailoverTopic"
GROUP = "FailoverGroup"
PUSH_GROUP = "FailoverPushGroup"
QUEUES = 4
LEASE_MS = 2000
KILLS = int(os.environ.get("ES_HA_KILLS", "3"))
# no route poll to speak of: the producer finds the new leader because a lost connection to a
# broker refreshes the routes at once (B-388)
NO_ROUTE_POLL = ClientConfig(poll_name_server_interval=3600, heartbeat_broker_interval=0.5)


@dataclass
class Acked:
    body: bytes
    msg_id: str
    queue_id: int
    queue_offset: int
    broker: str
    at: float


@dataclass
class Load:
    """A producer sending numbered messages until stopped; what was acknowledged (SEND_OK)."""

    producer: Producer
    acked: list[Acked] = field(default_factory=list)
    refused: int = 0
    stopped: bool = False
    done: trio.Event = field(default_factory=trio.Event)

    async def run(self) -> None:
        try:
            await self._send_until_stopped()
        finally:
            self.done.set()

    async def _send_until_stopped(self) -> None:
        n = 0
        while not self.stopped:
            n += 1
            body = f"message-{n}".encode()
            try:
                r = await self.producer.send(TOPIC, body)
            except Exception:  # refused or no answer: not acknowledged, the next one is tried
                self.refused += 1
                await trio.sleep(0.01)  # pacing while no master takes writes
                continue
            if r.status == SendStatus.SEND_OK:
                self.acked.append(
                    Acked(
                        body,
                        r.msg_id,
                        r.queue.queue_id,
                        r.queue_offset,
                        r.queue.broker_name,
                        time.monotonic(),
                    )
                )
            else:
                self.refused += 1


async def all_messages(w: Wire, addr: str) -> dict[tuple[int, int], tuple[str, bytes]]:
    """(queue, queue offset) -> (msgId, body) of every message of TOPIC on `addr`."""
    out: dict[tuple[int, int], tuple[str, bytes]] = {}
    for q in range(QUEUES):
        offset = 0
        while True:
            msgs = bodies(await w.pull(addr, GROUP, TOPIC, q, offset))
            if not msgs:
                break
            for m in msgs:
                assert (q, m.queue_offset) not in out
                out[(q, m.queue_offset)] = (m.properties.get("UNIQ_KEY", ""), m.body)
            offset = msgs[-1].queue_offset + 1
    return out


def verify_every_node(group: Group) -> None:
    for name in group.nodes:
        done = cli_checked("verify", "--data-dir", str(group.workdir / name), timeout=120)
        assert done.stdout.startswith("OK"), done.stdout


def records_of(data_dir: Path, kind: str) -> list[dict]:
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        return [r for _, r in store.log.read() if r["type"] == kind]
    finally:
        store.close()


async def producer_for(group: Group, nursery: trio.Nursery) -> Producer:
    producer = Producer(
        group.namesrv.addr,
        "FailoverProducer",
        instance_name="p",
        client_ip="127.0.0.1",
        client_config=NO_ROUTE_POLL,
    )
    await producer.start(nursery)
    return producer


def offsets_on_disk(data_dir: Path, group: str) -> dict[int, int]:
    """queue -> the group's stored offset of TOPIC in a stopped node's offset table."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        with store.read() as txn:
            return {q: store.offsets.query(txn, TOPIC, group, q) for q in range(QUEUES)}
    finally:
        store.close()


async def push_consumer_for(
    group: Group, nursery: trio.Nursery, collector: Collector
) -> PushConsumer:
    consumer = PushConsumer(
        group.namesrv.addr,
        PUSH_GROUP,
        collector,
        subscriptions={TOPIC: "*"},
        message_model=MessageModel.CLUSTERING,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        instance_name="c",
        client_ip="127.0.0.1",
        client_config=NO_ROUTE_POLL,
        config=FAST,
    )
    await consumer.start(nursery)
    return consumer


async def caught_up_all(w: Wire, group: Group, leader_addr: str, but: str) -> bool:
    for n in group.alive():
        if n != but and not await following(w, group, n, leader_addr):
            return False
    return True


async def test_sync_master_killed_again_and_again_loses_nothing_acknowledged(tmp_path, nursery):
    """Three SYNC_MASTER nodes, the leader killed -9 ES_HA_KILLS times under load, with no wait for
    the followers before a kill: a follower takes over by itself, the other follows it, the producer
    and a push consumer (route poll 1 h) find the new leader because a lost broker connection
    refreshes their routes, every acknowledged message is readable afterwards with its body and msgId
    at its queue position and was consumed at least once, an answered offset commit is never lost
    (B-383) and no node's committed offsets go back, writes resume, and every node's log verifies."""
    group = await start_group(
        tmp_path,
        ["n1", "n2", "n3"],
        brokerRole="SYNC_MASTER",
        ha_lease_ms=LEASE_MS,
        slaveTimeout=SLOW_MACHINE_MS,
    )
    w = Wire(RemotingClient(nursery))
    try:
        name, lp = await leader(w, group)
        await wait_until("followers caught up", lambda: caught_up_all(w, group, lp.addr, name), 60)
        await w.create_topic(lp.addr, TOPIC, QUEUES)
        collector = Collector()
        consumer = await push_consumer_for(group, nursery, collector)
        load = Load(await producer_for(group, nursery))
        nursery.start_soon(load.run)
        takeover: list[float] = []
        committed: dict[int, int] = {}
        for _ in range(KILLS):
            before = len(load.acked)
            await wait_until("sends acknowledged", lambda b=before: len(load.acked) >= b + 20, 60)
            for q in range(QUEUES):  # a consumer's progress: an answered commit is replicated
                offset = max((a.queue_offset + 1 for a in load.acked if a.queue_id == q), default=0)
                r = await w.call(
                    lp.addr,
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q, "commitOffset": offset},
                )
                if r.code == ResponseCode.SUCCESS:
                    committed[q] = max(committed.get(q, 0), offset)
            # no wait for the followers: the commits answered are theirs already (B-383)
            killed_at = time.monotonic()
            killed = name
            group.nodes[killed].kill9()
            name, lp = await leader(w, group, not_node=killed)
            await wait_until(
                "a send acknowledged by the new leader",
                lambda t=killed_at: any(a.at > t for a in load.acked),
                60,
            )
            takeover.append(next(a.at for a in load.acked if a.at > killed_at) - killed_at)
            for q, offset in committed.items():
                assert await w.query(lp.addr, GROUP, TOPIC, q) >= offset
            await group.start_node(killed)
            await wait_until(
                "the old leader follows",
                lambda k=killed, a=lp.addr: following(w, group, k, a),
                60,
            )
        load.stopped = True
        await load.done.wait()
        acked_bodies = {a.body for a in load.acked}
        await wait_until(
            "every acknowledged message consumed",
            lambda: acked_bodies <= {m.body for m in collector.received},
            120,
        )
        await consumer.shutdown()  # its offsets persisted
        await wait_until("followers caught up", lambda: caught_up_all(w, group, lp.addr, name), 60)
        stored = await all_messages(w, lp.addr)
        for a in load.acked:
            assert stored.get((a.queue_id, a.queue_offset)) == (a.msg_id, a.body), a
        consumed = {m.body for m in collector.received}
        print(
            f"\n{KILLS} kills: kill -> first acknowledged send on the new leader "
            f"median {statistics.median(takeover):.2f} s, max {max(takeover):.2f} s; "
            f"{len(load.acked)} sends acknowledged, {load.refused} refused or unanswered; "
            f"{len(collector.received)} deliveries to the push consumer, "
            f"{len(consumed & acked_bodies)} acknowledged messages consumed"
        )
        epochs = json.loads(etcd_keys(group.etcd)["/es-broker/DefaultCluster/broker-a/epoch"])
        assert epochs == KILLS + 1
        await load.producer.shutdown()
    finally:
        group.stop_all()
    verify_every_node(group)
    promoted = records_of(group.workdir / name, "ha_promoted")
    assert [r["epoch"] for r in promoted] == list(range(1, KILLS + 2))
    final = offsets_on_disk(group.workdir / name, PUSH_GROUP)
    for node in group.nodes:  # read back from every node: the same offsets, none ever lowered
        data_dir = group.workdir / node
        assert offsets_on_disk(data_dir, PUSH_GROUP) == final
        assert all(offsets_on_disk(data_dir, GROUP)[q] >= offset for q, offset in committed.items())
        for q in range(QUEUES):
            commits = [
                r["offset"]
                for r in records_of(data_dir, "offset_committed")
                if (r["group"], r["topic"], r["queue_id"]) == (PUSH_GROUP, TOPIC, q)
            ]
            assert commits == sorted(commits), (node, q, commits)
            assert commits and final[q] == commits[-1]


async def test_async_master_records_no_follower_got_are_set_aside_and_listed(tmp_path, nursery):
    """ASYNC_MASTER: records the old leader acknowledged alone are set aside when it rejoins:
    as many messages as the new leader lacks, each in the export, listed in a record on the
    new leader's log; the old leader then follows and both logs verify."""
    group = await start_group(
        tmp_path, ["n1", "n2"], brokerRole="ASYNC_MASTER", ha_lease_ms=LEASE_MS
    )
    w = Wire(RemotingClient(nursery))
    try:
        name, lp = await leader(w, group)
        other = next(n for n in group.nodes if n != name)
        await wait_until("the follower caught up", lambda: following(w, group, other, lp.addr), 60)
        await w.create_topic(lp.addr, TOPIC, QUEUES)
        for i in range(10):
            assert (await w.send(lp.addr, TOPIC, i % QUEUES, f"shared-{i}".encode())).code == 0
        await wait_until("the follower caught up", lambda: following(w, group, other, lp.addr), 60)
        group.nodes[other].process.send_signal(signal.SIGSTOP)  # the follower hears nothing
        alone = []
        for i in range(7):
            r = await w.send(
                lp.addr, TOPIC, i % QUEUES, f"alone-{i}".encode(), {"UNIQ_KEY": f"ALONE{i}"}
            )
            assert r.code == ResponseCode.SUCCESS
            alone.append(f"ALONE{i}")
        group.nodes[name].kill9()
        group.nodes[other].process.send_signal(signal.SIGCONT)
        new_name, new = await leader(w, group, not_node=name)
        lacking = [
            m
            for m in alone
            if m not in {mid for mid, _ in (await all_messages(w, new.addr)).values()}
        ]
        # a fetch answer already in the stopped follower's socket may still land: count, don't assume
        assert lacking and set(lacking) <= set(alone)
        await group.start_node(name)
        await wait_until("the old leader follows", lambda: following(w, group, name, new.addr), 60)
        await wait_until(
            "the set-aside recorded on the new leader",
            lambda: (
                etcd_keys(group.etcd) is not None
                and not (group.workdir / name / "ha_set_aside" / "pending.json").exists()
            ),
            60,
        )
        (export,) = (group.workdir / name / "ha_set_aside").glob("*/export")
        messages = pq.read_table(export / "message_bodies").to_pylist()
        assert sorted(m["msg_id"] for m in messages) == sorted(lacking)
        assert all(m["body"].startswith(b"alone-") and m["reason"] for m in messages)
        # the records in the export's families, each row with the reason
        stored = pq.read_table(export / "messages").to_pylist()
        assert sum(r["count"] for r in stored) == len(lacking)
        reasons = {r["reason"] for f in export.iterdir() for r in pq.read_table(f).to_pylist()}
        assert len(reasons) == 1 and f"node {name}" in reasons.pop()
        assert not list((group.workdir / name / "ha_set_aside").glob("*.jsonl"))
    finally:
        group.stop_all()
    (listed,) = records_of(group.workdir / new_name, "ha_records_set_aside")
    assert listed["node"] == name and sorted(listed["msg_ids"]) == sorted(lacking)
    assert listed["messages"] == len(lacking) and listed["export"] == str(export)
    verify_every_node(group)
    done = cli_checked(
        "verify",
        "--data-dir",
        str(group.workdir / new_name),
        "--against",
        str(group.workdir / name),
    )
    assert done.stdout.startswith("OK")


async def test_a_leader_cut_off_from_etcd_stops_writes_and_resumes_with_it(tmp_path, nursery):
    """etcd stopped: the leader refuses sends (SERVICE_NOT_AVAILABLE naming its lease) while
    pulls go on, no follower becomes a second master; etcd back: writes resume."""
    group = await start_group(
        tmp_path, ["n1", "n2"], brokerRole="ASYNC_MASTER", ha_lease_ms=LEASE_MS
    )
    w = Wire(RemotingClient(nursery))
    try:
        name, lp = await leader(w, group)
        other = next(n for n in group.nodes if n != name)
        await w.create_topic(lp.addr, TOPIC, QUEUES)
        assert (await w.send(lp.addr, TOPIC, 0, b"before")).code == ResponseCode.SUCCESS
        group.etcd.stop()
        stopped_at = time.monotonic()

        async def refused() -> object:
            r = await w.send(lp.addr, TOPIC, 0, b"during")
            return r if r.code == ResponseCode.SERVICE_NOT_AVAILABLE else None

        r = await wait_until("the leader refusing writes", refused, 60)
        print(
            f"\nwrites refused {time.monotonic() - stopped_at:.2f} s after etcd stopped: {r.remark}"
        )
        assert "lease" in (r.remark or "")
        # reads go on (the sends taken within the lease before the fence are there too)
        assert [m.body for m in bodies(await w.pull(lp.addr, GROUP, TOPIC, 0, 0))][0] == b"before"
        assert (
            await w.send(lp.addr, TOPIC, 0, b"still")
        ).code == ResponseCode.SERVICE_NOT_AVAILABLE
        rt = await w.runtime(group.nodes[other].addr)
        assert rt["brokerRole"] == "SLAVE"
        await group.etcd.start()
        name2, lp2 = await leader(w, group)
        assert (await w.send(lp2.addr, TOPIC, 0, b"after")).code == ResponseCode.SUCCESS
        for proc in group.alive().values():  # one master
            rt = await w.runtime(proc.addr)
            assert (rt["haFence"] == "") == (proc.addr == lp2.addr)
    finally:
        group.stop_all()
    verify_every_node(group)


@pytest.mark.parametrize("role", ["SYNC_MASTER", "ASYNC_MASTER"])
async def test_a_planned_switch_over_hands_the_lead_to_the_named_follower_without_loss(
    tmp_path, nursery, role
):
    """HA_SWITCH to a named follower, in either role: it leads the next epoch with every record
    the leader had; the old leader follows it; nothing acknowledged is lost and no committed
    offset moves back."""
    group = await start_group(
        tmp_path,
        ["n1", "n2", "n3"],
        brokerRole=role,
        ha_lease_ms=LEASE_MS,
        slaveTimeout=SLOW_MACHINE_MS,
    )
    w = Wire(RemotingClient(nursery))
    try:
        name, lp = await leader(w, group)
        others = sorted(n for n in group.nodes if n != name)
        for n in others:
            await wait_until("followers caught up", lambda n=n: following(w, group, n, lp.addr), 60)
        await w.create_topic(lp.addr, TOPIC, QUEUES)
        for i in range(20):
            assert (await w.send(lp.addr, TOPIC, i % QUEUES, f"m{i}".encode())).code == 0
        committed = {q: 1 + q for q in range(QUEUES)}
        for q, offset in committed.items():
            await w.commit(lp.addr, "SwitchGroup", TOPIC, q, offset)
        target = others[-1]  # not the one a tie would pick
        done = await cli_ok(
            "admin", "-n", group.namesrv.addr, "haSwitch", "-b", lp.addr, "-t", target
        )
        assert f"from {name} to {target}" in done.stdout
        new_name, new = await leader(w, group, not_node=name)
        assert new_name == target
        await wait_until("the old leader follows", lambda: following(w, group, name, new.addr), 60)
        status = await cli_ok("admin", "haStatus", "-b", new.addr)
        assert (
            "haEpoch" in status.stdout
            and f"haLeader                        : {target}" in status.stdout
        )
        rows = json.loads(
            (await cli_ok("admin", "-n", group.namesrv.addr, "clusterList", "--json")).stdout
        )
        assert {(r["brokerId"] == 0, r["role"], r["epoch"]) for r in rows} >= {(True, role, "2")}
        stored = await all_messages(w, new.addr)
        assert sorted(b for _, b in stored.values()) == sorted(f"m{i}".encode() for i in range(20))
        for q, offset in committed.items():
            assert await w.query(new.addr, "SwitchGroup", TOPIC, q) == offset
        assert (await w.send(new.addr, TOPIC, 0, b"after")).code == ResponseCode.SUCCESS
    finally:
        group.stop_all()
    (promoted,) = [r for r in records_of(group.workdir / target, "ha_promoted") if r["epoch"] == 2]
    assert promoted["reason"] == "switch_over" and promoted["old_leader"] == name
    verify_every_node(group)


def test_a_node_below_acked_says_so_once_then_once_a_minute_and_when_it_may_lead(caplog):
    """The best placed node below `acked` looks again every 50 ms: its ERROR is logged once, then at
    most once a minute while it lasts, and an INFO line says when it ends (B-372, as B-315)."""
    now = [1000.0]
    below = LastingCondition(logging.getLogger("t"), clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="t"):
        for _ in range(1200):  # a minute of looks, 50 ms apart
            below.holds("ha: node n2 holds records up to 7, below the acknowledged 9")
            now[0] += 0.05
        now[0] = 1060.0  # a minute after the first ERROR
        below.holds("ha: node n2 holds records up to 8, below the acknowledged 9")
        below.ended("ha: node n2 may lead")
        below.ended("ha: node n2 may lead")  # nothing more: it had ended
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["ERROR", "ERROR", "INFO"]
    assert "still so: 1201 times in 60 s" in lines[1][1]
    assert lines[2][1].startswith("ha: node n2 may lead (after 1201 time(s)")
