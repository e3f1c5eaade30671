"""The send and pull answers' headers, written directly on the hot path, are their classes' own
extFields: the same names, in the same order, with the same text
(es_broker/remoting/response_headers.py)."""

from __future__ import annotations

import pytest

from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import request, response_to
from es_broker.remoting.frames import encode_frame
from es_broker.remoting.response_headers import (
    DEFAULT_REGION,
    PullMessageResponseHeader,
    SendMessageResponseHeader,
)

I64 = (-(1 << 63), (1 << 63) - 1)


@pytest.mark.parametrize(
    ("msg_id", "queue_id", "queue_offset"),
    [
        ("7F00000100002A9F0000000000000000", 0, 0),
        ("AC1100020000271F00000000000004D2,AC1100020000271F0000000000000A00", 7, 1234),
        ("", (1 << 31) - 1, I64[1]),
        ("x", -1, I64[0]),
    ],
)
def test_a_stored_sends_fields_are_its_header_classes(
    msg_id: str, queue_id: int, queue_offset: int
) -> None:
    direct = SendMessageResponseHeader.stored(msg_id, queue_id, queue_offset)
    built = SendMessageResponseHeader(
        msg_id=msg_id,
        queue_id=queue_id,
        queue_offset=queue_offset,
        msg_region=DEFAULT_REGION,
        trace_on="true",
    ).to_fields()
    assert list(direct.items()) == list(built.items())


@pytest.mark.parametrize(
    ("suggest", "next_begin", "lo", "hi"),
    [(0, 0, 0, 0), (1, 32, 0, 64), (0, I64[1], I64[0], I64[1]), (3, -1, -5, 7)],
)
def test_a_pulls_fields_are_its_header_classes(
    suggest: int, next_begin: int, lo: int, hi: int
) -> None:
    direct = PullMessageResponseHeader.pulled(suggest, next_begin, lo, hi)
    built = PullMessageResponseHeader(
        suggest_which_broker_id=suggest, next_begin_offset=next_begin, min_offset=lo, max_offset=hi
    ).to_fields()
    assert list(direct.items()) == list(built.items())


def test_an_answer_written_directly_reads_back_as_its_class() -> None:
    req = request(310, {"a": "G"})
    sent = response_to(
        req, ResponseCode.SUCCESS, None, SendMessageResponseHeader.stored("ID", 2, 9)
    )
    assert SendMessageResponseHeader.of(sent) == SendMessageResponseHeader(
        msg_id="ID", queue_id=2, queue_offset=9, msg_region=DEFAULT_REGION, trace_on="true"
    )
    pulled = response_to(
        req, ResponseCode.SUCCESS, "FOUND", PullMessageResponseHeader.pulled(1, 5, 0, 9)
    )
    assert PullMessageResponseHeader.of(pulled) == PullMessageResponseHeader(
        suggest_which_broker_id=1, next_begin_offset=5, min_offset=0, max_offset=9
    )


def test_the_answer_frames_are_byte_for_byte_those_of_the_field_literals() -> None:
    """The frames the send and pull answers had when their fields were written out by hand."""
    req = request(310, {"a": "G"}, opaque=77)
    sent = response_to(req, 0, None, SendMessageResponseHeader.stored("AB,CD", 3, 1 << 40))
    assert encode_frame(sent) == (
        b'\x00\x00\x00\xdd\x00\x00\x00\xd9{"code":0,"extFields":{"MSG_REGION":"DefaultRegion",'
        b'"TRACE_ON":"true","msgId":"AB,CD","queueId":"3","queueOffset":"1099511627776"},'
        b'"flag":1,"language":"JAVA","opaque":77,"serializeTypeCurrentRPC":"JSON","version":409}'
    )
    pulled = response_to(req, 20, "NO_NEW_MSG", PullMessageResponseHeader.pulled(0, 64, 0, 64))
    assert encode_frame(pulled) == encode_frame(
        response_to(
            req,
            20,
            "NO_NEW_MSG",
            {"suggestWhichBrokerId": 0, "nextBeginOffset": 64, "minOffset": 0, "maxOffset": 64},
        )
    )
