"""Master/slave acceptance on real processes (issue 6): a name server, a master and a slave on loopback.

Consumers are driven with raw PULL_MESSAGE / UPDATE_CONSUMER_OFFSET /
QUERY_CONSUMER_OFFSET requests through RemotingClient, following RocketMQ's
client rules by hand (in-memory offsets, commit target, suggestWhichBrokerId),
so the broker side is what is under test. They heartbeat the slave only: a
consumer's heartbeat makes the master record `consumer_group_changed` when
its connection closes, a record that could land after the slave was stopped
and spoil the final verify.
"""

from __future__ import annotations

from collections import Counter

import trio

from es_broker.net.remoting_client import RemotingClient, RemotingError
from es_broker.remoting.codes import ResponseCode
from tests.ha_fixtures import (
    SLOW_MACHINE_MS,
    Cluster,
    Wire,
    bodies,
    caught_up,
    start_cluster,
    verify_identical,
)
from tests.helpers import wait_until

TOPIC = "HaTopic"
GROUP = "HaGroup"


class RawConsumer:
    """One consumer instance of GROUP holding every queue of TOPIC: in-memory offsets, as a client has (B-41)."""

    def __init__(self, w: Wire, queues: int, batch: int = 8) -> None:
        self.w = w
        self.offsets = dict.fromkeys(range(queues), 0)
        self.batch = batch
        self.consumed: list[bytes] = []

    async def start_from(self, addr: str) -> None:
        """Where a starting instance begins: the broker's stored offset (B-45)."""
        for q in self.offsets:
            self.offsets[q] = max(await self.w.query(addr, GROUP, TOPIC, q), 0)

    async def round(self, addr: str, *, commit_to: str | None) -> list[bytes]:
        """One pull per queue from addr; commit each queue's new offset to commit_to (None: not yet)."""
        got = []
        for q, offset in self.offsets.items():
            r = await self.w.pull(addr, GROUP, TOPIC, q, offset, self.batch)
            if r.code == ResponseCode.SUCCESS:
                got += [m.body for m in bodies(r)]
                self.offsets[q] = r.require_long("nextBeginOffset")
            if commit_to is not None:
                await self.w.commit(commit_to, GROUP, TOPIC, q, self.offsets[q])
        self.consumed += got
        return got

    async def commit_all(self, addr: str) -> None:
        for q, offset in self.offsets.items():
            await self.w.commit(addr, GROUP, TOPIC, q, offset)


def progress(cluster: Cluster) -> dict[int, int]:
    """`es-broker admin consumerProgress`: the master's table, or a slave's while the master is away (B-113)."""
    rows = cluster.admin_json("consumerProgress", "-g", GROUP)["queues"]
    return {r["queueId"]: r["consumerOffset"] for r in rows if r["topic"] == TOPIC}


async def test_b111_sync_master_killed_mid_produce_every_send_ok_is_readable_from_the_slave(
    tmp_path, nursery
):
    cluster = await start_cluster(tmp_path, master={"brokerRole": "SYNC_MASTER"}, slave={})
    try:
        w = Wire(RemotingClient(nursery))
        m, s = cluster.master.addr, cluster.slave.addr
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        await w.create_topic(m, TOPIC, 4)
        acked: list[tuple[int, int, bytes]] = []
        refused: Counter[int] = Counter()
        lost_in_flight = 0

        async def produce(n: int) -> None:
            nonlocal lost_in_flight
            i = 0
            while True:
                body = f"p{n}-{i}".encode()
                try:
                    r = await w.send(m, TOPIC, i % 4, body)
                except RemotingError:
                    lost_in_flight += 1  # the master died with this send unanswered
                    return
                if r.code == ResponseCode.SUCCESS:
                    acked.append((r.require_int("queueId"), r.require_long("queueOffset"), body))
                else:
                    refused[r.code] += 1
                if len(acked) >= 150 and cluster.master.process.poll() is None:
                    cluster.master.kill9()  # mid-produce: the other producers have sends in flight
                i += 1

        async with trio.open_nursery() as producers:
            for n in range(4):
                producers.start_soon(produce, n)
        assert len(acked) >= 150
        # stored on the master without a slave's acknowledgement: allowed, but then not SEND_OK
        assert set(refused) <= {
            ResponseCode.FLUSH_SLAVE_TIMEOUT,
            ResponseCode.SLAVE_NOT_AVAILABLE,
        }, refused

        on_slave: dict[tuple[int, int], bytes] = {}
        for q in range(4):
            offset = 0
            while True:
                r = await w.pull(s, "VerifyGroup", TOPIC, q, offset, 32)
                if r.code != ResponseCode.SUCCESS:
                    break
                for msg in bodies(r):
                    on_slave[(q, msg.queue_offset)] = msg.body
                offset = r.require_long("nextBeginOffset")
        missing = [(q, o, b) for q, o, b in acked if on_slave.get((q, o)) != b]
        assert not missing, (
            f"{len(missing)} of {len(acked)} SEND_OK messages are not on the slave: {missing[:5]}"
        )
    finally:
        cluster.stop_all()


