"""A producer with a broker that stopped answering while the name server still lists it (B-540, B-541).

A name server and two brokers, broker-a and broker-b, run as processes
(`tests/ha_fixtures.py`). broker-a is stopped (SIGSTOP): its connections stay
open, so the name server keeps routing to it and every request to it times out.
The producer's sends must pass it over after the first one that timed out,
instead of losing every other send to it (round robin), and come back to it
once it answers again.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
import trio

from es_broker.client import Producer, SendResult
from es_broker.client.config import ClientConfig, ProducerConfig
from es_broker.client.sync import SyncProducer
from es_broker.net.remoting_client import RemotingClient, RemotingError
from es_broker.remoting.command import request
from es_broker.remoting.message import parse_offset_msg_id
from tests.ha_fixtures import _BROKER, _NAMESRV, Proc, Wire, start, write_conf
from tests.helpers import wait_until

TOPIC = "TwoBrokers"
SENDS = 20
# heartbeats every 0.5 s: the way a passed-over broker is found back (B-541)
QUICK_HEARTBEAT = ClientConfig(poll_name_server_interval=3600, heartbeat_broker_interval=0.5)
ONE_SECOND = ProducerConfig(send_msg_timeout=1.0)  # a send to the stopped broker times out in 1 s


async def start_broker(workdir: Path, name: str, namesrv: str) -> Proc:
    conf = write_conf(workdir / f"{name}.conf", brokerName=name)
    return await start(
        name,
        workdir,
        [
            "--role",
            "broker",
            "--namesrv",
            namesrv,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(workdir / name),
            "--config",
            str(conf),
            "--readmodel-url",
            "none",
        ],
        _BROKER,
    )


def stored_at(result: SendResult) -> str:
    (host, port), _ = parse_offset_msg_id(result.offset_msg_id)
    return f"{host}:{port}"


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_b541_sends_pass_over_a_broker_that_stopped_answering_until_it_answers_again(
    tmp_path, nursery, blocking
):
    namesrv = await start(
        "namesrv",
        tmp_path,
        [
            "--role",
            "namesrv",
            "--namesrv-listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "ns"),
        ],
        _NAMESRV,
    )
    procs = [namesrv]
    options = {
        "instance_name": "p",
        "client_ip": "127.0.0.1",
        "client_config": QUICK_HEARTBEAT,
        "config": ONE_SECOND,
    }
    blocking_producer: SyncProducer | None = None
    producer: Producer | None = None
    try:
        a = await start_broker(tmp_path, "broker-a", namesrv.addr)
        procs.append(a)
        b = await start_broker(tmp_path, "broker-b", namesrv.addr)
        procs.append(b)
        w = Wire(RemotingClient(nursery))
        for broker in (a, b):
            await w.create_topic(broker.addr, TOPIC, 2)
        if blocking:
            blocking_producer = SyncProducer(namesrv.addr, "PG", **options)
            await trio.to_thread.run_sync(blocking_producer.start)
            sync_send = blocking_producer.send

            async def send(body: bytes) -> SendResult:
                return await trio.to_thread.run_sync(sync_send, TOPIC, body)
        else:
            producer = Producer(namesrv.addr, "PG", **options)
            await producer.start(nursery)
            async_send = producer.send

            async def send(body: bytes) -> SendResult:
                return await async_send(TOPIC, body)

        before = [stored_at(await send(b"before%d" % i)) for i in range(8)]
        assert set(before) == {a.addr, b.addr}  # round robin over both brokers

        a.process.send_signal(signal.SIGSTOP)  # connected, listed, and answering nothing
        outcomes: list[str] = []
        for i in range(SENDS):
            try:
                outcomes.append(stored_at(await send(b"stopped%d" % i)))
            except Exception as exc:  # the send timed out at broker-a
                outcomes.append(f"failed: {exc}")
        failed = [o for o in outcomes if o.startswith("failed")]
        # the first send to broker-a finds it dead; no later one is chosen for it
        assert len(failed) <= 1, failed
        assert set(outcomes) - set(failed) == {b.addr}

        a.process.send_signal(signal.SIGCONT)
        sent = 0

        async def one_reaches_a() -> bool:
            nonlocal sent
            sent += 1
            return stored_at(await send(b"back%d" % sent)) == a.addr

        await wait_until("a send stored on broker-a again", one_reaches_a, 30)
    finally:
        if blocking_producer is not None:
            await trio.to_thread.run_sync(blocking_producer.shutdown)
        if producer is not None:
            await producer.shutdown()
        for proc in reversed(procs):
            proc.process.send_signal(signal.SIGCONT)
            proc.stop()


def test_a_peer_that_never_takes_the_connection_fails_it_after_the_connect_timeout():
    """A SYN nobody answers (here: a listener whose backlog is full) ends in a RemotingError after
    the client's connect timeout (RocketMQ's connectTimeoutMillis), not the kernel's two minutes."""
    with socket.socket() as full, socket.socket() as queued:
        full.bind(("127.0.0.1", 0))
        full.listen(0)  # one connection in the accept queue, never accepted: later SYNs dropped
        queued.connect(full.getsockname())
        addr = f"127.0.0.1:{full.getsockname()[1]}"

        async def main() -> str:
            async with trio.open_nursery() as nursery:
                client = RemotingClient(nursery, connect_timeout=0.5)
                try:
                    await client.invoke(addr, request(34), timeout=60)
                except RemotingError as exc:
                    return str(exc)
                finally:
                    nursery.cancel_scope.cancel()
            raise AssertionError("connected to a listener that takes no connection")

        assert trio.run(main) == f"connect to {addr} failed: no answer within 0.5 s"
