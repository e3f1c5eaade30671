"""The ACL's pieces without a network: rule table, address patterns, the file, reloads, counters (B-160..B-179)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from es_broker.acl.access import AccessControl, AclSources, LoadCause, default_acl_sources
from es_broker.acl.addresses import AddressPatternError, parse_host, parse_pattern
from es_broker.acl.plain import AclConfigError, Perm, parse_file
from es_broker.acl.rules import BROKER_RULES, NAMESRV_RULES
from es_broker.acl.signing import Credentials, canonical_v1, sign, signature_v1
from es_broker.clock import ManualClock
from es_broker.config import BrokerConfig
from es_broker.ha.master import ReplicationMaster
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.server.namesrv import NameServer
from es_broker.server.processors.acl import AclProcessors
from es_broker.server.processors.admin import AdminBrokerProcessor
from es_broker.server.processors.client_manage import ClientManageProcessor
from es_broker.server.processors.consumer_manage import ConsumerManageProcessor
from es_broker.server.processors.end_transaction import EndTransactionProcessor
from es_broker.server.processors.pull import PullMessageProcessor
from es_broker.server.processors.query import QueryMessageProcessor
from es_broker.server.processors.reply import ReplyProcessors
from es_broker.server.processors.retry import RetryProcessors
from es_broker.server.processors.send import SendMessageProcessor
from tests.acl_fixtures import ACL_YAML, ACL_YAML_TOPIC_C, ADMIN, PRODUCER


class _Anything:
    """Stands in for a processor's collaborators: handlers() only reads bound methods off self."""

    def __getattr__(self, name: str) -> Any:
        return name


def _served(cls: type) -> set[int]:
    return set(cls.handlers(_Anything()))


def test_b160_every_code_the_broker_serves_has_an_access_rule():
    served = (
        _served(SendMessageProcessor)
        | _served(PullMessageProcessor)
        | _served(ConsumerManageProcessor)
        | _served(ClientManageProcessor)
        | _served(QueryMessageProcessor)
        | _served(AdminBrokerProcessor)
        | _served(EndTransactionProcessor)
        | _served(RetryProcessors)
        | _served(ReplyProcessors)
        | _served(ReplicationMaster)
        | _served(AclProcessors)
    )
    assert served, "no handler maps found"
    missing = sorted(served - set(BROKER_RULES))
    assert not missing, (
        f"served codes without an ACL rule (add them to es_broker/acl/rules.py): {missing}"
    )


def test_b160_every_code_the_name_server_serves_has_an_access_rule():
    missing = sorted(_served(NameServer) - set(NAMESRV_RULES))
    assert not missing, f"name-server codes without an ACL rule: {missing}"


def test_b176_registration_is_admin_only_on_the_name_server_and_routes_stay_open():
    assert NAMESRV_RULES[RequestCode.REGISTER_BROKER].admin
    assert NAMESRV_RULES[RequestCode.UNREGISTER_BROKER].admin
    assert NAMESRV_RULES[RequestCode.GET_ROUTEINFO_BY_TOPIC].open


# ------------------------------------------------------------------ perms
@pytest.mark.parametrize(
    ("needed", "owned", "allowed"),
    [
        (Perm.PUB, Perm.PUB, True),
        (Perm.PUB, Perm.SUB, False),
        (Perm.SUB, Perm.PUB | Perm.SUB, True),
        (Perm.PUB, Perm.DENY, False),
        (Perm.ANY, Perm.SUB, True),
        (Perm.ANY, Perm.DENY, False),
    ],
)
def test_b163_permission_check_is_4_9_8s(needed, owned, allowed):
    assert Perm.check(needed, owned) is allowed


# ------------------------------------------------------------------ addresses
@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        ("*", "8.8.8.8", True),
        ("*.*.*.*", "::1", True),
        ("", "127.0.0.1", False),
        (None, "127.0.0.1", False),
        ("192.168.*.*", "192.168.7.9", True),
        ("192.168.*.*", "192.169.0.1", False),
        ("192.168.1.1-100", "192.168.1.100", True),
        ("192.168.1.1-100", "192.168.1.101", False),
        ("192.168.1.{1,2,3}", "192.168.1.2", True),
        ("192.168.1.{1,2,3}", "192.168.1.4", False),
        ("192.168.1.1,10.0.0.1", "10.0.0.1", True),
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "::ffff:127.0.0.1", True),
        ("::1", "0:0:0:0:0:0:0:1", True),
        ("1050:0:0:0:5:600:300c:*", "1050::5:600:300c:326b", True),
        ("1050:0:0:0:5:600:300c:1-ff", "1050::5:600:300c:100", False),
        ("1050::0005:{600,700}", "1050::5:700", True),
    ],
)
def test_b170_remote_address_patterns(pattern, host, matches):
    assert parse_pattern(pattern).match(parse_host(host)) is matches


