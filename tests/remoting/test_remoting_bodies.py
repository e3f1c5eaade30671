"""JSON bodies (docs/protocol.md §9): the sample bodies of docs/protocol.md §9 decode, and encode back exactly."""

from __future__ import annotations

import dataclasses

import pytest

from es_broker.remoting import (
    Bean,
    BodyDecodeError,
    BrokerData,
    ClientConnection,
    ClusterInfo,
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    ConsumerRunningInfo,
    ConsumeStats,
    DataVersion,
    DelayOffsetSerializeWrapper,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    QueueData,
    RegisterBrokerBody,
    RemotingCommand,
    ResetOffsetBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicOffset,
    TopicRouteData,
    TopicStatsTable,
    wants_standard_json,
)

MQ0 = MessageQueue(topic="T", broker_name="broker-a", queue_id=0)
MQ1 = MessageQueue(topic="T", broker_name="broker-a", queue_id=1)

# -- 9.2 TopicRouteData -----------------------------------------------------------------

ROUTE = TopicRouteData(
    queue_datas=(QueueData("broker-a", read_queue_nums=4, write_queue_nums=4, perm=6),),
    broker_datas=(
        BrokerData("DefaultCluster", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}),
    ),
    order_topic_conf="broker-a:4",
)
ROUTE_LEGACY = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"}],"filterServerTable":{},"orderTopicConf":"broker-a:4",'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
    b'"writeQueueNums":4}]}'
)
ROUTE_STANDARD = ROUTE_LEGACY.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":')


def test_route_legacy_form_has_bare_broker_id_keys() -> None:
    assert ROUTE.encode() == ROUTE_LEGACY
    assert TopicRouteData.decode(ROUTE_LEGACY) == ROUTE


def test_route_standard_form_quotes_broker_id_keys() -> None:
    assert ROUTE.encode(standard_json=True) == ROUTE_STANDARD
    assert TopicRouteData.decode(ROUTE_STANDARD) == ROUTE


def test_route_pre_4_9_topic_syn_flag_spelling_is_accepted() -> None:
    body = b'{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":1,"topicSynFlag":3,"writeQueueNums":1}]}'
    assert TopicRouteData.decode(body).queue_datas[0].topic_sys_flag == 3


def test_route_without_order_topic_conf_omits_the_key() -> None:
    assert b"orderTopicConf" not in TopicRouteData().encode()


def test_standard_json_is_chosen_from_version_4_9_4_or_accept_standard_json_only() -> None:
    assert not wants_standard_json(RemotingCommand(code=105, version=121))
    assert wants_standard_json(RemotingCommand(code=105, version=401))
    assert wants_standard_json(
        RemotingCommand(code=105, version=121, ext_fields={"acceptStandardJsonOnly": "true"})
    )


# -- 9.3 HeartbeatData --------------------------------------------------------------------

HEARTBEAT_JAVA = (
    b'{"clientID":"10.0.0.5@12345#1","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
    b'"consumeType":"CONSUME_PASSIVELY","groupName":"GID_demo","messageModel":"CLUSTERING",'
    b'"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919,2598920],'
    b'"expressionType":"TAG","subString":"TagA || TagB","subVersion":1700000000000,'
    b'"tagsSet":["TagA","TagB"],"topic":"T"},{"classFilterMode":false,"codeSet":[],'
    b'"expressionType":"TAG","subString":"*","subVersion":1700000000001,"tagsSet":[],'
    b'"topic":"%RETRY%GID_demo"}],"unitMode":false}],"producerDataSet":[{"groupName":"PID_demo"},'
    b'{"groupName":"CLIENT_INNER_PRODUCER"}]}'
)


def test_java_heartbeat_decodes_and_encodes_back_exactly() -> None:
    heartbeat = HeartbeatData.decode(HEARTBEAT_JAVA)
    assert heartbeat.client_id == "10.0.0.5@12345#1"
    assert [p.group_name for p in heartbeat.producer_data_set] == [
        "PID_demo",
        "CLIENT_INNER_PRODUCER",
    ]
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.message_model == "CLUSTERING"
    assert consumer.subscription_data_set[0] == SubscriptionData(
        topic="T",
        sub_string="TagA || TagB",
        tags_set=("TagA", "TagB"),
        code_set=(2598919, 2598920),
        sub_version=1700000000000,
    )
    assert heartbeat.encode() == HEARTBEAT_JAVA


