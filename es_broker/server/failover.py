"""`es-broker serve` with ha_coordinator: the broker's role follows its group's election (B-370..B-389).

The node joins its group in etcd, waits for the election, and runs a
BrokerServer in the role it got: brokerId 0 with the configured master role
when it holds the leader key, a slave with its own brokerId otherwise. A
role change restarts the BrokerServer in the same process, on the same
data directory and port: a promoted follower records its promotion and
merges its slave journal (as a slave directory started as a master always
did), a demoted leader or a follower holding records the new history lacks
sets them aside first (es_broker/ha/rejoin.py). A follower whose leader
changed but whose log is on the new history switches master in place.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import trio

from es_broker.acl.signing import Credentials
from es_broker.config import BrokerConfig, BrokerRole
from es_broker.core.broker import Broker
from es_broker.ha.election import Coordinator, Leadership
from es_broker.ha.etcd import EtcdClient
from es_broker.ha.rejoin import pending_report, report_done, set_aside
from es_broker.ha.slave import SlaveReplicator
from es_broker.ha.term import HaTerm
from es_broker.net.remoting_client import RemotingClient, RemotingError
from es_broker.net.tls import TlsClientSettings
from es_broker.remoting.codes import EsRequestCode
from es_broker.remoting.command import request
from es_broker.remoting.peer_outcomes import PeerRequests
from es_broker.store import LMDB_DIR, Store

log = logging.getLogger(__name__)

REPORT_RETRY = 0.5  # s between two tries of the set-aside report while the leader refuses it


class BrokerServer(Protocol):
    """What fail-over drives of the broker server it runs in each role (es_broker/server/main.py,
    whose `serve` hands it `make_server` and so is not imported by it)."""

    @property
    def broker(self) -> Broker: ...
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def replicator(self) -> SlaveReplicator | None: ...
    @property
    def credentials(self) -> Credentials | None: ...
    @property
    def client_tls(self) -> TlsClientSettings | None: ...
    async def run(
        self, host: str, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
    ) -> None: ...


Server = TypeVar("Server", bound=BrokerServer)


def free_port(host: str) -> int:
    """A port to keep across role changes when broker.conf / --listen asked for any (0)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def last_seq_on_disk(config: BrokerConfig) -> int:
    """The log's last sequence while no BrokerServer has the data directory open."""
    if not (Path(config.storePathRootDir) / LMDB_DIR / "data.mdb").exists():
        return 0
    store = Store.open(config.storePathRootDir, config, readonly=True)
    try:
        return store.log.last_seq
    finally:
        store.close()


async def serve_ha(
    config: BrokerConfig,
    make_server: Callable[[BrokerConfig, HaTerm], Server],
    host: str,
    announce: Callable[[Server, HaTerm], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    leader_role = (
        config.brokerRole if config.brokerRole != BrokerRole.SLAVE else BrokerRole.ASYNC_MASTER
    )
    if config.listenPort == 0:
        config = config.replace(listenPort=free_port(host))
    etcd = EtcdClient.from_url(config.ha_coordinator)
    coordinator = Coordinator(
        etcd,
        cluster=config.brokerClusterName,
        broker_name=config.brokerName,
        node=config.ha_node_id,
        lease_ms=config.ha_lease_ms,
        sync=leader_role == BrokerRole.SYNC_MASTER,
    )
    on_disk = last_seq_on_disk(config)
    coordinator.position = lambda: on_disk  # nothing else opens the data directory meanwhile
    try:
        async with trio.open_nursery() as nursery:
            await coordinator.join(f"{config.brokerIP1}:{config.listenPort}")
            nursery.start_soon(coordinator.keep_alive)
            nursery.start_soon(coordinator.follow_positions)
            lead = await coordinator.elect()
            started = False
            while True:
                lead = await _run_term(
                    config, coordinator, lead, leader_role, make_server, host, announce
                )
                if not started:
                    started = True
                    task_status.started()
    finally:
        with trio.CancelScope(shield=True):
            with trio.move_on_after(2):
                await coordinator.leave()
            await etcd.aclose()


async def _run_term(
    config: BrokerConfig,
    coordinator: Coordinator,
    lead: Leadership,
    leader_role: BrokerRole,
    make_server: Callable[[BrokerConfig, HaTerm], Server],
    host: str,
    announce: Callable[[Server, HaTerm], None],
) -> Leadership:
    """Run one BrokerServer for `lead`; return the leadership the next run is for."""
    if lead.mine:
        role_config = config.replace(brokerRole=leader_role, brokerId=0)
        coordinator.leading = lead
        coordinator.superseded = False
        coordinator.switching = ""
    else:
        coordinator.leading = None
        role_config = config.replace(brokerRole=BrokerRole.SLAVE, brokerId=coordinator.broker_id)
        view = await coordinator.view()
        await trio.to_thread.run_sync(set_aside, role_config, coordinator.node, view.epochs)
        # the data directory is closed again: its last record, read once (LMDB opens an
        # environment once per process, so nothing reads it while a server has it open)
        on_disk = last_seq_on_disk(config)
        coordinator.position = lambda: on_disk
    term = HaTerm(coordinator, lead, leader_role)
    server = make_server(role_config, term)
    coordinator.position = lambda: server.broker.store.log.last_seq
    async with trio.open_nursery() as run:
        await run.start(server.run, host)
        announce(server, term)
        if not lead.mine and pending_report(config.storePathRootDir) is not None:
            run.start_soon(_report_set_aside, server, lead.addr)
        while True:
            await coordinator.until_changed(lead)
            new = await coordinator.elect()
            if (
                not lead.mine
                and not new.mine
                and server.replicator is not None
                and server.broker.store.log.last_seq <= new.start_seq
            ):
                log.info(
                    "ha: node %s follows %s (%s) in epoch %d",
                    coordinator.node,
                    new.node,
                    new.addr,
                    new.epoch,
                )
                server.replicator.follow(new.addr, new.epoch)
                term.lead = lead = new
                continue
            break
        final = server.broker.store.log.last_seq
        coordinator.position = lambda: final  # the server closes its store as it stops
        run.cancel_scope.cancel()
    return new


async def _report_set_aside(server: BrokerServer, leader: str) -> None:
    """Tell the new leader what was set aside, until it recorded it (`ha_records_set_aside`)."""
    data_dir = server.config.storePathRootDir
    report = pending_report(data_dir)
    if report is None:
        return
    outcomes = PeerRequests("set-aside report to the leader", log)
    async with trio.open_nursery() as nursery:
        client = RemotingClient(nursery, credentials=server.credentials, tls=server.client_tls)
        body = json.dumps(
            {
                "node": report.node,
                "epoch": report.epoch,
                "common_seq": report.common_seq,
                "first_seq": report.first_seq,
                "last_seq": report.last_seq,
                "messages": report.messages,
                "msg_ids": report.msg_ids,
                "export": report.export,
                "reason": report.reason,
            }
        ).encode()
        while True:
            cmd = request(EsRequestCode.HA_REPORT_SET_ASIDE, body=body)
            try:
                answer = await client.invoke(leader, cmd, timeout=10.0)
            except RemotingError as exc:
                outcomes.no_answer(leader, exc)
            else:
                if outcomes.answered(leader, answer):
                    report_done(data_dir)
                    nursery.cancel_scope.cancel()
                    return
            await trio.sleep(REPORT_RETRY)  # the leader may still be starting; retried
