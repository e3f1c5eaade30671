"""Text the broker cannot store is refused at the edge, naming the field (B-335..B-337).

Each case is a frame the fuzzer found reaching deep code (a lone surrogate from a JSON
`\\ud800` escape, a name whose derived retry and dead-letter keys do not fit LMDB), sent to a
broker process: it is answered with RocketMQ's code and a remark naming the field, the broker
keeps serving, and its log holds no traceback. Frames are built by hand: the client's encoder
would turn a lone surrogate into "?" before it reached the broker.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.connection import CLOSED, NEED_DATA, Connection
from es_broker.remoting.frames import encode_frame
from tests.helpers import cli_checked
from tests.process_fixtures import ServedBroker, serve

TOPIC, GROUP = "TextTopic", "text_group"
# the name limits of B-336, in UTF-8 bytes: a topic, a group, a group whose retry topic holds messages
TOPIC_BYTES_MAX, GROUP_BYTES_MAX, DERIVED_GROUP_BYTES_MAX = 127, 255, 120
LONE = "\ud800"  # a lone surrogate: what the JSON escape \ud800 decodes to


@dataclass
class Broker:
    served: ServedBroker
    log_file: Path

    def tracebacks(self) -> int:
        return self.log_file.read_text().count("Traceback")


def frame(code: int, fields: dict, body: bytes = b"", *, opaque: int = 1) -> bytes:
    """A JSON-serialized request frame; json.dumps escapes a lone surrogate as \\ud800."""
    header = json.dumps(
        {
            "code": code,
            "language": "JAVA",
            "version": 409,
            "opaque": opaque,
            "flag": 0,
            "extFields": {k: str(v) for k, v in fields.items()},
        }
    ).encode()
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def rocketmq_frame(code: int, fields: dict[bytes, bytes], *, opaque: int = 1) -> bytes:
    """A ROCKETMQ-serialized request frame whose extFields are raw bytes."""
    ext = b"".join(
        struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in fields.items()
    )
    header = struct.pack(">hbhiii", code, 0, 409, opaque, 0, 0) + struct.pack(">i", len(ext)) + ext
    return struct.pack(">iI", 4 + len(header), (1 << 24) | len(header)) + header


def exchange(addr: str, data: bytes) -> RemotingCommand:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(data)
        conn = Connection()
        while (event := conn.next_event()) is NEED_DATA:
            conn.receive_data(sock.recv(1 << 16))
        assert event is not CLOSED, "the broker closed the connection"
        return event


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker process for the module: a topic with a message, a group with offsets."""
    root = tmp_path_factory.mktemp("text_edge")
    log_file = root / "broker.log"
    with serve(root / "data", log_file=log_file) as served:
        addr = served.broker
        setup = [
            request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
            ),
            request(RequestCode.SEND_MESSAGE, send_fields(), b"hello"),
            request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "commitOffset": 1},
            ),
        ]
        for command in setup:
            answer = exchange(addr, encode_frame(command))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        yield Broker(served, log_file)
        assert served.process.poll() is None
    assert log_file.read_text().count("Traceback") == 0
    cli_checked("verify", "--data-dir", str(root / "data"))  # what was recorded replays


def send_fields(**changed: object) -> dict:
    return {
        "producerGroup": "text_pg",
        "topic": TOPIC,
        "queueId": 0,
        "sysFlag": 0,
        "bornTimestamp": 1,
        "flag": 0,
        "properties": "TAGS\x01TagA\x02",
        **changed,
    }


def heartbeat(*, client: str = "127.0.0.1@text", group: str = GROUP, topic: str = TOPIC) -> bytes:
    return json.dumps(
        {
            "clientID": client,
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [{"topic": topic, "subString": "*"}],
                    "unitMode": False,
                }
            ],
        }
    ).encode()


def refused(broker: Broker, data: bytes, *named: str) -> RemotingCommand:
    """Send one frame: SYSTEM_ERROR whose one-line remark names the field; no traceback; serving."""
    before = broker.tracebacks()
    answer = exchange(broker.served.broker, data)
    assert answer.code == ResponseCode.SYSTEM_ERROR, answer
    assert answer.remark is not None and "\n" not in answer.remark
    for part in named:
        assert part in answer.remark, answer.remark
    assert "Error" not in answer.remark  # never a Python exception's text
    assert broker.tracebacks() == before
    served = exchange(
        broker.served.broker, encode_frame(request(RequestCode.GET_BROKER_RUNTIME_INFO))
    )
    assert served.code == ResponseCode.SUCCESS
    return answer