def test_heartbeat_missing_expression_type_means_tag_and_missing_sets_are_empty() -> None:
    body = b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"T","subString":"*"}]}]}'
    (sub,) = HeartbeatData.decode(body).consumer_data_set[0].subscription_data_set
    assert (sub.expression_type, sub.tags_set, sub.code_set) == ("TAG", (), ())


def test_heartbeat_tolerates_numbers_as_strings_and_a_javascript_set_written_as_empty_object() -> (
    None
):
    body = b'{"clientID":"c","consumerDataSet":[{"groupName":"g","unitMode":"false","subscriptionDataSet":[{"topic":"T","subVersion":"17","tagsSet":{},"codeSet":{}}]}],"producerDataSet":null}'
    heartbeat = HeartbeatData.decode(body)
    (sub,) = heartbeat.consumer_data_set[0].subscription_data_set
    assert sub.sub_version == 17
    assert sub.tags_set == ()
    assert heartbeat.producer_data_set == ()


def test_heartbeat_with_wrong_types_names_the_bad_path() -> None:
    with pytest.raises(
        BodyDecodeError,
        match=r"HeartbeatData\.consumerDataSet\[0\]\.subscriptionDataSet\[0\]\.subVersion",
    ):
        HeartbeatData.decode(
            b'{"consumerDataSet":[{"subscriptionDataSet":[{"subVersion":"soon"}]}]}'
        )


def test_heartbeat_body_that_is_not_an_object_is_rejected() -> None:
    with pytest.raises(BodyDecodeError, match="expected an object"):
        HeartbeatData.decode(b"[1,2]")


# -- 9.4, 7.4.8 ------------------------------------------------------------------------


def test_consumer_list_body_round_trips() -> None:
    body = b'{"consumerIdList":["10.0.0.5@12345","10.0.0.6@222"]}'
    decoded = GetConsumerListByGroupResponseBody.decode(body)
    assert decoded.consumer_id_list == ("10.0.0.5@12345", "10.0.0.6@222")
    assert decoded.encode() == body


def test_lock_batch_bodies_carry_message_queue_lists() -> None:
    body = b'{"clientId":"c1","consumerGroup":"g","mqSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}'
    assert LockBatchRequestBody.decode(body) == LockBatchRequestBody("g", "c1", (MQ0,))
    assert LockBatchResponseBody((MQ0,)).encode() == (
        b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}'
    )


# -- 9.6 ResetOffsetBody ---------------------------------------------------------------

RESET_MAP_FORM = (
    b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:12,'
    b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:9}}'
)
RESET_LIST_FORM = (
    b'{"offsetTable":[{"brokerName":"broker-a","offset":12,"queueId":0,"topic":"T"},'
    b'{"brokerName":"broker-a","offset":9,"queueId":1,"topic":"T"}]}'
)


def test_reset_offset_body_object_key_form_matches_spec() -> None:
    body = ResetOffsetBody({MQ1: 9, MQ0: 12})
    assert body.encode() == RESET_MAP_FORM
    assert ResetOffsetBody.decode(RESET_MAP_FORM) == body


def test_reset_offset_body_cpp_list_form_matches_spec() -> None:
    body = ResetOffsetBody({MQ0: 12, MQ1: 9})
    assert body.encode(for_cpp=True) == RESET_LIST_FORM
    assert ResetOffsetBody.decode(RESET_LIST_FORM) == body


def test_reset_offset_body_quoted_key_form_is_also_read() -> None:
    body = ResetOffsetBody({MQ0: 12})
    assert ResetOffsetBody.decode(body.encode(standard_json=True)) == body


# -- 9.7 broker metadata ------------------------------------------------------------------

TOPIC_CONFIG = (
    b'{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T",'
    b'"topicSysFlag":0,"writeQueueNums":4}'
)
GROUP_CONFIG_DEFAULTS = (
    b'{"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,'
    b'"groupName":"g","notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,'
    b'"whichBrokerWhenConsumeSlowly":1}'
)


def test_topic_config_matches_spec_sample() -> None:
    config = TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=4)
    assert config.encode() == TOPIC_CONFIG
    assert TopicConfig.decode(TOPIC_CONFIG) == config


def test_topic_config_missing_fields_take_java_defaults() -> None:
    assert TopicConfig.decode(b'{"topicName":"T"}') == TopicConfig(
        "T", 16, 16, 6, "SINGLE_TAG", 0, False
    )


