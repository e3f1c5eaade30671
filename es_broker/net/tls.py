"""TLS for outgoing connections: what a client trusts and shows (RocketMQ's tls.client.* settings).

Off by default, as in the Java client (ClientConfig.useTLS = tls.enable =
false). Unlike the Java client, whose tls.test.mode.enable defaults to true
and then trusts any server, `TlsClientSettings` verifies the server unless
`test_mode` is asked for.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream

# netty's SslHandler gives a handshake 10 s (handshakeTimeoutMillis)
HANDSHAKE_TIMEOUT = 10.0

log = logging.getLogger(__name__)

# the password of the gRPC proxy's TLS key travels in this environment variable, not on a command line
GRPC_KEY_PASSWORD_ENV = "ES_BROKER_PROXY_TLS_KEY_PASSWORD"


class TlsSetupError(ValueError):
    """A TLS setting that cannot be used: a missing file, an unreadable key, a bad value."""


@dataclass(frozen=True, slots=True)
class TlsClientSettings:
    """How a client speaks TLS to brokers and name servers.

    `ca_file`: the PEM CA bundle the server's certificate must chain to (None:
    the system store). `test_mode`: no verification at all (RocketMQ's
    tls.test.mode.enable), never the default. `check_hostname`: the server's
    certificate must name the host or IP dialled (the Java client does not
    check names; turn it off to match). `cert_file`/`key_file`: a client
    certificate for brokers that ask for one (tls.client.certPath/keyPath).
    """

    ca_file: str | None = None
    test_mode: bool = False
    check_hostname: bool = True
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = None
    handshake_timeout: float = HANDSHAKE_TIMEOUT

    def context(self) -> ssl.SSLContext:
        """The stdlib client context these settings describe; TlsSetupError if a file is unusable."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if self.test_mode:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context.check_hostname = self.check_hostname
            if self.ca_file:
                _readable(self.ca_file, "CA file")
                try:
                    context.load_verify_locations(cafile=self.ca_file)
                except ssl.SSLError as exc:
                    raise TlsSetupError(
                        f"CA file {self.ca_file}: no usable certificate ({exc})"
                    ) from None
        if self.cert_file or self.key_file:
            load_cert_chain(context, self.cert_file, self.key_file, self.key_password, "client")
        return context


def _readable(path: str, what: str) -> None:
    if not Path(path).is_file():
        raise TlsSetupError(f"{what} {path} does not exist or is not a file")


def load_cert_chain(
    context: ssl.SSLContext, cert: str | None, key: str | None, password: str | None, side: str
) -> None:
    """Load a PEM certificate chain and its key, with an error that says which file is wrong."""
    if not cert:
        raise TlsSetupError(f"a {side} key is given but no certificate (tls.{side}.certPath)")
    _readable(cert, f"{side} certificate (tls.{side}.certPath)")
    if key:
        _readable(key, f"{side} key (tls.{side}.keyPath)")
    try:
        context.load_cert_chain(cert, key or None, password or None)
    except ssl.SSLError as exc:
        raise TlsSetupError(
            f"{side} certificate {cert} / key {key or cert}: cannot be used ({exc.reason or exc}); "
            f"is tls.{side}.keyPassword right?"
        ) from None
    except OSError as exc:
        raise TlsSetupError(f"{side} certificate {cert} / key {key or cert}: {exc}") from None


def self_signed_pem() -> tuple[bytes, bytes] | None:
    """A throwaway self-signed certificate for localhost and 127.0.0.1 and its key (PEM, PKCS8),
    as 4.9.8's test mode serves one; None when the `cryptography` package is missing."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        return None
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def pem_key_and_chain(cert: str, key: str | None, password: str | None) -> tuple[bytes, bytes]:
    """A PEM private key (decrypted with `password` when it is encrypted) and its certificate
    chain, as grpc's ssl_server_credentials takes them; TlsSetupError naming the file at fault."""
    from cryptography.hazmat.primitives import serialization

    _readable(cert, "certificate")
    if key:
        _readable(key, "key")
    chain = Path(cert).read_bytes()
    try:
        loaded = serialization.load_pem_private_key(
            Path(key or cert).read_bytes(), password.encode() if password else None
        )
    except (ValueError, TypeError) as exc:
        raise TlsSetupError(
            f"key {key or cert}: cannot be used ({exc}); is the key password right?"
        ) from None
    plain = loaded.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return plain, chain


class ReloadingCertificate:
    """A context's certificate chain kept in step with its files (B-400).

    `check()` compares the files' identity (inode, size, modification time)
    with what was last loaded; on a change it loads the new chain into a
    throwaway context first, so a half-written or mismatched pair leaves the
    old certificate serving (a WARNING says why), and only then into the live
    context, where the next handshake picks it up. Connections already open
    keep the certificate they were made with.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        cert: str,
        key: str | None,
        password: str | None,
        *,
        side: str,
        name: str,
    ) -> None:
        self.context = context
        self.cert = cert
        self.key = key or None
        self.password = password or None
        self.side = side
        self.name = name
        self._stamp = self._files()
        self.reloads = 0

    def _files(self) -> tuple[tuple[str, int, int, int] | tuple[str], ...]:
        out: list[tuple[str, int, int, int] | tuple[str]] = []
        for path in (self.cert, self.key):
            if path is None:
                continue
            try:
                st = os.stat(path)
            except OSError:
                out.append((path,))
                continue
            out.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def check(self) -> bool:
        """Load the files into the live context if they changed and load; True if they did."""
        stamp = self._files()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        trial = ssl.SSLContext(self.context.protocol)
        try:
            load_cert_chain(trial, self.cert, self.key, self.password, self.side)
        except TlsSetupError as exc:
            log.warning(
                "%s: the changed certificate cannot be used, the old one stays: %s", self.name, exc
            )
            return False
        self.context.load_cert_chain(self.cert, self.key, self.password)
        self.reloads += 1
        log.info("%s: certificate reloaded from %s", self.name, self.cert)
        return True


async def open_tls(
    stream: anyio.abc.SocketStream,
    host: str,
    context: ssl.SSLContext,
    timeout: float = HANDSHAKE_TIMEOUT,
) -> TLSStream:
    """TLS over a connected socket, handshake done; ssl.SSLError (with the reason) if it fails.

    Not standard-compatible: closing never waits for the peer's close_notify, so a
    shielded close cannot hang on a silent peer.
    """
    try:
        with anyio.fail_after(timeout):
            return await TLSStream.wrap(
                stream, hostname=host, ssl_context=context, standard_compatible=False
            )
    except (anyio.BrokenResourceError, anyio.EndOfStream) as exc:
        await anyio.aclose_forcefully(stream)
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLError):
            raise cause from None
        raise ssl.SSLError(
            f"the peer closed the connection during the TLS handshake ({cause or exc})"
        ) from None
    except BaseException:
        await anyio.aclose_forcefully(stream)
        raise