NOT_UTF8 = "is not UTF-8 text"


# -- the ten places the fuzzer reached, one frame each -----------------------------------------


def test_b335_a_lone_surrogate_in_a_topic_is_refused_before_the_topic_table(broker):
    """topics.py get: the topic's key was encoded there."""
    refused(
        broker,
        frame(RequestCode.GET_MAX_OFFSET, {"topic": "T" + LONE, "queueId": 0}),
        "GET_MAX_OFFSET",
        "'topic'",
        NOT_UTF8,
    )


def test_b335_a_lone_surrogate_in_a_group_is_refused_before_the_offset_key(broker):
    """keys.py offset_key."""
    refused(
        broker,
        frame(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "g" + LONE, "topic": TOPIC, "queueId": 0},
        ),
        "'consumerGroup'",
        NOT_UTF8,
    )


def test_b335_a_lone_surrogate_in_a_message_key_query_is_refused_before_the_key_index(broker):
    """key_index.py."""
    refused(
        broker,
        frame(
            RequestCode.QUERY_MESSAGE,
            {
                "topic": TOPIC,
                "key": "k" + LONE,
                "maxNum": 8,
                "beginTimestamp": 0,
                "endTimestamp": 1,
            },
        ),
        "'key'",
        NOT_UTF8,
    )


def test_b335_a_lone_surrogate_in_a_subscription_group_body_is_refused(broker):
    """subscription_groups.py: the group's key; the body is held at the edge as headers are."""
    refused(
        broker,
        frame(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            json.dumps({"groupName": "g" + LONE}).encode(),
        ),
        "SubscriptionGroupConfig.groupName",
        NOT_UTF8,
    )


def test_b335_a_lone_surrogate_in_a_tag_is_refused_before_its_hash(broker):
    """message.py tag_hash: the TAGS property of a send."""
    refused(
        broker,
        frame(RequestCode.SEND_MESSAGE, send_fields(properties=f"TAGS\x01A{LONE}\x02"), b"x"),
        "'properties'",
        NOT_UTF8,
    )


def test_b335_a_lone_surrogate_in_a_producer_group_is_refused_before_the_record(broker):
    """The msgpack packer of the send's record."""
    refused(
        broker,
        frame(RequestCode.SEND_MESSAGE, send_fields(producerGroup="pg" + LONE), b"x"),
        "'producerGroup'",
        NOT_UTF8,
    )


def test_b335_a_lone_surrogate_in_a_heartbeat_client_id_is_refused_and_the_broker_lives(broker):
    """The msgpack packer of the membership record, written in the background (it ended the broker)."""
    refused(
        broker,
        frame(RequestCode.HEART_BEAT, {}, heartbeat(client="c" + LONE)),
        "HeartbeatData.clientID",
        NOT_UTF8,
    )


def test_b335_a_lone_surrogate_in_a_heartbeat_subscription_topic_is_refused(broker):
    """The msgpack packer of the group's record, from a heartbeat's subscription."""
    refused(
        broker,
        frame(RequestCode.HEART_BEAT, {}, heartbeat(topic="t" + LONE)),
        "HeartbeatData.consumerDataSet[0].subscriptionDataSet[0].topic",
        NOT_UTF8,
    )


def test_b335_a_lone_surrogate_in_a_send_back_group_is_refused(broker):
    """The send-back's retry topic (%RETRY%<group>) reached the topic table."""
    refused(
        broker,
        frame(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {"group": "g" + LONE, "offset": 0, "delayLevel": 0, "originTopic": TOPIC},
        ),
        "'group'",
        NOT_UTF8,
    )


def test_b336_a_send_back_group_whose_derived_names_do_not_fit_is_refused(broker):
    """subscription_groups.py MDB_BAD_VALSIZE: %RETRY%<group> / %DLQ%<group> in keys."""
    refused(
        broker,
        frame(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "group": "G" * (DERIVED_GROUP_BYTES_MAX + 1),
                "offset": 0,
                "delayLevel": 0,
                "originTopic": TOPIC,
            },
        ),
        "'group'",
        f"longer than {DERIVED_GROUP_BYTES_MAX} bytes",
        "%RETRY%",
    )


# -- the rules around them -----------------------------------------------------------------------


