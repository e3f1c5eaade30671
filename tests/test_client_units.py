"""The client's pure parts: allocation, the process queue, offset stores, ids, routes, batch bodies."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from es_broker.client.allocate import allocate_averagely
from es_broker.client.consumer import build_subscription, parse_consume_timestamp
from es_broker.client.instance import ClientInstance, FoundBroker
from es_broker.client.messages import ReceivedMessage, UniqIdGenerator
from es_broker.client.offset_store import (
    LocalFileOffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from es_broker.client.process_queue import ProcessQueue
from es_broker.client.route import from_default_route, publish_queues, subscribe_queues
from es_broker.remoting.bodies import BrokerData, MessageQueue, QueueData, TopicRouteData
from es_broker.remoting.message import encode_batch, offset_msg_id, parse_offset_msg_id
from es_broker.server.processors.send import decode_batch

# ---------------------------------------------------------------------- B-51, B-52


@pytest.mark.parametrize(
    ("n", "c", "expected"),
    [
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (5, 3, [[0, 1], [2, 3], [4]]),
        (2, 3, [[0], [1], []]),
        (6, 3, [[0, 1], [2, 3], [4, 5]]),
        (1, 1, [[0]]),
    ],
)
def test_b051_allocate_averagely_table(n, c, expected):
    cids = [f"10.0.0.1@{i}" for i in range(c)]
    assert [allocate_averagely(cid, list(range(n)), cids) for cid in cids] == expected


def test_b051_two_brokers_sorted_by_topic_broker_and_queue():
    mqs = sorted(MessageQueue("T", b, q) for b in ("b", "a") for q in range(4))
    cids = ["c0", "c1", "c2"]
    names = [
        [f"{mq.broker_name}{mq.queue_id}" for mq in allocate_averagely(cid, mqs, cids)]
        for cid in cids
    ]
    assert names == [["a0", "a1", "a2"], ["a3", "b0", "b1"], ["b2", "b3"]]


def test_b051_client_ids_sort_as_strings():
    cids = sorted(["10.0.0.9@1", "10.0.0.10@1"])
    assert cids[0] == "10.0.0.10@1"
    assert allocate_averagely("10.0.0.10@1", [0, 1], cids) == [0]


def test_b052_a_client_missing_from_the_list_gets_nothing_and_empty_inputs_raise():
    assert allocate_averagely("x@1", [0, 1], ["a@1", "b@1"]) == []
    for args in (("a@1", [], ["a@1"]), ("a@1", [0], []), ("", [0], ["a@1"])):
        with pytest.raises(ValueError):
            allocate_averagely(*args)


# ---------------------------------------------------------------------- B-42


def msg(offset: int) -> ReceivedMessage:
    return ReceivedMessage("T", b"x", {}, MessageQueue("T", "b", 0), offset, 0, "id")


def test_b042_sliding_window_commit_values():
    pq = ProcessQueue()
    pq.put_messages([msg(10), msg(11), msg(12)])
    assert pq.remove_messages([msg(11)]) == 10
    assert pq.remove_messages([msg(10)]) == 12
    assert pq.remove_messages([msg(12)]) == 13
    assert pq.remove_messages([msg(13)]) == -1  # nothing held


def test_b042_span_and_duplicates():
    pq = ProcessQueue()
    assert pq.put_messages([msg(5), msg(5), msg(2005)]) == 2
    assert (pq.msg_count, pq.max_span(), pq.queue_offset_max) == (2, 2000, 2005)
    pq.drop()
    assert pq.dropped and pq.pull_scope.cancel_called


# ---------------------------------------------------------------------- B-41, B-43


def test_b041_update_offset_increase_only_and_overwrite():
    store = RemoteBrokerOffsetStore(ClientInstance("127.0.0.1:1"), "G")
    mq = MessageQueue("T", "b", 0)
    store.update_offset(mq, 100, increase_only=True)
    store.update_offset(mq, 90, increase_only=True)
    assert store.offsets()[mq] == 100
    store.update_offset(mq, 90, increase_only=False)
    assert store.offsets()[mq] == 90


async def test_b039_memory_read_is_minus_one_when_absent():
    store = RemoteBrokerOffsetStore(ClientInstance("127.0.0.1:1"), "G")
    assert await store.read_offset(MessageQueue("T", "b", 0), ReadOffsetType.READ_FROM_MEMORY) == -1


async def test_b043_local_store_round_trips_through_the_file_and_its_backup(tmp_path):
    mqs = [MessageQueue("T", "broker-a", q) for q in range(2)]
    store = LocalFileOffsetStore(tmp_path, "10.0.0.1@x", "G")
    store.update_offset(mqs[0], 7, increase_only=False)
    store.update_offset(mqs[1], 3, increase_only=False)
    await store.persist_all(set(mqs))
    store.update_offset(mqs[0], 9, increase_only=False)
    await store.persist_all(set(mqs))
    path = tmp_path / "10.0.0.1@x" / "G" / "offsets.json"
    assert path.read_text().startswith(
        '{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:9'
    )
    fresh = LocalFileOffsetStore(tmp_path, "10.0.0.1@x", "G")
    assert await fresh.read_offset(mqs[0], ReadOffsetType.READ_FROM_STORE) == 9
    assert (
        await fresh.read_offset(MessageQueue("T", "broker-a", 5), ReadOffsetType.READ_FROM_STORE)
        == -1
    )
    path.write_text("not json")  # an unreadable file falls back to .bak (B-07)
    fresh = LocalFileOffsetStore(tmp_path, "10.0.0.1@x", "G")
    await fresh.load()
    assert fresh.offsets() == {mqs[0]: 7, mqs[1]: 3}


# ---------------------------------------------------------------------- ids, subscriptions, routes, batches


def test_uniq_id_layout():
    ids = UniqIdGenerator("10.1.2.3")
    a, b = ids.next_id(), ids.next_id()
    assert len(a) == 32 and a != b and a.startswith("0A010203")
    assert a[:20] == b[:20]  # ip, pid, process constant
    assert int(b[-4:], 16) == (int(a[-4:], 16) + 1) & 0xFFFF


def test_subscription_as_java_builds_it():
    sub = build_subscription("T", " TagA || TagB ||TagA ")
    assert (sub.sub_string, sub.tags_set, sub.code_set) == (
        "TagA || TagB ||TagA",
        ("TagA", "TagB"),
        (2598919, 2598920),
    )
    star = build_subscription("T", None)
    assert (star.sub_string, star.tags_set, star.expression_type) == ("*", (), "TAG")


def test_b047_consume_timestamp_is_local_time():
    import time

    assert parse_consume_timestamp("20240102030405") == int(
        time.mktime((2024, 1, 2, 3, 4, 5, 0, 0, -1)) * 1000
    )


def route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=(QueueData("b", 2, 2, 6), QueueData("a", 3, 1, 4), QueueData("c", 1, 1, 6)),
        broker_datas=(
            BrokerData("C", "a", {0: "h:1"}),
            BrokerData("C", "b", {0: "h:2"}),
            BrokerData("C", "c", {1: "h:3"}),
        ),
    )


def test_b023_publish_takes_writable_queues_of_brokers_with_a_master():
    assert publish_queues("T", route()) == (MessageQueue("T", "b", 0), MessageQueue("T", "b", 1))


def test_b023_subscribe_takes_readable_queues_of_every_broker():
    assert sorted(subscribe_queues("T", route())) == [
        MessageQueue("T", "a", q) for q in range(3)
    ] + [MessageQueue("T", "b", q) for q in range(2)] + [MessageQueue("T", "c", 0)]


def test_default_route_is_cut_to_default_topic_queue_nums():
    template = TopicRouteData(
        queue_datas=(QueueData("a", 8, 8, 7),), broker_datas=(BrokerData("C", "a", {0: "h"}),)
    )
    assert [
        (q.read_queue_nums, q.write_queue_nums) for q in from_default_route(template, 4).queue_datas
    ] == [(4, 4)]


def test_batch_body_layout_of_spec_7_2_2():
    body = encode_batch([(3, b"hi", {"TAGS": "A"}), (0, b"", {})])
    assert body[:20] == struct.pack(">iiiii", 20 + 2 + 2 + 6, 0, 0, 3, 2)
    assert body[20:30] == b"hi" + struct.pack(">h", 6) + b"TAGS\x01A"
    assert decode_batch(body) == [(3, b"hi", {"TAGS": "A"}), (0, b"", {})]


# ---------------------------------------------------------------------- B-112, B-113, B-117


def _instance_with(addrs: dict[int, str]) -> ClientInstance:
    instance = ClientInstance("127.0.0.1:1")
    instance._apply_route(
        "T",
        TopicRouteData(
            queue_datas=(QueueData("a", 2, 2, 6),), broker_datas=(BrokerData("C", "a", addrs),)
        ),
        consumers=False,
    )
    return instance


def test_b117_pull_goes_to_the_suggested_id_else_the_lowest_id_of_the_name():
    both = _instance_with({1: "s:1", 0: "m:1"})
    assert both.find_broker_address_in_subscribe("a", 1, False) == FoundBroker("s:1", True)
    assert both.find_broker_address_in_subscribe("a", 0, False) == FoundBroker("m:1", False)
    assert both.find_broker_address_in_subscribe("a", 2, True) is None
    slaves = _instance_with({2: "s:2", 1: "s:1"})
    # the offset store then refreshes
    assert slaves.find_broker_address_in_subscribe("a", 0, True) is None
    assert slaves.find_broker_address_in_subscribe("a", 0, False) == FoundBroker("s:1", True)


def test_b112_a_master_the_routes_no_longer_list_is_forgotten():
    instance = _instance_with({0: "m:1", 1: "s:1"})
    instance.routes["T"] = TopicRouteData(
        queue_datas=(QueueData("a", 2, 2, 6),), broker_datas=(BrokerData("C", "a", {1: "s:1"}),)
    )
    instance.broker_addrs["gone"] = {0: "g:1"}
    instance.clean_offline_brokers()
    assert instance.broker_addrs == {"a": {1: "s:1"}}


@given(
    ip=st.ip_addresses(v=4),
    port=st.integers(0, 65535),
    offset=st.integers(-(2**63), 2**63 - 1),
)
def test_offset_msg_id_is_the_hex_of_host_port_and_offset_of_spec_8_5(ip, port, offset):
    """The id's host part is cached per broker; the id stays the 16-byte layout, in upper-case hex."""
    host = (str(ip), port)
    expected = (ip.packed + struct.pack(">iq", port, offset)).hex().upper()
    assert offset_msg_id(host, offset) == expected
    assert parse_offset_msg_id(expected) == (host, offset)


def test_a_request_takes_its_opaque_with_every_other_field_kept():
    """The channel numbers each request it writes: a copy with the opaque set, what
    `dataclasses.replace` makes, every field of the command included."""
    import dataclasses

    from es_broker.remoting.codes import LanguageCode, SerializeType
    from es_broker.remoting.command import RemotingCommand

    command = RemotingCommand(
        code=310,
        language=LanguageCode.PYTHON,
        version=399,
        opaque=7,
        flag=2,
        remark="r",
        ext_fields={"a": "1"},
        body=b"body",
        serialize_type=SerializeType.ROCKETMQ,
    )
    renumbered = command.with_opaque(42)
    assert renumbered == dataclasses.replace(command, opaque=42)
    assert [f.name for f in dataclasses.fields(RemotingCommand) if f.init] == [
        "code",
        "language",
        "version",
        "opaque",
        "flag",
        "remark",
        "ext_fields",
        "body",
        "serialize_type",
    ]  # a field added to the command must be added to with_opaque too
