"""Bad input on the wire: each case answered or the connection closed, the broker serving on.

Every test ends by checking that a fresh connection still gets answers, so
nothing a client sends takes the broker down.
"""

from __future__ import annotations

import json
import struct

import trio

from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.remoting.connection import CLOSED, NEED_DATA, Connection
from es_broker.remoting.message import encode_properties


def frame(
    header: bytes, body: bytes = b"", *, length: int | None = None, header_len: int | None = None
) -> bytes:
    hl = len(header) if header_len is None else header_len
    total = 4 + len(header) + len(body) if length is None else length
    return struct.pack(">ii", total, hl) + header + body


def json_header(code: int, ext: dict | None = None, opaque: int = 7) -> bytes:
    return json.dumps(
        {
            "code": code,
            "language": "JAVA",
            "opaque": opaque,
            "flag": 0,
            "version": 409,
            "extFields": ext or {},
        }
    ).encode()


async def raw(running) -> trio.SocketStream:
    host, port = running.addr.rsplit(":", 1)
    return await trio.open_tcp_stream(host, int(port))


async def read_reply(stream: trio.SocketStream):
    """The next command from the broker, or CLOSED when it closed the connection."""
    conn = Connection()
    while True:
        event = conn.next_event()
        if event is not NEED_DATA:
            return event
        data = await stream.receive_some(65536)
        conn.receive_data(data)


async def assert_still_serving(running) -> None:
    response = await running.call(RequestCode.GET_MAX_OFFSET, {"topic": "ANY", "queueId": 0})
    assert response.code == ResponseCode.SUCCESS


async def test_truncated_frame_then_eof_closes_only_that_connection(running):
    stream = await raw(running)
    await stream.send_all(frame(json_header(30, {"topic": "T", "queueId": 0}))[:-5])
    await stream.send_eof()
    assert await read_reply(stream) is CLOSED
    await assert_still_serving(running)


async def test_frame_longer_than_16_mib_closes_the_connection(running):
    stream = await raw(running)
    await stream.send_all(struct.pack(">ii", 16 * 1024 * 1024 + 1, 10))
    assert await read_reply(stream) is CLOSED
    await assert_still_serving(running)


async def test_header_length_larger_than_frame_closes_the_connection(running):
    stream = await raw(running)
    header = json_header(30)
    await stream.send_all(frame(header, header_len=len(header) + 100))
    assert await read_reply(stream) is CLOSED
    await assert_still_serving(running)


async def test_invalid_header_json_closes_the_connection(running):
    stream = await raw(running)
    await stream.send_all(frame(b'{"code": 30, "opaque": '))
    assert await read_reply(stream) is CLOSED
    await assert_still_serving(running)


async def test_unknown_request_code_answers_not_supported_and_the_connection_goes_on(running):
    stream = await raw(running)
    await stream.send_all(frame(json_header(4242, opaque=11)))
    reply = await read_reply(stream)
    assert (reply.code, reply.opaque, reply.remark) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        11,
        " request type 4242 not supported",
    )
    await stream.send_all(frame(json_header(30, {"topic": "T", "queueId": 0}, opaque=12)))
    assert (await read_reply(stream)).code == ResponseCode.SUCCESS


async def test_missing_required_field_answers_system_error_naming_it(running):
    response = await running.call(RequestCode.PULL_MESSAGE, {"consumerGroup": "G", "topic": "T"})
    assert response.code == ResponseCode.SYSTEM_ERROR and "queueId" in response.remark


async def test_wrongly_typed_field_answers_system_error_naming_it(running):
    response = await running.call(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "zero"})
    assert response.code == ResponseCode.SYSTEM_ERROR and "queueId" in response.remark


async def test_pull_from_missing_topic_is_topic_not_exist(running):
    response = await running.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "NOPE",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        },
    )
    assert response.code == ResponseCode.TOPIC_NOT_EXIST and "NOPE" in response.remark


async def test_b021_pull_without_read_perm_is_no_permission(running):
    await running.create_topic("WO", perm=2)
    response = await running.call(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "WO",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        },
    )
    assert response.code == ResponseCode.NO_PERMISSION
    assert response.remark == "the topic[WO] pulling message is forbidden"


async def test_body_over_max_message_size_is_message_illegal(running):
    await running.create_topic("BIG")
    response = await running.call(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "PG",
            "b": "BIG",
            "c": "TBW102",
            "d": 4,
            "e": 0,
            "f": 0,
            "g": 0,
            "h": 0,
            "i": encode_properties({}).decode(),
        },
        b"x" * (4 * 1024 * 1024 + 1),
    )
    assert response.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in response.remark
    assert running.server.broker.max_offset("BIG", 0) == 0


async def test_a_send_to_any_queue_of_a_topic_without_write_queues_is_refused(running):
    response = await running.call(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": "RO", "readQueueNums": 4, "writeQueueNums": 0, "perm": 6},
    )
    assert response.code == ResponseCode.SUCCESS, response.remark
    response = await running.call(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "PG", "b": "RO", "c": "TBW102", "d": 4, "e": -1, "f": 0, "g": 0, "h": 0, "i": ""},
        b"x",
    )
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark.startswith("topic[RO] has no write queue (writeQueueNums 0)")
    assert running.server.broker.max_offset("RO", 0) == 0
    await assert_still_serving(running)


async def test_a_client_that_connects_and_sends_nothing_does_not_block_others(running):
    silent = await raw(running)
    await assert_still_serving(running)
    await silent.aclose()


async def test_a_client_that_disconnects_mid_frame_leaves_the_broker_serving(running):
    stream = await raw(running)
    await stream.send_all(frame(json_header(30, {"topic": "T", "queueId": 0}))[:9])
    await stream.aclose()
    await assert_still_serving(running)


async def test_oneway_request_gets_no_answer(running):
    stream = await raw(running)
    conn = Connection()
    await stream.send_all(
        conn.send(
            request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "G", "topic": "T", "queueId": 0, "commitOffset": 5},
                opaque=21,
                oneway=True,
            )
        )
    )
    await stream.send_all(
        conn.send(
            request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": "G", "topic": "T", "queueId": 0},
                opaque=22,
            )
        )
    )
    reply = await read_reply(stream)
    assert reply.opaque == 22  # the first answer on the connection is the query's
    assert reply.code == ResponseCode.SUCCESS