def test_b336_the_longest_group_is_sent_back_and_its_retry_topic_keys_fit(broker):
    group = "G" * DERIVED_GROUP_BYTES_MAX
    before = broker.tracebacks()
    answer = exchange(
        broker.served.broker,
        frame(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {"group": group, "offset": 0, "delayLevel": 0, "originTopic": TOPIC},
        ),
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    retry = f"%RETRY%{group}"
    assert len(retry) == TOPIC_BYTES_MAX
    answer = exchange(
        broker.served.broker, frame(RequestCode.GET_MAX_OFFSET, {"topic": retry, "queueId": 0})
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark  # the retry topic was created
    # straight to the dead-letter topic (delay level -1): stored under %DLQ%<group>
    answer = exchange(
        broker.served.broker,
        frame(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {"group": group, "offset": 0, "delayLevel": -1, "originTopic": TOPIC},
        ),
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    answer = exchange(
        broker.served.broker,
        frame(RequestCode.GET_MAX_OFFSET, {"topic": f"%DLQ%{group}", "queueId": 0}),
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert int(answer.ext_fields["offset"]) == 1
    assert broker.tracebacks() == before


def test_b336_a_topic_longer_than_the_key_limit_allows_is_refused(broker):
    refused(
        broker,
        frame(RequestCode.GET_MAX_OFFSET, {"topic": "T" * (TOPIC_BYTES_MAX + 1), "queueId": 0}),
        "'topic'",
        f"longer than {TOPIC_BYTES_MAX} bytes",
    )


def test_b336_a_name_limit_counts_utf8_bytes_not_characters(broker):
    group = "\u00e9" * (GROUP_BYTES_MAX // 2 + 1)  # fewer characters than the limit, more bytes
    refused(
        broker,
        frame(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": TOPIC, "queueId": 0},
        ),
        "'consumerGroup'",
        "bytes in UTF-8",
    )


def test_b336_a_nul_in_a_name_is_refused(broker):
    refused(
        broker,
        frame(RequestCode.GET_MAX_OFFSET, {"topic": "T\x00x", "queueId": 0}),
        "'topic'",
        "NUL",
    )


def test_b336_a_nul_in_a_lock_body_topic_is_refused(broker):
    body = json.dumps(
        {
            "consumerGroup": GROUP,
            "clientId": "c",
            "mqSet": [{"topic": "T\x00", "brokerName": "broker-a", "queueId": 0}],
        }
    ).encode()
    refused(broker, frame(RequestCode.LOCK_BATCH_MQ, {}, body), "mqSet[0].topic", "NUL")


def test_b335_a_lone_surrogate_in_an_undeclared_header_field_is_refused(broker):
    refused(
        broker,
        frame(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0, "extra": LONE}),
        "'extra'",
        NOT_UTF8,
    )


def test_b335_bytes_that_are_not_utf8_in_a_rocketmq_header_are_refused(broker):
    answer = refused(
        broker,
        rocketmq_frame(RequestCode.GET_MAX_OFFSET, {b"topic": b"T\xff\xfe", b"queueId": b"0"}),
        "'topic'",
        NOT_UTF8,
    )
    assert answer.remark == f"GET_MAX_OFFSET: header field 'topic' {NOT_UTF8}"
    # the same request in UTF-8 is served
    ok = exchange(
        broker.served.broker,
        rocketmq_frame(RequestCode.GET_MAX_OFFSET, {b"topic": TOPIC.encode(), b"queueId": b"0"}),
    )
    assert ok.code == ResponseCode.SUCCESS, ok.remark


async def test_b337_an_unexpected_error_is_answered_with_an_id_that_finds_its_log_line(caplog):
    from es_broker.server.edge.remoting_server import RemotingServer

    async def broken(channel, req):
        raise UnicodeEncodeError("utf-8", "x", 0, 1, "surrogates not allowed")

    server = RemotingServer("test", {int(RequestCode.GET_BROKER_RUNTIME_INFO): broken})
    answer = await server.answer(None, request(RequestCode.GET_BROKER_RUNTIME_INFO))  # type: ignore[arg-type]
    assert answer is not None and answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark is not None and answer.remark.startswith("internal error, id ")
    assert "surrogates" not in answer.remark and "Error" not in answer.remark
    error_id = answer.remark.removeprefix("internal error, id ")
    [line] = [r for r in caplog.records if error_id in r.getMessage()]
    assert line.exc_info is not None  # the traceback is logged with the id
