"""TLS as RocketMQ 4.9.8 offers it (B-180..B-184), against real `es-broker serve` processes.

A throwaway CA and a server certificate for 127.0.0.1/localhost are made by
trustme for each test session; nothing here is a real key.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest
import trio
import trio.testing
import trustme

from es_broker.client import ClientConfig, ConsumeFromWhere, ConsumeResult, Producer, PushConsumer
from es_broker.config import load_broker_conf
from es_broker.net.remoting_client import RemotingClient, RemotingError
from es_broker.net.tls import TlsClientSettings
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.remoting.connection import Connection
from es_broker.server.edge.tls import ReplayStream, TlsMode, read_properties, with_tls_config_file
from tests.helpers import FAST
from tests.process_fixtures import ROOT, ServedBroker, _env, serve
from tests.tls_fixtures import KEY_PASSWORD, Certs, tls_conf
from tests.waiting import poll_until

BOUND = 30.0  # an upper bound for what must happen, never a measured duration


def trusting(certs: Certs) -> TlsClientSettings:
    return TlsClientSettings(ca_file=str(certs.ca))


async def ask(addr: str, code: int, tls: TlsClientSettings | None) -> int:
    """One request over a fresh client (plain, or TLS with these settings); its answer's code.

    The client's errors (RemotingError) come out as they are, not in an exception group.
    """
    outcome: list = []
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery, tls=tls)
        try:
            outcome.append((await client.invoke(addr, request(code), timeout=10)).code)
        except RemotingError as exc:
            outcome.append(exc)
        finally:
            await client.aclose()
            nursery.cancel_scope.cancel()
    if isinstance(outcome[0], RemotingError):
        raise outcome[0]
    return outcome[0]


async def runtime_info(addr: str, tls: TlsClientSettings | None) -> int:
    return await ask(addr, RequestCode.GET_BROKER_RUNTIME_INFO, tls)


async def namesrv_answer(addr: str, tls: TlsClientSettings | None) -> int:
    return await ask(addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, tls)


async def plain_request_is_closed_unanswered(addr: str) -> bool:
    """Send one well-formed plain-text request on a raw socket: True if the peer closes without answering."""
    host, port = addr.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    try:
        await stream.send_all(Connection().send(request(RequestCode.GET_BROKER_RUNTIME_INFO)))
        with trio.fail_after(BOUND):
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
        return data == b""
    finally:
        await stream.aclose()


@asynccontextmanager
async def tls_broker(tmp_path: Path, conf: list[str]) -> AsyncIterator[tuple[ServedBroker, Path]]:
    log_file = tmp_path / "broker.log"
    with serve(
        tmp_path / "data", "-v", "--readmodel-url", "none", log_file=log_file, conf=conf
    ) as served:
        yield served, log_file


def handshake_failures_at_info(log_file: Path) -> bool:
    """B-510: a client's failed TLS handshake is logged at INFO, never at WARNING."""
    lines = [line for line in log_file.read_text().splitlines() if "TLS handshake failed" in line]
    return bool(lines) and all(" INFO " in line for line in lines)


def tracebacks(log_file: Path) -> list[str]:
    return log_file.read_text().split("Traceback")[1:]


# ---------------------------------------------------------------------- B-180 settings


def test_b180_tls_keys_load_from_broker_conf_under_their_rocketmq_names(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "tls.server.mode=enforcing\ntls.server.need.client.auth=optional\n"
        "tls.server.certPath=/c.pem\ntls.server.keyPath=/k.pem\ntls.server.keyPassword=pw\n"
        "tls.server.trustCertPath=/ca.pem\ntls.test.mode.enable=false\ntls.enable=true\n"
    )
    config = load_broker_conf(conf)
    assert (
        config.tlsMode,
        config.tlsServerNeedClientAuth,
        config.tlsServerCertPath,
        config.tlsServerKeyPath,
        config.tlsServerKeyPassword,
        config.tlsServerTrustCertPath,
        config.tlsTestModeEnable,
        config.tlsEnable,
    ) == ("enforcing", "optional", "/c.pem", "/k.pem", "pw", "/ca.pem", False, True)


def test_b180_the_defaults_are_rocketmqs():
    config = load_broker_conf(Path("/dev/null"))
    assert TlsMode.parse(config.tlsMode) is TlsMode.PERMISSIVE
    assert (
        config.tlsTestModeEnable,
        config.tlsServerNeedClientAuth,
        config.tlsEnable,
        config.tlsConfigFile,
    ) == (True, "none", False, "/etc/rocketmq/tls.properties")


