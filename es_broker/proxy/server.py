"""The proxy process: a grpc.aio server of MessagingService over the project's asyncio client.

`es-broker proxy -n NS --grpcServerPort P` runs it in front of every broker
group the name server lists (RocketMQ 5's cluster mode); `es-broker serve
--enable-proxy` starts the same command as a child process of the broker
(es_broker/server/proxy_process.py), so that the proxy's failure is never the
broker's.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import grpc

from es_broker.acl.access import AclSources
from es_broker.net.hosts import local_ip
from es_broker.net.tls import TlsClientSettings, TlsSetupError, pem_key_and_chain, self_signed_pem
from es_broker.proxy.auth import Authenticator
from es_broker.proxy.cluster import Check, Cluster
from es_broker.proxy.registry import EXPIRE_S, Registry
from es_broker.proxy.renewal import Renewals
from es_broker.proxy.service import MessagingService
from es_broker.proxy.sessions import MAX_BODY, Sessions

log = logging.getLogger(__name__)

# the largest request taken: a 4 MiB body and room for its properties; grpc answers a larger one
# with RESOURCE_EXHAUSTED before any handler runs
MAX_REQUEST = MAX_BODY + 256 * 1024


@dataclass(frozen=True, slots=True)
class ProxyOptions:
    namesrv: str
    host: str = "127.0.0.1"
    port: int = 8081  # grpcServerPort
    acl_file: Path | None = None  # the default plain_acl.yml; None: no ACL
    acl_dir: Path | None = None  # more *.yml files (conf/acl)
    settings_timeout: float = 10.0  # s a Telemetry stream has to send its Settings
    client_expiry: float = EXPIRE_S  # s without a heartbeat after which a 5.x client is gone
    tls: GrpcTls | None = None  # None: the gRPC port is plain text
    brokers_tls: TlsClientSettings | None = None  # the proxy's connections to the brokers


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """TLS on the gRPC port: a PEM certificate chain and key, or (test mode) a self-signed one."""

    cert: str | None = None
    key: str | None = None
    key_password: str | None = None

    def credentials(self) -> Any:
        """grpc's server credentials; TlsSetupError when a file or the key cannot be used."""
        if self.cert:
            key, chain = pem_key_and_chain(self.cert, self.key, self.key_password)
        else:
            made = self_signed_pem()
            if made is None:
                raise TlsSetupError(
                    "a self-signed certificate needs the 'cryptography' package: give --tls-cert"
                )
            chain, key = made
        return grpc.ssl_server_credentials([(key, chain)])


async def _fifo_of(cluster: Cluster, subscription: Any, account: str | None) -> bool:
    """Whether a consumer's subscription is of a FIFO topic (it then pops in order)."""
    side = cluster.existing(account)
    if side is None:
        return False
    for entry in subscription.subscriptions:
        try:
            route = await side.route(entry.topic.name)
            if route is not None and await side.message_type(entry.topic.name, route) == "FIFO":
                return True
        except Exception as exc:  # settings are still answered; the topic's type is read later
            log.info("the type of topic %s is unknown for now: %r", entry.topic.name, exc)
    return False


async def _retry_max_times_of(
    cluster: Cluster, subscription: Any, account: str | None
) -> int | None:
    """The consumer group's retryMaxTimes on the first broker of its subscribed topics' routes;
    None when that broker has no such group, or none could be read (its Settings then get the
    default group's attempts, as RocketMQ 5's proxy answers when it finds no group config)."""
    side = cluster.existing(account)
    if side is None:
        return None
    group = subscription.group.name
    for entry in subscription.subscriptions:
        try:
            route = await side.known_route(entry.topic.name)
            if route is not None and route.broker_datas:
                return await side.retry_max_times(group, route)
        except Exception as exc:  # settings are still answered, with the default attempts
            log.info("the retryMaxTimes of group %s is unknown for now: %r", group, exc)
    return None


async def run(options: ProxyOptions) -> None:
    """Serve until SIGTERM or SIGINT."""
    sources = AclSources(options.acl_file.resolve(), options.acl_dir) if options.acl_file else None
    auth = Authenticator(sources)
    sessions_box: list[Sessions] = []

    async def on_check(check: Check) -> None:
        await sessions_box[0].forward_check(check)

    server = grpc.aio.server(
        options=[("grpc.max_receive_message_length", MAX_REQUEST), ("grpc.so_reuseport", 0)]
    )
    address = f"{options.host}:{options.port}"
    try:  # bound before anything starts: a port in use is one line and exit 1
        if options.tls is not None:
            port = server.add_secure_port(address, options.tls.credentials())
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:
        raise OSError(f"cannot listen on {options.host}:{options.port} (gRPC)") from None
    async with anyio.create_task_group() as nursery:
        cluster = Cluster(options.namesrv, on_check, local_ip(), options.brokers_tls)

        async def fifo_of(subscription: Any, account: str | None) -> bool:
            return await _fifo_of(cluster, subscription, account)

        async def retry_max_times_of(subscription: Any, account: str | None) -> int | None:
            return await _retry_max_times_of(cluster, subscription, account)

        sessions = Sessions(options.settings_timeout, fifo_of, retry_max_times_of)
        sessions_box.append(sessions)
        await cluster.start(nursery, unsigned=not auth.enabled)
        renewals = Renewals()
        nursery.start_soon(renewals.run)
        registry = Registry(cluster, sessions, nursery, options.client_expiry)
        nursery.start_soon(registry.run)
        service = MessagingService(
            cluster, auth, sessions, (options.host, port), renewals, registry
        )
        server.add_generic_rpc_handlers((service.handler(),))
        await server.start()
        acl = f", ACL {sources.default_file}" if sources else ""
        acl += ", TLS" if options.tls is not None else ""
        print(
            f"es-broker proxy listening on {options.host}:{port} (gRPC), pid {os.getpid()}, "
            f"name server {options.namesrv}{acl}",
            flush=True,
        )
        try:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    print(
                        f"es-broker proxy: {signal.Signals(signum).name}, shutting down", flush=True
                    )
                    break
        finally:
            with anyio.CancelScope(shield=True):
                await server.stop(1.0)
                await registry.stop()
                await cluster.stop()
            nursery.cancel_scope.cancel()
