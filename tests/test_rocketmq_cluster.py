"""es-broker beside RocketMQ 4.9.8 in one cluster (B-528..B-530).

No RocketMQ build runs here (no Maven Central), so the 4.9.8 side is tests/rocketmq_498_frames.py:
the REGISTER_BROKER frame a 4.9.8 broker sends, and a 4.9.8 name server's reading of one, both
written from the 4.9.8 sources. What runs for real is es-broker: its name server given the 4.9.8
frame over TCP beside an es-broker broker, and its broker registering with a listener that reads
frames by the 4.9.8 rules.
"""

from __future__ import annotations

import json
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from es_broker.client import Producer, PushConsumer
from es_broker.client.config import ClientConfig
from es_broker.client.subscription import ConsumeFromWhere
from es_broker.clock import ManualClock
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.frames import decode_frame
from es_broker.server.namesrv import NameServer
from tests.cluster_fixtures import admin, broker_process, drain_cluster, route_perms
from tests.helpers import FAST, Collector
from tests.process_fixtures import serve
from tests.rocketmq_498_frames import (
    Broker498,
    RouteTable498,
    Topic,
    read_registration,
    split_frame,
)
from tests.waiting import poll_until, poll_until_sync

PEER = "127.0.0.1:30911"  # the 4.9.8 broker's address (no process listens there)


def _read_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        part = sock.recv(4 - len(head))
        assert part, "the name server closed the connection"
        head += part
    (length,) = struct.unpack(">i", head)
    rest = b""
    while len(rest) < length:
        part = sock.recv(length - len(rest))
        assert part, "the name server closed the connection"
        rest += part
    return head + rest


def _register_498(sock: socket.socket, peer: Broker498) -> dict:
    sock.sendall(peer.register_frame())
    header, _ = split_frame(_read_frame(sock))
    return header


def test_b528_a_4_9_8_brokers_registration_is_routed_beside_an_es_broker_broker(tmp_path):
    with serve(tmp_path / "data", conf=["brokerName=es-broker-a"]) as served:
        admin(
            served.namesrv,
            "updateTopic",
            "-b",
            served.broker,
            "-t",
            "MIG_ORDERS",
            "-r",
            "4",
            "-w",
            "4",
        )
        peer = Broker498("rmq-broker-b", PEER, topics=[Topic("MIG_ORDERS", 8, 8)])
        host, port = served.namesrv.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            answer = _register_498(sock, peer)
            assert answer["code"] == ResponseCode.SUCCESS, answer
            assert answer["opaque"] == peer.opaque and answer["flag"] == 1  # its response
            route = admin(served.namesrv, "topicRoute", "-t", "MIG_ORDERS")
            queues = {q["brokerName"]: q for q in route["queueDatas"]}
            assert {
                n: (q["readQueueNums"], q["writeQueueNums"], q["perm"]) for n, q in queues.items()
            } == {
                "es-broker-a": (4, 4, 6),
                "rmq-broker-b": (8, 8, 6),
            }
            brokers = {b["brokerName"]: b["brokerAddrs"] for b in route["brokerDatas"]}
            assert brokers == {"es-broker-a": {"0": served.broker}, "rmq-broker-b": {"0": PEER}}
            # its own topics too: the broker-name topic routes to it alone
            assert route_perms(served.namesrv, "rmq-broker-b") == {"rmq-broker-b": 7}
            clusters = admin(served.namesrv, "clusterList")
            listed = json.dumps(clusters)
            assert "es-broker-a" in listed and "rmq-broker-b" in listed and PEER in listed

            # mqadmin updateBrokerConfig -k brokerPermission -v 4 on the 4.9.8 broker: its next
            # registration carries perm 4 on every topic, with the data version moved on
            peer.update_permission(4, now_ms=peer.timestamp + 1000)
            assert _register_498(sock, peer)["code"] == ResponseCode.SUCCESS
            assert route_perms(served.namesrv, "MIG_ORDERS") == {
                "es-broker-a": 6,
                "rmq-broker-b": 4,
            }
        # its connection closed (the broker stopped): RouteInfoManager#onChannelDestroy forgets it
        poll_until_sync(
            lambda: route_perms(served.namesrv, "MIG_ORDERS") == {"es-broker-a": 6},
            what="the 4.9.8 broker forgotten",
        )