def test_b180_tls_config_file_overrides_broker_conf_but_not_the_mode(tmp_path):
    props = tmp_path / "tls.properties"
    props.write_text(
        "# a comment\ntls.server.mode=disabled\ntls.server.certPath : /from/file.pem\n"
        "tls.server.keyPath /from/\\\n    file.key\ntls.test.mode.enable=false\n"
    )
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"tls.server.mode=enforcing\ntls.server.certPath=/from/conf.pem\ntls.config.file={props}\n"
    )
    config = with_tls_config_file(load_broker_conf(conf))
    assert (
        config.tlsMode,
        config.tlsServerCertPath,
        config.tlsServerKeyPath,
        config.tlsTestModeEnable,
    ) == ("enforcing", "/from/file.pem", "/from/file.key", False)
    assert read_properties(props)["tls.server.mode"] == "disabled"


def start_fails(tmp_path: Path, conf: list[str]) -> str:
    """Run `es-broker serve` with these broker.conf lines; it must exit 2 at once. Returns its stderr."""
    conf_file = tmp_path / "broker.conf"
    conf_file.write_text("\n".join(conf) + "\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "127.0.0.1:0",
            "--namesrv-listen",
            "127.0.0.1:0",
            "--config",
            str(conf_file),
            "--readmodel-url",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        cwd=ROOT,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


def test_b180_a_missing_certificate_stops_the_broker_at_start(tmp_path, certs):
    err = start_fails(
        tmp_path,
        tls_conf(certs, "enforcing")[:2]
        + [f"tls.server.certPath={tmp_path}/nope.pem", f"tls.server.keyPath={certs.key}"],
    )
    assert f"{tmp_path}/nope.pem does not exist" in err


def test_b180_a_key_that_does_not_load_stops_the_broker_at_start(tmp_path, certs):
    garbage = tmp_path / "garbage.key"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    err = start_fails(
        tmp_path, tls_conf(certs, "permissive")[:3] + [f"tls.server.keyPath={garbage}"]
    )
    assert "server certificate" in err and "cannot be used" in err


def test_b180_a_wrong_key_password_stops_the_broker_at_start(tmp_path, certs):
    err = start_fails(
        tmp_path,
        tls_conf(certs, "enforcing")[:3]
        + [f"tls.server.keyPath={certs.encrypted_key}", "tls.server.keyPassword=wrong"],
    )
    assert "tls.server.keyPassword" in err


def test_b180_a_tls_config_file_that_does_not_exist_stops_the_broker_at_start(tmp_path, certs):
    err = start_fails(
        tmp_path, [*tls_conf(certs, "enforcing"), f"tls.config.file={tmp_path}/missing.properties"]
    )
    assert f"tls.config.file {tmp_path}/missing.properties does not exist" in err


def test_b180_a_misspelt_mode_stops_the_broker_at_start(tmp_path, certs):
    err = start_fails(tmp_path, tls_conf(certs, "enforced"))
    assert "tls.server.mode must be disabled, permissive or enforcing, got 'enforced'" in err


async def test_b180_an_encrypted_key_serves_with_its_password(tmp_path, certs):
    conf = tls_conf(certs, "enforcing")[:3] + [
        f"tls.server.keyPath={certs.encrypted_key}",
        f"tls.server.keyPassword={KEY_PASSWORD}",
    ]
    async with tls_broker(tmp_path, conf) as (served, _):
        assert await runtime_info(served.broker, trusting(certs)) == ResponseCode.SUCCESS


# ---------------------------------------------------------------------- B-181 enforcing


async def test_b181_enforcing_closes_a_plain_connection_without_an_answer_on_both_listeners(
    tmp_path, certs
):
    async with tls_broker(tmp_path, tls_conf(certs, "enforcing")) as (served, log_file):
        assert await plain_request_is_closed_unanswered(served.broker)
        assert await plain_request_is_closed_unanswered(served.namesrv)
        assert "a plain-text connection while tls.server.mode is enforcing" in log_file.read_text()
        with pytest.raises(RemotingError, match="closed"):
            await runtime_info(served.broker, None)


async def test_b181_enforcing_serves_producer_and_push_consumer_over_tls_end_to_end(
    tmp_path, certs, nursery
):
    client_config = ClientConfig(use_tls=True, tls_ca_file=str(certs.ca))
    async with tls_broker(tmp_path, tls_conf(certs, "enforcing")) as (served, log_file):
        # the broker registered with its own (enforcing) name server over TLS, so routes resolve
        producer = Producer(
            served.namesrv, "PG_TLS", client_ip="127.0.0.1", client_config=client_config
        )
        await producer.start(nursery)
        bodies = [f"tls-{i}".encode() for i in range(20)]
        for body in bodies:
            result = await producer.send("TlsTopic", body)
            assert result.status.name == "SEND_OK"
        await producer.shutdown()

        got: list[bytes] = []
        all_in = trio.Event()

        async def handler(messages) -> ConsumeResult:
            got.extend(m.body for m in messages)
            if len(got) >= len(bodies):
                all_in.set()
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            served.namesrv,
            "CG_TLS",
            handler,
            subscriptions={"TlsTopic": "*"},
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            client_ip="127.0.0.1",
            config=FAST,
            client_config=client_config,
        )
        await consumer.start(nursery)
        with trio.fail_after(BOUND):
            await all_in.wait()
        await consumer.shutdown()
        assert sorted(got) == sorted(bodies)
        assert not tracebacks(log_file)