@pytest.mark.parametrize(
    "pattern",
    [
        "192.168.1",
        "192.168.1.300",
        "192.168.1.5-1",
        "10.0.0.x",
        "abc",
        "192.168.{1,2}.1",
        "1050::*:1",
    ],
)
def test_b170_a_malformed_pattern_is_refused(pattern):
    with pytest.raises(AddressPatternError, match="remote address"):
        parse_pattern(pattern)


# ------------------------------------------------------------------ the file
def test_b167_the_rocketmq_sample_file_parses():
    acl = parse_file(
        "plain_acl.yml",
        b"""
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
""",
    )
    first, second = acl.accounts
    assert first.secret_key == "12345678"  # a YAML number, read as its digits as fastjson does
    assert first.resource_perms["%RETRY%groupB"] == Perm.PUB | Perm.SUB
    assert first.perm_for("anyTopic") == Perm.DENY and first.perm_for("%RETRY%other") == Perm.SUB
    assert second.admin and second.white_remote_address.match(parse_host("192.168.1.20"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accounts: [1]", "accounts[0] must be a mapping"),
        ("acounts: []", "unknown key(s) acounts"),
        (
            "accounts:\n  - accessKey: short\n    secretKey: longenough",
            "accessKey is required and must be longer than 6",
        ),
        (
            "accounts:\n  - accessKey: LongEnough\n    secretKey: s3cr",
            "secretKey is required and must be longer than 6",
        ),
        (
            "accounts:\n  - accessKey: LongEnough\n    secretKey: s3cretkey\n    topicPerms: [a=ALL]",
            "topicPerms[0] must be DENY, PUB, SUB or PUB|SUB, got 'ALL'",
        ),
        (
            "accounts:\n  - accessKey: LongEnough\n    secretKey: s3cretkey\n    groupPerms: [a]",
            "expected NAME=PERM",
        ),
        (
            "accounts:\n  - accessKey: LongEnough\n    secretKey: s3cretkey\n    admin: yes please",
            "admin must be true or false",
        ),
        (
            "accounts:\n  - accessKey: LongEnough\n    secretKey: s3cretkey\n  - accessKey: LongEnough\n"
            "    secretKey: s3cretkey",
            "defined twice",
        ),
        ("globalWhiteRemoteAddresses: [300.1.1.1]", "globalWhiteRemoteAddresses[0]"),
        ("accounts: [\n  {secretKey: s3cretkey", "not valid YAML at line"),
        ("dataVersion: [{counter: x}]", "dataVersion[0].counter must be a long"),
    ],
)
def test_b167_an_invalid_file_is_refused_with_where_and_what(text, message):
    with pytest.raises(AclConfigError) as exc:
        parse_file("f.yml", text.encode())
    assert message in str(exc.value)
    assert "s3cr" not in str(exc.value)  # secrets never appear in errors


def test_b178_secrets_never_appear_in_reprs():
    account = parse_file(
        "f.yml", b"accounts:\n  - accessKey: LongEnough\n    secretKey: TopSecretValue\n"
    ).accounts[0]
    assert "TopSecretValue" not in repr(account)
    assert "TopSecretValue" not in repr(BrokerConfig(peer_secret_key="TopSecretValue"))
    assert "TopSecretValue" not in repr(Credentials("LongEnough", "TopSecretValue"))


def test_b160_the_file_is_found_as_rocketmq_finds_it(tmp_path):
    home = default_acl_sources("", str(tmp_path / "data"), {"ROCKETMQ_HOME": str(tmp_path / "rmq")})
    assert home.default_file == (tmp_path / "rmq" / "conf" / "plain_acl.yml").resolve()
    assert home.directory == (tmp_path / "rmq" / "conf" / "acl").resolve()
    data = default_acl_sources("", str(tmp_path / "data"), {})
    assert data.default_file == (tmp_path / "data" / "conf" / "plain_acl.yml").resolve()
    given = default_acl_sources("etc/acl.yml", str(tmp_path / "data"), {})
    assert given.default_file == (tmp_path / "data" / "etc" / "acl.yml").resolve()


# ------------------------------------------------------------------ reloads, hook, counters
class _Channel:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.remote = (host, 40000)
        self.attributes: dict[str, Any] = {}


