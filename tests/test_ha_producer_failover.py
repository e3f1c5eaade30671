"""A producer through automatic fail-overs of a two-node group (B-540, B-385): each node killed in turn.

etcd, a name server and the nodes n1 and n2 of broker-a run as processes
(`tests/etcd_fixtures.py`). A producer, the async `Producer` or the blocking
`SyncProducer`, sends one message after the other, with RocketMQ's heartbeat
interval and a route poll of an hour, so neither timer moves it. The leader is
killed -9; once the test has seen the name server route broker-a's master to
the other node, every send begun afterwards must be stored there: none fails,
none goes to the dead address. Then the killed node comes back, follows, and
the new leader is killed the same way, so both orders are covered (before B-540
the blocking producer stayed on the second dead master until a timer fired:
its failed sends told the client instance nothing, and the instance had no
connection of its own to that master to lose).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from es_broker.client import Producer, SendResult
from es_broker.client.config import ClientConfig
from es_broker.client.sync import SyncProducer
from es_broker.net.remoting_client import RemotingClient, RemotingError
from es_broker.remoting.message import parse_offset_msg_id
from tests.etcd_fixtures import Group, following, leader, start_group
from tests.ha_fixtures import SLOW_MACHINE_MS, Wire
from tests.helpers import wait_until

TOPIC = "FailoverTopic"
# RocketMQ's heartbeat interval (30 s) and a route poll of an hour: neither runs during a kill
NO_TIMERS = ClientConfig(poll_name_server_interval=3600, heartbeat_broker_interval=30)
AFTER_ROUTE = 10  # sends checked once the name server routes to the new master


@dataclass
class Sent:
    """One send: how many new routes the test had seen when it began, and how it ended."""

    routes_seen: int
    stored_at: str | None = None  # the broker address in its offset msgId
    error: str | None = None


@dataclass
class Load:
    """Sends one message after the other until stopped, through the async or the blocking producer."""

    send: Callable[[str, bytes], Awaitable[SendResult]]
    sends: list[Sent] = field(default_factory=list)
    routes_seen: int = 0  # times the test saw the name server route to a new master
    stopped: bool = False

    async def run(self) -> None:
        n = 0
        while not self.stopped:
            n += 1
            sent = Sent(self.routes_seen)
            self.sends.append(sent)
            try:
                result = await self.send(TOPIC, b"m%d" % n)
            except Exception as exc:  # refused or no answer: the next one is tried
                sent.error = str(exc)
                await trio.sleep(0.01)  # pacing while no master takes writes
                continue
            (host, port), _ = parse_offset_msg_id(result.offset_msg_id)
            sent.stored_at = f"{host}:{port}"

    def stored_at(self, addr: str) -> int:
        return sum(1 for s in self.sends if s.stored_at == addr)

    def after_route(self) -> list[Sent]:
        """The finished sends begun after the test saw the latest new route."""
        return [
            s for s in self.sends if s.routes_seen == self.routes_seen and (s.stored_at or s.error)
        ]


async def routes_master_to(w: Wire, group: Group, addr: str) -> bool:
    try:
        return (await w.route(group.namesrv.addr, TOPIC)).get(0) == addr
    except (RemotingError, AssertionError, ValueError):
        return False


async def kill_the_leader_and_follow_the_producer(w: Wire, group: Group, load: Load) -> str:
    """Kill the leader; the sends begun once the name server routes to the new one are stored there."""
    name, old = await leader(w, group)
    await wait_until("sends stored on the leader", lambda: load.stored_at(old.addr) >= 20, 60)
    (other,) = [n for n in group.nodes if n != name]
    new_addr = group.nodes[other].addr
    killed_at = len(load.sends)
    group.nodes[name].kill9()
    await wait_until(
        "the name server routing to the new master",
        lambda: routes_master_to(w, group, new_addr),
        60,
    )
    load.routes_seen += 1
    await wait_until("sends after the new route", lambda: len(load.after_route()) >= AFTER_ROUTE)
    checked = load.after_route()[:AFTER_ROUTE]
    failed = [s.error for s in load.sends[killed_at:] if s.error]
    print(f"\nkilled {name}: {len(failed)} sends failed from the kill to the new route's 10th send")
    assert [s.error for s in checked if s.error] == [], f"killed {name}"
    assert {s.stored_at for s in checked} == {new_addr}, f"killed {name}"
    await group.start_node(name)
    await wait_until("the old leader follows", lambda: following(w, group, name, new_addr), 60)
    return name


async def test_b540_the_producer_moves_to_the_new_master_once_the_name_server_routes_to_it(
    tmp_path, nursery
):
    """The async Producer (its requests go through the client instance's own connections)."""
    await _each_node_killed_in_turn(tmp_path, nursery, blocking=False)


async def test_b540_the_blocking_producer_moves_to_the_new_master_whichever_node_was_killed(
    tmp_path, nursery
):
    """The blocking SyncProducer (its sends go over sockets of their own)."""
    await _each_node_killed_in_turn(tmp_path, nursery, blocking=True)


async def _each_node_killed_in_turn(tmp_path, nursery, *, blocking: bool) -> None:
    group = await start_group(
        tmp_path,
        ["n1", "n2"],
        brokerRole="SYNC_MASTER",
        ha_lease_ms=2000,
        slaveTimeout=SLOW_MACHINE_MS,
    )
    w = Wire(RemotingClient(nursery))
    options = {"instance_name": "p", "client_ip": "127.0.0.1", "client_config": NO_TIMERS}
    blocking_producer: SyncProducer | None = None
    producer: Producer | None = None
    load: Load | None = None
    try:
        name, lp = await leader(w, group)
        (other,) = [n for n in group.nodes if n != name]
        await wait_until("the follower caught up", lambda: following(w, group, other, lp.addr), 60)
        await w.create_topic(lp.addr, TOPIC, 4)
        if blocking:
            blocking_producer = SyncProducer(group.namesrv.addr, "FailoverProducer", **options)
            await trio.to_thread.run_sync(blocking_producer.start)
            sync_send = blocking_producer.send

            async def send(topic: str, body: bytes) -> SendResult:
                return await trio.to_thread.run_sync(sync_send, topic, body)

            load = Load(send)
        else:
            producer = Producer(group.namesrv.addr, "FailoverProducer", **options)
            await producer.start(nursery)
            load = Load(producer.send)
        done = trio.Event()

        async def run_load() -> None:
            try:
                await load.run()
            finally:
                done.set()

        nursery.start_soon(run_load)
        killed = [await kill_the_leader_and_follow_the_producer(w, group, load) for _ in range(2)]
        assert sorted(killed) == ["n1", "n2"]  # each node was the leader killed once
        load.stopped = True
        await done.wait()
    finally:
        if load is not None:
            load.stopped = True
        if blocking_producer is not None:
            await trio.to_thread.run_sync(blocking_producer.shutdown)
        if producer is not None:
            await producer.shutdown()
        group.stop_all()
