"""ACL administration over the wire (B-171..B-173) and the client acceptance with ACL on (B-162, B-161).

Real `es-broker serve` processes with aclEnable=true; requests signed by the Python
client, the Admin API and `es-broker admin`. Behaviours: docs/semantics.md
"Access control (B-160..B-179)".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import trio
import yaml

from es_broker.acl.access import AccessControl, AclSources, LoadCause
from es_broker.acl.plain import Perm, parse_file
from es_broker.acl.rules import BROKER_RULES
from es_broker.acl.signing import Credentials
from es_broker.client import (
    ClientConfig,
    ConsumeResult,
    Producer,
    PushConsumer,
    PushConsumerConfig,
    ReceivedMessage,
)
from es_broker.client.admin import Admin, AdminError
from es_broker.client.producer import ClientError
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.remoting.requests import shape_of
from es_broker.server.processors.acl import MASK, NOT_ENABLED, AclProcessors
from tests.acl_fixtures import (
    ACL_EXCEPTION,
    ACL_YAML,
    ADMIN,
    PRODUCER,
    WRONG_SECRET,
    acl_conf,
    max_offset,
    topics,
    wire,
)
from tests.ha_fixtures import Wire
from tests.process_fixtures import ServedBroker, serve
from tests.waiting import poll_until

NEW = Credentials("NewAccount1", "NewSecret001")
ADMIN_FLAGS = ("--access-key", ADMIN.access_key, "--secret-key", ADMIN.secret_key)
FAST = PushConsumerConfig(
    rebalance_interval=0.5,
    persist_consumer_offset_interval=0.1,
    persist_consumer_offset_delay=0.1,
    pull_time_delay_when_exception=0.05,
)
ACL_CODES = (
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
    RequestCode.DELETE_ACL_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
    RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
)


@pytest.fixture(scope="module")
def acl_admin_broker(tmp_path_factory) -> Iterator[ServedBroker]:
    tmp = tmp_path_factory.mktemp("acladmin")
    conf, _ = acl_conf(tmp)
    with serve(tmp / "data", "--config", str(conf), "--readmodel-url", "none") as broker:
        broker.acl_file = tmp / "plain_acl.yml"  # type: ignore[attr-defined]
        yield broker


def refused(remark: str | None, message: str) -> None:
    assert remark is not None and ACL_EXCEPTION + message in remark, remark


async def total(nursery, broker: ServedBroker, topic: str) -> int:
    return sum([await max_offset(nursery, broker, topic, q) for q in range(4)])


async def producer(nursery, broker: ServedBroker, credentials: Credentials | None) -> Producer:
    p = Producer(broker.namesrv, "PG", client_ip="127.0.0.1", credentials=credentials)
    await p.start(nursery)
    return p


# ------------------------------------------------------------------ the table
def test_b171_every_acl_admin_code_is_served_admin_only_and_has_a_shape():
    served = set(AclProcessors(None, lambda: 0, lambda: ("", "", "")).handlers())
    assert served == set(ACL_CODES)
    for code in ACL_CODES:
        assert BROKER_RULES[code].admin, code
        assert shape_of(code) is not None, code


# ------------------------------------------------------------------ accounts
async def test_b171_an_account_created_by_an_admin_may_send_at_once_updated_and_deleted_at_once(
    acl_admin_broker, nursery
):
    broker = acl_admin_broker
    await topics(nursery, broker, "TopicN", "TopicA")
    async with Admin.open(broker.namesrv, credentials=ADMIN) as admin:
        await admin.update_acl_config(
            broker.broker,
            NEW.access_key,
            NEW.secret_key,
            default_topic_perm="DENY",
            default_group_perm="DENY",
            topic_perms=["TopicN=PUB"],
        )
    p = await producer(nursery, broker, NEW)
    assert (await p.send("TopicN", b"first")).status.name == "SEND_OK"
    new = wire(nursery, NEW)
    refused(
        (await new.send(broker.broker, "TopicA", 0, b"x")).remark,
        "No default permission for topic:TopicA",
    )

    async with Admin.open(
        broker.namesrv, credentials=ADMIN
    ) as admin:  # the perms change: in force at once
        await admin.update_acl_config(
            broker.broker, NEW.access_key, NEW.secret_key, topic_perms=["TopicN=DENY", "TopicA=PUB"]
        )
    assert (await p.send("TopicA", b"second")).status.name == "SEND_OK"
    refused(
        (await new.send(broker.broker, "TopicN", 0, b"x")).remark,
        "No default permission for topic:TopicN",
    )
    await p.shutdown()

    before = await max_offset(nursery, broker, "TopicA", 0)
    broker.admin(*ADMIN_FLAGS, "deleteAclConfig", "-b", broker.broker, "-a", NEW.access_key)
    r = await new.send(broker.broker, "TopicA", 0, b"after delete")
    assert r.code == ResponseCode.SYSTEM_ERROR
    refused(r.remark, f"No acl config for {NEW.access_key}")
    assert await max_offset(nursery, broker, "TopicA", 0) == before
    assert NEW.access_key not in broker.acl_file.read_text()


async def test_b171_the_cli_creates_an_account_with_mqadmins_options(acl_admin_broker, nursery):
    broker = acl_admin_broker
    await topics(nursery, broker, "TopicCli")
    done = broker.admin(
        *ADMIN_FLAGS,
        "updateAclConfig",
        "-b",
        broker.broker,
        "-a",
        "CliAccount1",
        "-s",
        "CliSecret001",
        "-i",
        "DENY",
        "-u",
        "SUB",
        "-t",
        "TopicCli=PUB,TopicA=DENY",
        "-g",
        "GroupCli=SUB",
        "-w",
        "10.9.9.*",
        "-m",
        "false",
    )
    assert f"create or update plain access config to {broker.broker} success." in done.stdout
    assert "CliSecret001" not in done.stdout + done.stderr
    r = await wire(nursery, Credentials("CliAccount1", "CliSecret001")).send(
        broker.broker, "TopicCli", 0, b"x"
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    account = parse_file(broker.acl_file, broker.acl_file.read_bytes())
    cli = next(a for a in account.accounts if a.access_key == "CliAccount1")
    assert (cli.default_topic_perm, cli.default_group_perm, cli.admin) == (
        Perm.DENY,
        Perm.SUB,
        False,
    )
    assert cli.perm_for("TopicCli") == Perm.PUB and cli.perm_for("TopicA") == Perm.DENY
    assert cli.white_remote_address.text == "10.9.9.*"
    done = broker.admin(
        *ADMIN_FLAGS, "deleteAclConfig", "-c", "DefaultCluster", "-a", "CliAccount1"
    )
    assert f"delete plain access config account from {broker.broker} success." in done.stdout


async def test_b171_a_non_admin_account_is_refused_every_acl_code_and_the_file_stays(
    acl_admin_broker, nursery
):
    broker = acl_admin_broker
    before = broker.acl_file.read_bytes()
    producer_wire = wire(nursery, PRODUCER)
    fields = {
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: {
            "accessKey": "ProducerKey",
            "secretKey": "ProducerSecret",
            "admin": True,
            "defaultTopicPerm": "PUB",
        },
        RequestCode.DELETE_ACL_CONFIG: {"accessKey": "AdminKey01"},
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: {"globalWhiteAddrs": "*"},
    }
    for code in ACL_CODES:
        r = await producer_wire.call(broker.broker, code, fields.get(code, {}))
        assert r.code == ResponseCode.SYSTEM_ERROR, (code, r.code)
        refused(
            r.remark,
            f"Need admin permission for request code={int(code)}, but accessKey=ProducerKey is not",
        )
    assert broker.acl_file.read_bytes() == before


async def test_b171_an_update_that_would_be_invalid_is_refused_with_209_and_the_file_stays(
    acl_admin_broker, nursery
):
    broker = acl_admin_broker
    before = broker.acl_file.read_bytes()
    admin_wire = wire(nursery, ADMIN)
    bad = [
        (
            {"accessKey": "BadAccount1", "secretKey": "BadSecret001", "topicPerms": "TopicA=READ"},
            "must be DENY, PUB, SUB or PUB|SUB",
        ),
        (
            {"accessKey": "BadAccount1", "secretKey": "short"},
            "secretKey is required and must be longer than 6",
        ),
        (
            {"accessKey": "ProducerKey", "secretKey": "ProducerSecret", "defaultGroupPerm": "ALL"},
            "must be DENY, PUB, SUB or PUB|SUB",
        ),
        (
            {
                "accessKey": "BadAccount1",
                "secretKey": "BadSecret001",
                "whiteRemoteAddress": "300.1.1.1",
            },
            "whiteRemoteAddress",
        ),
    ]
    for fields, reason in bad:
        r = await admin_wire.call(broker.broker, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, fields)
        assert r.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED == 209, (
            fields,
            r.code,
            r.remark,
        )
        assert reason in (r.remark or ""), r.remark
        assert "unchanged" in (r.remark or "") or reason.startswith("secretKey"), r.remark
        assert str(fields["secretKey"]) not in (r.remark or "")
        assert broker.acl_file.read_bytes() == before
    r = await admin_wire.call(
        broker.broker, RequestCode.DELETE_ACL_CONFIG, {"accessKey": "NeverDefined1"}
    )
    assert r.code == ResponseCode.DELETE_ACL_CONFIG_FAILED == 210, r.remark
    r = await admin_wire.call(
        broker.broker,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        {"globalWhiteAddrs": "10.1.1.1", "aclFileFullPath": "/etc/passwd"},
    )
    assert r.code == ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED == 211, r.remark
    assert broker.acl_file.read_bytes() == before


# ------------------------------------------------------------------ white list, versions, listing
async def test_b172_update_global_white_addr_changes_who_passes_unsigned(acl_admin_broker, nursery):
    broker = acl_admin_broker
    await topics(nursery, broker, "TopicA")
    anonymous = wire(nursery, None)
    refused(
        (await anonymous.send(broker.broker, "TopicA", 0, b"x")).remark,
        "No accessKey is configured",
    )
    done = broker.admin(
        *ADMIN_FLAGS, "updateGlobalWhiteAddr", "-b", broker.broker, "-g", "10.255.255.*,127.0.0.1"
    )
    assert f"update global white remote addresses to {broker.broker} success." in done.stdout
    try:
        r = await anonymous.send(broker.broker, "TopicA", 0, b"white-listed")
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        broker.admin(
            *ADMIN_FLAGS, "updateGlobalWhiteAddr", "-b", broker.broker, "-g", "10.255.255.*"
        )
    refused(
        (await anonymous.send(broker.broker, "TopicA", 0, b"x")).remark,
        "No accessKey is configured",
    )
    tree = yaml.safe_load(broker.acl_file.read_text())
    assert tree["globalWhiteRemoteAddresses"] == ["10.255.255.*"]
    admin_wire = wire(nursery, ADMIN)
    r = await admin_wire.call(broker.broker, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {})
    assert r.code == ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED, r.remark
    await admin_wire.ok(
        broker.broker, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": ""}
    )
    try:
        assert yaml.safe_load(broker.acl_file.read_text())["globalWhiteRemoteAddresses"] == []
    finally:
        await admin_wire.ok(
            broker.broker,
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
            {"globalWhiteAddrs": "10.255.255.*"},
        )


async def test_b172_cluster_acl_config_version_shows_the_bumped_data_version(
    acl_admin_broker, nursery
):
    broker = acl_admin_broker
    path = str(broker.acl_file.resolve())

    def version() -> dict:
        rows = json.loads(
            broker.admin(
                *ADMIN_FLAGS, "clusterAclConfigVersion", "-b", broker.broker, "--json"
            ).stdout
        )
        assert len(rows) == 1 and rows[0]["brokerAddr"] == broker.broker
        assert rows[0]["version"] == rows[0]["allAclFileVersion"][path]
        return rows[0]["allAclFileVersion"][path]

    before = version()
    async with Admin.open(broker.namesrv, credentials=ADMIN) as admin:
        await admin.update_acl_config(
            broker.broker, "Versioned01", "VersionSecret1", default_topic_perm="SUB"
        )
        after = version()
        assert after["counter"] == before["counter"] + 1
        assert after["timestamp"] >= before["timestamp"] and after["timestamp"] > 1700000000000
        await admin.delete_acl_config(broker.broker, "Versioned01")
    assert version()["counter"] == before["counter"] + 2
    table = broker.admin(*ADMIN_FLAGS, "clusterAclConfigVersion", "-b", broker.broker).stdout
    assert "#AclConfigVersionNum" in table and path in table


async def test_b172_get_access_config_lists_accounts_with_every_secret_masked(acl_admin_broker):
    broker = acl_admin_broker
    done = broker.admin(*ADMIN_FLAGS, "getAccessConfigSubCommand", "-b", broker.broker, "--json")
    (listing,) = json.loads(done.stdout)
    accounts = {a["accessKey"]: a for a in listing["plainAccessConfigs"]}
    assert {"AdminKey01", "ProducerKey"} <= set(accounts)
    assert all(a["secretKey"] == MASK for a in accounts.values())
    assert accounts["ProducerKey"]["topicPerms"] == ["TopicA=PUB|SUB", "TopicD=DENY"]
    assert accounts["ProducerKey"]["groupPerms"] == ["GroupA=SUB"]
    assert accounts["AdminKey01"]["admin"] is True
    assert listing["globalWhiteAddrs"] == ["10.255.255.*"]
    text = broker.admin(*ADMIN_FLAGS, "getAccessConfigSubCommand", "-b", broker.broker).stdout
    for secret in ("AdminSecret01", "ProducerSecret"):
        assert secret not in done.stdout and secret not in text


async def test_b173_the_written_file_is_plain_rocketmq_yaml_that_plain_py_reads(
    acl_admin_broker, nursery
):
    broker = acl_admin_broker
    async with Admin.open(broker.namesrv, credentials=ADMIN) as admin:
        await admin.update_acl_config(
            broker.broker,
            "Written001",
            "WrittenSecret1",
            white_remote_address="192.168.1.*",
            default_topic_perm="PUB|SUB",
            topic_perms=["T1=SUB"],
            group_perms=["G1=SUB"],
        )
    data = broker.acl_file.read_bytes()
    # what the broker loads, and es-broker's strict reading
    parsed = parse_file(broker.acl_file, data)
    assert {"AdminKey01", "ProducerKey", "Written001"} <= {a.access_key for a in parsed.accounts}
    assert b"#" not in data
    tree = yaml.safe_load(data)
    assert list(tree) == ["globalWhiteRemoteAddresses", "accounts", "dataVersion"]
    written = next(a for a in tree["accounts"] if a["accessKey"] == "Written001")
    assert written == {
        "accessKey": "Written001",
        "secretKey": "WrittenSecret1",
        "whiteRemoteAddress": "192.168.1.*",
        "admin": False,
        "defaultTopicPerm": "PUB|SUB",
        "topicPerms": ["T1=SUB"],
        "groupPerms": ["G1=SUB"],
    }
    assert set(tree["dataVersion"][0]) == {"counter", "timestamp"}
    # no temp file left
    assert not [p for p in broker.acl_file.parent.iterdir() if p.name.endswith(".tmp")]
    async with Admin.open(broker.namesrv, credentials=ADMIN) as admin:
        await admin.delete_acl_config(broker.broker, "Written001")


async def test_b173_with_acl_off_the_writes_refuse_and_say_why(tmp_path, nursery):
    with serve(tmp_path / "data", "--readmodel-url", "none") as broker:
        plain = wire(nursery, None)
        for code, failed in (
            (RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, 209),
            (RequestCode.DELETE_ACL_CONFIG, 210),
            (RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, 211),
            (RequestCode.GET_BROKER_CLUSTER_ACL_INFO, ResponseCode.SYSTEM_ERROR),
        ):
            r = await plain.call(
                broker.broker,
                code,
                {"accessKey": "Somebody01", "secretKey": "Secret0001", "globalWhiteAddrs": "*"},
            )
            assert (r.code, r.remark) == (failed, NOT_ENABLED)


# ------------------------------------------------------------------ part 3: the client with ACL on
async def test_b162_producer_push_consumer_and_admin_with_credentials_work_end_to_end(
    acl_admin_broker, nursery
):
    broker = acl_admin_broker
    await topics(nursery, broker, "TopicA")
    p = await producer(nursery, broker, PRODUCER)
    sent = await p.send("TopicA", b"end-to-end")
    await p.shutdown()
    got: list[bytes] = []
    delivered = trio.Event()

    async def consume(msgs: list[ReceivedMessage]) -> ConsumeResult:
        got.extend(m.body for m in msgs)
        if b"end-to-end" in got:
            delivered.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        broker.namesrv,
        "GroupA",
        consume,
        subscriptions={"TopicA": "*"},
        client_ip="127.0.0.1",
        config=FAST,
        client_config=ClientConfig(credentials=PRODUCER),
    )
    await consumer.start(nursery)
    with trio.fail_after(30):
        await delivered.wait()
    admin_wire = wire(nursery, ADMIN)
    queue = sent.queue.queue_id
    stored = await max_offset(nursery, broker, "TopicA", queue)
    # the consumer commits what it consumed (a signed UPDATE_CONSUMER_OFFSET, SUB on GroupA and TopicA)
    await poll_until(lambda: _committed(admin_wire, broker, queue, stored))
    await consumer.shutdown()
    async with Admin.open(broker.namesrv, credentials=PRODUCER) as admin:
        rows = await admin.topic_status("TopicA")
    assert sum(r["maxOffset"] for r in rows) == await total(nursery, broker, "TopicA")


async def _committed(admin_wire: Wire, broker: ServedBroker, queue: int, stored: int) -> bool:
    return await admin_wire.query(broker.broker, "GroupA", "TopicA", queue) == stored


@pytest.mark.parametrize(
    "credentials, message",
    [
        (None, "No accessKey is configured"),
        (WRONG_SECRET, "Check signature failed for accessKey=ProducerKey"),
    ],
)
async def test_b161_a_client_without_credentials_or_with_a_wrong_secret_is_refused_and_nothing_is_stored(
    acl_admin_broker, nursery, credentials, message
):
    broker = acl_admin_broker
    await topics(nursery, broker, "TopicA")
    before = await total(nursery, broker, "TopicA")
    p = await producer(nursery, broker, credentials)
    with pytest.raises(ClientError) as caught:
        await p.send("TopicA", b"must not be stored")
    refused(str(caught.value), message)
    await p.shutdown()
    assert await total(nursery, broker, "TopicA") == before
    async with Admin.open(broker.namesrv, credentials=credentials) as admin:
        with pytest.raises(AdminError) as refused_admin:
            await admin.update_topic(broker.broker, "TopicNever")
        refused(refused_admin.value.remark, message)
        with pytest.raises(AdminError) as refused_acl:
            await admin.update_acl_config(
                broker.broker, "Intruder01", "IntruderSecret1", admin=True
            )
        refused(refused_acl.value.remark, message)
    assert "Intruder01" not in broker.acl_file.read_text()


async def test_b161_a_push_consumer_with_a_wrong_secret_is_refused_and_commits_nothing(
    acl_admin_broker, nursery, caplog
):
    broker = acl_admin_broker
    await topics(nursery, broker, "TopicA")
    p = await producer(nursery, broker, PRODUCER)
    await p.send("TopicA", b"for nobody")
    await p.shutdown()
    admin_wire = wire(nursery, ADMIN)
    committed = [await admin_wire.query(broker.broker, "GroupA", "TopicA", q) for q in range(4)]
    consumed: list[ReceivedMessage] = []

    async def consume(msgs: list[ReceivedMessage]) -> ConsumeResult:
        consumed.extend(msgs)
        return ConsumeResult.SUCCESS

    caplog.set_level(logging.WARNING, logger="es_broker.client")
    consumer = PushConsumer(
        broker.namesrv,
        "GroupA",
        consume,
        subscriptions={"TopicA": "*"},
        client_ip="127.0.0.1",
        config=FAST,
        client_config=ClientConfig(credentials=WRONG_SECRET),
    )
    await consumer.start(nursery)
    # its heartbeat is answered with the AclException (the client logs the refusal)
    await poll_until(
        lambda: any(
            "Check signature failed for accessKey=ProducerKey" in r.getMessage()
            for r in caplog.records
        )
    )
    await consumer.shutdown()
    assert consumed == []
    assert [
        await admin_wire.query(broker.broker, "GroupA", "TopicA", q) for q in range(4)
    ] == committed


# ------------------------------------------------------------------ in-process: who asked, same-size changes
class _Peer:
    remote = ("127.0.0.9", 4242)
    attributes: dict = {}


def test_b171_each_write_is_loaded_at_once_and_the_hook_is_told_who_asked(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_YAML)
    told: list[tuple[LoadCause, str | None]] = []
    access = AccessControl(
        AclSources(acl_file.resolve()),
        BROKER_RULES,
        on_change=lambda acl, cause, who: told.append((cause, who)),
    )
    clock = iter(range(1_800_000_000_000, 1_800_000_001_000))
    processors = AclProcessors(access, lambda: next(clock), lambda: ("C", "B", "127.0.0.1:1"))

    async def update(perm: str) -> None:
        r = await processors.update_and_create_acl_config(
            _Peer(),
            request(
                RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
                {
                    "AccessKey": ADMIN.access_key,
                    "accessKey": "SameSize01",
                    "secretKey": "SameSecret01",
                    "topicPerms": f"T={perm}",
                },
            ),
        )
        assert r.code == ResponseCode.SUCCESS, r.remark

    async def main() -> None:
        for perm in ("PUB", "SUB", "PUB", "SUB"):  # same size each time, within one timestamp tick
            await update(perm)
            assert access.acl.accounts["SameSize01"].perm_for("T") == Perm.NAMES[perm]
        r = await processors.get_broker_acl_config_version(
            _Peer(), request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
        )
        assert json.loads(r.ext_fields["version"]) == {"counter": 5, "timestamp": 1_800_000_000_003}

    trio.run(main)
    assert told[1:] == [(LoadCause.ADMIN, "AdminKey01@127.0.0.9")] * 4
    assert "SameSecret01" not in repr(told)
