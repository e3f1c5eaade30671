"""Signed clients (RocketMQ's AclClientRPCHook): the Python client and `es-broker admin`.

A real name server and broker run in the test's nursery; both listeners record
every request that reaches them, so a test can show what a client sent.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from es_broker import cli
from es_broker.acl.signing import verify_v1
from es_broker.cli.credentials import CredentialsError, admin_credentials, read_tools_yml
from es_broker.client import (
    ClientConfig,
    ClientInstance,
    ConsumeResult,
    Credentials,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from es_broker.client.admin import Admin
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import ACCESS_KEY
from tests.credential_fixtures import (
    CREDS,
    TIMEOUT,
    Recorded,
    assert_all_signed_by,
    assert_none_signed,
    recorded_topic,
)
from tests.helpers import FAST
from tests.process_fixtures import ROOT

CREDENTIAL_ENV = ("ES_BROKER_ACCESS_KEY", "ES_BROKER_SECRET_KEY", "ROCKETMQ_HOME")


# ---------------------------------------------------------------------- the Python client


async def test_a_producer_with_credentials_signs_route_heartbeat_send_and_unregister(
    recorded,
    nursery,
):
    topic = await recorded_topic(recorded, "SignedSend")
    producer = Producer(recorded.namesrv_addr, "PG", client_ip="127.0.0.1", credentials=CREDS)
    await producer.start(nursery)
    await producer.send(topic, b"hello")
    await recorded.recorder.wait_for(RequestCode.HEART_BEAT)
    await producer.shutdown()
    assert {
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.HEART_BEAT,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.UNREGISTER_CLIENT,
    } <= recorded.recorder.codes()
    assert_all_signed_by(recorded.recorder.seen, CREDS)


async def test_a_producer_without_credentials_signs_nothing(recorded, nursery):
    topic = await recorded_topic(recorded, "PlainSend")
    producer = Producer(recorded.namesrv_addr, "PG", client_ip="127.0.0.1")
    await producer.start(nursery)
    await producer.send(topic, b"hello")
    await recorded.recorder.wait_for(RequestCode.HEART_BEAT)
    await producer.shutdown()
    assert_none_signed(recorded.recorder.seen)


async def test_a_push_consumers_whole_life_is_signed(recorded, nursery):
    """Heartbeat, route, consumer list, offset query, pull, send-back, commit, unregister."""
    topic = await recorded_topic(recorded, "SignedConsume")
    producer = Producer(recorded.namesrv_addr, "PG", client_ip="127.0.0.1", credentials=CREDS)
    await producer.start(nursery)
    await producer.send(topic, b"first")
    await producer.shutdown()

    delivered = trio.Event()

    async def fail_first_time(msgs: list[ReceivedMessage]) -> ConsumeResult:
        delivered.set()
        return (
            ConsumeResult.RECONSUME_LATER if msgs[0].reconsume_times == 0 else ConsumeResult.SUCCESS
        )

    consumer = PushConsumer(
        recorded.namesrv_addr,
        "CG",
        fail_first_time,
        subscriptions={topic: "*"},
        client_ip="127.0.0.1",
        config=FAST,
        client_config=ClientConfig(credentials=CREDS),
    )
    await consumer.start(nursery)
    with trio.fail_after(TIMEOUT):
        await delivered.wait()
    await recorded.recorder.wait_for(
        RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.UPDATE_CONSUMER_OFFSET
    )
    await consumer.shutdown()
    assert {
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.HEART_BEAT,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.PULL_MESSAGE,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.UNREGISTER_CLIENT,
    } <= recorded.recorder.codes()
    assert_all_signed_by(recorded.recorder.seen, CREDS)


async def test_the_admin_api_opened_with_credentials_signs_its_requests(recorded):
    await recorded_topic(recorded, "AdminTopic")
    async with Admin.open(recorded.namesrv_addr, credentials=CREDS) as admin:
        assert "AdminTopic" in await admin.topic_list()
        await admin.topic_status("AdminTopic")
    assert {
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_TOPIC_STATS_INFO,
    } <= recorded.recorder.codes()
    assert_all_signed_by(recorded.recorder.seen, CREDS)


def test_the_secret_is_in_no_config_repr():
    config = ClientConfig(credentials=Credentials("ak", "s3cr3t-value", "token-value"))
    instance = ClientInstance("127.0.0.1:1", config=config)
    assert "ak" in repr(config)
    for text in (repr(config), str(config), repr(instance.config)):
        assert "s3cr3t-value" not in text and "token-value" not in text


def test_credentials_given_to_a_member_become_its_instances():
    producer = Producer("127.0.0.1:1", credentials=CREDS)
    assert producer.instance.config.credentials == CREDS
    same = Producer("127.0.0.1:1", client_config=ClientConfig(credentials=CREDS), credentials=CREDS)
    assert same.instance.config.credentials == CREDS


def test_two_different_accounts_for_one_client_are_refused():
    with pytest.raises(ValueError, match="credentials given twice"):
        Producer(
            "127.0.0.1:1",
            client_config=ClientConfig(credentials=CREDS),
            credentials=Credentials("other", "x"),
        )
    shared = ClientInstance("127.0.0.1:1", credentials=CREDS)
    with pytest.raises(ValueError, match="belong to the client instance"):
        PushConsumer(
            "127.0.0.1:1",
            "CG",
            lambda msgs: ConsumeResult.SUCCESS,
            instance=shared,
            credentials=Credentials("other", "x"),
        )


# ---------------------------------------------------------------------- es-broker admin


def admin_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_ENV}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


async def run_admin(
    namesrv: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`es-broker admin -n NAMESRV ARGS...` as a process, while the broker serves in this test's loop."""
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-m", "es_broker.cli", "admin", "-n", namesrv, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env or admin_env(),
        )


