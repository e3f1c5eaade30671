"""TLS on a listener, as RocketMQ 4.9.8's server offers it (tls.server.mode).

The first bytes of every connection decide (4.9.8 NettyRemotingServer's
HandshakeHandler): 0x16, a TLS handshake record, gets a TLS handshake in
permissive and enforcing mode and is closed in disabled mode; anything else
is plain remoting in disabled and permissive mode and is closed in enforcing
mode. The bytes read to decide are replayed to whichever side then reads the
connection (`ReplayStream`).

Settings (TlsSystemConfig, TlsHelper.buildSslContext): the tls.* keys of
broker.conf, overridden by the tls.properties that tls.config.file names
(all but tls.server.mode and tls.enable). Unlike 4.9.8, a configured
certificate is used even in test mode (4.9.8 then serves a self-signed one),
a file that is missing or a key that does not load stops the broker at
start, and a misspelt mode or client-auth value is an error, not
"permissive" / "none".
"""

from __future__ import annotations

import enum
import logging
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import trio

from es_broker.config import TLS_PROPERTIES, BrokerConfig, coerce
from es_broker.net.tls import (
    ReloadingCertificate,
    TlsClientSettings,
    TlsSetupError,
    load_cert_chain,
    self_signed_pem,
)

log = logging.getLogger(__name__)

HANDSHAKE_RECORD = 0x16  # the content type of a TLS handshake record: a ClientHello starts with it
PEEK_SIZE = 4096  # the first read of a connection, replayed to whoever reads it next
DEFAULT_CONFIG_FILE = "/etc/rocketmq/tls.properties"  # 4.9.8's default (BrokerConfig.tlsConfigFile): read if it exists
# TlsHelper does not read these from the file
_NOT_IN_FILE = {
    "tls.server.mode",
    "tls.enable",
    "tls.config.file",
}


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"

    @classmethod
    def parse(cls, value: str) -> TlsMode:
        try:
            return cls(value.strip())
        except ValueError:
            raise TlsSetupError(
                f"tls.server.mode must be disabled, permissive or enforcing, got {value!r}"
            ) from None


_CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}


