"""Topic and group configs are read as their Bean, while records and LMDB keep the bytes they always
had: the camelCase map in Java's field order, plus the projection's `dataVersion`."""

from __future__ import annotations

import tarfile
from pathlib import Path

import msgpack
import pytest

from es_broker.log.types import RecordType
from es_broker.projections.configs import as_record
from es_broker.remoting.bodies import SubscriptionGroupConfig, TopicConfig
from es_broker.store import Store
from tests.conftest import make_topic

# what the broker wrote before configs were typed (commands/topics.py, projections/subscription_groups.py)
TOPIC_MAP = {
    "topicName": "T",
    "readQueueNums": 1,
    "writeQueueNums": 2,
    "perm": 7,
    "topicFilterType": "SINGLE_TAG",
    "topicSysFlag": 0,
    "order": False,
}
GROUP_MAP = {
    "groupName": "G",
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "consumeBroadcastEnable": True,
    "retryQueueNums": 1,
    "retryMaxTimes": 16,
    "brokerId": 0,
    "whichBrokerWhenConsumeSlowly": 1,
    "notifyConsumerIdsChangedEnable": True,
}
OLD_STORE = Path(__file__).parent / "data" / "store-format-1-6573b9b.tar.gz"


def test_a_config_built_from_the_bean_is_the_map_records_always_held():
    assert msgpack.packb(as_record(TopicConfig("T", 1, 2, 7))) == msgpack.packb(TOPIC_MAP)
    assert msgpack.packb(as_record(SubscriptionGroupConfig("G"))) == msgpack.packb(GROUP_MAP)


async def test_the_projections_store_the_records_map_and_read_the_bean(broker):
    seq = await broker.update_topic(dict(TOPIC_MAP), requester="ops")
    perm_seq = await broker.update_topic_perm("T", 6, requester="ops")
    group_seq = await broker.update_group({"groupName": "G"}, requester="ops")
    store = broker.store
    with store.read() as txn:
        raw_topic = bytes(txn.get(b"T", db=store.topics.db))
        raw_group = bytes(txn.get(b"G", db=store.groups.db))
        versioned = store.topics.versioned(txn, "T")
    assert seq < perm_seq
    assert raw_topic == msgpack.packb({**TOPIC_MAP, "perm": 6, "dataVersion": perm_seq})
    assert raw_group == msgpack.packb({**GROUP_MAP, "dataVersion": group_seq})
    assert versioned is not None
    assert (versioned.config, versioned.data_version) == (TopicConfig("T", 1, 2, 6), perm_seq)
    assert broker.group_config("G") == SubscriptionGroupConfig("G")
    assert broker.topic_table()[0]["T"] == TopicConfig("T", 1, 2, 6)
    groups, version = broker.group_table()  # with the default groups 4.9.8 holds at start (B-482)
    assert (groups["G"], version) == (SubscriptionGroupConfig("G"), group_seq)


async def test_an_incoming_config_is_checked_and_recorded_as_sent(broker):
    await make_topic(broker, queues=3)
    [(_, record)] = [
        r for r in broker.store.log.read() if r[1]["type"] == RecordType.TOPIC_UPDATED
    ][-1:]
    assert record["config"] == {**TOPIC_MAP, "readQueueNums": 3, "writeQueueNums": 3, "perm": 6}
    assert list(record["config"]) == list(TOPIC_MAP)  # the key order of the map, hence its bytes


@pytest.mark.parametrize("name", ["", "x" * 600])
async def test_a_name_no_topic_or_group_can_have_reads_as_absent(broker, name):
    assert broker.topic_config(name) is None and broker.group_config(name) is None


def test_a_data_directory_written_before_reads_its_configs_as_beans(tmp_path):
    with tarfile.open(OLD_STORE) as tar:
        tar.extractall(tmp_path, filter="data")
    store = Store.open(tmp_path, readonly=True)  # read as it is, not upgraded (B-470)
    try:
        with store.read() as txn:
            stored = {
                key.decode(): msgpack.unpackb(raw) for key, raw in txn.cursor(db=store.topics.db)
            }
            topics = {v.config.topic_name: v for v in store.topics.all(txn)}
            stored_groups = [msgpack.unpackb(raw) for _, raw in txn.cursor(db=store.groups.db)]
            groups = [v.config for v in store.groups.all(txn)]
    finally:
        store.close()
    assert stored and set(topics) == set(stored)
    for name, value in stored.items():
        config = as_record(topics[name].config)
        assert config == {k: v for k, v in value.items() if k != "dataVersion"}
        assert topics[name].data_version == value["dataVersion"]
    assert [as_record(g) for g in groups] == [
        {k: v for k, v in value.items() if k != "dataVersion"} for value in stored_groups
    ]
    assert [g.group_name for g in groups] == ["G1", "G2"]
