"""A throwaway CA and server certificate (trustme), and the broker.conf lines of a TLS mode."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path
    encrypted_key: Path  # the same key under KEY_PASSWORD


KEY_PASSWORD = "changeit"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    root = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    paths = Certs(
        root / "ca.pem", root / "server.pem", root / "server.key", root / "server-enc.key"
    )
    ca.cert_pem.write_to_path(str(paths.ca))
    server.cert_chain_pems[0].write_to_path(str(paths.cert))
    for extra in server.cert_chain_pems[1:]:
        extra.write_to_path(str(paths.cert), append=True)
    server.private_key_pem.write_to_path(str(paths.key))
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), password=None)
    paths.encrypted_key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
        )
    )
    return paths


def tls_conf(certs: Certs, mode: str, *more: str) -> list[str]:
    return [
        f"tls.server.mode={mode}",
        "tls.test.mode.enable=false",
        f"tls.server.certPath={certs.cert}",
        f"tls.server.keyPath={certs.key}",
        *more,
    ]