async def test_b529_a_silent_4_9_8_broker_expires_after_120_s():
    clock = ManualClock()
    ns = NameServer(clock)
    peer = Broker498("rmq-broker-b", PEER, topics=[Topic("MIG_ORDERS", 8, 8)])
    answer = await ns.register_broker(None, decode_frame(peer.register_frame()))
    assert answer.code == ResponseCode.SUCCESS
    assert ns.routes.route("MIG_ORDERS") is not None
    clock.advance(30_000)  # its next heartbeat (registerNameServerPeriod, 30 s) keeps it live
    await ns.register_broker(None, decode_frame(peer.register_frame()))
    clock.advance(120_000)  # BROKER_CHANNEL_EXPIRED_TIME: not yet past it
    assert ns.scan_not_active() == [] and ns.routes.route("MIG_ORDERS") is not None
    clock.advance(1)
    assert ns.scan_not_active() == [PEER]
    assert ns.routes.route("MIG_ORDERS") is None
    assert "rmq-broker-b" not in ns.routes.cluster_info().broker_addr_table


# ------------------------------------------------------------------ es-broker on a 4.9.8 name server


class _Reader498(socketserver.BaseRequestHandler):
    """A name server's port that keeps every frame and answers SUCCESS, as 4.9.8's does to a
    registration it accepts (the reading itself is the test's, by the 4.9.8 rules)."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        while True:
            try:
                frame = _read_frame(sock)
            except (AssertionError, OSError):
                return
            command, _ = split_frame(frame)
            with self.server.lock:  # type: ignore[attr-defined]
                self.server.frames.append(frame)  # type: ignore[attr-defined]
                self.server.lock.notify_all()  # type: ignore[attr-defined]
            reply = json.dumps(
                {
                    "code": 0,
                    "extFields": {},
                    "flag": 1,
                    "language": "JAVA",
                    "opaque": command["opaque"],
                    "serializeTypeCurrentRPC": "JSON",
                    "version": 409,
                },
                separators=(",", ":"),
            ).encode()
            sock.sendall(struct.pack(">ii", 4 + len(reply), len(reply)) + reply)


@contextmanager
def _namesrv_498() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Reader498)
    server.daemon_threads = True
    server.frames = []  # type: ignore[attr-defined]
    server.lock = threading.Condition()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _registrations(server, count: int) -> list:
    """The first `count` REGISTER_BROKER frames, read by the 4.9.8 rules."""
    deadline = time.monotonic() + 60
    with server.lock:
        while True:
            frames = [f for f in server.frames if split_frame(f)[0]["code"] == 103]
            if len(frames) >= count:
                return [read_registration(f) for f in frames]
            left = deadline - time.monotonic()
            assert left > 0, f"{len(frames)} registrations, {count} awaited"
            server.lock.wait(left)


def test_b530_es_brokers_registration_reads_as_4_9_8s_name_server_reads_it(tmp_path):
    with _namesrv_498() as reader:
        namesrv = f"127.0.0.1:{reader.server_address[1]}"
        with broker_process(tmp_path, "es-broker-a", namesrv) as broker:
            (first,) = _registrations(reader, 1)[:1]
            header = first.header
            assert {
                k: header[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")
            } == {
                "brokerName": "es-broker-a",
                "brokerAddr": broker,
                "clusterName": "DefaultCluster",
                "brokerId": 0,
            }
            assert header["haServerAddr"].endswith(":10912") and header["bodyCrc32"] != 0
            # es-broker's own fields are no field of 4.9.8's header class: never read there
            assert set(first.ignored) <= {"topicTableComplete", "deletedTopics"}
            assert {"TBW102", "SELF_TEST_TOPIC", "es-broker-a"} <= set(first.topics)
            assert all(t["perm"] in (6, 7) for t in first.topics.values())
            routes = RouteTable498()
            assert routes.register(first)  # its first registration: every topic taken

            admin(namesrv, "updateTopic", "-b", broker, "-t", "MIG_ORDERS", "-r", "4", "-w", "4")
            admin(namesrv, "updateBrokerConfig", "-b", broker, "-k", "brokerPermission", "-v", "4")
            regs = _registrations(reader, 3)
            for reg in regs[1:]:
                routes.register(reg)
            # the permission change reached a 4.9.8 name server: its data version moved on, so
            # RouteInfoManager took every topic again, each with the broker's perm 4
            assert routes.queue_perm[("MIG_ORDERS", "es-broker-a")] == 4
            assert routes.queue_perm[("TBW102", "es-broker-a")] == 4
            assert regs[2].data_version != regs[1].data_version


# ------------------------------------------------------------------ add and drain


async def _run(fn, *args):
    return await trio.to_thread.run_sync(fn, *args)


async def test_b531_add_and_drain_two_brokers_on_one_name_server(tmp_path, nursery):
    """RocketMQ's way to move a cluster: add a broker, make the old one read-only
    (`updateBrokerConfig -k brokerPermission -v 4`), let its consumers drain it, then stop it."""
    fast = ClientConfig(poll_name_server_interval=0.5, heartbeat_broker_interval=1.0)
    with drain_cluster(tmp_path, "MIG") as cluster:
        namesrv, old = cluster.namesrv, cluster.old
        producer = Producer(namesrv, "PID_DRAIN", client_config=fast)
        await producer.start(nursery)
        sent: dict[str, set[bytes]] = {"broker-old": set(), "broker-new": set()}

        async def send(n: int, tag: str) -> list[str]:
            names = []
            for i in range(n):
                result = await producer.send("MIG", f"{tag}-{i}".encode())
                sent[result.queue.broker_name].add(f"{tag}-{i}".encode())
                names.append(result.queue.broker_name)
            return names

        assert set(await send(40, "before")) == {"broker-old", "broker-new"}

        await _run(
            admin, namesrv, "updateBrokerConfig", "-b", old, "-k", "brokerPermission", "-v", "4"
        )
        # the name server's route: the old broker's queues read-only, the new one's read-write
        assert await _run(route_perms, namesrv, "MIG") == {"broker-old": 4, "broker-new": 6}
        # after the producer's next route refresh (pollNameServerInterval), every send goes to
        # the new broker
        await poll_until(
            lambda: (
                {q.broker_name: q.perm for q in producer.instance.routes["MIG"].queue_datas}
                == {"broker-old": 4, "broker-new": 6}
            ),
            what="the producer's route refreshed",
        )
        assert set(await send(40, "after")) == {"broker-new"}

        # a consumer drains what the old broker still holds (its queues stay readable)
        collector = Collector()
        consumer = PushConsumer(
            namesrv,
            "GID_DRAIN",
            collector,
            subscriptions={"MIG": "*"},
            config=FAST,
            client_config=fast,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        await consumer.start(nursery)
        await collector.wait_count(80, timeout=60)
        by_broker = {
            name: {m.body for m in collector.received if m.queue.broker_name == name}
            for name in sent
        }
        assert by_broker == sent and len(sent["broker-old"]) > 0
        await consumer.shutdown()

        # the old broker stopped: the name server forgets it, sends go on to the new one
        await _run(cluster.stop_old)
        await poll_until(
            lambda: route_perms(namesrv, "MIG") == {"broker-new": 6},
            what="the old broker gone",
        )
        assert set(await send(10, "stopped")) == {"broker-new"}
        await producer.shutdown()
