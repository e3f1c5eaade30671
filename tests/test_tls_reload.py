"""A renewed certificate serves without a restart (B-400): the broker's listeners (broker and
name server) and the dashboard, against real processes. Certificates from a throwaway CA
(trustme); nothing here is a real key.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest
import trustme
from cryptography import x509

from tests.process_fixtures import serve
from tests.waiting import poll_until_sync

pytest.importorskip("hypercorn")


def issue(ca: trustme.CA, cert: Path, key: Path) -> int:
    """Write a new server certificate for 127.0.0.1 (key first, then chain); its serial number."""
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    leaf.private_key_pem.write_to_path(str(key))
    chain = b"".join(pem.bytes() for pem in leaf.cert_chain_pems)
    cert.write_bytes(chain)
    return x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).serial_number


def served_serial(addr: str, ca: trustme.CA) -> int:
    """The serial number of the certificate a TLS handshake with `addr` is shown."""
    host, port = addr.rsplit(":", 1)
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with (
        socket.create_connection((host, int(port)), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_b400_the_broker_serves_a_renewed_certificate_from_the_next_handshake(tmp_path):
    """B-400: the broker and its name server check tls.server.certPath/keyPath before each
    handshake: a renewed pair serves at once, a pair that does not load leaves the old one
    serving with a WARNING, and open connections are not touched."""
    ca = trustme.CA()
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    first = issue(ca, cert, key)
    conf = [
        "tls.server.mode=permissive",
        "tls.test.mode.enable=false",
        f"tls.server.certPath={cert}",
        f"tls.server.keyPath={key}",
    ]
    log_file = tmp_path / "broker.log"
    with serve(
        tmp_path / "data", "--readmodel-url", "none", log_file=log_file, conf=conf
    ) as served:
        for addr in (served.broker, served.namesrv):
            assert served_serial(addr, ca) == first
        second = issue(ca, cert, key)
        assert second != first
        for addr in (served.broker, served.namesrv):
            assert served_serial(addr, ca) == second
        cert.write_text("not a certificate\n")  # a renewal gone wrong
        assert served_serial(served.broker, ca) == second
        assert "the changed certificate cannot be used, the old one stays" in log_file.read_text()
        third = issue(ca, cert, key)  # fixed: served again
        assert served_serial(served.namesrv, ca) == third
    assert "Traceback" not in log_file.read_text()


def test_b400_the_dashboard_serves_a_renewed_certificate(tmp_path):
    """B-400: the dashboard looks at --tls-cert/--tls-key every few seconds and serves a renewed
    pair from the next handshake on."""
    from tests.dashboard_fixtures import dashboard

    ca = trustme.CA()
    cert, key = tmp_path / "dash.pem", tmp_path / "dash.key"
    first = issue(ca, cert, key)
    with (
        serve(tmp_path / "data", "--readmodel-url", "none") as served,
        dashboard(
            served.namesrv,
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            log=tmp_path / "dashboard.log",
        ) as url,
    ):
        addr = url.removeprefix("https://")
        assert served_serial(addr, ca) == first
        second = issue(ca, cert, key)
        poll_until_sync(
            lambda: served_serial(addr, ca) == second, what="the dashboard serving the renewal"
        )
