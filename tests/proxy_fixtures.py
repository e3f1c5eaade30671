"""A broker process and the gRPC proxy (`es-broker proxy`) in front of it, for RocketMQ 5 clients.

The 5.x client under test is the official one from PyPI (rocketmq-python-client);
it runs its own threads and blocks, so the tests using it are plain functions.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from tests.process_fixtures import ServedBroker, _env, serve

_PROXY = re.compile(r"proxy listening on (\S+) \(gRPC\)")


@dataclass
class Proxied:
    broker: ServedBroker
    process: subprocess.Popen
    endpoint: str  # HOST:PORT of the proxy's gRPC server

    def topic(self, name: str, *extra: str, queues: int = 4) -> str:
        self.broker.admin(
            "updateTopic",
            "-t",
            name,
            "-c",
            "DefaultCluster",
            "-r",
            str(queues),
            "-w",
            str(queues),
            *extra,
        )
        return name


@contextmanager
def proxy(
    namesrv: str, *extra: str, log_file: Path | None = None
) -> Iterator[tuple[subprocess.Popen, str]]:
    args = [
        sys.executable,
        "-m",
        "es_broker.cli",
        "proxy",
        "-n",
        namesrv,
        "--grpcServerPort",
        "0",
        *extra,
    ]
    sink = open(log_file, "a") if log_file is not None else None  # noqa: SIM115 (closed in finally)
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=sink or subprocess.STDOUT, text=True, env=_env()
    )
    try:
        assert process.stdout is not None
        endpoint = None
        for line in process.stdout:
            if m := _PROXY.search(line):
                endpoint = m.group(1)
                break
        if endpoint is None:
            raise RuntimeError(f"es-broker proxy did not start (exit {process.wait()})")
        yield process, endpoint
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if sink is not None:
            sink.close()


@contextmanager
def proxied(
    tmp_path: Path, conf: Sequence[str] = (), proxy_args: Sequence[str] = ()
) -> Iterator[Proxied]:
    with (
        serve(tmp_path / "data", conf=conf, log_file=tmp_path / "broker.log") as broker,
        proxy(broker.namesrv, *proxy_args, log_file=tmp_path / "proxy.log") as (process, endpoint),
    ):
        yield Proxied(broker, process, endpoint)


def config(endpoint: str, ak: str = "", sk: str = "") -> Any:
    from rocketmq import ClientConfiguration, Credentials

    return ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=10)


def raw(px: Proxied, method: str, request, response_type, *, metadata=(), timeout: float = 10):
    """One unary call with grpc itself: `request` may be a message or bytes."""
    with grpc.insecure_channel(px.endpoint) as channel:
        call = channel.unary_unary(
            f"/apache.rocketmq.v2.MessagingService/{method}",
            request_serializer=lambda r: r if isinstance(r, bytes) else r.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        return call(request, timeout=timeout, metadata=(("x-mq-client-id", "raw-test"), *metadata))


def v5(topic: str, body: bytes, msg_id: str, **system) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name=topic), body=body)
    m.system_properties.message_id = msg_id
    for name, value in system.items():
        setattr(m.system_properties, name, value)
    return m


def signed(ak: str, sk: str, date: str = "20261128T120000Z") -> tuple[tuple[str, str], ...]:
    sig = hmac.new(sk.encode(), date.encode(), hashlib.sha1).hexdigest()
    auth = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"
    return (("x-mq-client-id", "acl-test"), ("x-mq-date-time", date), ("authorization", auth))


def send_raw(endpoint: str, topic: str, metadata) -> spb.SendMessageResponse:
    m = pb.Message(topic=pb.Resource(name=topic), body=b"raw")
    m.system_properties.message_id = "01C0FFEE"
    m.system_properties.message_type = pb.MessageType.NORMAL
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=spb.SendMessageRequest.SerializeToString,
            response_deserializer=spb.SendMessageResponse.FromString,
        )
        return call(spb.SendMessageRequest(messages=[m]), metadata=metadata, timeout=10)
