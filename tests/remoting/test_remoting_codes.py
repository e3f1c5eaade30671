"""Code tables (docs/protocol.md §2.1, §2.2, §6)."""

from __future__ import annotations

import pytest

from es_broker.remoting import (
    CURRENT_VERSION,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
    Version,
    version_name,
)


def test_request_codes_used_by_ali_ons_have_their_4_9_numbers() -> None:
    assert RequestCode.SEND_MESSAGE_V2 == 310
    assert RequestCode.PULL_MESSAGE == 11
    assert RequestCode.QUERY_CONSUMER_OFFSET == 14
    assert RequestCode.UPDATE_CONSUMER_OFFSET == 15
    assert RequestCode.SEARCH_OFFSET_BY_TIMESTAMP == 29
    assert RequestCode.GET_MAX_OFFSET == 30
    assert RequestCode.HEART_BEAT == 34
    assert RequestCode.UNREGISTER_CLIENT == 35
    assert RequestCode.CONSUMER_SEND_MSG_BACK == 36
    assert RequestCode.GET_CONSUMER_LIST_BY_GROUP == 38
    assert RequestCode.GET_ROUTEINFO_BY_TOPIC == 105


def test_request_code_table_spans_section_6_1() -> None:
    # the 97 codes of docs/protocol.md §6.1, 4.9.0's GET_BROKER_CLUSTER_ACL_CONFIG (removed by
    # 4.9.8, served with masked secrets), and RocketMQ 5's three pop codes (docs/protocol.md §14)
    assert len(RequestCode) == 97 + 1 + 3
    assert (
        RequestCode.POP_MESSAGE,
        RequestCode.ACK_MESSAGE,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
    ) == (200050, 200051, 200053)
    assert RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG == 54
    assert min(RequestCode) == 10
    assert max(code for code in RequestCode if code < 200000) == 329
    assert RequestCode.GET_KV_CONFIG_BY_VALUE == 217


def test_response_codes_of_section_6_2() -> None:
    assert ResponseCode.SUCCESS == 0
    assert ResponseCode.SYSTEM_ERROR == 1
    assert ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert ResponseCode.TOPIC_NOT_EXIST == 17
    assert (
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    ) == (19, 20, 21)
    assert ResponseCode.QUERY_NOT_FOUND == 22
    assert ResponseCode.CONSUMER_NOT_ONLINE == 206
    assert ResponseCode.CONSUME_MSG_TIMEOUT == 207
    assert ResponseCode.FLOW_CONTROL == 215


def test_language_bytes_of_section_2_1() -> None:
    assert [(code.name, code.value) for code in LanguageCode] == [
        ("JAVA", 0),
        ("CPP", 1),
        ("DOTNET", 2),
        ("PYTHON", 3),
        ("DELPHI", 4),
        ("ERLANG", 5),
        ("RUBY", 6),
        ("OTHER", 7),
        ("HTTP", 8),
        ("GO", 9),
        ("PHP", 10),
        ("OMS", 11),
        ("RUST", 12),
    ]


def test_serialize_types() -> None:
    assert (SerializeType.JSON, SerializeType.ROCKETMQ) == (0, 1)


def test_version_ordinals_of_section_2_2() -> None:
    assert Version.V3_0_7_SNAPSHOT == 28
    assert Version.V3_0_11 == 37
    assert Version.V3_1_8_SNAPSHOT == 62
    assert Version.V3_4_9 == 121
    assert Version.V4_0_0 == 213
    assert Version.V4_1_0_SNAPSHOT == 232
    assert Version.V4_5_0 == 313
    assert Version.V4_9_4 == 401
    assert Version.V4_9_5 == 403
    assert Version.V4_9_7 == 407
    assert Version.V4_9_8 == 409
    assert CURRENT_VERSION == 409


@pytest.mark.parametrize(
    ("ordinal", "name"),
    [
        (121, "V3_4_9"),
        (409, "V4_9_8"),
        (212, "V4_0_0_SNAPSHOT"),
        (313, "V4_5_0"),
        (330, "V4_5_9_SNAPSHOT"),
        (411, "V4_9_9"),
        (5, "version#5"),
        (999, "version#999"),
    ],
)
def test_version_name_names_4_x_ordinals(ordinal: int, name: str) -> None:
    assert version_name(ordinal) == name
