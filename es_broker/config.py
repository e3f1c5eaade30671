"""Broker configuration: RocketMQ's names and default values in one place.

Keys keep RocketMQ's camelCase names so a `broker.conf` written for RocketMQ
loads as it is; es-broker's own switches (docs/design.md §10) use snake_case.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

SYNC_FLUSH = "SYNC_FLUSH"
ASYNC_FLUSH = "ASYNC_FLUSH"

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class BrokerRole(enum.StrEnum):
    """brokerRole (BrokerRole): a master that answers a send once stored, or once its slave has it too, or a slave."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def _host_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 24 * 1024**3  # what RocketMQ assumes when the JVM cannot tell


def default_store_root() -> str:
    return str(Path.home() / "store")  # storePathRootDir default ($HOME/store, B-07)


def default_data_dir() -> str:
    """Where `es-broker serve` keeps its data without --data-dir or a broker.conf's storePathRootDir."""
    return str(Path.home() / ".es-broker" / "data")


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Every setting the broker reads, with RocketMQ's default values (B-01, B-02)."""

    # --- identity and network (BrokerConfig, NettyServerConfig)
    brokerName: str = "broker-a"
    brokerClusterName: str = "DefaultCluster"
    brokerId: int = 0
    brokerIP1: str = "127.0.0.1"
    listenPort: int = 10911
    namesrvAddr: str = ""
    brokerRole: BrokerRole = BrokerRole.ASYNC_MASTER
    brokerPermission: int = 6
    haListenPort: int = 10912
    # the periodic full registration in RegisterBrokerBody's compressed form (B-392)
    compressedRegister: bool = False

    # --- automatic fail-over (es_broker/ha/election.py, B-370..B-389): etcd://H:P[,H:P...]; "" is off
    ha_coordinator: str = ""
    ha_node_id: str = ""  # this node's name, unique in its broker group
    ha_lease_ms: int = 10_000  # the leader key's lease; a dead leader is replaced after it
    # --- store (MessageStoreConfig)
    storePathRootDir: str = field(default_factory=default_store_root)
    flushDiskType: str = ASYNC_FLUSH
    flushIntervalCommitLog: int = 500  # ms between background flushes in ASYNC_FLUSH
    maxMessageSize: int = 4 * 1024 * 1024
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024  # a message never straddles two files (B-08)
    fileReservedTime: int = 72  # hours
    deleteWhen: str = "04"
    diskMaxUsedSpaceRatio: int = 75
    cleanResourceInterval: int = 10_000  # ms between retention passes (B-14)
    # a retention pass expires a file in steps of about this many bytes, each a record and a
    # transaction of its own, so that the writer is never held for a whole file (B-676); 0: whole
    # files. No RocketMQ counterpart (its deletion of a file is an unlink)
    retention_step_bytes: int = 4 * 1024 * 1024
    # DELETE_EXPIRED_COMMITLOG answers with its pass's outcome if the pass ends within this many ms,
    # else at once that the pass runs on (B-677): under the admin tool's 5 s timeout. RocketMQ
    # answers at once and deletes on its clean service's next passes
    manual_pass_answer_ms: int = 3000
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    accessMessageInMemoryMaxRatio: int = 40
    maxTransferBytesOnMessageInMemory: int = 262144
    maxTransferCountOnMessageInMemory: int = 32
    maxTransferBytesOnMessageInDisk: int = 65536
    maxTransferCountOnMessageInDisk: int = 8
    offsetCheckInSlave: bool = False
    maxMsgsNumBatch: int = 64  # most messages one QUERY_MESSAGE answers (B-202)
    defaultQueryMaxNum: int = 32  # maxNum of a QUERY_MESSAGE flagged _UNIQUE_KEY_QUERY (B-202)
    # --- master/slave (MessageStoreConfig; es-broker replicates records over the remoting port)
    slaveTimeout: int = (
        3000  # ms a SYNC_MASTER send waits for the slave (4.9.8 CommitLog#submitReplicaRequest)
    )
    # commit-log bytes a slave may lag and still count
    haSlaveFallbehindMax: int = 256 * 1024 * 1024
    haSendHeartbeatInterval: int = (
        5000  # ms: a slave's fetch is held at most this long, so it beats this often
    )
    haHousekeepingInterval: int = 20_000  # ms without a fetch after which the master drops a slave
    # --- broker behaviour
    slaveReadEnable: bool = False
    autoCreateTopicEnable: bool = True
    autoCreateSubscriptionGroup: bool = True
    defaultTopicQueueNums: int = 8
    # the topics TopicConfigManager makes at start (B-481): the cluster's and the broker's own topic
    # are readable and writable when these are on, and the trace topic exists when traceTopicEnable is
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    traceTopicEnable: bool = False
    msgTraceTopicName: str = "RMQ_SYS_TRACE_TOPIC"
    longPollingEnable: bool = True
    shortPollingTimeMills: int = 1000
    flushConsumerOffsetInterval: int = 5000
    notifyConsumerIdsChangedEnable: bool = True
    # --- transactional messages (BrokerConfig; TransactionalMessageCheckService, B-220..B-234)
    rejectTransactionMessage: bool = False  # refuse half messages with NO_PERMISSION
    transactionTimeOut: int = 6_000  # ms after its born time before a half message is first checked
    transactionCheckMax: int = 15  # checks of one half message before it is discarded
    transactionCheckInterval: int = 60_000  # ms between check passes
    # --- RocketMQ 5's timer messages (its MessageStoreConfig, B-589)
    timerMaxDelaySec: int = 259_200  # 3 days: a message due later than this is refused
    # --- SQL92 property filters (BrokerConfig; ExpressionMessageFilter, B-210..B-219)
    enablePropertyFilter: bool = False  # SQL92 subscriptions are served (B-214)
    filterSupportRetry: bool = False  # a group's SQL92 filters apply to its retry topic too (B-217)
    # --- es-broker switches (docs/design.md §10; defaults are RocketMQ-compatible)
    total_physical_memory_bytes: int = field(default_factory=_host_ram)
    overflow_badly_next: str = "max"  # max | legacy (B-60)
    dlq_topic_perm: int = 2  # a new %DLQ%G's perm: 2 (write only), as 4.x up to 4.9.1 (B-103)
    strict_retry_config: bool = False  # S-10: no silent drop, one DLQ threshold for both paths
    new_group_start: str = "compat"  # compat | strict (S-6)
    time_lookup: str = "compat"  # compat | lower_bound | upper_bound (S-7)
    reset_mode: str = "compat"  # compat | server_side (S-2)
    reset_scope: str = "compat"  # compat | read_queues (S-13)
    reset_fence: bool = False  # a reset fences off late commits until the owner catches up (S-3)
    slave_offset_merge: str = "latest_wins"  # latest_wins | compat_overwrite (S-5, B-123)
    # the LMDB map; grows by itself. On ext4 and xfs with ASYNC_FLUSH its blocks are allocated
    # beforehand and LMDB writes its pages straight into it (B-673): the map is then disk space taken
    initial_map_size: int = 64 * 1024 * 1024
    write_map: bool = True  # False: LMDB writes every page with a system call, on any filesystem
    # --- history archive (B-401..B-419)
    # a running master seals, every history_seal_interval ms, what is this many days old; 0: never
    # by itself (B-411)
    history_hot_days: int = 0
    history_seal_interval: int = 600_000
    history_archive: str = ""  # a folder or a pyarrow filesystem URI; "" = <data dir>/archive
    history_segment_records: int = 100_000  # the log is cut into segments of this many records
    # --- the edge: what a remoting listener (broker and name server) lets its connections hold
    serverChannelMaxIdleTimeSeconds: int = (
        120  # NettyServerConfig: no frame begun for this long closes
    )
    # the largest frame, length prefix included: RocketMQ's system property
    # com.rocketmq.remoting.frameMaxLength (NettySystemConfig), checked at the length prefix
    frameMaxLength: int = 16 * 1024 * 1024
    frame_read_timeout_ms: int = (
        30_000  # a frame begun and then silent this long closes its connection
    )
    # bytes of unfinished frames held by a listener's connections
    partial_frame_bytes_max: int = 256 * 1024 * 1024
    max_connections: int = 10_000  # per listener; more are accepted and closed at once
    # processes that accept the broker's connections and relay them to this one, the writer (0: this
    # process accepts them itself; es_broker/server/edge/processes.py, B-671)
    edge_processes: int = 0
    # --- access control: RocketMQ's plain ACL (es_broker/acl; docs/semantics.md B-160..B-179)
    aclEnable: bool = False  # BrokerConfig.aclEnable: check every request against plain_acl.yml
    # the default ACL file (RocketMQ's Java property rocketmq.acl.plain.file); "" is conf/plain_acl.yml
    # under ROCKETMQ_HOME, or under the data directory when ROCKETMQ_HOME is not set; relative paths too
    # admin_only: left out of GET_BROKER_CONFIG's answer (B-352)
    acl_plain_file: str = field(default="", metadata={"admin_only": True})
    aclDenialSummaryInterval: int = (
        60  # s between `access_denied` summaries of refused requests (B-191)
    )
    # es-broker's bound signature (B-345..B-349): how far a request's esTimestamp may be from the
    # broker's clock, either way; its nonce is remembered that long after the timestamp
    aclSignatureWindowMs: int = 60_000
    # nonces remembered per account within the window; a request past them is refused (B-349)
    aclNonceCacheSize: int = 200_000
    # true: RocketMQ's signature (AclClientRPCHook) is refused for every code, not only admin ones
    aclStrictSignatures: bool = False
    # true: admin-only codes take RocketMQ's signature too, as 4.9.8 does (Java's mqadmin signs only
    # that way), at the price of captured admin requests being replayable; ignored when strict
    aclAdminRocketmqSignatures: bool = False
    # the account this broker signs its own requests with (a slave's replication, name-server
    # registration); it must be an admin account when the peer has aclEnable. No RocketMQ counterpart.
    peer_access_key: str = field(
        default="", metadata={"account": True}
    )  # never in GET_BROKER_CONFIG
    peer_secret_key: str = field(default="", repr=False, metadata={"secret": True})
    # --- TLS (4.9.8 TlsSystemConfig; broker.conf takes the dotted names, see TLS_PROPERTIES below).
    # A tls.properties named by tls.config.file overrides every one of them but tlsMode and tlsEnable.
    tlsMode: str = "permissive"  # tls.server.mode: disabled | permissive | enforcing
    tlsEnable: bool = (
        False  # tls.enable: the broker's own connections (registration, slave to master) use TLS
    )
    tlsConfigFile: str = (
        "/etc/rocketmq/tls.properties"  # tls.config.file (read if it exists; set: must exist)
    )
    tlsTestModeEnable: bool = (
        True  # tls.test.mode.enable: self-signed server cert if none given; client trusts all
    )
    tlsServerNeedClientAuth: str = "none"  # tls.server.need.client.auth: none | optional | require
    tlsServerKeyPath: str = ""  # tls.server.keyPath (PEM private key)
    tlsServerKeyPassword: str = ""  # tls.server.keyPassword
    tlsServerCertPath: str = ""  # tls.server.certPath (PEM certificate chain)
    tlsServerAuthClient: bool = False  # tls.server.authClient: verify client certificates
    tlsServerTrustCertPath: str = (
        ""  # tls.server.trustCertPath (PEM CA bundle for client certificates)
    )
    tlsClientKeyPath: str = ""  # tls.client.keyPath
    tlsClientKeyPassword: str = ""  # tls.client.keyPassword
    tlsClientCertPath: str = ""  # tls.client.certPath
    tlsClientAuthServer: bool = (
        False  # tls.client.authServer: verify the server (when not in test mode)
    )
    tlsClientTrustCertPath: str = ""  # tls.client.trustCertPath
    # --- metrics (RocketMQ 5's BrokerConfig.metricsExporterType and its Prometheus exporter, B-355)
    metricsExporterType: str = "DISABLE"  # DISABLE | PROM (OTLP_GRPC and LOG are refused at start)
    metricsPromExporterHost: str = ""  # "" is brokerIP1, as RocketMQ 5 binds it
    metricsPromExporterPort: int = 5557  # 0: any free port (logged at start)
    # --- queue locks of orderly consumers (RebalanceLockManager, B-142..B-147)
    # ms a lock lives without renewal; RocketMQ's system property rocketmq.broker.rebalance.lockMaxLiveTime,
    # which broker.conf may also name (CONFIG_ALIASES)
    rebalanceLockMaxLiveTime: int = 60_000
    # release a client's queue locks when its connection closes (4.9.8 keeps them until they expire)
    queueLockReleaseOnClose: bool = True

    def __post_init__(self) -> None:
        # a role given as text (a test, a --role option) is the enum from here on; ValueError if none
        object.__setattr__(self, "brokerRole", BrokerRole(self.brokerRole))

    @property
    def sync_flush(self) -> bool:
        return self.flushDiskType == SYNC_FLUSH

    @property
    def in_memory_threshold(self) -> int:
        """Bytes of commit log behind phyMax still counted as 'in memory' (B-38)."""
        return self.total_physical_memory_bytes * self.accessMessageInMemoryMaxRatio // 100

    def delay_levels_ms(self) -> list[int]:
        """messageDelayLevel parsed into milliseconds, level 1 first (B-06)."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        out = []
        for item in self.messageDelayLevel.split():
            unit = item[-1]
            if unit not in units or not item[:-1].isdigit():
                raise ValueError(f"messageDelayLevel entry {item!r} is not <digits><s|m|h|d>")
            out.append(int(item[:-1]) * units[unit])
        return out

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)


# RocketMQ's TLS property names (TlsSystemConfig) -> BrokerConfig fields
TLS_PROPERTIES = {
    "tls.server.mode": "tlsMode",
    "tls.enable": "tlsEnable",
    "tls.config.file": "tlsConfigFile",
    "tls.test.mode.enable": "tlsTestModeEnable",
    "tls.server.need.client.auth": "tlsServerNeedClientAuth",
    "tls.server.keyPath": "tlsServerKeyPath",
    "tls.server.keyPassword": "tlsServerKeyPassword",
    "tls.server.certPath": "tlsServerCertPath",
    "tls.server.authClient": "tlsServerAuthClient",
    "tls.server.trustCertPath": "tlsServerTrustCertPath",
    "tls.client.keyPath": "tlsClientKeyPath",
    "tls.client.keyPassword": "tlsClientKeyPassword",
    "tls.client.certPath": "tlsClientCertPath",
    "tls.client.authServer": "tlsClientAuthServer",
    "tls.client.trustCertPath": "tlsClientTrustCertPath",
}

# broker.conf keys that name a field under another name (RocketMQ system properties)
CONFIG_ALIASES = {
    "rocketmq.broker.rebalance.lockMaxLiveTime": "rebalanceLockMaxLiveTime",
    **TLS_PROPERTIES,
}


# settings UPDATE_BROKER_CONFIG may change while the broker runs; the rest need a restart
RUNTIME_KEYS = frozenset(
    {
        "brokerPermission",
        "slaveReadEnable",
        "longPollingEnable",
        "shortPollingTimeMills",
        "notifyConsumerIdsChangedEnable",
        "autoCreateTopicEnable",
        "autoCreateSubscriptionGroup",
        "fileReservedTime",
        "deleteWhen",
        "offsetCheckInSlave",
    }
)


def coerce(name: str, raw: str, kind: type) -> object:
    """A broker.conf value (text) as the type of the field it sets; ValueError names the field."""
    text = raw.strip()
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{name} must be true or false, got {raw!r}")
        return text.lower() == "true"
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if issubclass(kind, enum.Enum):
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"{name} must be one of {', '.join(kind)}, got {raw!r}") from None
    return text


def load_broker_conf(path: str | Path, base: BrokerConfig | None = None) -> BrokerConfig:
    """Read a RocketMQ-style broker.conf (key=value, '#' comments).

    Unknown keys are ignored, as RocketMQ ignores them, so one file can serve both.
    """
    base = base or BrokerConfig()
    types = {f.name: type(getattr(base, f.name)) for f in fields(base)}
    changes: dict[str, object] = {}
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}:{lineno}: expected key=value, got {line!r}")
        key = CONFIG_ALIASES.get(key.strip(), key.strip())
        if key in types:
            changes[key] = coerce(key, value, types[key])
    config = base.replace(**changes)
    config.delay_levels_ms()  # fail early on a bad messageDelayLevel
    return config


class ConfigOwner:
    """The one holder of a broker's current settings: every part reads `current`.

    Nothing keeps a copy: a change replaces `current`, and the next read sees it.
    `runtime_values` is the single check of a run-time change (the key must be in
    RUNTIME_KEYS, the value must parse as the field's type); the commands layer
    records the change and then calls `apply`.
    """

    __slots__ = ("current",)

    def __init__(self, config: BrokerConfig) -> None:
        self.current = config

    def runtime_values(self, changes: Mapping[str, str]) -> dict[str, object]:
        """The typed values of a run-time change; ValueError on a key or value it cannot take."""
        values: dict[str, object] = {}
        for key, raw in changes.items():
            if key not in RUNTIME_KEYS:
                raise ValueError(
                    f"{key} cannot be changed while the broker runs; "
                    f"changeable: {', '.join(sorted(RUNTIME_KEYS))}"
                )
            values[key] = coerce(key, raw, type(getattr(self.current, key)))
        return values

    def apply(self, values: Mapping[str, object]) -> BrokerConfig:
        """Replace the named settings (typed values, as `runtime_values` gives them)."""
        self.current = self.current.replace(**values)
        return self.current
