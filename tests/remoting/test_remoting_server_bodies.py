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
from es_broker.remoting.query_bodies import (
    AccountScopeBody,
    AclFileVersions,
    ExplainBody,
    HistoryRow,
    MessageTraceBody,
    OffsetAtRow,
    OffsetHistoryBody,
    OffsetsAtBody,
    OffsetTimelineBody,
    QueueExplanationRow,
    ResourceScope,
    TimelineQueue,
    TimelineSample,
    TraceHop,
    acl_version_text,
    read_acl_version,
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

# es-broker's own answers in Python's JSON (query_bodies)
OFFSET_ROW = OffsetAtRow("G", "T", 0, 5, 9, 4, 12, 1700000000000, "commit", "10.0.0.1@a")
ROW_DURABLE = OffsetAtRow("G", "T", 1, -1, 3, None, 13, 1700000000001, "reset", "", -1, None)
SOURCE = "the broker's time index"
CHANGE = HistoryRow(
    12, 1700000000000, 1700000000000, "G", "T", "offset_change", 0, 4, 5, "commit", "10.0.0.1@a"
)
RESET = HistoryRow(
    15,
    1700000000002,
    1700000000002,
    "G",
    "T",
    "OFFSET_RESET",
    None,
    None,
    None,
    "",
    "admin",
    {"mode": "force", "offsets": {"0": 3}},
)
COMMIT = {"seq": 4, "ts": 2, "old": 0, "new": 5, "cause": "commit", "requester": "c"}
START = {
    "seq": 3,
    "ts": 1,
    "requester": "c",
    "row": 2,
    "answer": 0,
    "min_offset": 0,
    "head_in_memory": True,
    "phy_max": 10,
    "consume_from_where": "CONSUME_FROM_LAST_OFFSET",
    "why": "w",
}
EVERYTHING = ResourceScope("ALL", True)

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
        "DELETE_EXPIRED_COMMITLOG passes going on (B-677)",
        CleanPassResult("manual", (0,), 1024, 7, True),
        b'{"deletedFiles":[0],"phyMin":1024,"reason":"manual","running":true,"seq":7}',
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
    (
        "OFFSETS_AT",
        OffsetsAtBody(1700000000005, "G", None, SOURCE, (OFFSET_ROW,), 14),
        b'{"at": 1700000000005, "group": "G", "topic": null, "source": "the broker\'s time index", "queues": [{"group": "G", "topic": "T", "queue_id": 0, "offset": 5, "max_offset": 9, "lag": 4, "seq": 12, "time": 1700000000000, "cause": "commit", "requester": "10.0.0.1@a", "durable": null, "durable_lag": null}], "position": 14}',
    ),
    (
        "OFFSETS_AT durable",
        OffsetsAtBody(1700000000005, "G", "T", SOURCE, (ROW_DURABLE,), 14, True, None),
        b'{"at": 1700000000005, "group": "G", "topic": "T", "source": "the broker\'s time index", "queues": [{"group": "G", "topic": "T", "queue_id": 1, "offset": -1, "max_offset": 3, "lag": null, "seq": 13, "time": 1700000000001, "cause": "reset", "requester": "", "durable": -1, "durable_lag": null}], "position": 14, "persist_tick": null}',
    ),
    (
        "OFFSET_HISTORY",
        OffsetHistoryBody("G", None, None, 1700000000009, True, (CHANGE, RESET)),
        b'{"group": "G", "topic": null, "since": null, "until": 1700000000009, "more": true, "entries": [{"seq": 12, "time": 1700000000000, "ts": 1700000000000, "group": "G", "topic": "T", "kind": "offset_change", "queue_id": 0, "old": 4, "new": 5, "cause": "commit", "requester": "10.0.0.1@a", "detail": {}}, {"seq": 15, "time": 1700000000002, "ts": 1700000000002, "group": "G", "topic": "T", "kind": "OFFSET_RESET", "queue_id": null, "old": null, "new": null, "cause": "", "requester": "admin", "detail": {"mode": "force", "offsets": {"0": 3}}}]}',
    ),
    (
        "OFFSET_TIMELINE",
        OffsetTimelineBody(
            "G",
            "T",
            1700000000000,
            1700000000009,
            (TimelineSample(1700000000000, 12, 5, 9, 4, 1),),
            (TimelineQueue("T", 0, (None, 5), (3, 9), (None, 4)),),
            (RESET,),
            False,
        ),
        b'{"group": "G", "topic": "T", "since": 1700000000000, "until": 1700000000009, "samples": [{"at": 1700000000000, "position": 12, "offset": 5, "max_offset": 9, "lag": 4, "queues": 1}], "queues": [{"topic": "T", "queue_id": 0, "offsets": [null, 5], "max_offsets": [3, 9], "lags": [null, 4]}], "events": [{"seq": 15, "time": 1700000000002, "ts": 1700000000002, "group": "G", "topic": "T", "kind": "OFFSET_RESET", "queue_id": null, "old": null, "new": null, "cause": "", "requester": "admin", "detail": {"mode": "force", "offsets": {"0": 3}}}], "moreEvents": false}',
    ),
    (
        "EXPLAIN_GROUP",
        ExplainBody(
            "G",
            "T",
            "CONSUME_FROM_LAST_OFFSET",
            ("10.0.0.1@a",),
            (QueueExplanationRow(0, 5, START, COMMIT, COMMIT, 1),),
        ),
        b'{"group": "G", "topic": "T", "consume_from_where": "CONSUME_FROM_LAST_OFFSET", "clients": ["10.0.0.1@a"], "queues": [{"queue_id": 0, "current_offset": 5, "start": {"seq": 3, "ts": 1, "requester": "c", "row": 2, "answer": 0, "min_offset": 0, "head_in_memory": true, "phy_max": 10, "consume_from_where": "CONSUME_FROM_LAST_OFFSET", "why": "w"}, "first_change": {"seq": 4, "ts": 2, "old": 0, "new": 5, "cause": "commit", "requester": "c"}, "latest_change": {"seq": 4, "ts": 2, "old": 0, "new": 5, "cause": "commit", "requester": "c"}, "changes": 1}]}',
    ),
    (
        "EXPLAIN_GROUP nothing",
        ExplainBody("G", "T"),
        b'{"group": "G", "topic": "T", "consume_from_where": null, "clients": [], "queues": []}',
    ),
    (
        "ACCOUNT_SCOPE no ACL",
        AccountScopeBody(
            False,
            None,
            True,
            True,
            "ACL is not enabled on this broker",
            {"A": EVERYTHING, "T": EVERYTHING},
            {"G": EVERYTHING},
        ),
        b'{"aclEnabled": false, "accessKey": null, "admin": true, "everything": true, "reason": "ACL is not enabled on this broker", "topics": {"A": {"perm": "ALL", "visible": true}, "T": {"perm": "ALL", "visible": true}}, "groups": {"G": {"perm": "ALL", "visible": true}}}',
    ),
    (
        "ACCOUNT_SCOPE",
        AccountScopeBody(
            True,
            "rocketmq2",
            False,
            False,
            "an account",
            {"T": ResourceScope("PUB", True), "U": ResourceScope("DENY", False)},
            {},
        ),
        b'{"aclEnabled": true, "accessKey": "rocketmq2", "admin": false, "everything": false, "reason": "an account", "topics": {"T": {"perm": "PUB", "visible": true}, "U": {"perm": "DENY", "visible": false}}, "groups": {}}',
    ),
    (
        "MESSAGE_TRACE",
        MessageTraceBody(
            "ID0",
            True,
            (
                TraceHop(None, 100, "T", 0, 3, 1700000000000, 7, False),
                TraceHop(
                    "ID1",
                    200,
                    "%RETRY%G",
                    0,
                    0,
                    1700000000003,
                    9,
                    True,
                    1,
                    None,
                    "A",
                    "k1 k2",
                    1699999999999,
                    "10.0.0.1:5000",
                    "127.0.0.1:10911",
                    {"TAGS": "A"},
                ),
            ),
            (
                {
                    "seq": 7,
                    "ts": 1700000000000,
                    "event": "sent",
                    "msgId": None,
                    "topic": "T",
                    "queueId": 0,
                    "queueOffset": 3,
                    "producerGroup": "PG",
                    "requester": "",
                    "bornHost": None,
                    "bornTimestamp": None,
                },
                {
                    "seq": 8,
                    "ts": 1700000000001,
                    "msgId": None,
                    "event": "sent_back",
                    "group": "G",
                    "requester": "c",
                    "reason": None,
                },
            ),
        ),
        b'{"msgId": "ID0", "found": true, "hops": [{"msgId": null, "physicalOffset": 100, "topic": "T", "queueId": 0, "queueOffset": 3, "storeTimestamp": 1700000000000, "seq": 7, "bodyAvailable": false}, {"msgId": "ID1", "physicalOffset": 200, "topic": "%RETRY%G", "queueId": 0, "queueOffset": 0, "storeTimestamp": 1700000000003, "seq": 9, "bodyAvailable": true, "reconsumeTimes": 1, "uniqKey": null, "tags": "A", "keys": "k1 k2", "bornTimestamp": 1699999999999, "bornHost": "10.0.0.1:5000", "storeHost": "127.0.0.1:10911", "properties": {"TAGS": "A"}}], "events": [{"seq": 7, "ts": 1700000000000, "event": "sent", "msgId": null, "topic": "T", "queueId": 0, "queueOffset": 3, "producerGroup": "PG", "requester": "", "bornHost": null, "bornTimestamp": null}, {"seq": 8, "ts": 1700000000001, "msgId": null, "event": "sent_back", "group": "G", "requester": "c", "reason": null}]}',
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


def test_the_acl_version_headers_are_compact_json_in_the_brokers_file_order() -> None:
    versions = AclFileVersions(
        {"/conf/plain_acl.yml": DataVersion(1700000000000, 2), "/conf/acl/b.yml": DataVersion(5, 1)}
    )
    assert (
        acl_version_text(DataVersion(1700000000000, 2)) == '{"counter":2,"timestamp":1700000000000}'
    )
    assert (
        versions.encode()
        == '{"/conf/plain_acl.yml":{"counter":2,"timestamp":1700000000000},"/conf/acl/b.yml":{"counter":1,"timestamp":5}}'
    )
    assert read_acl_version(acl_version_text(DataVersion(1700000000000, 2))) == DataVersion(
        1700000000000, 2
    )
    assert AclFileVersions.decode(versions.encode()) == versions