def test_subscription_group_config_defaults_match_spec_sample() -> None:
    assert SubscriptionGroupConfig(group_name="g").encode() == GROUP_CONFIG_DEFAULTS
    assert SubscriptionGroupConfig.decode(b'{"groupName":"g"}') == SubscriptionGroupConfig("g")


def test_data_version_encodes_counter_and_timestamp_and_advances() -> None:
    version = DataVersion(timestamp=1700000000000, counter=3)
    assert version.encode() == b'{"counter":3,"timestamp":1700000000000}'
    assert version.next_version(1700000000500) == DataVersion(1700000000500, 4)


def test_topic_config_wrapper_round_trips() -> None:
    wrapper = TopicConfigSerializeWrapper(
        {"T": TopicConfig("T"), "TBW102": TopicConfig("TBW102", 8, 8, 7)},
        DataVersion(1700000000000, 3),
    )
    assert TopicConfigSerializeWrapper.decode(wrapper.encode()) == wrapper
    assert wrapper.encode().startswith(b'{"dataVersion":{"counter":3,"timestamp":1700000000000},')


def test_subscription_group_wrapper_round_trips() -> None:
    wrapper = SubscriptionGroupWrapper({"g": SubscriptionGroupConfig("g")}, DataVersion(1, 2))
    assert SubscriptionGroupWrapper.decode(wrapper.encode()) == wrapper


def test_consumer_offsets_use_bare_queue_id_keys() -> None:
    body = b'{"offsetTable":{"%RETRY%g@g":{0:1},"T@g":{0:5,1:3}}}'
    offsets = ConsumerOffsetSerializeWrapper.decode(body)
    assert offsets.offset_table == {"T@g": {0: 5, 1: 3}, "%RETRY%g@g": {0: 1}}
    assert offsets.encode() == body


def test_delay_offsets_use_bare_level_keys() -> None:
    body = b'{"offsetTable":{1:0,3:5}}'
    assert DelayOffsetSerializeWrapper.decode(body).offset_table == {1: 0, 3: 5}
    assert DelayOffsetSerializeWrapper({3: 5, 1: 0}).encode() == body


def test_kv_table_and_topic_list_round_trip() -> None:
    assert KVTable({"k": "v"}).encode() == b'{"table":{"k":"v"}}'
    assert TopicList.decode(b'{"topicList":["b","a"]}').topic_list == ("b", "a")
    assert TopicList(("T",)).encode() == b'{"topicList":["T"]}'


REGISTER = RegisterBrokerBody(
    TopicConfigSerializeWrapper(
        {"T": TopicConfig("T", 4, 4), "%RETRY%g": TopicConfig("%RETRY%g", 1, 1)},
        DataVersion(1700000000000, 2),
    ),
)