def tools_yml(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def test_admin_verbs_with_key_flags_sign_every_request(recorded):
    topic = await recorded_topic(recorded, "CliTopic")
    ns, broker = recorded.namesrv_addr, recorded.addr
    flags = ("--access-key", CREDS.access_key, "--secret-key", CREDS.secret_key)
    runs = [
        (*flags, "topicList"),
        ("updateTopic", "-b", broker, "-t", "CliTopic2", *flags),  # the flags after the verb
        (*flags, "topicStatus", "-t", topic),
        (*flags, "sendMessage", "-t", topic, "-p", "body"),
        (*flags, "consumerProgress", "-g", "NoSuchGroup"),
        (*flags, "brokerStatus", "-b", broker),
        (*flags, "clusterList"),
    ]
    for args in runs:
        done = await run_admin(ns, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert CREDS.secret_key.encode() not in done.stdout + done.stderr
    assert {
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.GET_TOPIC_STATS_INFO,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.GET_CONSUME_STATS,
        RequestCode.GET_BROKER_RUNTIME_INFO,
        RequestCode.GET_BROKER_CLUSTER_INFO,
    } <= recorded.recorder.codes()
    assert_all_signed_by(recorded.recorder.seen, CREDS)


async def test_admin_without_any_credentials_signs_nothing(recorded):
    done = await run_admin(recorded.namesrv_addr, "topicList")
    assert done.returncode == 0, done.stderr
    assert_none_signed(recorded.recorder.seen)


async def admin_account(recorded: Recorded, *args: str, env: dict[str, str]) -> str:
    """The AccessKey of the one request `topicList` sent, after checking its signature."""
    recorded.recorder.seen.clear()
    done = await run_admin(recorded.namesrv_addr, *args, "topicList", env=env)
    assert done.returncode == 0, done.stderr
    (command,) = recorded.recorder.seen
    return command.ext_fields[ACCESS_KEY]


async def test_admin_flags_beat_the_environment_which_beats_tools_yml(recorded, tmp_path):
    yml = tools_yml(tmp_path / "tools.yml", "accessKey: yml-ak\nsecretKey: yml-sk\n")
    env = admin_env(ES_BROKER_ACCESS_KEY="env-ak", ES_BROKER_SECRET_KEY="env-sk")
    flags = ("--access-key", "flag-ak", "--secret-key", "flag-sk", "--tools-yml", str(yml))
    assert await admin_account(recorded, *flags, env=env) == "flag-ak"
    assert await admin_account(recorded, "--tools-yml", str(yml), env=env) == "env-ak"
    assert await admin_account(recorded, "--tools-yml", str(yml), env=admin_env()) == "yml-ak"
    secrets = {"flag-ak": "flag-sk", "env-ak": "env-sk", "yml-ak": "yml-sk"}
    # every request verified with the secret of the account it names (none of the others')
    for command in recorded.recorder.seen:
        assert verify_v1(
            command.code, command.ext_fields, command.body, secrets[command.ext_fields[ACCESS_KEY]]
        )


async def test_admin_reads_mqadmins_tools_yml_under_rocketmq_home(recorded, tmp_path):
    # RocketMQ's distribution/conf/tools.yml has a secret that YAML reads as a number
    tools_yml(
        tmp_path / "home" / "conf" / "tools.yml", "accessKey: rocketmq2\nsecretKey: 12345678\n"
    )
    recorded.recorder.seen.clear()
    done = await run_admin(
        recorded.namesrv_addr, "topicList", env=admin_env(ROCKETMQ_HOME=str(tmp_path / "home"))
    )
    assert done.returncode == 0, done.stderr
    assert_all_signed_by(recorded.recorder.seen, Credentials("rocketmq2", "12345678"))


async def test_admin_with_half_an_account_sends_nothing_and_says_what_is_missing(recorded):
    done = await run_admin(
        recorded.namesrv_addr, "topicList", env=admin_env(ES_BROKER_SECRET_KEY="lonely-secret")
    )
    assert done.returncode == 2
    assert b"ES_BROKER_SECRET_KEY given without ES_BROKER_ACCESS_KEY" in done.stderr
    assert b"lonely-secret" not in done.stderr
    assert recorded.recorder.seen == []


# ---------------------------------------------------------------------- where the admin's account comes from


def args_of(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    from es_broker.cli.admin import add_parser as add_admin_parser

    add_admin_parser(sub)
    return parser.parse_args(["admin", *argv])


def test_key_flags_are_taken_before_and_after_the_verb():
    before = args_of("--access-key", "a", "--secret-key", "s", "topicList")
    after = args_of("topicList", "--access-key", "a", "--secret-key", "s")
    split = args_of("--access-key", "a", "topicList", "--secret-key", "s")
    for args in (before, after, split):
        assert admin_credentials(args, {}) == Credentials("a", "s")


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (("--access-key", "a", "topicList"), {}, "--access-key given without --secret-key"),
        (("topicList", "--secret-key", "s"), {}, "--secret-key given without --access-key"),
        # one source gives the whole account: a flag does not pair with the environment's half
        (
            ("--access-key", "a", "topicList"),
            {"ES_BROKER_SECRET_KEY": "s"},
            "--access-key given without --secret-key",
        ),
        (
            ("topicList",),
            {"ES_BROKER_ACCESS_KEY": "a"},
            "ES_BROKER_ACCESS_KEY given without ES_BROKER_SECRET_KEY",
        ),
    ],
)
def test_half_an_account_is_an_error_naming_the_missing_half(argv, environ, message):
    with pytest.raises(CredentialsError, match=message):
        admin_credentials(args_of(*argv), environ)


def test_a_tools_yml_with_only_an_access_key_is_an_error_naming_the_file(tmp_path):
    yml = tools_yml(tmp_path / "tools.yml", "accessKey: rocketmq2\n")
    with pytest.raises(CredentialsError, match=f"secretKey in {yml}"):
        read_tools_yml(yml)


def test_an_unparsable_tools_yml_is_an_error_naming_the_file_but_not_its_lines(tmp_path):
    yml = tools_yml(tmp_path / "tools.yml", "accessKey: rocketmq2\nsecretKey topsecret-line\n")
    with pytest.raises(CredentialsError) as caught:
        read_tools_yml(yml)
    assert str(yml) in str(caught.value) and "cannot be parsed" in str(caught.value)
    assert "topsecret" not in str(caught.value)


def test_a_tools_yml_that_is_not_a_mapping_is_an_error(tmp_path):
    yml = tools_yml(tmp_path / "tools.yml", "- rocketmq2\n- 12345678\n")
    with pytest.raises(CredentialsError, match="not a mapping"):
        read_tools_yml(yml)


def test_a_missing_tools_yml_named_by_the_flag_is_an_error(tmp_path):
    with pytest.raises(CredentialsError, match="does not exist"):
        admin_credentials(args_of("--tools-yml", str(tmp_path / "nope.yml"), "topicList"), {})


def test_without_rocketmq_home_or_its_tools_yml_the_admin_signs_nothing(tmp_path):
    assert admin_credentials(args_of("topicList"), {}) is None
    assert admin_credentials(args_of("topicList"), {"ROCKETMQ_HOME": str(tmp_path)}) is None


def test_an_empty_tools_yml_or_blank_keys_sign_nothing(tmp_path):
    assert read_tools_yml(tools_yml(tmp_path / "empty.yml", "")) is None
    assert read_tools_yml(tools_yml(tmp_path / "blank.yml", "accessKey:\nsecretKey: ''\n")) is None


def test_the_cli_prints_the_error_and_exits_2_before_connecting(capsys, monkeypatch, tmp_path):
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    yml = tools_yml(tmp_path / "tools.yml", "accessKey: [unclosed\nsecretKey: hidden-secret\n")
    assert cli.main(["admin", "-n", "127.0.0.1:1", "--tools-yml", str(yml), "topicList"]) == 2
    err = capsys.readouterr().err
    assert f"es-broker admin topicList: tools.yml {yml} cannot be parsed" in err
    assert "hidden-secret" not in err