def _send(creds: Credentials | None, topic: str) -> Any:
    fields = {
        "producerGroup": "PG",
        "topic": topic,
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1",
    }
    if creds is not None:
        fields = sign(fields, b"body", creds.access_key, creds.secret_key)
    return request(RequestCode.SEND_MESSAGE, fields, b"body")


def _control(tmp_path: Path, seen: list) -> tuple[AccessControl, Path]:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_YAML)
    control = AccessControl(
        AclSources(acl_file, tmp_path / "acl"),
        BROKER_RULES,
        on_change=lambda acl, cause, requester: seen.append((sorted(acl.accounts), cause)),
    )
    return control, acl_file


def test_b168_a_changed_file_is_loaded_on_the_next_check_and_the_hook_is_told(tmp_path):
    seen: list = []
    control, acl_file = _control(tmp_path, seen)
    assert control.version == 1 and seen == [(["AdminKey01", "ProducerKey"], LoadCause.STARTUP)]
    assert control.check(_Channel(), _send(PRODUCER, "TopicC")) is not None
    assert control.check_reload() is False  # nothing changed
    acl_file.write_text(ACL_YAML_TOPIC_C)
    assert control.check_reload() is True
    assert control.version == 2 and seen[-1][1] is LoadCause.FILE_CHANGE
    assert control.check(_Channel(), _send(PRODUCER, "TopicC")) is None


def test_b168_more_files_in_the_acl_directory_are_read_too(tmp_path):
    control, _ = _control(tmp_path, [])
    (tmp_path / "acl").mkdir()
    (tmp_path / "acl" / "team.yml").write_text(
        "accounts:\n  - accessKey: TeamKey01\n    secretKey: TeamSecret01\n"
        "    defaultTopicPerm: PUB\n"
    )
    assert control.check_reload() is True
    assert (
        control.check(_Channel(), _send(Credentials("TeamKey01", "TeamSecret01"), "AnyTopic"))
        is None
    )


def test_b169_an_invalid_reload_keeps_the_old_rules_and_says_why(tmp_path, caplog):
    control, acl_file = _control(tmp_path, [])
    acl_file.write_text(ACL_YAML.replace("admin: true", "admin: maybe"))
    with caplog.at_level(logging.ERROR):
        assert control.check_reload() is False
    assert control.version == 1 and control.reload_errors == 1
    assert "admin must be true or false" in caplog.text and "AdminSecret01" not in caplog.text
    assert control.check(_Channel(), _send(PRODUCER, "TopicA")) is None


def test_b161_the_global_white_list_lets_an_unsigned_request_through(tmp_path):
    control, _ = _control(tmp_path, [])
    assert control.check(_Channel("10.255.255.7"), _send(None, "TopicC")) is None
    assert control.check(_Channel("10.255.254.7"), _send(None, "TopicC")) is not None


def test_b162_a_retry_topic_is_checked_as_its_group(tmp_path):
    control, _ = _control(tmp_path, [])
    assert control.check(_Channel(), _send(PRODUCER, "%RETRY%GroupA")) is None
    refusal = control.check(_Channel(), _send(PRODUCER, "%RETRY%GroupB"))
    assert refusal is not None and "No default permission for group:GroupB" in refusal.remark


def test_b177_refusals_are_counted_by_account_host_and_code(tmp_path):
    control, _ = _control(tmp_path, [])
    for _ in range(2):
        control.check(_Channel(), _send(None, "TopicA"))
    control.check(_Channel("127.0.0.2"), _send(PRODUCER, "TopicC"))
    control.check(_Channel(), _send(Credentials("Invented1", "whatever1"), "TopicA"))
    assert control.take_denials() == {
        ("anonymous", "127.0.0.1", 10): 2,
        ("ProducerKey", "127.0.0.2", 10): 1,
        ("unknown:Invented1", "127.0.0.1", 10): 1,
    }
    assert not control.denials


def test_b165_admin_codes_need_an_admin_account(tmp_path):
    control, _ = _control(tmp_path, [])
    create = {"topic": "T", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}
    for creds, allowed in ((ADMIN, True), (PRODUCER, False)):
        req = request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            creds.sign_request(RequestCode.UPDATE_AND_CREATE_TOPIC, create, b""),
        )
        assert (control.check(_Channel(), req) is None) is allowed


# ------------------------------------------------------------------ es-broker's bound signature
def _bound_control(tmp_path: Path, **options: Any) -> tuple[AccessControl, ManualClock]:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_YAML)
    clock = ManualClock()
    control = AccessControl(
        AclSources(acl_file, tmp_path / "acl"), BROKER_RULES, now_ms=clock.now_ms, **options
    )
    return control, clock