def test_register_broker_body_plain_json_round_trips() -> None:
    body = REGISTER.encode()
    assert body.startswith(b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":')
    assert RegisterBrokerBody.decode(body) == REGISTER


def test_register_broker_body_compressed_form_round_trips() -> None:
    assert RegisterBrokerBody.decode(REGISTER.encode(compressed=True), compressed=True) == REGISTER


def test_register_broker_body_corrupt_compressed_form_is_a_body_decode_error() -> None:
    with pytest.raises(BodyDecodeError):
        RegisterBrokerBody.decode(b"not zlib", compressed=True)
    import zlib

    with pytest.raises(BodyDecodeError, match="overruns"):
        RegisterBrokerBody.decode(zlib.compress(b"\x00\x00\x01\x00{}"), compressed=True)


# -- 9.8 ClusterInfo ------------------------------------------------------------------------

CLUSTER_INFO = (
    b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
)


def test_cluster_info_matches_spec_sample() -> None:
    info = ClusterInfo(
        {"broker-a": BrokerData("DefaultCluster", "broker-a", {0: "10.0.0.1:10911"})},
        {"DefaultCluster": ("broker-a",)},
    )
    assert info.encode() == CLUSTER_INFO
    assert ClusterInfo.decode(CLUSTER_INFO) == info


# -- 9.9 stats with object keys --------------------------------------------------------------


def test_topic_stats_table_writes_object_keys() -> None:
    body = (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        b'{"lastUpdateTimestamp":1700000000000,"maxOffset":10,"minOffset":0}}}'
    )
    table = TopicStatsTable(
        {MQ0: TopicOffset(min_offset=0, max_offset=10, last_update_timestamp=1700000000000)}
    )
    assert table.encode() == body
    assert TopicStatsTable.decode(body) == table


def test_consume_stats_orders_queues_like_java_tree_map() -> None:
    stats = ConsumeStats(
        {MQ1: OffsetWrapper(1, 1, 0), MQ0: OffsetWrapper(2, 2, 0)}, consume_tps=1.5
    )
    text = stats.encode()
    assert text.index(b'"queueId":0') < text.index(b'"queueId":1')
    assert b'"consumeTps":1.5' in text
    assert ConsumeStats.decode(text) == stats


# -- 9.10 ConsumerRunningInfo ------------------------------------------------------------------

RUNNING_INFO = (
    b'{"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"cachedMsgCount":0,'
    b'"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,"cachedMsgSizeInMiB":0,"commitOffset":7,'
    b'"droped":false,"lastConsumeTimestamp":1700000000000,"lastLockTimestamp":0,'
    b'"lastPullTimestamp":1700000000001,"locked":false,"transactionMsgCount":0,'
    b'"transactionMsgMaxOffset":0,"transactionMsgMinOffset":0,"tryUnlockTimes":0}},'
    b'"properties":{"PROP_CLIENT_VERSION":"V4_9_8","PROP_CONSUMEORDERLY":"false",'
    b'"PROP_THREADPOOL_CORE_SIZE":"20"},"statusTable":{"T":{"consumeFailedMsgs":0,'
    b'"consumeFailedTPS":0.0,"consumeOKTPS":0.5,"consumeRT":1.0,"pullRT":2.0,"pullTPS":0.0}},'
    b'"subscriptionSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG",'
    b'"subString":"*","subVersion":1,"tagsSet":[],"topic":"T"}]}'
)


def test_consumer_running_info_decodes_object_keyed_mq_table() -> None:
    info = ConsumerRunningInfo.decode(RUNNING_INFO)
    assert info.mq_table[MQ0].commit_offset == 7
    assert info.mq_table[MQ0].last_pull_timestamp == 1700000000001
    assert info.status_table["T"].consume_ok_tps == 0.5
    assert info.properties["PROP_CLIENT_VERSION"] == "V4_9_8"
    assert info.subscription_set[0].topic == "T"
    assert info.jstack is None
    assert info.encode() == RUNNING_INFO


# -- 9.11 connections ------------------------------------------------------------------------

CONNECTION = (
    b'{"clientAddr":"10.0.0.5:53211","clientId":"10.0.0.5@12345","language":"JAVA","version":409}'
)


def test_connection_body_matches_spec_sample() -> None:
    connection = ClientConnection("10.0.0.5@12345", "10.0.0.5:53211", "JAVA", 409)
    assert connection.encode() == CONNECTION
    assert ClientConnection.decode(CONNECTION) == connection


def test_consumer_and_producer_connection_bodies_round_trip() -> None:
    connection = ClientConnection.decode(CONNECTION)
    consumer = ConsumerConnection(
        connection_set=(connection,),
        subscription_table={"T": SubscriptionData(topic="T")},
        consume_type="CONSUME_PASSIVELY",
        message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
    )
    assert ConsumerConnection.decode(consumer.encode()) == consumer
    assert consumer.encode().startswith(b'{"connectionSet":[' + CONNECTION + b"]")
    producer = ProducerConnection((connection,))
    assert producer.encode() == b'{"connectionSet":[' + CONNECTION + b"]}"


# -- every body type --------------------------------------------------------------------------


def _all_beans() -> list[type[Bean]]:
    """Every fastjson body class (the bases of other families, such as PythonJsonBean, are no body)."""
    return sorted(
        (cls for cls in Bean.__subclasses__() if dataclasses.is_dataclass(cls)),
        key=lambda cls: cls.__name__,
    )


@pytest.mark.parametrize("cls", _all_beans(), ids=lambda cls: cls.__name__)
def test_every_body_decodes_from_an_empty_object_with_java_defaults(cls: type[Bean]) -> None:
    decoded = cls.decode(b"{}")
    assert decoded == cls()
    assert cls.decode(decoded.encode()) == decoded


@pytest.mark.parametrize("cls", _all_beans(), ids=lambda cls: cls.__name__)
def test_every_body_ignores_unknown_keys(cls: type[Bean]) -> None:
    assert cls.decode(b'{"somethingNew":[1,{2:3}],"bname":"x"}') == cls()