# ---------------------------------------------------------------------- settings


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java .properties file: key=value, key:value or key value; # and ! comments; \\ continues a line."""
    # java.util.Properties.load(InputStream) reads ISO 8859-1
    text = Path(path).read_text(encoding="latin-1")
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd number of backslashes: the line goes on
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        out[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        out[key] = value
    return out


def _split_property(line: str) -> tuple[str, str]:
    i, key = 0, []
    while i < len(line) and line[i] not in "=: \t\f":
        if line[i] == "\\" and i + 1 < len(line):
            i += 1
        key.append(line[i])
        i += 1
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape("".join(key)), _unescape(rest)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            digits = text[i + 2 : i + 6]
            if n == "u" and len(digits) == 4 and all(d in "0123456789abcdefABCDEF" for d in digits):
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def with_tls_config_file(config: BrokerConfig) -> BrokerConfig:
    """The config with tls.config.file's settings applied over broker.conf's (TlsHelper.extractTlsConfigFromFile).

    RocketMQ's default path is read only if it exists; a path given explicitly must exist.
    """
    path = Path(config.tlsConfigFile) if config.tlsConfigFile else None
    if path is None or not path.exists():
        if path is not None and config.tlsConfigFile != DEFAULT_CONFIG_FILE:
            raise TlsSetupError(f"tls.config.file {config.tlsConfigFile} does not exist")
        return config
    try:
        properties = read_properties(path)
    except OSError as exc:
        raise TlsSetupError(f"tls.config.file {path}: {exc}") from None
    changes: dict[str, object] = {}
    for key, value in properties.items():
        name = TLS_PROPERTIES.get(key)
        if name is None or key in _NOT_IN_FILE:
            continue
        try:
            changes[name] = coerce(key, value, type(getattr(config, name)))
        except ValueError as exc:
            raise TlsSetupError(f"tls.config.file {path}: {exc}") from None
    return config.replace(**changes)


def broker_client_tls(config: BrokerConfig) -> TlsClientSettings | None:
    """TLS for the broker's own connections (registration, slave to master), as 4.9.8's client builds it.

    On when tls.enable is true, or when this broker enforces TLS itself (its
    embedded name server then takes nothing else). Verification as TlsHelper
    does for a client: none in test mode or without tls.client.authServer,
    else against tls.client.trustCertPath (or the system store); like the
    Java client, no host-name check.
    """
    if not config.tlsEnable and TlsMode.parse(config.tlsMode) is not TlsMode.ENFORCING:
        return None
    verify = not config.tlsTestModeEnable and config.tlsClientAuthServer
    return TlsClientSettings(
        ca_file=config.tlsClientTrustCertPath or None,
        test_mode=not verify,
        check_hostname=False,
        cert_file=config.tlsClientCertPath or None,
        key_file=config.tlsClientKeyPath or None,
        key_password=config.tlsClientKeyPassword or None,
    )


# ---------------------------------------------------------------------- contexts


def server_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The server context of TlsHelper.buildSslContext(false); None when there is nothing to serve.

    With no tls.server.certPath, test mode serves a self-signed certificate
    made at start with the `cryptography` package, a dependency of es-broker
    (B-322; should it be missing all the same, the listener offers no TLS and
    closes TLS connections, as 4.9.8 does when its context failed to build).
    Every failure with a configured file is a TlsSetupError.
    """
    need = _CLIENT_AUTH.get(config.tlsServerNeedClientAuth.strip().lower())
    if need is None:
        raise TlsSetupError(
            "tls.server.need.client.auth must be none, optional or require, "
            f"got {config.tlsServerNeedClientAuth!r}"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if config.tlsServerCertPath or config.tlsServerKeyPath:
        load_cert_chain(
            context,
            config.tlsServerCertPath,
            config.tlsServerKeyPath,
            config.tlsServerKeyPassword,
            "server",
        )
    elif config.tlsTestModeEnable:
        if not _load_self_signed(context):
            return None
        return context  # 4.9.8's test mode asks no client certificate it could check
    else:
        raise TlsSetupError(
            "TLS is on (tls.server.mode) but no tls.server.certPath / tls.server.keyPath is "
            "given and tls.test.mode.enable is false"
        )
    if need != ssl.CERT_NONE:
        # Python's ssl cannot take a client certificate without checking it, so a
        # client certificate is always verified: against tls.server.trustCertPath, else the system store
        context.verify_mode = need
        if config.tlsServerTrustCertPath:
            if not Path(config.tlsServerTrustCertPath).is_file():
                raise TlsSetupError(
                    f"tls.server.trustCertPath {config.tlsServerTrustCertPath} does not exist"
                )
            try:
                context.load_verify_locations(cafile=config.tlsServerTrustCertPath)
            except ssl.SSLError as exc:
                raise TlsSetupError(
                    f"tls.server.trustCertPath {config.tlsServerTrustCertPath}: {exc}"
                ) from None
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return context


def _load_self_signed(context: ssl.SSLContext) -> bool:
    """A throwaway self-signed certificate for localhost (4.9.8's SelfSignedCertificate); False without cryptography."""
    made = self_signed_pem()
    if made is None:
        log.warning(
            "TLS test mode needs a self-signed certificate, and making one needs the 'cryptography' "
            "package, a dependency of es-broker that is missing from this installation: TLS "
            "connections will be closed (reinstall es-broker, or set tls.server.certPath and "
            "tls.server.keyPath)"
        )
        return False
    cert, key = made
    with tempfile.TemporaryDirectory() as tmp:  # ssl loads chains from files only
        pem = Path(tmp) / "self-signed.pem"
        pem.write_bytes(cert + key)
        context.load_cert_chain(str(pem))
    return True


# ---------------------------------------------------------------------- the listener side


class ReplayStream(trio.abc.Stream):
    """A stream whose first reads return bytes already read from it (the peek), then read on."""

    def __init__(self, transport_stream: trio.abc.Stream, head: bytes) -> None:
        self.transport_stream = transport_stream
        self._head = head

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if not self._head:
            return await self.transport_stream.receive_some(max_bytes)
        await trio.lowlevel.checkpoint()
        size = len(self._head) if max_bytes is None else max_bytes
        data, self._head = self._head[:size], self._head[size:]
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        self._head = b""
        await self.transport_stream.aclose()


@dataclass(frozen=True, slots=True)
class ServerTls:
    """What a listener does with the first bytes of a connection: its mode and its server context."""

    mode: TlsMode
    context: ssl.SSLContext | None  # None: no TLS can be served (disabled, or no certificate)
    # the configured certificate files, checked before every handshake (B-400); None in test mode
    reload: ReloadingCertificate | None = None

    @classmethod
    def of(cls, config: BrokerConfig) -> ServerTls:
        """The listener TLS a broker.conf (and its tls.config.file) sets; TlsSetupError on a bad setting or file."""
        mode = TlsMode.parse(config.tlsMode)
        if mode is TlsMode.DISABLED:
            return cls(mode, None)
        config = with_tls_config_file(config)
        context = server_context(config)
        if context is None and mode is TlsMode.ENFORCING:
            raise TlsSetupError(
                "tls.server.mode is enforcing but there is no certificate to serve: set "
                "tls.server.certPath and tls.server.keyPath"
            )
        reload = None
        if context is not None and config.tlsServerCertPath:
            reload = ReloadingCertificate(
                context,
                config.tlsServerCertPath,
                config.tlsServerKeyPath,
                config.tlsServerKeyPassword,
                side="server",
                name="TLS listener",
            )
        return cls(mode, context, reload)

    async def open(
        self,
        stream: trio.SocketStream,
        *,
        name: str,
        peer: str,
        idle_timeout: float,
        read_timeout: float,
    ) -> tuple[trio.abc.Stream, bytes] | None:
        """The stream to read remoting frames from and the bytes already read from it (a plain
        connection's peek, read before the stream's own; none after a handshake), or None: the
        connection is to be closed.

        Waits `idle_timeout` for the first bytes (as for a first frame); a TLS
        handshake must then be done within `read_timeout` (as a begun frame).
        """
        head: bytes | None = None
        with trio.move_on_after(idle_timeout):
            try:
                head = await stream.receive_some(PEEK_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                head = b""
        if head is None:
            log.info("%s: closing idle connection %s", name, peer)
            return None
        if not head:
            return None
        if head[0] != HANDSHAKE_RECORD:
            if self.mode is TlsMode.ENFORCING:
                log.warning(
                    "%s: closing %s: a plain-text connection while tls.server.mode is enforcing",
                    name,
                    peer,
                )
                return None
            return stream, head  # the socket itself: no wrapper on every later read
        if self.mode is TlsMode.DISABLED:
            log.warning(
                "%s: closing %s: a TLS handshake while tls.server.mode is disabled", name, peer
            )
            return None
        if self.context is None:
            log.warning(
                "%s: closing %s: a TLS handshake, but this listener has no certificate to serve",
                name,
                peer,
            )
            return None
        if self.reload is not None:
            self.reload.check()  # a few stat calls per handshake: a renewed certificate serves at once
        tls = trio.SSLStream(
            ReplayStream(stream, head), self.context, server_side=True, https_compatible=True
        )
        with trio.move_on_after(read_timeout):
            try:
                await tls.do_handshake()
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                # a client's own failure (untrusted CA, a scanner): routine, not for a person
                log.info(
                    "%s: closing %s: TLS handshake failed: %s", name, peer, exc.__cause__ or exc
                )
                return None
            return tls, b""
        log.info("%s: closing %s: TLS handshake not done within %g s", name, peer, read_timeout)
        return None
