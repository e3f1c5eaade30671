"""Registration at scale (B-391, B-392): one changed topic is registered alone, the rest stay routed.

A topic created, changed or deleted through the admin is registered with the name servers by
itself (4.9.8 BrokerController.registerIncrementBrokerData), before the admin's answer; the
name server applies such a body without dropping the broker's other topics (RouteInfoManager
.registerBroker). Checked against a name server run as a process of its own (`serve --role
namesrv`, the broker registering over the wire) and against the one in the broker's process.
The periodic full registration is compressed with compressedRegister=true: its body is checked
byte for byte against a frame made by Java's Deflater(BEST_COMPRESSION) over 4.9.8's layout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from es_broker.client.admin import Admin
from es_broker.remoting.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.server.namesrv import COMPLETE, DELETED, NameServer
from tests.cluster_fixtures import NAMESRV_READY, broker_process, process
from tests.process_fixtures import _env, serve

# RegisterBrokerBody.encode(true) of 4.9.8 for the wrapper of _golden_wrapper(): a
# DeflaterOutputStream(Deflater(BEST_COMPRESSION)) over [len][DataVersion JSON], [count],
# [len]["name read write perm filterType"] per topic, [len][filterServerList JSON], made by
# java.util.zip on OpenJDK 17
GOLDEN_COMPRESSED = bytes.fromhex(
    "78da636060d0a8564ace2fcd2b492d52b23231d2512ac9cc4d2d2e49cc2d50b232343740805a060606262016"
    "f72f4a492d2a56b000423385604f3f771fd7f8104777a094946a906b4850a4aabba10208a2c93245c70200f6"
    "cd19e7"
)


def _golden_wrapper() -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        {
            "Orders": TopicConfig(topic_name="Orders", read_queue_nums=8, write_queue_nums=8),
            "%RETRY%G1": TopicConfig(topic_name="%RETRY%G1", read_queue_nums=1, write_queue_nums=1),
        },
        DataVersion(timestamp=1700000000000, counter=42),
    )


def test_the_compressed_body_is_4_9_8s_frame_byte_for_byte():
    body = RegisterBrokerBody(_golden_wrapper()).encode(compressed=True)
    assert body == GOLDEN_COMPRESSED
    layout = zlib.decompress(body)
    assert layout[:4] == (40).to_bytes(4, "big")
    assert layout[4:44] == b'{"counter":42,"timestamp":1700000000000}'
    assert layout[44:48] == (2).to_bytes(4, "big")
    assert layout.endswith((2).to_bytes(4, "big") + b"[]")


def test_a_compressed_body_round_trips():
    decoded = RegisterBrokerBody.decode(GOLDEN_COMPRESSED, compressed=True)
    wrapper = decoded.topic_config_serialize_wrapper
    assert wrapper.data_version == DataVersion(timestamp=1700000000000, counter=42)
    assert wrapper.topic_config_table == _golden_wrapper().topic_config_table
    assert decoded.filter_server_list == ()


def _register(fields: dict[str, object], wrapper: TopicConfigSerializeWrapper, compressed=False):
    header = {
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "127.0.0.1:10912",
        "brokerId": 0,
        "compressed": compressed,
        **fields,
    }
    return request(
        RequestCode.REGISTER_BROKER,
        header,
        RegisterBrokerBody(wrapper).encode(compressed=compressed),
    )


def _wrapper(*names: str, version: int = 1) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        {n: TopicConfig(topic_name=n, read_queue_nums=4, write_queue_nums=4) for n in names},
        DataVersion(timestamp=version, counter=version),
    )


async def test_the_name_server_applies_bodies_as_4_9_8_and_es_brokers_complete_ones():
    ns = NameServer()
    answer = await ns.register_broker(None, _register({COMPLETE: True}, _wrapper("A", "B", "C")))
    assert answer.code == ResponseCode.SUCCESS
    # an incremental body (4.9.8's, no marker): the one topic is added, the others stay
    await ns.register_broker(None, _register({}, _wrapper("D", version=2)))
    assert sorted(ns.routes.topic_queues) == ["A", "B", "C", "D"]
    # es-broker's deletion: the named topic goes, for this broker only
    await ns.register_broker(None, _register({DELETED: "B"}, _wrapper(version=3)))
    assert sorted(ns.routes.topic_queues) == ["A", "C", "D"]
    # a compressed full registration of es-broker: what it does not list goes
    await ns.register_broker(
        None, _register({COMPLETE: True}, _wrapper("A", "D", version=4), compressed=True)
    )
    assert sorted(ns.routes.topic_queues) == ["A", "D"]
    # a compressed one of 4.9.8 (no marker) adds and changes, and removes nothing
    await ns.register_broker(None, _register({}, _wrapper("E", version=5), compressed=True))
    assert sorted(ns.routes.topic_queues) == ["A", "D", "E"]


@contextmanager
def _separate(tmp_path: Path, *conf: str) -> Iterator[tuple[str, str]]:
    """A name server process and a broker process (broker-a) registering with it over the wire."""
    namesrv_args = ["serve", "--role", "namesrv", "--namesrv-listen", "127.0.0.1:0"]
    with (
        process(namesrv_args, NAMESRV_READY, tmp_path / "namesrv.log") as namesrv,
        broker_process(tmp_path, "broker-a", namesrv, *conf) as addr,
    ):
        yield namesrv, addr


def _admin(namesrv: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "es_broker.cli", "admin", "-n", namesrv, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    if check:
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def _routed(namesrv: str) -> dict[str, int]:
    """Every topic the name server routes, with the write queues broker-a has for it."""
    return trio.run(_routes_of_every_topic, namesrv)


async def _routes_of_every_topic(namesrv: str) -> dict[str, int]:
    # one admin client for the whole table (the CLI's topicList and topicRoute ask the same
    # GET_ALL_TOPIC_LIST_FROM_NAMESERVER and GET_ROUTEINFO_BY_TOPIC, one process per call)
    out = {}
    async with Admin.open(namesrv) as admin:
        for topic in await admin.topic_list():
            route = json.loads((await admin.route(topic)).encode(standard_json=True))
            (queue_data,) = [q for q in route["queueDatas"] if q["brokerName"] == "broker-a"]
            out[topic] = queue_data["writeQueueNums"]
    return out


def _changes_one_topic_at_a_time(namesrv: str, broker: str) -> None:
    for topic, queues in (("Alpha", "2"), ("Beta", "3"), ("Gamma", "4")):
        _admin(namesrv, "updateTopic", "-b", broker, "-t", topic, "-r", queues, "-w", queues)
    before = _routed(namesrv)
    assert {"Alpha": 2, "Beta": 3, "Gamma": 4}.items() <= before.items()
    # a new topic, then a change of one: each answered once the name server has it, alone
    _admin(namesrv, "updateTopic", "-b", broker, "-t", "Delta", "-r", "5", "-w", "5")
    _admin(namesrv, "updateTopic", "-b", broker, "-t", "Beta", "-r", "6", "-w", "6")
    after = _routed(namesrv)
    assert after == {**before, "Delta": 5, "Beta": 6}
    # a deletion in the broker alone (DELETE_TOPIC_IN_BROKER, no DELETE_TOPIC_IN_NAMESRV): the
    # broker's registration of it takes its route away, the others stay
    trio.run(_delete_in_broker, namesrv, broker, "Gamma")
    gone = _routed(namesrv)
    assert gone == {k: v for k, v in after.items() if k != "Gamma"}


async def _delete_in_broker(namesrv: str, broker: str, topic: str) -> None:
    async with Admin.open(namesrv) as admin:
        answer = await admin.client.invoke(
            broker, request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}), 10.0
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark


def test_one_changed_topic_leaves_the_others_routed_on_a_separate_name_server(tmp_path):
    with _separate(tmp_path) as (namesrv, broker):
        _changes_one_topic_at_a_time(namesrv, broker)


def test_one_changed_topic_leaves_the_others_routed_in_process(tmp_path):
    with serve(tmp_path / "data") as served:
        _changes_one_topic_at_a_time(served.namesrv, served.broker)


def test_a_compressed_full_registration_routes_every_topic(tmp_path):
    with _separate(tmp_path) as (namesrv, broker):
        for topic in ("Alpha", "Beta"):
            _admin(namesrv, "updateTopic", "-b", broker, "-t", topic, "-r", "2", "-w", "2")
    # the same broker restarted with compressedRegister=true on a new name server: the full
    # registration at its start, compressed, is all that name server hears
    (tmp_path / "namesrv.log").unlink()
    with _separate(tmp_path, "compressedRegister=true") as (namesrv, broker):
        routed = _routed(namesrv)
        assert {"Alpha": 2, "Beta": 2}.items() <= routed.items()
        # and the topics changed since come incrementally, beside them
        _admin(namesrv, "updateTopic", "-b", broker, "-t", "Gamma", "-r", "3", "-w", "3")
        assert _routed(namesrv) == {**routed, "Gamma": 3}


@pytest.mark.parametrize("perm", ["4"])
def test_a_broker_permission_change_is_a_full_registration(tmp_path, perm):
    with serve(tmp_path / "data") as served:
        _admin(served.namesrv, "updateTopic", "-b", served.broker, "-t", "Alpha")
        _admin(
            served.namesrv,
            "updateBrokerConfig",
            "-b",
            served.broker,
            "-k",
            "brokerPermission",
            "-v",
            perm,
        )
        route = json.loads(_admin(served.namesrv, "topicRoute", "-t", "Alpha", "--json").stdout)
        assert [q["perm"] for q in route["queueDatas"]] == [int(perm)]
