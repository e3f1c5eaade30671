"""TLS on the gRPC port (B-652, B-653), with the official Python client's own TLS.

The Python client 5.1.2 opens its secure channel with `grpc.ssl_channel_credentials()`
and no roots of its own: it trusts grpc's default roots, which
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names. That is read once per process, so the
client runs in a process of its own with the test CA as those roots.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import service_pb2 as spb

from es_broker.net.tls import GRPC_KEY_PASSWORD_ENV
from tests.process_fixtures import _env, serve
from tests.proxy_fixtures import proxy
from tests.test_proxy_enabled import _proxies
from tests.tls_fixtures import KEY_PASSWORD, Certs, certs, tls_conf
from tests.waiting import poll_until_sync

__all__ = ["certs"]  # the module's fixture

SEND = """
import sys
from rocketmq import Message, Producer
from tests.proxy_fixtures import config

endpoint, topic = sys.argv[1], sys.argv[2]
producer = Producer(config(endpoint), topics=(topic,), tls_enable=True)
producer.startup()
try:
    m = Message()
    m.topic, m.body = topic, b"over TLS"
    print(producer.send(m).message_id)
finally:
    producer.shutdown()
"""


def send_over_tls(endpoint: str, topic: str, ca: Path) -> str:
    """A message sent with the official client over TLS, trusting `ca`; its message id."""
    done = subprocess.run(
        [sys.executable, "-c", SEND, endpoint, topic],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(_env(), GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(ca)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def stored(admin, topic: str, *tls: str) -> int:
    rows = json.loads(admin("topicStatus", "-t", topic, *tls, "--json").stdout)
    return sum(int(r["maxOffset"]) for r in rows)


def test_b652_the_proxy_serves_grpc_over_tls_with_the_given_certificate(
    tmp_path, certs: Certs, monkeypatch
):
    monkeypatch.setenv(GRPC_KEY_PASSWORD_ENV, KEY_PASSWORD)  # the encrypted key's password
    with (
        serve(tmp_path / "data", log_file=tmp_path / "broker.log") as broker,
        proxy(
            broker.namesrv,
            "--tls-cert",
            str(certs.cert),
            "--tls-key",
            str(certs.encrypted_key),
            log_file=tmp_path / "proxy.log",
        ) as (_, endpoint),
    ):
        topic = "T652"
        broker.admin("updateTopic", "-t", topic, "-c", "DefaultCluster", "-r", "2", "-w", "2")
        assert send_over_tls(endpoint, topic, certs.ca)
        assert stored(broker.admin, topic) == 1
        with grpc.insecure_channel(endpoint) as channel:  # plain text is not served
            call = channel.unary_unary(
                "/apache.rocketmq.v2.MessagingService/QueryRoute",
                request_serializer=spb.QueryRouteRequest.SerializeToString,
                response_deserializer=spb.QueryRouteResponse.FromString,
            )
            with pytest.raises(grpc.RpcError) as refused:
                call(spb.QueryRouteRequest(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_b652_a_key_that_does_not_load_stops_the_proxy_with_one_line(tmp_path, certs: Certs):
    done = subprocess.run(
        [sys.executable, "-m", "es_broker.cli", "proxy", "-n", "127.0.0.1:1"]
        + ["--grpcServerPort", "0", "--tls-cert", str(certs.cert)]
        + ["--tls-key", str(certs.encrypted_key)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in _env().items() if k != GRPC_KEY_PASSWORD_ENV},
    )
    assert done.returncode == 1
    assert f"key {certs.encrypted_key}: cannot be used" in done.stderr
    assert "Traceback" not in done.stderr


def test_b653_an_enforcing_broker_runs_its_proxy_over_tls_both_ways(tmp_path, certs: Certs):
    log = tmp_path / "broker.log"
    conf = tls_conf(certs, "enforcing")
    with serve(
        tmp_path / "data", "--enable-proxy", "--grpcServerPort", "0", log_file=log, conf=conf
    ) as broker:
        endpoint = poll_until_sync(lambda: _proxies(log), what="the proxy's ready line")[0][0]
        tls = ("--tls-ca", str(certs.ca))
        broker.admin(
            "updateTopic", "-t", "T653", "-c", "DefaultCluster", "-r", "2", "-w", "2", *tls
        )
        assert send_over_tls(endpoint, "T653", certs.ca)
        assert stored(broker.admin, "T653", *tls) == 1
        assert "proxy listening on" in log.read_text() and ", TLS" in log.read_text()
