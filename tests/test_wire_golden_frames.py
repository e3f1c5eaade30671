"""Golden frames: each request code the broker and name server serve, as literal bytes on a socket.

The request frames are written out as the wire layout of docs/protocol.md §1.2
(length, serType|headerLen, JSON header as ali-ons writes it, body); the
answer must be a response to that opaque with the code RocketMQ gives.
"""

from __future__ import annotations

import struct

import pytest
import trio

from es_broker.remoting.connection import NEED_DATA, Connection

HB = (
    b'{"clientID":"127.0.0.1@1","consumerDataSet":[{"groupName":"GG","consumeType":"CONSUME_PASSIVELY",'
    b'"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","unitMode":false,'
    b'"subscriptionDataSet":[{"topic":"GT","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,'
    b'"classFilterMode":false}]}],"producerDataSet":[{"groupName":"PG"}]}'
)
GROUP = (
    b'{"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,'
    b'"groupName":"SG","notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,'
    b'"whichBrokerWhenConsumeSlowly":1}'
)
BATCH = struct.pack(">iiiii", 20 + 2 + 2 + 0, 0, 0, 0, 2) + b"b1" + struct.pack(">h", 0)
REGISTER = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":1},'
    b'"topicConfigTable":{"NT":{"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG",'
    b'"topicName":"NT","topicSysFlag":0,"writeQueueNums":2}}}}'
)

# (code, extFields JSON, body, expected response code)
BROKER_CASES = [
    (
        10,
        '{"producerGroup":"PG","topic":"GT","defaultTopic":"TBW102","defaultTopicQueueNums":4,"queueId":0,'
        '"sysFlag":0,"bornTimestamp":1,"flag":0,"properties":"TAGS\\u0001A"}',
        b"v1",
        0,
    ),
    (
        310,
        '{"a":"PG","b":"GT","c":"TBW102","d":4,"e":0,"f":0,"g":1,"h":0,"i":"TAGS\\u0001A\\u0002"}',
        b"v2",
        0,
    ),
    (320, '{"a":"PG","b":"GT","c":"TBW102","d":4,"e":1,"f":0,"g":1,"h":0,"m":true}', BATCH, 0),
    (
        11,
        '{"consumerGroup":"GG","topic":"GT","queueId":0,"queueOffset":0,"maxMsgNums":32,"sysFlag":4,'
        '"commitOffset":0,"suspendTimeoutMillis":0,"subscription":"*","subVersion":0}',
        b"",
        0,
    ),
    (14, '{"consumerGroup":"GG","topic":"GT","queueId":0}', b"", 0),
    (15, '{"consumerGroup":"GG","topic":"GT","queueId":0,"commitOffset":1}', b"", 0),
    (29, '{"topic":"GT","queueId":0,"timestamp":0}', b"", 0),
    (30, '{"topic":"GT","queueId":0}', b"", 0),
    (31, '{"topic":"GT","queueId":0}', b"", 0),
    (32, '{"topic":"GT","queueId":0}', b"", 0),
    (33, '{"offset":0}', b"", 0),
    (
        12,
        '{"topic":"GT","key":"nokey","maxNum":32,"beginTimestamp":0,"endTimestamp":9999999999999}',
        b"",
        22,
    ),
    (34, "{}", HB, 0),
    (38, '{"consumerGroup":"GG"}', b"", 0),
    (35, '{"clientID":"127.0.0.1@1","consumerGroup":"GG"}', b"", 0),
    (
        46,
        "{}",
        b'{"clientId":"c","group":"GG","subscriptionData":{"subString":"*","expressionType":"TAG"}}',
        0,
    ),
    (41, "{}", b'{"clientId":"c","consumerGroup":"GG","mqSet":[]}', 0),
    (42, "{}", b'{"clientId":"c","consumerGroup":"GG","mqSet":[]}', 0),
    (
        17,
        '{"topic":"NEW","defaultTopic":"TBW102","readQueueNums":2,"writeQueueNums":2,"perm":6,'
        '"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}',
        b"",
        0,
    ),
    (215, '{"topic":"NEW"}', b"", 0),
    (21, "{}", b"", 0),
    (200, "{}", GROUP, 0),
    (201, "{}", b"", 0),
    (207, '{"groupName":"SG"}', b"", 0),
    (202, '{"topic":"GT"}', b"", 0),
    (203, '{"consumerGroup":"NOBODY"}', b"", 206),
    (204, '{"producerGroup":"NOBODY"}', b"", 1),
    (208, '{"consumerGroup":"GG"}', b"", 0),
    (43, "{}", b"", 0),
    (28, "{}", b"", 0),
    (26, "{}", b"", 0),
]

