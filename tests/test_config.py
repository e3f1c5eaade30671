"""Defaults are RocketMQ's (B-01, B-02) and a RocketMQ broker.conf loads as it is."""

from __future__ import annotations

import pytest

from es_broker.config import BrokerConfig, load_broker_conf


def test_b001_store_defaults():
    c = BrokerConfig()
    assert (c.maxMessageSize, c.fileReservedTime, c.deleteWhen, c.diskMaxUsedSpaceRatio) == (
        4194304,
        72,
        "04",
        75,
    )
    assert (c.maxTransferBytesOnMessageInMemory, c.maxTransferCountOnMessageInMemory) == (
        262144,
        32,
    )
    assert (c.maxTransferBytesOnMessageInDisk, c.maxTransferCountOnMessageInDisk) == (65536, 8)
    assert (c.accessMessageInMemoryMaxRatio, c.brokerRole, c.flushDiskType) == (
        40,
        "ASYNC_MASTER",
        "ASYNC_FLUSH",
    )
    assert c.messageDelayLevel == "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


def test_b002_broker_defaults():
    c = BrokerConfig()
    assert (
        c.brokerPermission,
        c.slaveReadEnable,
        c.autoCreateTopicEnable,
        c.defaultTopicQueueNums,
    ) == (6, False, True, 8)
    assert (c.flushConsumerOffsetInterval, c.shortPollingTimeMills, c.longPollingEnable) == (
        5000,
        1000,
        True,
    )


def test_b006_delay_levels_in_milliseconds():
    levels = BrokerConfig().delay_levels_ms()
    assert (
        levels[:4] == [1000, 5000, 10000, 30000] and levels[-1] == 7_200_000 and len(levels) == 18
    )


def test_rocketmq_broker_conf_loads_and_unknown_keys_are_ignored(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a RocketMQ broker.conf\n"
        "brokerClusterName = DefaultCluster\nbrokerName=broker-b\nbrokerId=0\ndeleteWhen=04\n"
        "fileReservedTime=48\nbrokerRole=SYNC_MASTER\nflushDiskType=SYNC_FLUSH\nlistenPort=10921\n"
        "messageDelayLevel=1s 2s 3s\nslaveReadEnable=true\nmapedFileSizeCommitLog=1073741824\n"
        "new_group_start=strict\n"
    )
    c = load_broker_conf(conf)
    assert (c.brokerName, c.fileReservedTime, c.brokerRole, c.listenPort) == (
        "broker-b",
        48,
        "SYNC_MASTER",
        10921,
    )
    assert c.sync_flush and c.slaveReadEnable and c.new_group_start == "strict"
    assert c.delay_levels_ms() == [1000, 2000, 3000]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("listenPort=abc", "listenPort must be an integer"),
        ("slaveReadEnable=yes", "slaveReadEnable must be true or false"),
        ("messageDelayLevel=1x", "messageDelayLevel entry '1x'"),
        ("justakey", "expected key=value"),
    ],
)
def test_bad_broker_conf_lines_are_clear_errors(tmp_path, line, error):
    conf = tmp_path / "broker.conf"
    conf.write_text(line + "\n")
    with pytest.raises(ValueError, match=error):
        load_broker_conf(conf)
