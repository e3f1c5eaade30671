"""The broker's composition root: `BrokerServer` builds a broker's parts and runs them.

One place makes what a running broker is made of, each part given what it
uses: the core (`open_broker`), held pulls and the clients table, a master's
replication, the request processors (processors/build.py), the background
services (delay delivery, transaction check, sealing), and the listener,
handed the dispatch table of server/routes.py. `run` starts them in one
nursery with the name-server registration and the housekeeping loops. The
process around it, `es-broker serve`, is server/serve.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import zlib
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import trio

from es_broker.acl.access import AccessControl
from es_broker.commands.acl_audit import AclAudit
from es_broker.commands.errors import BrokerError
from es_broker.config import BrokerConfig, BrokerRole
from es_broker.core.slave_broker import SlaveBroker, merge_own_journal, open_broker
from es_broker.ha.master import ReplicationMaster
from es_broker.ha.slave import SlaveReplicator
from es_broker.ha.term import HaTerm
from es_broker.log import WriterClosed
from es_broker.net.channel import Channel
from es_broker.net.remoting_client import RemotingClient, RemotingError
from es_broker.readmodel.process import read_position
from es_broker.readmodel.supervisor import FollowerCommand, FollowerSupervisor
from es_broker.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from es_broker.remoting.headers import RegisterBrokerRequestHeader
from es_broker.remoting.peer_outcomes import NONE, PeerRequests
from es_broker.remoting.response_headers import RegisterBrokerResponseHeader
from es_broker.server.clients import ClientRegistry
from es_broker.server.delay_delivery import DelayDeliveryService
from es_broker.server.edge.outbox import HeldAnswers
from es_broker.server.edge.processes import EdgeProcesses
from es_broker.server.edge.remoting_server import EdgeLimits, RemotingServer
from es_broker.server.edge.tls import ServerTls, broker_client_tls, with_tls_config_file
from es_broker.server.longpoll import PullHoldService
from es_broker.server.namesrv import SCAN_PERIOD, InProcessNameServer
from es_broker.server.processors.build import BrokerProcessors
from es_broker.server.processors.pop import PopProcessor
from es_broker.server.routes import broker_routes
from es_broker.server.sealing import HistorySealing
from es_broker.server.serve_access import (
    peer_credentials,
)
from es_broker.server.timer_delivery import TimerDeliveryService
from es_broker.server.transaction_check import TransactionCheckService

log = logging.getLogger("es_broker")

REGISTER_PERIOD = 30.0  # registerNameServerPeriod
REGISTER_WAIT = 6.0  # longest an admin answer waits for the registration carrying its change


class BrokerServer:
    """A running broker: core, listener, name-server registration, housekeeping."""

    def __init__(
        self,
        config: BrokerConfig,
        namesrv_addrs: list[str],
        *,
        readmodel_url: str | None = None,
        master_addr: str | None = None,
        access: AccessControl | None = None,
        tls: ServerTls | None = None,
        audit: AclAudit | None = None,
        local_namesrv: InProcessNameServer | None = None,
        ha: HaTerm | None = None,
    ) -> None:
        # automatic fail-over (B-370..B-389): this run's term in its group's election, or None
        self.ha = ha
        # the name server of this process: registered with directly, never over the wire (B-313)
        self.local_namesrv = local_namesrv
        # what the name servers answered the registrations (B-315)
        self.registration = PeerRequests("registration with name server", log)
        self.audit = audit  # records the ACL loads and summaries of refusals (B-190..B-194)
        self.access = access  # the plain ACL when aclEnable (B-160); None: every request is served
        # what this broker signs its own requests with (B-175)
        self.credentials = peer_credentials(config)
        self.tls = tls  # the listener's TLS mode (None: plain only)
        # registration, slave to master
        self.client_tls = broker_client_tls(with_tls_config_file(config))
        self.readmodel_url = readmodel_url  # the SQL read model's database; None: no follower
        self.metrics: Any = None  # the /metrics exporter (es_broker/server/metrics.py) when PROM
        self.follower: FollowerSupervisor | None = None  # the read-model follower's child process
        self.namesrv_addrs = namesrv_addrs
        self.broker = open_broker(config)  # a SlaveBroker for brokerRole=SLAVE
        self.holds = PullHoldService()
        self.clients = ClientRegistry(notify_changed=self._consumer_ids_changed)
        # master/slave (es_broker/ha): a master serves its log to slaves, a slave follows its master's
        self.master_addr = master_addr  # --master; else learned from the name server (B-121)
        self.replication = (
            ReplicationMaster(self.broker) if config.brokerRole != BrokerRole.SLAVE else None
        )
        self.replicator: SlaveReplicator | None = None
        if ha is not None and ha.lead.mine and self.replication is not None:
            coordinator = ha.coordinator
            self.replication.epoch = ha.lead.epoch
            if config.brokerRole == BrokerRole.SYNC_MASTER:
                self.replication.publish_acked = coordinator.publish_acked
            self.replication.on_superseded = coordinator.note_superseded
            self.broker.writer.fence = coordinator.fence
        if ha is not None and self.replication is not None:
            # B-501: HA reports are taken only from the group's own nodes
            self.replication.member_addrs = ha.coordinator.member_addrs
        self.processors = BrokerProcessors.build(
            self.broker,
            self.clients,
            self.holds,
            topics_changed=self._topics_changed,
            registered=self.registered,
            ha_status=self.ha_status,
            addr=lambda: self.addr,
            access=access,  # reads filtered to the caller's perms (B-350, B-351)
            # SYNC_MASTER: answers SEND_OK only once a slave holds the record (es_broker.ha.master)
            replication=self.replication if config.brokerRole == BrokerRole.SYNC_MASTER else None,
        )
        self.delays = DelayDeliveryService(self.broker, self.holds)
        self.transaction_check = TransactionCheckService(self.broker, self.clients)
        # RocketMQ 5's pop consumption and its revive service, and its timer messages (B-580..B-599)
        self.timers = TimerDeliveryService(self.broker, self.holds)
        self.pop, self.pop_revive = PopProcessor.serving(
            self.broker, self.holds, self.clients.client_id
        )
        # sealing the log's old segments while running (B-411..B-414)
        self.sealing = HistorySealing(self.broker, self.replication, follower=bool(readmodel_url))
        routes = broker_routes(self.processors, self.pop, self.sealing, self.replication, ha)
        held = HeldAnswers()
        self.broker.writer.completing = held.holding
        self.remoting = RemotingServer(
            "broker",
            routes.handlers,
            on_close=self._channel_closed,
            limits=EdgeLimits.of(config),
            guard=access,
            starts=routes.starts,
            before_wait=self.broker.writer.commit_after_read,
            held=held,
        )
        self._register_now = trio.Event()
        # what the next registration carries: the topics that changed, or everything (B-391)
        self._register_topics: set[str] = set()
        self._register_everything = False
        self._data_version = DataVersion()  # of the last registration's topics
        # registrations asked for and done, so an admin change can wait until the name server has it
        self._register_wanted = 0
        self._register_done = 0
        self._registered = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.port = config.listenPort
        # edge_processes: the processes that accept the broker's connections and relay them here (B-671)
        self.edges = (
            EdgeProcesses(
                self.remoting,
                config.edge_processes,
                with_tls_config_file(config),
                tls=tls is not None,
            )
            if config.edge_processes > 0
            else None
        )

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings as they are now (the store's ConfigOwner holds them)."""
        return self.broker.config

    @property
    def addr(self) -> str:
        return f"{self.config.brokerIP1}:{self.port}"

    def _topics_changed(self, topics: Iterable[str] | None = None) -> int:
        """Register with the name servers soon; returns the number of the registration that will carry it.

        `topics`: the topics that changed (created, updated or deleted), registered alone
        (RocketMQ's registerIncrementBrokerData, B-391); None: every topic (a full registration).
        """
        if topics is None:
            self._register_everything = True
        else:
            self._register_topics.update(topics)
        self._register_wanted += 1
        self._register_now.set()
        return self._register_wanted

    async def registered(self, topics: Iterable[str] | None = None) -> None:
        """Register now and return once the name servers were told (or after REGISTER_WAIT).

        As in RocketMQ, an admin change of topics is answered after the
        registration that carries it, so a client that routes right after
        the answer finds it. `topics` as for _topics_changed.
        """
        wanted = self._topics_changed(topics)
        if not self.namesrv_addrs:
            return
        with trio.move_on_after(REGISTER_WAIT):
            while self._register_done < wanted:
                await self._registered.wait()

    def _channel_closed(self, channel: Channel) -> None:
        self.clients.channel_closed(channel)
        # a client gone: the notices it missed no longer count against the broker's state (B-319)
        self.processors.notices.outcomes.forget(channel.remote_addr)
        self.transaction_check.checks.forget(channel.remote_addr)
        if self._nursery is not None:
            # its queue locks (B-145)
            self._nursery.start_soon(self.processors.client_manage.channel_closed, channel)
        if self.replication is not None:
            self.replication.channel_closed(channel)

    def ha_status(self) -> dict[str, object]:
        """Replication state for GET_BROKER_RUNTIME_INFO: the slaves a master serves, or a slave's progress."""
        status: dict[str, object] = {
            "brokerRole": self.config.brokerRole,
            "brokerId": self.config.brokerId,
            # the requests this broker sends on its own, and how their peers answered (B-316)
            "nameServerRegistration": self.registration.state() if self.namesrv_addrs else NONE,
            "slaveFetch": NONE,
            "slaveOffsetMerge": NONE,
            "transactionCheck": self.transaction_check.checks.state(),
            "clientNotice": self.processors.notices.outcomes.state(),
        }
        if self.replication is not None:
            status.update(self.replication.status())
        if self.replicator is not None:
            status.update(self.replicator.status())
        if self.ha is not None:
            status.update(self.ha.status())
        status.update(self.readmodel_status())
        if self.edges is not None:
            status.update(self.edges.status())
        return status

    def readmodel_status(self) -> dict[str, object]:
        """The SQL read-model follower: running or not, and its checkpoint against the log's head."""
        if not self.readmodel_url:
            return {"readModelFollower": "off"}
        follower = self.follower
        position = read_position(self.config.storePathRootDir)
        head = self.broker.store.log.last_seq
        exits = follower.exits if follower is not None else []
        return {
            "readModelFollower": "running" if follower and follower.pid else "not running",
            "readModelFollowerPid": (follower.pid if follower else None) or -1,
            "readModelFollowerStarts": follower.starts if follower else 0,
            "readModelFollowerLastExit": "" if not exits else str(exits[-1]),
            "readModelPosition": -1 if position is None else position,
            "readModelBehind": -1 if position is None else max(head - position, 0),
        }

    def _consumer_ids_changed(self, group: str, channels: list[Channel]) -> None:
        if self._nursery is None:
            return
        self.processors.notices.consumer_ids_changed(group, channels, self._nursery)
        info = self.clients.consumer_group(group)
        subs = (
            {t: str(s.get("subString", "*")) for t, s in info.subscriptions.items()} if info else {}
        )
        self._nursery.start_soon(
            self._record_group_change,
            group,
            functools.partial(
                self.broker.record_consumer_group,
                group,
                info.client_ids() if info else [],
                info.consume_from_where if info else "",
                info.message_model if info else "",
                subs,
            ),
        )

    async def _record_group_change(
        self, group: str, record: Callable[[], Awaitable[object]]
    ) -> None:
        # shutting down: the channels closing now are not a membership change
        with contextlib.suppress(WriterClosed):
            try:
                await record()
            except (
                BrokerError
            ) as exc:  # a refused record (a full disk, ...) must not end the broker's nursery
                log.warning("membership change of group %s not recorded: %s", group, exc.remark)

    async def run(
        self, host: str, *, task_status: trio.TaskStatus[BrokerServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.broker.run)
                if self.ha is not None and self.ha.lead.mine:
                    await self.ha.record_promotion(self.broker)
                    if self.config.brokerRole == BrokerRole.SYNC_MASTER:
                        nursery.start_soon(self.ha.coordinator.acked_publisher, self.ha.lead.epoch)
                if self.config.brokerRole != BrokerRole.SLAVE:
                    await self._merge_journal_of_a_former_slave()
                if self.edges is not None:  # the edge processes accept; this process writes
                    self.port = await nursery.start(self.edges.serve, host, self.config.listenPort)
                else:
                    self.port = await nursery.start(
                        functools.partial(
                            self.remoting.serve, host, self.config.listenPort, tls=self.tls
                        )
                    )
                # the port bound (0 in broker.conf: any); a start-up fact, not a recorded change
                self.broker.config = self.config.replace(listenPort=self.port)
                if self.config.metricsExporterType == "PROM":
                    self._start_metrics()
                # before registering: the answer may name the master
                if isinstance(self.broker, SlaveBroker):  # brokerRole=SLAVE
                    self.replicator = SlaveReplicator(
                        self.broker,
                        RemotingClient(nursery, credentials=self.credentials, tls=self.client_tls),
                        master_addr=self.master_addr,
                        own_addr=lambda: self.addr,
                        on_stored=self.holds.notify,
                    )
                    if self.ha is not None:  # the coordinator names the master and its epoch
                        self.replicator.follow(self.ha.lead.addr, self.ha.lead.epoch)
                    nursery.start_soon(self.replicator.run)
                if self.access is not None:
                    if self.audit is not None:
                        await nursery.start(
                            self.audit.run, self.broker.submit, self.broker.store.clock, self.access
                        )
                    nursery.start_soon(self.access.watch)
                client = RemotingClient(nursery, credentials=self.credentials, tls=self.client_tls)
                if self.namesrv_addrs:
                    await self._register_all(client)
                    nursery.start_soon(self._registration_loop, client)
                nursery.start_soon(self._expiry_loop)
                nursery.start_soon(self.processors.client_manage.lock_expiry_loop)
                if self.readmodel_url:  # the SQL read model follows the log in a child process
                    await nursery.start(self._follower().run)
                if self.config.brokerRole != BrokerRole.SLAVE:
                    nursery.start_soon(self._retention_loop)
                    # the delay schedule runs on a master only (B-98)
                    nursery.start_soon(self.delays.run)
                    # so is the transaction check (4.9.8 starts it only on a master)
                    nursery.start_soon(self.transaction_check.run)
                    nursery.start_soon(self.pop_revive.run)  # masters only, as 5.x's
                    nursery.start_soon(self.timers.run)
                    if self.config.history_hot_days > 0:  # sealing by itself (B-411)
                        nursery.start_soon(self.sealing.run)
                task_status.started(self)
        finally:
            if self.metrics is not None:
                self.metrics.stop()
            # the writer has stopped: what is left goes in one transaction
            if self.audit is not None:
                self.audit.close(self.broker.store.log)
            self.broker.close()

    def _start_metrics(self) -> None:
        """/metrics on its own thread (B-355); a port that cannot be bound is logged, the broker goes on."""
        from es_broker.server.metrics import MetricsExporter  # loads prometheus_client: PROM only

        cfg = self.config
        host = cfg.metricsPromExporterHost or cfg.brokerIP1
        exporter = MetricsExporter(self)
        try:
            bound = exporter.start(host, cfg.metricsPromExporterPort)
        except OSError as exc:
            log.error(
                "metrics: cannot listen on %s:%d: %s; the broker runs without /metrics",
                host,
                cfg.metricsPromExporterPort,
                exc,
            )
            return
        self.metrics = exporter
        self.remoting.observe = exporter.latency.observe
        print(f"es-broker metrics on http://{bound[0]}:{bound[1]}/metrics", flush=True)

    def _follower(self) -> FollowerSupervisor:
        cfg = self.config
        self.follower = FollowerSupervisor(
            FollowerCommand(
                str(Path(cfg.storePathRootDir).resolve()),
                self.readmodel_url or "",
                cfg.brokerName,
                cfg.brokerRole,
                verbose=logging.getLogger().isEnabledFor(logging.INFO),
            )
        )
        return self.follower

    async def _merge_journal_of_a_former_slave(self) -> None:
        """A slave's data directory started as a master (promotion): its journal becomes records first."""
        done = await merge_own_journal(self.broker, self.config.storePathRootDir)
        if done is not None:
            log.info(
                "promoted from slave: merged %d queue offsets and %d deliveries of the slave journal, "
                "record %d",
                len(done.queues),
                done.deliveries,
                done.seq,
            )

    async def _registration_loop(self, client: RemotingClient) -> None:
        while True:
            periodic = True
            with trio.move_on_after(REGISTER_PERIOD):
                await self._register_now.wait()
                periodic = False
            self._register_now = trio.Event()
            wanted = self._register_wanted
            topics, self._register_topics = self._register_topics, set()
            everything, self._register_everything = self._register_everything, False
            if periodic or everything:
                await self._register_all(client)
            else:
                await self._register_changed(client, topics)
            self._register_done = wanted
            self._registered.set()
            self._registered = trio.Event()

    async def _register_all(self, client: RemotingClient) -> None:
        """registerBrokerAll: every topic (compressed on the wire when compressedRegister, B-392)."""
        wrapper = self.processors.admin.topic_config_wrapper()
        self._data_version = wrapper.data_version
        await self._register(client, wrapper, self.config.compressedRegister, complete=True)

    async def _register_changed(self, client: RemotingClient, topics: set[str]) -> None:
        """registerIncrementBrokerData: the changed topics only, with the current data version (B-391)."""
        configs, version = self.processors.admin.topic_configs_of(sorted(topics))
        gone = sorted(topics - configs.keys())
        if version > self._data_version.counter:
            self._data_version = DataVersion(timestamp=version, counter=version)
        wrapper = TopicConfigSerializeWrapper(configs, self._data_version)
        await self._register(
            client, wrapper, self.config.compressedRegister, deleted=";".join(gone) or None
        )

    async def _register(
        self,
        client: RemotingClient,
        wrapper: TopicConfigSerializeWrapper,
        compressed: bool,
        *,
        complete: bool | None = None,
        deleted: str | None = None,
    ) -> None:
        """REGISTER_BROKER to every name server; `complete`: the wrapper holds every topic of the
        broker, `deleted`: the topics it deleted, `;`-separated (B-391)."""
        cfg = self.config
        header = RegisterBrokerRequestHeader(
            broker_name=cfg.brokerName,
            broker_addr=self.addr,
            cluster_name=cfg.brokerClusterName,
            ha_server_addr=f"{cfg.brokerIP1}:{cfg.haListenPort}",
            broker_id=cfg.brokerId,
            compressed=compressed,
            topic_table_complete=complete,
            deleted_topics=deleted,
        )
        body: bytes | None = None  # encoded once, and only for a name server over the wire
        wire_header = header
        for addr in self.namesrv_addrs:
            local = self.local_namesrv
            try:
                if local is not None and local.serves(addr, (cfg.brokerIP1,)):
                    # this process's own name server: called directly, the body not encoded (B-313)
                    answer = local.namesrv.apply_registration(
                        None, request(RequestCode.REGISTER_BROKER, header), wrapper
                    )
                else:
                    if body is None:
                        body = RegisterBrokerBody(wrapper).encode(compressed=compressed)
                        # as 4.9.8's registerBrokerAll: the name server checks it (B-530)
                        crc = zlib.crc32(body) & 0x7FFFFFFF
                        wire_header = dataclasses.replace(header, body_crc32=crc)
                    cmd = request(RequestCode.REGISTER_BROKER, wire_header, body)
                    answer = await client.invoke(addr, cmd, timeout=6.0)
            except RemotingError as exc:
                self.registration.no_answer(addr, exc)
                continue
            if not self.registration.answered(addr, answer):
                continue  # a refusal names no master: a slave keeps the one it has
            if self.replicator is not None:  # a slave learns (or forgets) its master here (B-121)
                self.replicator.set_master(RegisterBrokerResponseHeader.of(answer).master_addr)

    async def _retention_loop(self) -> None:
        """CleanCommitLogService: a pass every cleanResourceInterval (B-14); passes that delete are records."""
        while True:
            await trio.sleep(self.config.cleanResourceInterval / 1000)
            done = await self.broker.retention_pass()
            if done.deleted_files:
                log.info(
                    "retention (%s) removed commit-log files %s",
                    done.reason,
                    list(done.deleted_files),
                )

    async def _expiry_loop(self) -> None:
        while True:
            await trio.sleep(SCAN_PERIOD)
            for channel in self.clients.scan_expired():
                log.info("dropped client channel %s: no heartbeat for 120 s", channel.remote_addr)
