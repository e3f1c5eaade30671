"""`es-broker serve`: the broker, and by default the name server role, in one process."""

from __future__ import annotations

import argparse
import logging
import sys

from es_broker.config import default_data_dir


def _cmd_serve(args: argparse.Namespace) -> int:
    import trio

    from es_broker.cli.errors import sole_error
    from es_broker.server.edge.remoting_server import CannotListen
    from es_broker.server.serve import serve
    from es_broker.server.serve_options import ServeOptions

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = ServeOptions(
        data_dir=args.data_dir or default_data_dir(),
        data_dir_given=args.data_dir is not None,
        config=args.config,
        listen=args.listen,
        namesrv_listen=args.namesrv_listen,
        namesrv=args.namesrv,
        role=args.role,
        master=args.master,
        broker_id=args.broker_id,
        broker_name=args.broker_name,
        cluster=args.cluster,
        readmodel_url=args.readmodel_url,
        enable_proxy=args.enable_proxy,
        grpc_port=args.grpcServerPort,
    )
    try:
        trio.run(serve, options)
    except BaseExceptionGroup as group:  # out of the broker's nursery
        error = sole_error(group)
        if not isinstance(error, CannotListen):
            raise
        print(f"es-broker serve: {error.strerror}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve", help="run the broker (and the name server role) on a data directory"
    )
    p.add_argument("--data-dir", help=f"broker data directory (default {default_data_dir()})")
    p.add_argument("--config", help="a RocketMQ-style broker.conf (key=value)")
    p.add_argument("--listen", help="broker HOST:PORT (default 127.0.0.1:10911)")
    p.add_argument("--namesrv-listen", default="127.0.0.1:9876", help="name server HOST:PORT")
    p.add_argument(
        "--namesrv", help="external name server(s) HOST:PORT[;HOST:PORT]; no embedded one"
    )
    p.add_argument(
        "--role",
        choices=["all", "broker", "slave", "namesrv"],
        default="all",
        help="all: broker and name server; slave: a slave broker (brokerRole=SLAVE), with a name "
        "server unless --namesrv; broker: the broker only; namesrv: the name server only",
    )
    p.add_argument(
        "--master",
        help="HOST:PORT of the master a slave replicates from (default: the master the "
        "name server lists for this brokerName)",
    )
    p.add_argument(
        "--broker-id",
        type=int,
        help="brokerId: 0 for a master, > 0 for a slave (default 1 with --role slave)",
    )
    p.add_argument("--broker-name")
    p.add_argument("--cluster")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument(
        "--readmodel-url",
        help="SQL read model database, any SQLAlchemy URL (default: sqlite "
        "readmodel.sqlite in the data directory; 'none' runs no follower)",
    )
    p.add_argument(
        "--enable-proxy",
        action="store_true",
        help="also run RocketMQ 5's gRPC proxy (es-broker proxy) as a child process, for 5.x "
        "clients; it never takes the broker down with it",
    )
    p.add_argument(
        "--grpcServerPort", type=int, default=8081, help="the proxy's gRPC port (default 8081)"
    )
    p.set_defaults(func=_cmd_serve)