async def _fail_over_and_back(tmp_path, nursery, policy: str) -> None:
    master = {
        "brokerRole": "SYNC_MASTER",
        "slaveTimeout": SLOW_MACHINE_MS,
        "slave_offset_merge": policy,
    }
    cluster = await start_cluster(tmp_path, master=master, slave={"slave_offset_merge": policy})
    try:
        w = Wire(RemotingClient(nursery))
        m, s = cluster.master.addr, cluster.slave.addr
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        await w.create_topic(m, TOPIC, 2)
        for i in range(120):
            assert (await w.send(m, TOPIC, i % 2, f"m{i}".encode())).code == ResponseCode.SUCCESS
        await w.heartbeat(s, "consumer-a", GROUP, TOPIC)  # consumers heartbeat slaves too (B-111)

        a = RawConsumer(w, queues=2)
        for _ in range(3):  # 48 messages from the master, each batch committed there
            await a.round(m, commit_to=m)
        master_had = dict(a.offsets)
        # processed, not yet committed when the master dies
        in_flight = await a.round(m, commit_to=None)
        cluster.master.kill9()

        # the master is down: the client commits to the slave and keeps reading it (B-113, B-116, B-30)
        await a.commit_all(s)
        for _ in range(2):
            await a.round(s, commit_to=s)
        last_committed = dict(a.offsets)
        assert last_committed == {0: 48, 1: 48}
        assert {q: await w.query(s, GROUP, TOPIC, q) for q in (0, 1)} == last_committed
        assert progress(cluster) == last_committed  # the name server lists only the slave now

        await cluster.restart_master()

        async def merged() -> bool:
            status = await w.runtime(s)
            return status["haPendingOffsetCommits"] == "0" and status["haLastMergeSeq"] != "0"

        await wait_until("the slave's commits merged on the master", merged)
        after_merge = progress(cluster)

        # an instance that starts now (restart, rebalance) asks the master
        b = RawConsumer(w, queues=2)
        await b.start_from(m)
        while await b.round(m, commit_to=m):
            pass
        assert progress(cluster) == {0: 60, 1: 60}
        everything = {f"m{i}".encode() for i in range(120)}
        assert set(a.consumed) | set(b.consumed) == everything
        twice = sum((Counter(a.consumed) & Counter(b.consumed)).values())

        if policy == "latest_wins":
            # S-5: the slave's commits won; nothing is consumed twice beyond what was in flight at the kill
            assert after_merge == last_committed
            assert twice <= len(in_flight) and twice == 0
        else:
            # B-123: the master's table overwrote the slave's; the new instance re-consumes from there
            assert after_merge == master_had
            assert twice == sum(last_committed[q] - master_had[q] for q in (0, 1)) == 48
            assert twice > len(in_flight)
        await verify_identical(cluster, w)
    finally:
        cluster.stop_all()


async def test_s005_consumer_fails_over_to_the_slave_and_its_commits_survive_the_masters_return(
    tmp_path, nursery
):
    await _fail_over_and_back(tmp_path, nursery, "latest_wins")


async def test_b123_compat_overwrite_loses_the_slave_commits_and_reconsumes_like_rocketmq(
    tmp_path, nursery
):
    await _fail_over_and_back(tmp_path, nursery, "compat_overwrite")


async def test_b114_lagging_consumer_is_sent_to_the_slave_and_back_to_the_master_near_the_head(
    tmp_path, nursery
):
    # RAM 20 000 bytes: a read is "slow" beyond 8 000 bytes of commit log behind the head (B-38, B-115)
    settings = {"slaveReadEnable": True, "total_physical_memory_bytes": 20_000}
    master = {"brokerRole": "SYNC_MASTER", "slaveTimeout": SLOW_MACHINE_MS, **settings}
    cluster = await start_cluster(tmp_path, master=master, slave=settings)
    try:
        w = Wire(RemotingClient(nursery))
        m, s = cluster.master.addr, cluster.slave.addr
        await wait_until("the slave caught up", lambda: caught_up(w, m, s))
        await w.create_topic(m, TOPIC, 1)
        for i in range(100):
            assert (
                await w.send(m, TOPIC, 0, b"x" * 300 + str(i).encode())
            ).code == ResponseCode.SUCCESS
        addrs = await w.route(cluster.namesrv.addr, TOPIC)
        assert addrs == {0: m, 1: s}

        # a consumer following the suggestion of every answer, as the client does (B-117)
        broker_id, offset, path = 0, 0, []
        while offset < 100:
            r = await w.pull(addrs[broker_id], GROUP, TOPIC, 0, offset, 8)
            assert r.code == ResponseCode.SUCCESS, r.remark
            suggestion = r.require_int("suggestWhichBrokerId")
            path.append((broker_id, offset, suggestion))
            offset, broker_id = r.require_long("nextBeginOffset"), suggestion
        assert path[0] == (0, 0, 1)  # far behind on the master: go to the slave
        assert [p for p in path if p[0] == 1], path  # ... which served it while it lagged
        # near the head it is back on the master, and stays there
        assert path[-1] == (
            0,
            path[-1][1],
            0,
        )
        first_back = next(i for i, p in enumerate(path) if i > 0 and p[0] == 0)
        assert all(b == 1 for b, _, _ in path[1:first_back]) and all(
            b == 0 for b, _, _ in path[first_back:]
        )

        # without lag a consumer never leaves the master (suggestion = the group's brokerId, 0)
        r = await w.pull(m, "HeadGroup", TOPIC, 0, 96, 8)
        assert r.code == ResponseCode.SUCCESS and r.require_int("suggestWhichBrokerId") == 0
    finally:
        cluster.stop_all()
