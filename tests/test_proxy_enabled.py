"""`es-broker serve --enable-proxy`: the gRPC proxy as the broker's child process (B-612)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from rocketmq import Message, Producer
from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf
from tests.process_fixtures import _env, serve
from tests.proxy_fixtures import config, send_raw, signed
from tests.waiting import poll_until_sync

_READY = re.compile(r"proxy listening on (\S+) \(gRPC\), pid (\d+)")


def _proxies(log: Path) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2))) for m in _READY.finditer(log.read_text())]


def _send(endpoint: str, topic: str, body: bytes) -> str:
    producer = Producer(config(endpoint), topics=(topic,))
    producer.startup()
    try:
        m = Message()
        m.topic, m.body = topic, body
        return str(producer.send(m).message_id)
    finally:
        producer.shutdown()


def test_b612_the_broker_outlives_its_proxy_and_starts_it_again(tmp_path):
    log = tmp_path / "broker.log"
    with serve(tmp_path / "data", "--enable-proxy", "--grpcServerPort", "0", log_file=log) as b:
        first = poll_until_sync(lambda: _proxies(log), what="the proxy's ready line")[0]
        b.admin("updateTopic", "-t", "PE", "-c", "DefaultCluster", "-r", "2", "-w", "2")
        _send(first[0], "PE", b"through the first proxy")
        os.kill(first[1], signal.SIGKILL)
        again = poll_until_sync(
            lambda: [p for p in _proxies(log) if p[1] != first[1]], what="the proxy started again"
        )[0]
        assert f"the gRPC proxy (pid {first[1]}) exited with -9" in log.read_text()
        assert b.process.poll() is None  # the broker did not die with it
        _send(again[0], "PE", b"through the second proxy")
        rows = b.admin_json("topicStatus", "-t", "PE")
        assert sum(int(r["maxOffset"]) for r in rows) == 2
    assert not any(_alive(pid) for _, pid in _proxies(log))  # the broker's stop stopped its proxy
    # and before the broker closed: the proxy's clients unregistered from a broker still there
    assert "unregistration from broker" not in log.read_text()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of an exited child of the (gone) broker is reaped by init; a live one answers
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_b627_a_grpc_port_in_use_is_one_line_and_exit_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "es_broker.cli", "proxy", "-n", "127.0.0.1:1"]
            + ["--grpcServerPort", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
        )
    assert done.returncode == 1
    assert f"es-broker proxy: cannot listen on 127.0.0.1:{port} (gRPC)" in done.stderr
    assert "Traceback" not in done.stderr


def test_b612_with_acl_the_brokers_proxy_reads_the_brokers_acl_files(tmp_path):
    conf, acl_file = acl_conf(tmp_path)
    log = tmp_path / "broker.log"
    with serve(
        tmp_path / "data",
        "--config",
        str(conf),
        "--enable-proxy",
        "--grpcServerPort",
        "0",
        log_file=log,
    ) as b:
        endpoint = poll_until_sync(lambda: _proxies(log), what="the proxy's ready line")[0][0]
        assert f"ACL {acl_file}" in log.read_text()
        b.admin(
            "updateTopic",
            "-t",
            "TopicA",
            "-c",
            "DefaultCluster",
            "--access-key",
            ADMIN.access_key,
            "--secret-key",
            ADMIN.secret_key,
        )
        with pytest.raises(grpc.RpcError) as refused:
            send_raw(endpoint, "TopicA", (("x-mq-client-id", "t"),))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        signed_ok = send_raw(endpoint, "TopicA", signed(PRODUCER.access_key, PRODUCER.secret_key))
        assert signed_ok.status.code == pb.Code.OK
