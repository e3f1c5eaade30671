"""The gRPC proxy: RocketMQ 5's `apache.rocketmq.v2.MessagingService` in front of the brokers.

A 5.x client (Java, Go, Python, ...) speaks gRPC to the proxy; the proxy
speaks the 4.x remoting protocol to the brokers through the project's own
client (es_broker/client), as RocketMQ 5's proxy does in cluster mode.
Modules: server.py (the process and its grpc.aio server), service.py (the
RPCs), sending.py (SendMessage, EndTransaction), receiving.py (ReceiveMessage,
AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue),
sessions.py (Telemetry), cluster.py (the client side toward the brokers),
auth.py (the 5.x signature against the plain ACL), convert.py (messages
between the wires), status.py (refusals). docs/protocol.md §15 says what is
served and what is not.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from es_broker.net.tls import GRPC_KEY_PASSWORD_ENV


def _cmd_proxy(args: argparse.Namespace) -> int:
    import logging

    import anyio

    from es_broker.net.tls import TlsClientSettings, TlsSetupError
    from es_broker.proxy.server import GrpcTls, ProxyOptions, run

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.client_expiry <= 0:
        print("es-broker proxy: --client-expiry must be more than 0 seconds", file=sys.stderr)
        return 2
    if args.tls_key and not args.tls_cert:
        print("es-broker proxy: --tls-key needs --tls-cert", file=sys.stderr)
        return 2
    tls = None
    if args.tls_cert or args.tls_test_mode:
        tls = GrpcTls(args.tls_cert, args.tls_key, os.environ.get(GRPC_KEY_PASSWORD_ENV) or None)
    brokers_tls = None
    if args.brokers_tls:
        brokers_tls = TlsClientSettings(
            ca_file=args.brokers_tls_ca,
            test_mode=args.brokers_tls_ca is None,
            check_hostname=False,  # as the Java client: no host-name check
        )
    options = ProxyOptions(
        namesrv=args.namesrv,
        host=args.host,
        port=args.grpcServerPort,
        acl_file=Path(args.acl_file) if args.acl_file else None,
        acl_dir=Path(args.acl_dir) if args.acl_dir else None,
        settings_timeout=args.settings_timeout,
        client_expiry=args.client_expiry,
        tls=tls,
        brokers_tls=brokers_tls,
    )
    try:
        anyio.run(run, options, backend="asyncio")
    except (OSError, TlsSetupError) as exc:
        print(f"es-broker proxy: {exc}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "proxy",
        help="RocketMQ 5's gRPC proxy (MessagingService) in front of the brokers a name server lists",
    )
    p.add_argument("-n", "--namesrv", required=True, help="name server(s) HOST:PORT[;HOST:PORT]")
    p.add_argument("--grpcServerPort", type=int, default=8081, help="gRPC port (default 8081)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--acl-file", help="plain_acl.yml: 5.x clients must sign with its accounts")
    p.add_argument("--acl-dir", help="a directory of more ACL *.yml files (conf/acl)")
    p.add_argument(
        "--settings-timeout",
        type=float,
        default=10.0,
        help="seconds a Telemetry stream has to send its Settings before it is closed",
    )
    p.add_argument(
        "--client-expiry",
        type=float,
        default=120.0,
        help="seconds without a heartbeat after which a 5.x client is unregistered from the "
        "brokers (default 120, RocketMQ 5's channelExpiredTimeout)",
    )
    p.add_argument(
        "--tls-cert",
        help="serve gRPC over TLS with this PEM certificate chain (with --tls-key, or the key in it)",
    )
    p.add_argument("--tls-key", help=f"its PEM private key (password in ${GRPC_KEY_PASSWORD_ENV})")
    p.add_argument(
        "--tls-test-mode",
        action="store_true",
        help="serve gRPC over TLS with a self-signed certificate for localhost/127.0.0.1",
    )
    p.add_argument(
        "--brokers-tls",
        action="store_true",
        help="speak TLS to the name server and brokers (their tls.server.mode is enforcing)",
    )
    p.add_argument(
        "--brokers-tls-ca",
        help="with --brokers-tls: the PEM CA bundle their certificates must chain to "
        "(without it, any certificate is taken: tls.test.mode.enable)",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=_cmd_proxy)
