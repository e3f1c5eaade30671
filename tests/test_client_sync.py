"""The blocking SyncProducer: sends from the calling thread over blocking sockets (docs/protocol.md §7.2).

The in-process brokers run in the test's trio loop, so the blocking code runs
in a worker thread (`trio.to_thread.run_sync`), as a user's script would in
its own thread.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections import Counter

import pytest
import trio

from es_broker.client import (
    BrokerRefused,
    ClientConfig,
    ClientError,
    Message,
    ProducerConfig,
    SendStatus,
    SyncProducer,
)
from es_broker.client.admin import Admin
from es_broker.client.blocking import BlockingRemoting
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from tests.credential_fixtures import CREDS, assert_all_signed_by, recorded_topic
from tests.helpers import topic_ready
from tests.process_fixtures import serve
from tests.tls_fixtures import tls_conf


def sync_producer(env, **kw) -> SyncProducer:
    kw.setdefault("client_ip", "127.0.0.1")
    return SyncProducer(env.namesrv_addr, "PG", **kw)


async def in_thread(script):
    """Run blocking client code in a worker thread while the broker serves in this loop."""
    return await trio.to_thread.run_sync(script)


async def test_blocking_sends_are_stored_round_robin_under_their_uniq_keys(running):
    await topic_ready(running, "T", 4)

    def script():
        with sync_producer(running) as p:
            return [p.send("T", f"m{i}".encode(), tags="TagA", keys=["k"]) for i in range(8)]

    results = await in_thread(script)
    assert [r.status for r in results] == [SendStatus.SEND_OK] * 8
    queues = [r.queue.queue_id for r in results]
    assert Counter(queues) == Counter({0: 2, 1: 2, 2: 2, 3: 2})
    assert all((b - a) % 4 == 1 for a, b in zip(queues, queues[1:], strict=False))
    stored = await Admin(running.client, running.namesrv_addr).view_message(
        results[3].offset_msg_id
    )
    assert (stored.body, stored.tags, stored.keys) == (b"m3", "TagA", ["k"])
    assert stored.properties["UNIQ_KEY"] == results[3].msg_id
    assert len({r.msg_id for r in results}) == 8


async def test_a_blocking_batch_and_a_oneway_send_are_stored(running):
    await topic_ready(running, "T", 1)

    def script():
        with sync_producer(running) as p:
            batch = p.send_batch("T", [Message(b"b0", tags="A"), Message(b"b1", tags="B")])
            p.send_oneway("T", b"one way")
            after = p.send("T", b"after")  # answered after the oneway on the same connection
            return batch, after

    batch, after = await in_thread(script)
    assert batch.msg_id.count(",") == 1 and batch.queue_offset == 0
    assert after.queue_offset == 3
    assert running.server.broker.max_offset("T", 0) == 4


async def test_a_refused_blocking_send_is_retried_on_the_next_queue(running):
    await topic_ready(running, "T", 8)

    def script():
        with sync_producer(running) as p:
            # it holds the 8-queue route
            p.send("T", b"warm up", queue_selector=lambda queues: queues[0])
            # queue 7 is gone: SYSTEM_ERROR there
            trio.from_thread.run(running.create_topic, "T", 7)
            return [p.send("T", f"m{i}".encode()) for i in range(16)]

    results = await in_thread(script)
    queues = Counter(r.queue.queue_id for r in results)
    assert set(queues) == set(range(7))
    assert set(queues.values()) <= {2, 3}
    assert sum(running.server.broker.max_offset("T", q) for q in range(7)) == 17


async def test_a_refusal_java_does_not_retry_is_raised_by_the_blocking_send(running):
    await topic_ready(running, "T", 1)
    big = os.urandom(5 * 1024 * 1024)  # incompressible, above the broker's maxMessageSize

    def script():
        with sync_producer(running, config=ProducerConfig(max_message_size=8 * 1024 * 1024)) as p:
            with pytest.raises(BrokerRefused) as refused:
                p.send("T", big)
            return refused.value.code

    assert await in_thread(script) == ResponseCode.MESSAGE_ILLEGAL
    assert running.server.broker.max_offset("T", 0) == 0


async def test_sends_from_several_threads_at_once_are_all_stored(running):
    await topic_ready(running, "T", 4)

    def script():
        results = []
        with sync_producer(running) as p:

            def sender(n: int) -> None:
                results.extend(p.send("T", f"{n}-{i}".encode()) for i in range(25))

            threads = [threading.Thread(target=sender, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        return results

    results = await in_thread(script)
    assert len(results) == 100 and len({r.msg_id for r in results}) == 100
    assert sum(running.server.broker.max_offset("T", q) for q in range(4)) == 100


async def test_blocking_sends_with_credentials_are_signed(recorded):
    topic = await recorded_topic(recorded, "SignedSyncSend")

    def script():
        with sync_producer(recorded, credentials=CREDS) as p:
            p.send(topic, b"signed")
            p.send_batch(topic, [Message(b"b0"), Message(b"b1")])

    await in_thread(script)
    assert {
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
    } <= recorded.recorder.codes()
    assert_all_signed_by(recorded.recorder.seen, CREDS)


def test_a_blocking_request_without_an_answer_times_out_and_drops_its_connection():
    with socket.socket() as silent:  # accepts (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        addr = f"127.0.0.1:{silent.getsockname()[1]}"
        remoting = BlockingRemoting()
        with pytest.raises(RemotingError, match="no answer from .* within 0.2 s"):
            remoting.invoke(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=0.2)
        assert not remoting._idle.get(addr)  # a late answer must not be read as the next one's
        remoting.close()


def test_a_blocking_send_to_a_stopped_broker_fails_after_its_retries(tmp_path):
    with serve(tmp_path / "data", "--readmodel-url", "none") as served:
        served.admin("updateTopic", "-b", served.broker, "-t", "T", "-r", "2", "-w", "2")
        config = ProducerConfig(send_msg_timeout=1.0)  # the whole send, retries included
        with SyncProducer(served.namesrv, "PG", client_ip="127.0.0.1", config=config) as p:
            assert p.send("T", b"first").status == SendStatus.SEND_OK
            served.process.send_signal(signal.SIGSTOP)  # connected, but it answers nothing
            try:
                with pytest.raises(ClientError, match=r"Send \[3\] times, still failed") as failed:
                    p.send("T", b"unanswered")
            finally:
                served.process.send_signal(signal.SIGCONT)
            assert isinstance(failed.value.__cause__, RemotingError)
            assert p.send("T", b"again").status == SendStatus.SEND_OK


def test_blocking_sends_over_tls(tmp_path, certs):
    client_config = ClientConfig(use_tls=True, tls_ca_file=str(certs.ca))
    with serve(
        tmp_path / "data", "--readmodel-url", "none", conf=tls_conf(certs, "enforcing")
    ) as served:
        with SyncProducer(
            served.namesrv, "PG_TLS", client_ip="127.0.0.1", client_config=client_config
        ) as p:
            results = [p.send("TlsTopic", f"tls-{i}".encode()) for i in range(5)]
        assert [r.status for r in results] == [SendStatus.SEND_OK] * 5
        assert len({(r.queue.queue_id, r.queue_offset) for r in results}) == 5
