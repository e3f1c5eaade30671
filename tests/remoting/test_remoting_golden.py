"""Golden frames: exact bytes, one request and one response per request family.

Requests are what the clients send (ali-ons bytes from docs/protocol.md §1.2 and §3,
Java bytes in fastjson form); responses are what our encoder must produce.
"""

from __future__ import annotations

import struct

from es_broker.remoting import (
    Connection,
    ConsumeStats,
    HeartbeatData,
    LanguageCode,
    MessageQueue,
    OffsetWrapper,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    TopicRouteData,
    decode_frame,
    encode_frame,
    request,
    response_to,
)


def golden(prefix_hex: str, header: bytes, body: bytes = b"") -> bytes:
    """A frame from its literal 8-byte prefix, header and body.

    The prefix is pinned as written; the assertion only catches typos in it.
    """
    prefix = bytes.fromhex(prefix_hex)
    length, word = struct.unpack(">iI", prefix)
    assert length == 4 + len(header) + len(body), "golden prefix: wrong total length"
    assert word & 0xFFFFFF == len(header), "golden prefix: wrong header length"
    return prefix + header + body


# -- get route (name server) ---------------------------------------------------------

ROUTE_REQUEST_ALI_ONS = golden(
    "0000005f 0000005b",
    b'{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,"extFields":{"topic":"T1"}}',
)

ROUTE_BODY_LEGACY = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
    b'"writeQueueNums":4}]}'
)
ROUTE_RESPONSE = golden(
    "0000015e 0000005f",
    b'{"code":0,"flag":1,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":409}',
    ROUTE_BODY_LEGACY,
)
ROUTE_NOT_FOUND_RESPONSE = golden(
    "000000a4 000000a0",
    b'{"code":17,"flag":1,"language":"JAVA","opaque":1,'
    b'"remark":"No topic route info in name server for the topic: T1",'
    b'"serializeTypeCurrentRPC":"JSON","version":409}',
)


def test_ali_ons_route_request_matches_spec_worked_example() -> None:
    cmd = decode_frame(ROUTE_REQUEST_ALI_ONS)
    assert cmd == RemotingCommand(
        code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
        language=LanguageCode.JAVA,
        version=121,
        opaque=1,
        flag=0,
        ext_fields={"topic": "T1"},
    )


def test_route_response_with_legacy_body_is_byte_exact() -> None:
    req = decode_frame(ROUTE_REQUEST_ALI_ONS)
    route = TopicRouteData.decode(ROUTE_BODY_LEGACY)
    assert (
        encode_frame(response_to(req, ResponseCode.SUCCESS, body=route.encode())) == ROUTE_RESPONSE
    )


def test_route_not_found_response_is_byte_exact() -> None:
    req = decode_frame(ROUTE_REQUEST_ALI_ONS)
    resp = response_to(
        req,
        ResponseCode.TOPIC_NOT_EXIST,
        remark="No topic route info in name server for the topic: T1",
    )
    assert encode_frame(resp) == ROUTE_NOT_FOUND_RESPONSE


# -- send ------------------------------------------------------------------------------

SEND_REQUEST_ALI_ONS = golden(
    "000000dd 000000d4",
    b'{"code":310,"language":"JAVA","opaque":2,"flag":0,"version":121,"extFields":{"a":"PG",'
    b'"b":"T1","c":"TBW102","d":4,"e":0,"f":0,"g":1700000000000,"h":0,'
    b'"i":"TAGS\\u0001TagA\\u0002KEYS\\u0001k1\\u0002","j":0,"k":false}}',
    b"hello",
)
SEND_RESPONSE = golden(
    "000000eb 000000e7",
    b'{"code":0,"extFields":{"MSG_REGION":"DefaultRegion","TRACE_ON":"true",'
    b'"msgId":"7F00000100002A9F0000000000000000","queueId":"1","queueOffset":"0"},'
    b'"flag":1,"language":"JAVA","opaque":2,"serializeTypeCurrentRPC":"JSON","version":409}',
)