NAMESRV_CASES = [
    (
        103,
        '{"brokerName":"nb","brokerAddr":"127.0.0.1:1","clusterName":"NC","haServerAddr":"127.0.0.1:2",'
        '"brokerId":0}',
        REGISTER,
        0,
    ),
    (105, '{"topic":"NT"}', b"", 0),
    (106, "{}", b"", 0),
    (206, "{}", b"", 0),
    (224, '{"cluster":"NC"}', b"", 0),
    (
        322,
        '{"brokerName":"nb","brokerAddr":"127.0.0.1:1","clusterName":"NC","brokerId":0}',
        b'{"counter":1,"timestamp":1}',
        0,
    ),
    (100, '{"namespace":"ns","key":"k","value":"v"}', b"", 0),
    (101, '{"namespace":"ns","key":"k"}', b"", 0),
    (219, '{"namespace":"ns"}', b"", 0),
    (102, '{"namespace":"ns","key":"k"}', b"", 0),
    (216, '{"topic":"NT"}', b"", 0),
    (104, '{"brokerName":"nb","brokerAddr":"127.0.0.1:1","clusterName":"NC","brokerId":0}', b"", 0),
]


def golden(code: int, ext: str, body: bytes, opaque: int) -> bytes:
    header = (
        f'{{"code":{code},"language":"JAVA","opaque":{opaque},"flag":0,"version":121,'
        f'"extFields":{ext}}}'
    ).encode()
    return (
        struct.pack(">i", 4 + len(header) + len(body))
        + struct.pack(">i", len(header))
        + header
        + body
    )


def test_golden_frame_matches_the_spec_example():
    """docs/protocol.md §1.2: GET_ROUTEINFO_BY_TOPIC for T1, the first command of an ali-ons process."""
    expected = bytes.fromhex("0000005f0000005b") + (
        b'{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,"extFields":{"topic":"T1"}}'
    )
    assert golden(105, '{"topic":"T1"}', b"", 1) == expected


async def exchange(addr: str, cases) -> list:
    host, port = addr.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    conn = Connection()
    replies = []
    for opaque, (code, ext, body, _) in enumerate(cases, start=100):
        await stream.send_all(golden(code, ext, body, opaque))
        while True:  # one at a time: each case may depend on the one before
            event = conn.next_event()
            if event is NEED_DATA:
                conn.receive_data(await stream.receive_some(1 << 20))
            elif event.is_response:
                break
            # else a request of the broker's own (NOTIFY_CONSUMER_IDS_CHANGED after a heartbeat)
        assert event.is_response and event.opaque == opaque
        replies.append(event)
    await stream.aclose()
    return replies


async def test_every_broker_request_code_answers_as_rocketmq(running):
    await running.create_topic("GT", queues=2)
    replies = await exchange(running.addr, BROKER_CASES)
    got = [(case[0], reply.code) for case, reply in zip(BROKER_CASES, replies, strict=True)]
    assert got == [(case[0], case[3]) for case in BROKER_CASES]


async def test_every_name_server_request_code_answers_as_rocketmq(running):
    replies = await exchange(running.namesrv_addr, NAMESRV_CASES)
    got = [(case[0], reply.code) for case, reply in zip(NAMESRV_CASES, replies, strict=True)]
    assert got == [(case[0], case[3]) for case in NAMESRV_CASES]


@pytest.mark.parametrize("code", [10, 310])
async def test_send_answer_carries_msg_id_queue_and_offset(running, code):
    await running.create_topic("GT", queues=2)
    case = next(c for c in BROKER_CASES if c[0] == code)
    (reply,) = await exchange(running.addr, [case])
    assert set(reply.ext_fields) >= {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
    assert len(reply.ext_fields["msgId"]) == 32