def _no_permission(refusal: Any, words: str) -> None:
    assert refusal is not None and refusal.code == ResponseCode.NO_PERMISSION, refusal
    assert words in refusal.remark, refusal.remark


def test_b347_rocketmq_signature_on_an_admin_code_is_refused_by_default(tmp_path):
    """B-347: an admin account's RocketMQ-signed admin code is refused (scheme), counted with its reason."""
    control, _ = _bound_control(tmp_path)
    fields = sign({"topic": "Victim1"}, b"", ADMIN.access_key, ADMIN.secret_key)
    refusal = control.check(_Channel(), request(RequestCode.DELETE_TOPIC_IN_BROKER, fields))
    _no_permission(refusal, "admin-only and takes es-broker's signature (esSignature) only")
    assert control.take_reasons() == {("AdminKey01", "127.0.0.1", 215, "scheme"): 1}
    # a RocketMQ-signed send still passes; aclStrictSignatures refuses it
    assert control.check(_Channel(), _send(PRODUCER, "TopicA")) is None
    strict, _ = _bound_control(tmp_path, strict=True)
    _no_permission(strict.check(_Channel(), _send(PRODUCER, "TopicA")), "aclStrictSignatures=true")


def test_b348_a_bound_request_outside_the_window_is_refused_as_stale(tmp_path):
    """B-348: |broker clock - esTimestamp| > aclSignatureWindowMs is refused, either way."""
    control, clock = _bound_control(tmp_path, window_ms=1000)
    code = RequestCode.GET_ALL_TOPIC_CONFIG
    for offset, ok in ((-1000, True), (1000, True), (-1001, False), (1001, False)):
        fields = ADMIN.sign_request(code, {}, None, now_ms=clock.now_ms() + offset)
        refusal = control.check(_Channel(), request(code, fields))
        if ok:
            assert refusal is None, refusal
        else:
            _no_permission(refusal, "Stale request from accessKey=AdminKey01")


def test_b349_a_nonce_is_refused_the_second_time_and_forgotten_only_after_the_window(tmp_path):
    """B-349: the same nonce is refused as replayed while its timestamp could be accepted."""
    control, clock = _bound_control(tmp_path, window_ms=1000)
    code = RequestCode.GET_ALL_TOPIC_CONFIG
    fields = ADMIN.sign_request(code, {}, None, now_ms=clock.now_ms(), nonce="a" * 32)
    assert control.check(_Channel(), request(code, fields)) is None
    _no_permission(control.check(_Channel(), request(code, fields)), "Replayed request")
    # another account's identical nonce is its own
    other = PRODUCER.sign_request(code, {}, None, now_ms=clock.now_ms(), nonce="a" * 32)
    assert control.check(_Channel(), request(code, other)) is None
    clock.advance(1001)  # the timestamp left the window: stale now, not replayed
    _no_permission(control.check(_Channel(), request(code, fields)), "Stale request")


def test_b349_a_full_replay_cache_refuses_rather_than_forgets(tmp_path):
    """B-349: at nonces_max live nonces the next request is refused; expired ones make room."""
    control, clock = _bound_control(tmp_path, window_ms=1000, nonces_max=2)
    code = RequestCode.GET_ALL_TOPIC_CONFIG

    def ask() -> Any:
        fields = ADMIN.sign_request(code, {}, None, now_ms=clock.now_ms())
        return control.check(_Channel(), request(code, fields))

    assert ask() is None and ask() is None
    _no_permission(ask(), "2 nonces remembered")
    clock.advance(1001)
    assert ask() is None


def test_b345_malformed_bound_fields_are_refused_with_the_reason(tmp_path):
    """B-345: a signed request whose version, timestamp or nonce is not as specified is refused."""
    control, clock = _bound_control(tmp_path)
    code = RequestCode.GET_ALL_TOPIC_CONFIG
    for extra, words in (
        ({"esSigVersion": "2"}, "esSigVersion"),
        ({"esTimestamp": "-5"}, "esTimestamp"),
        ({"esNonce": "short"}, "esNonce"),
    ):
        fields = {**ADMIN.sign_request(code, {}, None, now_ms=clock.now_ms()), **extra}
        fields["esSignature"] = signature_v1(canonical_v1(code, fields, None), ADMIN.secret_key)
        _no_permission(control.check(_Channel(), request(code, fields)), words)
