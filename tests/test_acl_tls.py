"""ACL and TLS together: a broker with aclEnable=true in tls.server.mode=enforcing serves signed
clients over TLS, and refuses an unsigned one over TLS with the ACL's answer (B-161, B-181)."""

from __future__ import annotations

from pathlib import Path

import trustme

from es_broker.client import Producer
from es_broker.client.config import ClientConfig
from es_broker.net.remoting_client import RemotingClient
from es_broker.net.tls import TlsClientSettings
from tests.acl_fixtures import ADMIN, PRODUCER, acl_conf
from tests.ha_fixtures import Wire
from tests.process_fixtures import serve

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "


def tls_lines(tmp: Path) -> tuple[list[str], Path]:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(tmp / "server.pem")
    )
    return [
        "tls.server.mode=enforcing",
        "tls.test.mode.enable=false",
        "tls.enable=true",
        f"tls.server.certPath={tmp / 'server.pem'}",
        f"tls.server.keyPath={tmp / 'server.pem'}",
        f"tls.client.trustCertPath={tmp / 'ca.pem'}",
    ], tmp / "ca.pem"


async def test_signed_clients_over_tls_on_an_acl_broker(tmp_path, nursery):
    conf, _ = acl_conf(tmp_path)
    tls, ca = tls_lines(tmp_path)
    lines = conf.read_text().splitlines() + tls
    with serve(tmp_path / "data", "--readmodel-url", "none", conf=lines) as broker:
        settings = TlsClientSettings(ca_file=str(ca))
        admin = Wire(RemotingClient(nursery, credentials=ADMIN, tls=settings))
        await admin.create_topic(broker.broker, "TopicA", 4)

        unsigned = await Wire(RemotingClient(nursery, tls=settings)).send(
            broker.broker, "TopicA", 0, b"anon"
        )
        assert unsigned.remark is not None and unsigned.remark.startswith(
            ACL_EXCEPTION + "No accessKey"
        ), unsigned.remark

        config = ClientConfig(credentials=PRODUCER, use_tls=True, tls_ca_file=str(ca))
        async with Producer(broker.namesrv, "PG", client_config=config) as producer:
            result = await producer.send("TopicA", b"over TLS, signed")
        assert result.status.name == "SEND_OK"