def test_ali_ons_send_v2_request_decodes_with_java_string_values() -> None:
    cmd = decode_frame(SEND_REQUEST_ALI_ONS)
    assert cmd.code == RequestCode.SEND_MESSAGE_V2
    assert cmd.body == b"hello"
    assert cmd.ext_fields == {
        "a": "PG",
        "b": "T1",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "TAGS\x01TagA\x02KEYS\x01k1\x02",
        "j": "0",
        "k": "false",
    }
    assert cmd.require_long("g") == 1700000000000
    assert cmd.get_bool("k") is False


def test_send_response_matches_spec_java_example_byte_for_byte() -> None:
    req = decode_frame(SEND_REQUEST_ALI_ONS)
    resp = response_to(
        req,
        ResponseCode.SUCCESS,
        ext_fields={
            "msgId": "7F00000100002A9F0000000000000000",
            "queueId": 1,
            "queueOffset": 0,
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": True,
        },
    )
    assert encode_frame(resp) == SEND_RESPONSE


# -- pull ------------------------------------------------------------------------------

PULL_REQUEST_JAVA = golden(
    "00000152 0000014e",
    b'{"code":11,"extFields":{"commitOffset":"0","consumerGroup":"GID_demo",'
    b'"expressionType":"TAG","maxMsgNums":"32","queueId":"1","queueOffset":"5",'
    b'"subVersion":"1700000000000","subscription":"*","suspendTimeoutMillis":"15000",'
    b'"sysFlag":"6","topic":"T"},"flag":0,"language":"JAVA","opaque":7,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}',
)
PULL_NOT_FOUND_RESPONSE = golden(
    "000000e2 000000de",
    b'{"code":19,"extFields":{"maxOffset":"5","minOffset":"0","nextBeginOffset":"5",'
    b'"suggestWhichBrokerId":"0"},"flag":1,"language":"JAVA","opaque":7,'
    b'"remark":"OFFSET_OVERFLOW_ONE","serializeTypeCurrentRPC":"JSON","version":409}',
)


def test_java_pull_request_round_trips_byte_exact() -> None:
    cmd = decode_frame(PULL_REQUEST_JAVA)
    assert cmd.require_int("queueId") == 1
    assert cmd.require_long("queueOffset") == 5
    assert cmd.require_int("sysFlag") == 6
    assert encode_frame(cmd) == PULL_REQUEST_JAVA


def test_pull_not_found_response_carries_the_four_offsets_as_strings() -> None:
    req = decode_frame(PULL_REQUEST_JAVA)
    resp = response_to(
        req,
        ResponseCode.PULL_NOT_FOUND,
        remark="OFFSET_OVERFLOW_ONE",
        ext_fields={
            "suggestWhichBrokerId": 0,
            "nextBeginOffset": 5,
            "minOffset": 0,
            "maxOffset": 5,
        },
    )
    assert encode_frame(resp) == PULL_NOT_FOUND_RESPONSE


# -- heartbeat ------------------------------------------------------------------------

HEARTBEAT_BODY_ALI_ONS = (
    b'{"clientID":"10.0.0.5@12345","producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],'
    b'"consumerDataSet":[{"groupName":"GID_demo","consumeType":"CONSUME_PASSIVELY",'
    b'"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","unitMode":false,'
    b'"subscriptionDataSet":[{"topic":"T","subString":"TagA || TagB","tagsSet":["TagA","TagB"],'
    b'"codeSet":[2598919,2598920],"subVersion":1700000000000,"classFilterMode":false}]}]}'
)
HEARTBEAT_REQUEST_ALI_ONS = golden(
    "000001fd 0000004e",
    b'{"code":34,"language":"JAVA","opaque":3,"flag":0,"version":121,"extFields":{}}',
    HEARTBEAT_BODY_ALI_ONS,
)
HEARTBEAT_RESPONSE = golden(
    "00000063 0000005f",
    b'{"code":0,"flag":1,"language":"JAVA","opaque":3,"serializeTypeCurrentRPC":"JSON","version":409}',
)


