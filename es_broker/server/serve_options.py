"""What `es-broker serve` was asked for, and the role and broker id it settles from it."""

from __future__ import annotations

from dataclasses import dataclass

from es_broker.config import BrokerConfig, BrokerRole


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What `es-broker serve` was asked for, over the broker.conf (es_broker/cli/serve.py reads them)."""

    data_dir: str  # storePathRootDir unless a broker.conf names one and --data-dir was not given
    data_dir_given: bool = False
    config: str | None = None  # a broker.conf
    listen: str | None = None  # broker HOST:PORT
    namesrv_listen: str = "127.0.0.1:9876"
    namesrv: str | None = None  # external name server(s); no embedded one
    role: str = "all"  # all | broker | slave | namesrv
    master: str | None = None
    broker_id: int | None = None
    broker_name: str | None = None
    cluster: str | None = None
    readmodel_url: str | None = None
    enable_proxy: bool = False  # RocketMQ 5's --enable-proxy: the gRPC proxy as a child process
    grpc_port: int = 8081  # grpcServerPort


def with_role(config: BrokerConfig, args: ServeOptions) -> BrokerConfig:
    """--role slave / --broker-id over broker.conf's brokerRole and brokerId, checked as BrokerStartup does."""
    if args.role == "slave":
        config = config.replace(brokerRole=BrokerRole.SLAVE, brokerId=config.brokerId or 1)
    if args.broker_id is not None:
        config = config.replace(brokerId=args.broker_id)
    if config.ha_coordinator:  # brokerRole is the role a leader takes; ids come from etcd (B-370)
        from es_broker.ha.etcd import etcd_endpoints  # loads httpx: HA nodes only

        # checked here, before anything starts, rather than by the election once it runs
        etcd_endpoints(config.ha_coordinator)
        if not config.ha_node_id:
            raise ValueError("ha_coordinator needs ha_node_id (unique in the broker group)")
        if args.master:
            raise ValueError(
                "--master and ha_coordinator exclude each other: etcd names the master"
            )
        return config.replace(brokerId=0)
    if config.brokerRole == BrokerRole.SLAVE:
        if config.brokerId <= 0:
            raise ValueError("a slave's brokerId must be > 0 (--broker-id N)")
    else:
        if args.master:
            raise ValueError("--master names the master a slave follows; this broker is a master")
        config = config.replace(brokerId=0)  # a master is always brokerId 0 (MixAll.MASTER_ID)
    return config
