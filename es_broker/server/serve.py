"""`es-broker serve`: the broker, and by default the name server role, in one trio nursery.

`serve` settles what the process was asked for (broker.conf, role, listen
addresses), takes the data directory's lock, checks the ACL files, TLS and the
metrics exporter before anything listens, then starts the name server role
(server/namesrv.py) and the broker (`BrokerServer`, server/main.py), or under
the fail-over coordinator the node whose role its group's election decides
(server/failover.py).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from es_broker import compiled
from es_broker.acl.access import default_acl_sources
from es_broker.acl.rules import BROKER_RULES, NAMESRV_RULES
from es_broker.commands.acl_audit import AclAudit
from es_broker.config import BrokerConfig, BrokerRole, load_broker_conf
from es_broker.ha.term import HaTerm
from es_broker.log.dirlock import DataDirLock
from es_broker.net.hosts import WILDCARDS, local_ip
from es_broker.net.remoting_client import split_addr
from es_broker.readmodel.db import default_url, engine_error
from es_broker.server.edge.remoting_server import EdgeLimits
from es_broker.server.edge.tls import ServerTls
from es_broker.server.main import BrokerServer
from es_broker.server.metrics_config import check_exporter_type
from es_broker.server.namesrv import InProcessNameServer, NameServerRole
from es_broker.server.proxy_process import proxy_command, proxy_tls, supervise
from es_broker.server.serve_access import (
    access_control,
    open_listener_warning,
    peer_credentials,
    say_who_registers,
)
from es_broker.server.serve_options import ServeOptions, with_role

log = logging.getLogger("es_broker")


def _registered_host(listen_host: str, configured: str) -> str:
    """The broker's address for its clients (brokerIP1) when it listens on `listen_host`: that
    host, unless it is a wildcard, which no client can connect to; then broker.conf's brokerIP1
    when it names one, else this host's outward address, as RocketMQ's brokerIP1 defaults to
    `RemotingUtil.getLocalAddress()` (B-682)."""
    if listen_host not in WILDCARDS:
        return listen_host
    default = BrokerConfig.__dataclass_fields__["brokerIP1"].default  # the loopback listener's
    if configured not in WILDCARDS and configured != default:
        return configured
    return local_ip()


def _listen(value: str, default_port: int) -> tuple[str, int]:
    if ":" in value:
        return split_addr(value)
    return value or "127.0.0.1", default_port


async def serve(args: ServeOptions) -> None:
    log.log(*compiled.status())  # first: compiled or pure, and why (quiet when compiled)
    config = BrokerConfig(storePathRootDir=args.data_dir)
    if args.config:
        config = load_broker_conf(args.config, config)
        if args.data_dir_given:
            config = config.replace(storePathRootDir=args.data_dir)
    if args.broker_name:
        config = config.replace(brokerName=args.broker_name)
    if args.cluster:
        config = config.replace(brokerClusterName=args.cluster)
    config = with_role(config, args)
    host, port = _listen(
        args.listen or f"{config.brokerIP1}:{config.listenPort}", config.listenPort
    )
    config = config.replace(brokerIP1=_registered_host(host, config.brokerIP1), listenPort=port)
    check_exporter_type(config.metricsExporterType)  # before anything listens (B-355)
    _check_readmodel_url(args)
    # one process writes a data directory: taken before anything in it is opened or made (B-490)
    lock = None if args.role == "namesrv" else DataDirLock.acquire(config.storePathRootDir)
    try:
        await _serve_locked(args, config, host, port)
    finally:
        if lock is not None:
            lock.release()


async def _serve_locked(args: ServeOptions, config: BrokerConfig, host: str, port: int) -> None:
    Path(config.storePathRootDir).mkdir(parents=True, exist_ok=True)
    # ACL (B-160): an invalid or missing file stops the start here, with the file and entry named
    audit = (
        AclAudit.for_data_dir(config.storePathRootDir, config.aclDenialSummaryInterval)
        if config.aclEnable and args.role != "namesrv" and config.brokerRole != BrokerRole.SLAVE
        else None
    )
    broker_access = (
        access_control(config, BROKER_RULES, "broker", audit.on_change if audit else None)
        if args.role != "namesrv"
        else None
    )
    namesrv_access = access_control(config, NAMESRV_RULES, "namesrv")
    peer_credentials(config)  # both keys or neither, checked before anything listens
    tls = ServerTls.of(config)  # both listeners; a bad TLS setting or file stops the start here

    runs_namesrv = args.role in ("all", "slave", "namesrv") and not (
        args.role in ("all", "slave") and args.namesrv
    )
    listeners = {} if args.role == "namesrv" else {"broker": host}
    if runs_namesrv:
        listeners["name server"] = _listen(args.namesrv_listen, 9876)[0]
    if (warning := open_listener_warning(config, listeners)) is not None:
        log.warning("%s", warning)  # once, as Redis's protected mode warns (B-353)

    first = _StoppedFirst()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_on_signal, nursery.cancel_scope, first)
        namesrv = args.namesrv or config.namesrvAddr
        local_namesrv: InProcessNameServer | None = None
        if runs_namesrv:
            ns_host, ns_port = _listen(args.namesrv_listen, 9876)
            ns_role = NameServerRole(EdgeLimits.of(config), namesrv_access, tls)
            bound = await nursery.start(ns_role.run, ns_host, ns_port)
            local_namesrv = InProcessNameServer(ns_role.namesrv, ns_host, bound)
            print(f"es-broker name server listening on {ns_host}:{bound}", flush=True)
            if namesrv_access is not None:
                say_who_registers(namesrv_access, f"{ns_host}:{bound}", args.role == "namesrv")
            if not namesrv:
                namesrv = f"{ns_host}:{bound}"
        if args.role == "namesrv":
            return

        def make_server(cfg: BrokerConfig, ha: HaTerm | None = None) -> BrokerServer:
            return BrokerServer(
                cfg,
                [a for a in namesrv.split(";") if a],
                readmodel_url=readmodel_url_for(args.readmodel_url, cfg.storePathRootDir),
                master_addr=args.master,
                access=broker_access,
                tls=tls,
                audit=audit,
                local_namesrv=local_namesrv,
                ha=ha,
            )

        if config.ha_coordinator:  # the role comes from the group's election (B-370)
            from es_broker.server.failover import serve_ha  # loads readmodel.export: HA nodes only

            def announce(server: BrokerServer, term: HaTerm) -> None:
                lead = term.lead
                role = "leader" if lead.mine else f"follower of {lead.node} ({lead.addr})"
                print(
                    f"es-broker {config.brokerName} listening on {server.addr}, data in "
                    f"{config.storePathRootDir}, name server {namesrv}, ha node "
                    f"{config.ha_node_id} {role} epoch {lead.epoch}, "
                    f"{server.config.brokerRole} brokerId {server.config.brokerId}",
                    flush=True,
                )

            if args.enable_proxy:
                nursery.start_soon(
                    first.run,
                    supervise,
                    _proxy_command(config, namesrv, args.grpc_port),
                    proxy_tls(config).env,
                )
            await nursery.start(serve_ha, config, make_server, host, announce)
            return
        if args.enable_proxy:
            nursery.start_soon(
                first.run,
                supervise,
                _proxy_command(config, namesrv, args.grpc_port),
                proxy_tls(config).env,
            )
        server: BrokerServer = await nursery.start(make_server(config).run, host)
        role = (
            ""
            if config.brokerRole == BrokerRole.ASYNC_MASTER
            else f", {config.brokerRole} brokerId {config.brokerId}"
        )
        master = f", master {args.master}" if args.master else ""
        print(
            f"es-broker {config.brokerName} listening on {server.addr}, data in {config.storePathRootDir}, "
            f"name server {namesrv}{role}{master}",
            flush=True,
        )


def _proxy_command(config: BrokerConfig, namesrv: str, port: int) -> list[str]:
    """`es-broker proxy` in front of this broker's name server(s), with its ACL files if any."""
    tls = proxy_tls(config)
    if not config.aclEnable:
        return proxy_command(namesrv, port, None, None, tls)
    sources = default_acl_sources(config.acl_plain_file, config.storePathRootDir)
    return proxy_command(namesrv, port, sources.default_file, sources.directory, tls)


