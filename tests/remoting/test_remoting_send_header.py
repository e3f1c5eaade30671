"""The send header, one class for SEND_MESSAGE (V1 names) and SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE."""

from __future__ import annotations

import pytest

from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from es_broker.remoting.errors import BadField, MissingField
from es_broker.remoting.headers import SendMessageRequestHeader

HEADER = SendMessageRequestHeader(
    producer_group="PG",
    topic="GT",
    default_topic="TBW102",
    default_topic_queue_nums=4,
    queue_id=0,
    sys_flag=0,
    born_timestamp=1,
    flag=0,
    properties="TAGS\x01A\x02",
    reconsume_times=0,
    unit_mode=False,
    batch=False,
)


def test_v2_header_is_the_one_letter_map_the_producer_always_wrote() -> None:
    assert HEADER.v2_fields() == {
        "a": "PG",
        "b": "GT",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "1",
        "h": "0",
        "i": "TAGS\x01A\x02",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    # a consumer's re-send to %RETRY% adds maxReconsumeTimes last (B-95)
    retry = SendMessageRequestHeader(topic="%RETRY%G", max_reconsume_times=3)
    assert list(retry.v2_fields()) == ["b", "e", "f", "g", "l"]


def test_v1_header_uses_java_field_names() -> None:
    assert list(HEADER.v1_fields()) == [
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
        "properties",
        "reconsumeTimes",
        "unitMode",
        "batch",
    ]


@pytest.mark.parametrize(
    ("code", "fields"),
    [
        (RequestCode.SEND_MESSAGE, HEADER.v1_fields()),
        (RequestCode.SEND_MESSAGE_V2, HEADER.v2_fields()),
        (RequestCode.SEND_BATCH_MESSAGE, HEADER.v2_fields()),
    ],
)
def test_the_broker_reads_back_what_either_form_wrote(code: int, fields: dict[str, str]) -> None:
    assert SendMessageRequestHeader.of(request(code, fields)) == HEADER


def test_a_v2_header_may_carry_a_v1_name_for_a_field() -> None:
    fields = dict(HEADER.v2_fields())
    fields["topic"] = fields.pop("b")
    assert SendMessageRequestHeader.of(request(RequestCode.SEND_MESSAGE_V2, fields)) == HEADER


def test_a_missing_or_malformed_field_is_named_by_its_v1_name() -> None:
    fields = dict(HEADER.v2_fields())
    del fields["b"]
    with pytest.raises(MissingField, match="'topic'"):
        SendMessageRequestHeader.of(request(RequestCode.SEND_MESSAGE_V2, fields))
    fields = dict(HEADER.v2_fields(), e="x1")
    with pytest.raises(BadField, match="queueId"):
        SendMessageRequestHeader.of(request(RequestCode.SEND_MESSAGE_V2, fields))