async def test_b181_b510_a_client_that_does_not_trust_the_ca_fails_with_a_certificate_error(
    tmp_path, certs
):
    async with tls_broker(tmp_path, tls_conf(certs, "enforcing")) as (served, log_file):
        with pytest.raises(
            RemotingError, match="TLS handshake with .* failed: .*certificate verify failed"
        ):
            await runtime_info(served.broker, TlsClientSettings())  # the system store only
        other_ca = tmp_path / "other-ca.pem"
        trustme.CA().cert_pem.write_to_path(str(other_ca))
        with pytest.raises(RemotingError, match="certificate verify failed"):
            await runtime_info(served.broker, TlsClientSettings(ca_file=str(other_ca)))
        # RocketMQ's test mode trusts any server, when asked for
        assert (
            await runtime_info(served.broker, TlsClientSettings(test_mode=True))
            == ResponseCode.SUCCESS
        )
        assert handshake_failures_at_info(log_file)


# ---------------------------------------------------------------------- B-182 permissive


async def test_b182_permissive_serves_plain_and_tls_clients_on_both_listeners(tmp_path, certs):
    async with tls_broker(tmp_path, tls_conf(certs, "permissive")) as (served, _):
        assert await runtime_info(served.broker, None) == ResponseCode.SUCCESS
        assert await runtime_info(served.broker, trusting(certs)) == ResponseCode.SUCCESS
        assert await namesrv_answer(served.namesrv, None) == ResponseCode.SUCCESS
        assert await namesrv_answer(served.namesrv, trusting(certs)) == ResponseCode.SUCCESS


async def test_b182_the_bytes_read_to_decide_are_replayed_first_and_in_order():
    left, right = trio.testing.memory_stream_pair()
    replay = ReplayStream(right, b"\x00\x00\x00\x10head")
    await left.send_all(b"tail")
    assert await replay.receive_some(3) == b"\x00\x00\x00"
    assert await replay.receive_some(100) == b"\x10head"
    assert await replay.receive_some(100) == b"tail"


async def test_b182_the_default_permissive_test_mode_serves_tls_with_a_self_signed_certificate(
    tmp_path,
):
    async with tls_broker(tmp_path, []) as (served, _):
        assert await runtime_info(served.broker, None) == ResponseCode.SUCCESS
        assert (
            await runtime_info(served.broker, TlsClientSettings(test_mode=True))
            == ResponseCode.SUCCESS
        )
        with pytest.raises(RemotingError, match="certificate verify failed"):
            await runtime_info(served.broker, TlsClientSettings())


# ---------------------------------------------------------------------- B-183 disabled


async def test_b183_disabled_closes_a_tls_client_and_serves_plain(tmp_path, certs):
    async with tls_broker(tmp_path, tls_conf(certs, "disabled")) as (served, log_file):
        with pytest.raises(RemotingError, match="TLS handshake with .* failed"):
            await runtime_info(served.broker, trusting(certs))
        with pytest.raises(RemotingError, match="TLS handshake with .* failed"):
            await namesrv_answer(served.namesrv, trusting(certs))
        assert await runtime_info(served.broker, None) == ResponseCode.SUCCESS
        assert "a TLS handshake while tls.server.mode is disabled" in log_file.read_text()


# ---------------------------------------------------------------------- B-184 the edge