class _StoppedFirst:
    """The side processes a signal stops before the broker (its gRPC proxy), so that they leave
    it as its clients do, unregistering from a broker still there."""

    def __init__(self) -> None:
        self._parts: list[tuple[trio.CancelScope, trio.Event]] = []

    async def run(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        scope, ended = trio.CancelScope(), trio.Event()
        self._parts.append((scope, ended))
        try:
            with scope:
                await fn(*args)
        finally:
            ended.set()

    async def stop(self) -> None:
        """Cancel them all and wait until each has ended (a child has its grace, then SIGKILL)."""
        for scope, _ in self._parts:
            scope.cancel()
        for _, ended in self._parts:
            await ended.wait()


async def _stop_on_signal(scope: trio.CancelScope, first: _StoppedFirst) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            print(f"es-broker: {signal.Signals(signum).name}, shutting down", flush=True)
            await first.stop()
            scope.cancel()
            return


def _check_readmodel_url(args: ServeOptions) -> None:
    """A --readmodel-url its follower could never open (a driver not installed) stops the start,
    said as `es-broker readmodel` says it; a database not reachable yet does not. SQLAlchemy is
    loaded for a URL given only: the default SQLite one needs nothing installed."""
    url = args.readmodel_url
    if args.role == "namesrv" or not url or url.lower() == "none":
        return
    if (error := engine_error(url)) is not None:
        raise ValueError(error)


def readmodel_url_for(url: str | None, data_dir: str) -> str | None:
    if url and url.lower() == "none":
        return None
    return url or default_url(data_dir)