def test_ali_ons_heartbeat_with_empty_ext_fields_decodes_and_its_body_parses() -> None:
    cmd = decode_frame(HEARTBEAT_REQUEST_ALI_ONS)
    assert cmd.code == RequestCode.HEART_BEAT
    assert cmd.ext_fields == {}
    heartbeat = HeartbeatData.decode(cmd.body)
    assert heartbeat.client_id == "10.0.0.5@12345"
    (subscription,) = heartbeat.consumer_data_set[0].subscription_data_set
    assert subscription.expression_type == "TAG"  # absent in ali-ons' TAG subscriptions
    assert subscription.code_set == (2598919, 2598920)


def test_heartbeat_response_omits_ext_fields_and_remark_and_stamps_version_409() -> None:
    req = decode_frame(HEARTBEAT_REQUEST_ALI_ONS)
    assert encode_frame(response_to(req, ResponseCode.SUCCESS)) == HEARTBEAT_RESPONSE


# -- query / update consumer offset -------------------------------------------------------

QUERY_OFFSET_REQUEST_ALI_ONS = golden(
    "00000084 00000080",
    b'{"code":14,"language":"JAVA","opaque":4,"flag":0,"version":121,'
    b'"extFields":{"topic":"T","consumerGroup":"GID_demo","queueId":0}}',
)
QUERY_OFFSET_RESPONSE = golden(
    "0000007f 0000007b",
    b'{"code":0,"extFields":{"offset":"42"},"flag":1,"language":"JAVA","opaque":4,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}',
)
UPDATE_OFFSET_ONEWAY_JAVA = golden(
    "000000ce 000000ca",
    b'{"code":15,"extFields":{"bname":"broker-a","commitOffset":"43","consumerGroup":"GID_demo",'
    b'"queueId":"0","topic":"T"},"flag":2,"language":"JAVA","opaque":0,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}',
)


def test_query_consumer_offset_request_and_response() -> None:
    req = decode_frame(QUERY_OFFSET_REQUEST_ALI_ONS)
    assert req.require_int("queueId") == 0
    assert req.require_str("consumerGroup") == "GID_demo"
    resp = response_to(req, ResponseCode.SUCCESS, ext_fields={"offset": 42})
    assert encode_frame(resp) == QUERY_OFFSET_RESPONSE


def test_java_oneway_update_offset_is_flagged_oneway_with_opaque_zero() -> None:
    cmd = decode_frame(UPDATE_OFFSET_ONEWAY_JAVA)
    assert cmd.is_oneway and cmd.is_request
    assert cmd.opaque == 0
    assert cmd.require_long("commitOffset") == 43
    assert encode_frame(cmd) == UPDATE_OFFSET_ONEWAY_JAVA


def test_ali_ons_negative_commit_offset_is_read_as_a_long() -> None:
    # ali-ons persists an in-memory 0 as -1 (docs/protocol.md §11.4); it is not an error.
    raw = b'{"code":15,"language":"JAVA","opaque":5,"flag":0,"version":121,"extFields":{"topic":"T","consumerGroup":"G","queueId":2,"commitOffset":-1}}'
    conn = Connection()
    conn.receive_data(struct.pack(">iI", 4 + len(raw), len(raw)) + raw)
    cmd = conn.next_event()
    assert isinstance(cmd, RemotingCommand)
    assert cmd.require_long("commitOffset") == -1
    assert not cmd.is_oneway


# -- admin: binary (ROCKETMQ) header ------------------------------------------------------

