"""`es-broker serve --enable-proxy`: RocketMQ 5's gRPC proxy as a child process of the broker.

The proxy (`es-broker proxy`, es_broker/proxy) runs in a process of its own, so
nothing that happens to it happens to the broker: when it exits the broker
logs it and starts it again after a pause that doubles up to a minute (back to
one second once a proxy has run for a minute); when the broker stops, the proxy
is stopped with it. With aclEnable the proxy reads the broker's ACL files.
With tls.server.mode enforcing the proxy serves gRPC over TLS with the
broker's certificate (tls.server.certPath/keyPath, its password handed over
in the environment; test mode without them: a self-signed one) and speaks TLS
to the brokers as the broker's own connections do (tls.client.*); permissive
and disabled leave the gRPC port plain text, as one grpcio port cannot serve
both.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import trio

from es_broker.config import BrokerConfig
from es_broker.net.tls import GRPC_KEY_PASSWORD_ENV
from es_broker.server.children import stop_child
from es_broker.server.edge.tls import TlsMode, broker_client_tls, with_tls_config_file

log = logging.getLogger(__name__)

FIRST_PAUSE = 1.0  # s before the first restart
LONGEST_PAUSE = 60.0
STEADY = 60.0  # s a proxy must have run for the pause to start again from FIRST_PAUSE


@dataclass(frozen=True, slots=True)
class ProxyTls:
    """The proxy's TLS arguments and the environment that carries the key's password."""

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def proxy_tls(config: BrokerConfig) -> ProxyTls:
    """What the broker's TLS settings ask of its proxy: nothing unless tls.server.mode is enforcing."""
    if TlsMode.parse(config.tlsMode) is not TlsMode.ENFORCING:
        return ProxyTls()
    config = with_tls_config_file(config)
    args: list[str] = []
    env: dict[str, str] = {}
    if config.tlsServerCertPath:
        args += ["--tls-cert", config.tlsServerCertPath]
        if config.tlsServerKeyPath:
            args += ["--tls-key", config.tlsServerKeyPath]
        if config.tlsServerKeyPassword:
            env[GRPC_KEY_PASSWORD_ENV] = config.tlsServerKeyPassword
    else:
        args.append("--tls-test-mode")
    client = broker_client_tls(config)
    args.append("--brokers-tls")
    if client is not None and not client.test_mode and client.ca_file:
        args += ["--brokers-tls-ca", client.ca_file]
    return ProxyTls(tuple(args), env)


def proxy_command(
    namesrv: str,
    port: int,
    acl_file: Path | None,
    acl_dir: Path | None,
    tls: ProxyTls | None = None,
) -> list[str]:
    command = [sys.executable, "-m", "es_broker.cli", "proxy", "-n", namesrv]
    command += ["--grpcServerPort", str(port)]
    if acl_file is not None:
        command += ["--acl-file", str(acl_file)]
        if acl_dir is not None:
            command += ["--acl-dir", str(acl_dir)]
    if tls is not None:
        command += tls.args
    return command


async def supervise(command: list[str], env: Mapping[str, str] | None = None) -> None:
    """Run the proxy until cancelled, starting it again whenever it exits; `env` over the broker's."""
    pause = FIRST_PAUSE
    child_env = {**os.environ, **env} if env else None
    while True:
        began = trio.current_time()
        process = await trio.lowlevel.open_process(command, env=child_env)
        try:
            code = await process.wait()
        finally:
            await stop_child(process)  # the broker stops: the proxy stops with it
        if trio.current_time() - began >= STEADY:
            pause = FIRST_PAUSE
        print(
            f"es-broker: the gRPC proxy (pid {process.pid}) exited with {code}; "
            f"starting it again in {pause:g} s",
            flush=True,
        )
        await trio.sleep(pause)  # a pause between restarts, not a wait for a condition
        pause = min(pause * 2, LONGEST_PAUSE)


__all__ = ["ProxyTls", "proxy_command", "proxy_tls", "supervise"]
