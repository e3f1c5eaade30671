"""A plain_acl.yml for the ACL tests and the broker.conf that turns ACL on."""

from __future__ import annotations

from pathlib import Path

from es_broker.acl.signing import Credentials
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand
from tests.ha_fixtures import Wire
from tests.process_fixtures import ServedBroker

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "
ADMIN = Credentials("AdminKey01", "AdminSecret01")
PRODUCER = Credentials("ProducerKey", "ProducerSecret")  # PUB on TopicA, SUB on GroupA
WRONG_SECRET = Credentials("ProducerKey", "NotTheSecret")

ACL_YAML = """\
globalWhiteRemoteAddresses:
  - 10.255.255.*
accounts:
  - accessKey: AdminKey01
    secretKey: AdminSecret01
    admin: true
  - accessKey: ProducerKey
    secretKey: ProducerSecret
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - TopicA=PUB|SUB
      - TopicD=DENY
    groupPerms:
      - GroupA=SUB
dataVersion:
  - timestamp: 1700000000000
    counter: 1
"""

# the same, with TopicC opened to the producer account
ACL_YAML_TOPIC_C = ACL_YAML.replace(
    "      - TopicD=DENY\n", "      - TopicD=DENY\n      - TopicC=PUB\n"
)


def acl_conf(
    tmp: Path, yaml_text: str = ACL_YAML, *, peer: Credentials | None = ADMIN, **extra: object
) -> tuple[Path, Path]:
    """(broker.conf, plain_acl.yml) in tmp: aclEnable=true, the file by path, the peer account."""
    acl_file = tmp / "plain_acl.yml"
    acl_file.write_text(yaml_text)
    lines = ["aclEnable=true", f"acl_plain_file={acl_file}"]
    if peer is not None:
        lines += [f"peer_access_key={peer.access_key}", f"peer_secret_key={peer.secret_key}"]
    lines += [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in extra.items()]
    conf = tmp / "broker.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf, acl_file


def wire(nursery, credentials: Credentials | None) -> Wire:
    """Our remoting client, signing with `credentials` (None: unsigned)."""
    return Wire(RemotingClient(nursery, credentials=credentials))


async def topics(nursery, broker: ServedBroker, *names: str) -> None:
    """Create the topics (4 queues each) as the admin account."""
    admin = wire(nursery, ADMIN)
    for name in names:
        await admin.create_topic(broker.broker, name, 4)


async def max_offset(nursery, broker: ServedBroker, topic: str, queue_id: int = 0) -> int:
    r = await wire(nursery, ADMIN).ok(
        broker.broker, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id}
    )
    return r.require_long("offset")


def refused(r: RemotingCommand, message: str) -> None:
    """The ACL refusal RocketMQ gives: SYSTEM_ERROR with the AclException's message."""
    assert r.code == ResponseCode.SYSTEM_ERROR, (r.code, r.remark)
    assert r.remark is not None and r.remark.startswith(ACL_EXCEPTION + message), r.remark