async def test_b184_a_stalled_tls_handshake_holds_its_slot_only_until_the_read_timeout(
    tmp_path, certs
):
    conf = tls_conf(certs, "enforcing", "max_connections=1", "frame_read_timeout_ms=1000")
    async with tls_broker(tmp_path, conf) as (served, log_file):
        host, port = served.broker.rsplit(":", 1)
        staller = await trio.open_tcp_stream(host, int(port))
        # a ClientHello's first bytes, then silence
        await staller.send_all(b"\x16\x03\x01\x02\x00\x01")

        async def a_new_connection_is_refused() -> bool:
            try:
                await runtime_info(served.broker, trusting(certs))
            except RemotingError:
                return True
            return False

        # while the handshake stalls, it holds the only slot: a new connection is closed at once
        await poll_until(
            a_new_connection_is_refused, BOUND, "a connection refused while the handshake stalls"
        )
        with trio.fail_after(BOUND):  # the broker closes the stalled handshake (after 1 s)
            with suppress(trio.BrokenResourceError):
                assert await staller.receive_some(1024) == b""
        await staller.aclose()
        assert await runtime_info(served.broker, trusting(certs)) == ResponseCode.SUCCESS
        text = log_file.read_text()
        assert "TLS handshake not done within 1 s" in text
        assert "max_connections" in text
        assert not tracebacks(log_file)


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x16" + b"\xff" * 300,  # a handshake record header that is nonsense
        b"\x16\x03\x01\x00\x05hello",  # a well-framed record that is no ClientHello
        b"\x16\x03\x03\x48\x01" + b"\x01" * 0x4801,  # a record over TLS's largest (2^14 + 2048)
    ],
)
async def test_b184_a_garbage_client_hello_closes_that_connection_only(tmp_path, certs, garbage):
    async with tls_broker(tmp_path, tls_conf(certs, "permissive")) as (served, log_file):
        host, port = served.broker.rsplit(":", 1)
        async with trio.open_nursery() as nursery:
            # a TLS client opened before the garbage
            keep = RemotingClient(nursery, tls=trusting(certs))
            answer = await keep.invoke(
                served.broker, request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=10
            )
            assert answer.code == ResponseCode.SUCCESS
            bad = await trio.open_tcp_stream(host, int(port))
            await bad.send_all(garbage)
            with trio.fail_after(BOUND), suppress(trio.BrokenResourceError):
                while await bad.receive_some(65536):
                    pass
            await bad.aclose()
            # the connection opened before goes on, and a new one is served
            answer = await keep.invoke(
                served.broker, request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=10
            )
            assert answer.code == ResponseCode.SUCCESS
            await keep.aclose()
            nursery.cancel_scope.cancel()
        assert await runtime_info(served.broker, None) == ResponseCode.SUCCESS
        assert served.process.poll() is None
        assert handshake_failures_at_info(log_file)
        assert not tracebacks(log_file)


# ---------------------------------------------------------------------- B-354 the admin CLI
async def test_b354_the_admin_cli_speaks_tls_with_tls_and_tls_ca(tmp_path, certs):
    """B-354: `es-broker admin --tls-ca CA` reaches an enforcing broker and name server; plain fails."""
    async with tls_broker(tmp_path, tls_conf(certs, "enforcing")) as (served, _):
        done = served.admin("--tls-ca", str(certs.ca), "brokerStatus", "-b", served.broker)
        assert "brokerVersionDesc" in done.stdout, done.stderr
        # after the verb too, and the name server's verbs as well
        served.admin("clusterList", "--tls", "--tls-ca", str(certs.ca))
        plain = served.admin("brokerStatus", "-b", served.broker, check=False)
        assert plain.returncode == 1, plain.stderr
        untrusted = served.admin("--tls", "brokerStatus", "-b", served.broker, check=False)
        assert untrusted.returncode == 1 and "certificate verify failed" in untrusted.stderr
        missing = served.admin(
            "--tls-ca", str(tmp_path / "none.pem"), "brokerStatus", "-b", served.broker, check=False
        )
        assert missing.returncode == 2 and "does not exist" in missing.stderr


async def test_b671_edge_processes_do_the_handshake_with_the_writers_settings(tmp_path, certs):
    """With edge_processes the edges hold the TLS side: an encrypted key with its password serves
    TLS clients, and enforcing closes a plain one unanswered, as the writer's own listener does."""
    conf = tls_conf(certs, "enforcing")[:3] + [
        f"tls.server.keyPath={certs.encrypted_key}",
        f"tls.server.keyPassword={KEY_PASSWORD}",
        "edge_processes=2",
    ]
    async with tls_broker(tmp_path, conf) as (served, _):
        for _ in range(4):
            assert await runtime_info(served.broker, trusting(certs)) == ResponseCode.SUCCESS
        assert await plain_request_is_closed_unanswered(served.broker)
