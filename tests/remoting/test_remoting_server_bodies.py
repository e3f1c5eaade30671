"""Golden bytes of every body the broker and the name server ship, written from their classes.

Each literal is what the broker sent before its bodies were classes (the
dict-built bodies of 4.9.8's shapes, read off the same inputs): encoding the
class the server now builds must give exactly those bytes, fastjson's quirks
included (bare numeric keys, MessageQueue object keys, sorted fields, nulls
left out). Decoding them gives the class back, which is what the admin reads.
"""

from __future__ import annotations

import pytest

from es_broker.remoting.admin_bodies import (
    CleanPassResult,
    OpenTransaction,
    OpenTransactionsBody,
    QueueResetRow,
    RedriveBody,
    RedriveItem,
    ResetOffsetResult,
)
from es_broker.remoting.bodies import (
    AclConfig,
    Bean,
    BrokerData,
    ClientConnection,
    ClusterInfo,
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    ConsumeStats,
    DataVersion,
    DelayOffsetSerializeWrapper,
    GetConsumerListByGroupResponseBody,
    KVTable,
    LockBatchResponseBody,
    MessageQueue,
    OffsetWrapper,
    PlainAccessConfig,
    ProducerConnection,
    QueueData,
    RegisterBrokerBody,
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
)

MQ0, MQ1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
TOPIC = TopicConfig("T", 4, 4)
RETRY = TopicConfig("%RETRY%G", 1, 1)
CONNECTION = ClientConnection("10.0.0.1@a", "127.0.0.1:5000", "JAVA", 409)
BROKER = BrokerData("C", "b", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"})
ROUTE = TopicRouteData(queue_datas=(QueueData("b", 4, 4, 6, 0),), broker_datas=(BROKER,))
ROWS = (QueueResetRow(0, 1, 4, 4, "moved"),)
ACCOUNT = PlainAccessConfig(
    "rocketmq2", "****", None, False, "DENY", "SUB", topic_perms=("T=PUB",), group_perms=()
)

# (name, the class as the server builds it, the bytes the broker sent before)
CASES: list[tuple[str, Bean, bytes]] = [
    (
        "GET_CONSUMER_LIST_BY_GROUP",
        GetConsumerListByGroupResponseBody(("10.0.0.1@a", "10.0.0.2@b")),
        b'{"consumerIdList":["10.0.0.1@a","10.0.0.2@b"]}',
    ),
    ("LOCK_BATCH_MQ nothing held", LockBatchResponseBody(()), b'{"lockOKMQSet":[]}'),
    (
        "LOCK_BATCH_MQ",
        LockBatchResponseBody((MQ1, MQ0)),
        b'{"lockOKMQSet":[{"brokerName":"b","queueId":1,"topic":"T"},'
        b'{"brokerName":"b","queueId":0,"topic":"T"}]}',
    ),
    (
        "RESET_CONSUMER_CLIENT_OFFSET",
        ResetOffsetBody({MQ0: 5, MQ1: 7}),
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5,'
        b'{"brokerName":"b","queueId":1,"topic":"T"}:7}}',
    ),
    (
        "OPEN_TRANSACTIONS",
        OpenTransactionsBody(
            (
                OpenTransaction(
                    "PG", "T", 0, "TX1", "7F00000100002A9F0000000000000000", 0, 3, 11, 12, 1, -1
                ),
                OpenTransaction("PG", "T", 1, None, "X", 9, 4, 13, 14, 0, 99),
            )
        ),
        b'{"transactions":[{"bornTimestamp":11,"checks":1,"commitLogOffset":0,"lastCheckTimestamp":-1,'
        b'"offsetMsgId":"7F00000100002A9F0000000000000000","producerGroup":"PG","queueId":0,'
        b'"storeTimestamp":12,"topic":"T","tranStateTableOffset":3,"transactionId":"TX1"},'
        b'{"bornTimestamp":13,"checks":0,"commitLogOffset":9,"lastCheckTimestamp":99,"offsetMsgId":"X",'
        b'"producerGroup":"PG","queueId":1,"storeTimestamp":14,"topic":"T","tranStateTableOffset":4}]}',
    ),
    (
        "RESET_OFFSET",
        ResetOffsetResult(
            "G", "T", "b", "offset", 4, "notify", False, 17, "notify: notified 1 client(s)", ROWS
        ),
        b'{"brokerName":"b","dryRun":false,"group":"G","kind":"offset","mode":"notify",'
        b'"outcome":"notify: notified 1 client(s)","queues":[{"current":1,"final":4,"outcome":"moved",'
        b'"queueId":0,"target":4}],"seq":17,"topic":"T","value":4}',
    ),
    (
        "RESET_OFFSET dry run",
        ResetOffsetResult(
            "G", "T", "b", "offset", 4, "notify", True, None, "dry run: nothing changed", ROWS
        ),
        b'{"brokerName":"b","dryRun":true,"group":"G","kind":"offset","mode":"notify",'
        b'"outcome":"dry run: nothing changed","queues":[{"current":1,"final":4,"outcome":"moved",'
        b'"queueId":0,"target":4}],"topic":"T","value":4}',
    ),
    (
        "GET_ALL_TOPIC_CONFIG",
        TopicConfigSerializeWrapper({"T": TOPIC, "%RETRY%G": RETRY}, DataVersion(42, 42)),
        b'{"dataVersion":{"counter":42,"timestamp":42},"topicConfigTable":{"%RETRY%G":{"order":false,'
        b'"perm":6,"readQueueNums":1,"topicFilterType":"SINGLE_TAG","topicName":"%RETRY%G","topicSysFlag":0,'
        b'"writeQueueNums":1},"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
        b'"topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}',
    ),
    (
        "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
        SubscriptionGroupWrapper({"G": SubscriptionGroupConfig("G")}, DataVersion(7, 7)),
        b'{"dataVersion":{"counter":7,"timestamp":7},"subscriptionGroupTable":{"G":{"brokerId":0,'
        b'"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,"groupName":"G",'
        b'"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,'
        b'"whichBrokerWhenConsumeSlowly":1}}}',
    ),
    (
        "GET_TOPIC_STATS_INFO",
        TopicStatsTable({MQ0: TopicOffset(0, 10, 100), MQ1: TopicOffset(1, 11, 101)}),
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"lastUpdateTimestamp":100,'
        b'"maxOffset":10,"minOffset":0},{"brokerName":"b","queueId":1,"topic":"T"}:'
        b'{"lastUpdateTimestamp":101,"maxOffset":11,"minOffset":1}}}',
    ),
    (
        "GET_CONSUME_STATS",
        ConsumeStats({MQ0: OffsetWrapper(10, 3, 55), MQ1: OffsetWrapper(10, 4, 55)}, 0.0),
        b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":10,'
        b'"consumerOffset":3,"lastTimestamp":55},{"brokerName":"b","queueId":1,"topic":"T"}:'
        b'{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":55}}}',
    ),
    (
        "GET_CONSUMER_CONNECTION_LIST",
        ConsumerConnection(
            (CONNECTION,),
            {"T": SubscriptionData("T", "A", ("A",), (65,), 12)},
            "CONSUME_PASSIVELY",
            "CLUSTERING",
            "CONSUME_FROM_LAST_OFFSET",
        ),
        b'{"connectionSet":[{"clientAddr":"127.0.0.1:5000","clientId":"10.0.0.1@a","language":"JAVA",'
        b'"version":409}],"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY",'
        b'"messageModel":"CLUSTERING","subscriptionTable":{"T":{"classFilterMode":false,"codeSet":[65],'
        b'"expressionType":"TAG","subString":"A","subVersion":12,"tagsSet":["A"],"topic":"T"}}}',
    ),
    (
        "GET_PRODUCER_CONNECTION_LIST",
        ProducerConnection((CONNECTION,)),
        b'{"connectionSet":[{"clientAddr":"127.0.0.1:5000","clientId":"10.0.0.1@a","language":"JAVA",'
        b'"version":409}]}',
    ),
    (
        "GET_ALL_CONSUMER_OFFSET",
        ConsumerOffsetSerializeWrapper({"T@G": {0: 5, 1: 6}, "%RETRY%G@G": {0: 0}}),
        b'{"offsetTable":{"%RETRY%G@G":{0:0},"T@G":{0:5,1:6}}}',
    ),
    (
        "GET_BROKER_RUNTIME_INFO",
        KVTable({"brokerVersion": "409", "diskFull": "False", "commitLogMaxOffset": "1024"}),
        b'{"table":{"brokerVersion":"409","commitLogMaxOffset":"1024","diskFull":"False"}}',
    ),
    ("GET_BROKER_CONFIG version", DataVersion(), b'{"counter":0,"timestamp":0}'),
    (
        "REGISTER_BROKER",
        RegisterBrokerBody(TopicConfigSerializeWrapper({"T": TOPIC}, DataVersion(42, 42))),
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":42,'
        b'"timestamp":42},"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,'
        b'"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}}',
    ),
    (
        "DELETE_EXPIRED_COMMITLOG",
        CleanPassResult("manual", (0, 1024), 2048, 9),
        b'{"deletedFiles":[0,1024],"phyMin":2048,"reason":"manual","seq":9}',
    ),
    (
        "DELETE_EXPIRED_COMMITLOG no trigger",
        CleanPassResult(None, (), 0, None),
        b'{"deletedFiles":[],"phyMin":0}',
    ),
    (
        "GET_ALL_DELAY_OFFSET",
        DelayOffsetSerializeWrapper({1: 4, 3: 0}),
        b'{"offsetTable":{1:4,3:0}}',
    ),
    (
        "REDRIVE_DLQ",
        RedriveBody(
            "G",
            "retry",
            False,
            True,
            (RedriveItem(0, "ID0", 100, "T", "%RETRY%G", 0, "ID1", None),),
        ),
        b'{"group": "G", "target": "retry", "dryRun": false, "more": true, "items": [{"dlqQueueOffset": 0, '
        b'"dlqMsgId": "ID0", "physicalOffset": 100, "originalTopic": "T", "targetTopic": "%RETRY%G", '
        b'"targetQueueId": 0, "newMsgId": "ID1", "skipped": null}]}',
    ),
    (
        "GET_ROUTEINFO_BY_TOPIC",
        ROUTE,
        b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"b",'
        b'"cluster":"C"}],"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,'
        b'"topicSysFlag":0,"writeQueueNums":4}]}',
    ),
    (
        "GET_BROKER_CLUSTER_INFO",
        ClusterInfo({"b": BROKER}, {"C": ("b",)}),
        b'{"brokerAddrTable":{"b":{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"b",'
        b'"cluster":"C"}},"clusterAddrTable":{"C":["b"]}}',
    ),
    ("GET_ALL_TOPIC_LIST_FROM_NAMESERVER", TopicList(("A", "T")), b'{"topicList":["A","T"]}'),
    (
        "QUERY_DATA_VERSION",
        DataVersion(1700000000000, 3),
        b'{"counter":3,"timestamp":1700000000000}',
    ),
    (
        "GET_KVLIST_BY_NAMESPACE",
        KVTable({"k1": "v1", "k2": "v2"}),
        b'{"table":{"k1":"v1","k2":"v2"}}',
    ),
    (
        "GET_BROKER_CLUSTER_ACL_CONFIG",
        AclConfig(
            ("10.10.103.*",),
            (
                ACCOUNT,
                PlainAccessConfig(
                    "admin", "****", "192.168.1.*", True, "DENY", "SUB", ("T=PUB",), ()
                ),
            ),
        ),
        b'{"globalWhiteAddrs":["10.10.103.*"],"plainAccessConfigs":[{"accessKey":"rocketmq2","admin":false,'
        b'"defaultGroupPerm":"SUB","defaultTopicPerm":"DENY","groupPerms":[],"secretKey":"****",'
        b'"topicPerms":["T=PUB"]},{"accessKey":"admin","admin":true,"defaultGroupPerm":"SUB",'
        b'"defaultTopicPerm":"DENY","groupPerms":[],"secretKey":"****","topicPerms":["T=PUB"],'
        b'"whiteRemoteAddress":"192.168.1.*"}]}',
    ),
]


@pytest.mark.parametrize(("name", "body", "golden"), CASES, ids=[c[0] for c in CASES])
def test_the_class_the_server_ships_writes_the_bytes_it_always_sent(
    name: str, body: Bean, golden: bytes
) -> None:
    assert body.encode() == golden


@pytest.mark.parametrize(("name", "body", "golden"), CASES, ids=[c[0] for c in CASES])
def test_the_admin_reads_the_golden_bytes_back_into_the_class(
    name: str, body: Bean, golden: bytes
) -> None:
    assert type(body).decode(golden) == body


def test_route_for_a_4_9_4_client_quotes_the_broker_ids() -> None:
    assert ROUTE.encode(standard_json=True) == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"},"brokerName":"b",'
        b'"cluster":"C"}],"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,'
        b'"topicSysFlag":0,"writeQueueNums":4}]}'
    )


def test_reset_offset_for_a_cpp_client_is_the_list_form() -> None:
    assert ResetOffsetBody({MQ0: 5, MQ1: 7}).encode(for_cpp=True) == (
        b'{"offsetTable":[{"brokerName":"b","offset":5,"queueId":0,"topic":"T"},'
        b'{"brokerName":"b","offset":7,"queueId":1,"topic":"T"}]}'
    )
