"""`es-broker serve`: the broker, and by default the name server role, in one trio nursery."""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import trio

from es_broker import compiled
from es_broker.acl.access import AccessControl, default_acl_sources
from es_broker.acl.rules import BROKER_RULES, NAMESRV_RULES
from es_broker.commands.acl_audit import AclAudit
from es_broker.commands.errors import BrokerError
from es_broker.config import BrokerConfig, BrokerRole, load_broker_conf
from es_broker.core.slave_broker import SlaveBroker, merge_own_journal, open_broker
from es_broker.ha.master import ReplicationMaster
from es_broker.ha.slave import SlaveReplicator
from es_broker.ha.term import HaTerm
from es_broker.log import WriterClosed
from es_broker.log.dirlock import DataDirLock
from es_broker.net.channel import Channel
from es_broker.net.remoting_client import RemotingClient, RemotingError, split_addr
from es_broker.readmodel.db import default_url
from es_broker.readmodel.process import read_position
from es_broker.readmodel.supervisor import FollowerCommand, FollowerSupervisor
from es_broker.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper
from es_broker.remoting.codes import EsRequestCode, RequestCode
from es_broker.remoting.command import request
from es_broker.remoting.headers import RegisterBrokerRequestHeader
from es_broker.remoting.peer_outcomes import NONE, PeerRequests
from es_broker.remoting.response_headers import RegisterBrokerResponseHeader
from es_broker.server.acl_processors import AclProcessors
from es_broker.server.broker_processors import BrokerProcessors
from es_broker.server.clients import ClientRegistry
from es_broker.server.delay_delivery import DelayDeliveryService
from es_broker.server.longpoll import PullHoldService
from es_broker.server.metrics_config import check_exporter_type
from es_broker.server.namesrv import InProcessNameServer, NameServer
from es_broker.server.outbox import HeldAnswers
from es_broker.server.pop_processor import PopProcessor
from es_broker.server.proxy_process import proxy_command, supervise
from es_broker.server.remoting_server import EdgeLimits, RemotingServer
from es_broker.server.sealing import HistorySealing
from es_broker.server.serve_access import (
    access_control,
    open_listener_warning,
    peer_credentials,
    say_who_registers,
)
from es_broker.server.serve_options import ServeOptions
from es_broker.server.serve_options import with_role as _with_role
from es_broker.server.timer_delivery import TimerDeliveryService
from es_broker.server.tls import ServerTls, broker_client_tls, with_tls_config_file
from es_broker.server.transaction_check import TransactionCheckService

log = logging.getLogger("es_broker")

REGISTER_PERIOD = 30.0  # registerNameServerPeriod
SCAN_PERIOD = 10.0  # channel expiry scans, broker and name server
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
        ha_handlers = self.replication.handlers() if self.replication else {}
        # sealing the log's old segments while running (B-411..B-414)
        self.sealing = HistorySealing(self.broker, self.replication, follower=bool(readmodel_url))
        if ha is not None:
            ha_handlers[EsRequestCode.HA_SWITCH] = ha.switch
        acl_handlers = AclProcessors(
            access,
            lambda: self.broker.store.clock.now_ms(),
            lambda: (self.config.brokerClusterName, self.config.brokerName, self.addr),
        ).handlers()
        handlers = {
            **self.processors.handlers(),
            **self.pop.handlers(),
            **ha_handlers,
            **acl_handlers,
            **self.sealing.handlers(),
        }
        # the first part of a send or an offset commit runs as its frame is decoded, where the
        # processor's own handler serves the code (not one a later table replaced)
        starts = {
            code: start
            for code, (handler, start) in self.processors.starts().items()
            if handlers.get(code) == handler
        }
        held = HeldAnswers()
        self.broker.writer.completing = held.holding
        self.remoting = RemotingServer(
            "broker",
            handlers,
            on_close=self._channel_closed,
            limits=EdgeLimits.of(config),
            guard=access,
            starts=starts,
            before_wait=self.broker.writer.commit_waiting,
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
                    cmd = request(RequestCode.REGISTER_BROKER, header, body)
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


class NameServerRole:
    def __init__(
        self,
        limits: EdgeLimits | None = None,
        access: AccessControl | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.tls = tls
        self.namesrv = NameServer()
        self.access = access  # B-176: registration needs an admin account when set
        self.remoting = RemotingServer(
            "namesrv",
            self.namesrv.handlers(),
            on_close=self.namesrv.channel_closed,
            limits=limits,
            guard=access,
        )

    async def run(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            if self.access is not None:
                nursery.start_soon(self.access.watch)
            bound = await nursery.start(
                functools.partial(self.remoting.serve, host, port, tls=self.tls)
            )
            nursery.start_soon(self._scan)
            task_status.started(bound)

    async def _scan(self) -> None:
        while True:
            await trio.sleep(SCAN_PERIOD)
            self.namesrv.scan_not_active()


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
    config = _with_role(config, args)
    host, port = _listen(
        args.listen or f"{config.brokerIP1}:{config.listenPort}", config.listenPort
    )
    config = config.replace(brokerIP1=host, listenPort=port)
    check_exporter_type(config.metricsExporterType)  # before anything listens (B-355)
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

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
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
                nursery.start_soon(supervise, _proxy_command(config, namesrv, args.grpc_port))
            await nursery.start(serve_ha, config, make_server, host, announce)
            return
        if args.enable_proxy:
            nursery.start_soon(supervise, _proxy_command(config, namesrv, args.grpc_port))
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
    if not config.aclEnable:
        return proxy_command(namesrv, port, None, None)
    sources = default_acl_sources(config.acl_plain_file, config.storePathRootDir)
    return proxy_command(namesrv, port, sources.default_file, sources.directory)


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            print(f"es-broker: {signal.Signals(signum).name}, shutting down", flush=True)
            scope.cancel()
            return


def readmodel_url_for(url: str | None, data_dir: str) -> str | None:
    if url and url.lower() == "none":
        return None
    return url or default_url(data_dir)
