"""RemotingCommand: flags, constructors, typed extFields accessors."""

from __future__ import annotations

import pytest

from es_broker.remoting import (
    CURRENT_VERSION,
    BadField,
    CommandError,
    LanguageCode,
    MissingField,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    request,
    response_to,
)


def test_flag_bit_zero_marks_a_response_and_bit_one_a_oneway_request() -> None:
    assert RemotingCommand(code=0, flag=1).is_response
    assert not RemotingCommand(code=0, flag=1).is_oneway
    assert RemotingCommand(code=15, flag=2).is_oneway
    assert RemotingCommand(code=15, flag=2).is_request
    assert RemotingCommand(code=15, flag=0).is_request


def test_response_to_copies_opaque_and_serialize_type_and_sets_response_bit() -> None:
    req = RemotingCommand(
        code=RequestCode.PULL_MESSAGE,
        language=LanguageCode.CPP,
        version=121,
        opaque=77,
        serialize_type=SerializeType.ROCKETMQ,
    )
    resp = response_to(req, ResponseCode.PULL_NOT_FOUND, remark="none", ext_fields={"maxOffset": 3})
    assert resp.opaque == 77
    assert resp.flag == 1
    assert resp.serialize_type is SerializeType.ROCKETMQ
    assert resp.language is LanguageCode.JAVA
    assert resp.version == CURRENT_VERSION == 409
    assert resp.ext_fields == {"maxOffset": "3"}
    assert resp.remark == "none"


def test_response_to_opaque_zero_is_an_ordinary_opaque() -> None:
    # Java's first command has opaque 0 (docs/protocol.md §5).
    assert response_to(RemotingCommand(code=34, opaque=0), 0).opaque == 0


def test_request_normalises_ext_values_to_java_strings_and_drops_none() -> None:
    cmd = request(
        RequestCode.SEND_MESSAGE_V2,
        {"e": 0, "k": False, "m": True, "g": 1700000000000, "n": None, "a": "PG"},
        b"body",
        opaque=3,
    )
    assert cmd.ext_fields == {"e": "0", "k": "false", "m": "true", "g": "1700000000000", "a": "PG"}
    assert cmd.flag == 0
    assert cmd.body == b"body"


def test_request_oneway_sets_flag_bit_one() -> None:
    assert request(RequestCode.UPDATE_CONSUMER_OFFSET, oneway=True).flag == 2


def test_request_code_enum_is_stored_as_its_number() -> None:
    cmd = request(RequestCode.HEART_BEAT)
    assert type(cmd.code) is int and cmd.code == 34


def test_repr_shows_body_size_not_body() -> None:
    text = repr(RemotingCommand(code=10, body=b"x" * 1000))
    assert "<1000 bytes>" in text
    assert "xxxx" not in text


# -- typed accessors -----------------------------------------------------------------

CMD = RemotingCommand(
    code=11,
    ext_fields={
        "queueId": "3",
        "queueOffset": "1700000000000",
        "negative": "-1",
        "plus": "+5",
        "big": "2147483648",
        "word": "abc",
        "blank": "",
        "spaced": " 5",
        "underscored": "1_000",
        "flagTrue": "TRUE",
        "flagFalse": "false",
        "flagOdd": "yes",
    },
)


def test_get_int_parses_decimal_java_ints() -> None:
    assert CMD.get_int("queueId") == 3
    assert CMD.get_int("negative") == -1
    assert CMD.get_int("plus") == 5


def test_get_int_returns_default_when_absent() -> None:
    assert CMD.get_int("missing") is None
    assert CMD.get_int("missing", default=-1) == -1


def test_get_int_rejects_values_outside_32_bits_naming_the_field() -> None:
    with pytest.raises(BadField, match="'big'") as info:
        CMD.get_int("big")
    assert info.value.field == "big"
    assert info.value.expected == "int"


def test_get_long_accepts_64_bit_values() -> None:
    assert CMD.get_long("big") == 2147483648
    assert CMD.require_long("queueOffset") == 1700000000000


@pytest.mark.parametrize("name", ["word", "blank", "spaced", "underscored"])
def test_integer_accessors_reject_text_java_would_not_parse(name: str) -> None:
    with pytest.raises(BadField, match=repr(name)):
        CMD.require_long(name)


def test_require_int_raises_missing_field_naming_the_field() -> None:
    with pytest.raises(MissingField, match="'queueOffsetX'") as info:
        CMD.require_int("queueOffsetX")
    assert info.value.field == "queueOffsetX"


def test_missing_and_bad_field_are_command_errors_with_a_remark() -> None:
    with pytest.raises(CommandError) as info:
        CMD.require_str("topic")
    assert "topic" in info.value.remark


def test_get_bool_follows_java_parse_boolean() -> None:
    assert CMD.get_bool("flagTrue") is True
    assert CMD.get_bool("flagFalse") is False
    assert CMD.get_bool("flagOdd") is False  # Boolean.parseBoolean("yes") is false
    assert CMD.get_bool("missing") is None
    assert CMD.get_bool("missing", default=True) is True


def test_require_bool_raises_missing_field() -> None:
    with pytest.raises(MissingField):
        CMD.require_bool("isForce")


def test_get_str_and_require_str_return_raw_text() -> None:
    assert CMD.get_str("word") == "abc"
    assert CMD.get_str("blank") == ""
    assert CMD.get_str("missing", "d") == "d"
    assert CMD.require_str("blank") == ""
