"""A default `es-broker serve` starts quietly and serves TLS test mode out of the box (B-322)."""

from __future__ import annotations

import re
import tomllib

import trio

from es_broker.net.remoting_client import RemotingClient
from es_broker.net.tls import TlsClientSettings
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from tests.process_fixtures import ROOT, serve

# serve's log format: "%(asctime)s %(levelname)s %(name)s: %(message)s"
_COMPLAINT = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b")


async def ask(addr: str, code: int, tls: TlsClientSettings | None) -> int:
    """One request over a fresh client, plain or TLS; the answer's code."""
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery, tls=tls)
        try:
            return (await client.invoke(addr, request(code), timeout=10)).code
        finally:
            await client.aclose()
            nursery.cancel_scope.cancel()


async def test_b322_a_default_serve_logs_no_warning_and_answers_plain_and_test_mode_tls(tmp_path):
    """B-322: `es-broker serve` with nothing but a fresh data dir logs no WARNING or ERROR from
    start to shutdown, and its default permissive test mode answers a TLS client (the self-signed
    certificate is made at start: cryptography is a dependency of every install)."""
    log_file = tmp_path / "serve.log"
    with serve(tmp_path / "data", log_file=log_file) as served:
        for addr, code in (
            (served.broker, RequestCode.GET_BROKER_RUNTIME_INFO),
            (served.namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
        ):
            assert await ask(addr, code, None) == ResponseCode.SUCCESS
            assert await ask(addr, code, TlsClientSettings(test_mode=True)) == ResponseCode.SUCCESS
    assert served.process.returncode == 0
    lines = log_file.read_text().splitlines()
    assert any("listening on" in line for line in lines)
    assert [line for line in lines if _COMPLAINT.search(line) or "Traceback" in line] == []


def test_b322_cryptography_is_a_main_dependency_and_the_tls_extra_an_empty_alias():
    """B-322: a default install brings cryptography; `es-broker[tls]` still resolves, to nothing more."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d for d in project["dependencies"] if d.startswith("cryptography")] == [
        "cryptography>=42,<51"
    ]
    assert project["optional-dependencies"]["tls"] == []