UPDATE_TOPIC_REQUEST_BINARY = golden(
    "00000030 0100002c",
    b"\x00\x11"  # code 17 UPDATE_AND_CREATE_TOPIC
    b"\x00"  # language JAVA
    b"\x01\x99"  # version 409
    b"\x00\x00\x00\x05"  # opaque 5
    b"\x00\x00\x00\x00"  # flag: request
    b"\x00\x00\x00\x00"  # remark: null
    b"\x00\x00\x00\x17"  # extFields map: 23 bytes
    b"\x00\x04perm\x00\x00\x00\x016"
    b"\x00\x05topic\x00\x00\x00\x01T",
)
UPDATE_TOPIC_RESPONSE_BINARY = golden(
    "00000019 01000015",
    b"\x00\x00"  # code 0 SUCCESS
    b"\x00"  # language JAVA
    b"\x01\x99"  # version 409
    b"\x00\x00\x00\x05"  # opaque 5
    b"\x00\x00\x00\x01"  # flag: response
    b"\x00\x00\x00\x00"  # remark: null
    b"\x00\x00\x00\x00",  # extFields: none
)
NOT_SUPPORTED_RESPONSE_BINARY = golden(
    "0000001a 01000016",
    b"\x00\x03"  # code 3 REQUEST_CODE_NOT_SUPPORTED
    b"\x00"
    b"\x01\x99"
    b"\x00\x00\x00\x05"
    b"\x00\x00\x00\x01"
    b"\x00\x00\x00\x01x"  # remark "x"
    b"\x00\x00\x00\x00",
)


def test_binary_update_topic_request_decodes_per_section_4_layout() -> None:
    cmd = decode_frame(UPDATE_TOPIC_REQUEST_BINARY)
    assert cmd == RemotingCommand(
        code=RequestCode.UPDATE_AND_CREATE_TOPIC,
        version=409,
        opaque=5,
        ext_fields={"perm": "6", "topic": "T"},
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode_frame(cmd) == UPDATE_TOPIC_REQUEST_BINARY


def test_response_to_binary_request_is_binary_too() -> None:
    req = decode_frame(UPDATE_TOPIC_REQUEST_BINARY)
    assert encode_frame(response_to(req, ResponseCode.SUCCESS)) == UPDATE_TOPIC_RESPONSE_BINARY


def test_binary_remark_is_length_prefixed_utf8() -> None:
    req = decode_frame(UPDATE_TOPIC_REQUEST_BINARY)
    resp = response_to(req, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark="x")
    assert encode_frame(resp) == NOT_SUPPORTED_RESPONSE_BINARY
    assert decode_frame(NOT_SUPPORTED_RESPONSE_BINARY).remark == "x"


# -- admin: stats body with object keys ----------------------------------------------------

CONSUME_STATS_REQUEST_JAVA = golden(
    "0000009a 00000096",
    b'{"code":208,"extFields":{"consumerGroup":"GID_demo","topic":"T"},"flag":0,'
    b'"language":"JAVA","opaque":9,"serializeTypeCurrentRPC":"JSON","version":409}',
)
CONSUME_STATS_BODY = (
    b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
    b'{"brokerOffset":10,"consumerOffset":7,"lastTimestamp":1700000000000}}}'
)
CONSUME_STATS_RESPONSE = golden(
    "000000fc 0000005f",
    b'{"code":0,"flag":1,"language":"JAVA","opaque":9,"serializeTypeCurrentRPC":"JSON","version":409}',
    CONSUME_STATS_BODY,
)


def test_consume_stats_response_writes_message_queue_object_keys() -> None:
    req = decode_frame(CONSUME_STATS_REQUEST_JAVA)
    assert req.code == RequestCode.GET_CONSUME_STATS
    stats = ConsumeStats(
        offset_table={
            MessageQueue("T", "broker-a", 0): OffsetWrapper(
                broker_offset=10, consumer_offset=7, last_timestamp=1700000000000
            )
        }
    )
    resp = response_to(req, ResponseCode.SUCCESS, body=stats.encode())
    assert encode_frame(resp) == CONSUME_STATS_RESPONSE
    assert ConsumeStats.decode(decode_frame(CONSUME_STATS_RESPONSE).body) == stats


def test_server_initiated_oneway_request_is_not_a_response() -> None:
    notify = request(
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"}, opaque=0, oneway=True
    )
    frame = encode_frame(notify)
    assert frame == golden(
        "00000086 00000082",
        b'{"code":40,"extFields":{"consumerGroup":"G"},"flag":2,"language":"JAVA","opaque":0,'
        b'"serializeTypeCurrentRPC":"JSON","version":409}',
    )
