"""Header encodings: JSON (docs/protocol.md §3) and ROCKETMQ binary (docs/protocol.md §4)."""

from __future__ import annotations

import json
import struct

import pytest

from es_broker.remoting import (
    EncodeError,
    HeaderDecodeError,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    decode_json_header,
    decode_rocketmq_header,
    encode_json_header,
    encode_rocketmq_header,
)

# -- JSON: what we write ----------------------------------------------------------------


def test_json_header_keys_are_in_java_alphabetical_order() -> None:
    cmd = RemotingCommand(code=1, opaque=5, flag=1, remark="boom", ext_fields={"b": "2", "a": "1"})
    assert encode_json_header(cmd) == (
        b'{"code":1,"extFields":{"a":"1","b":"2"},"flag":1,"language":"JAVA","opaque":5,'
        b'"remark":"boom","serializeTypeCurrentRPC":"JSON","version":409}'
    )


def test_json_header_omits_null_remark_and_empty_ext_fields() -> None:
    text = encode_json_header(RemotingCommand(code=0, flag=1))
    assert b"remark" not in text
    assert b"extFields" not in text


def test_json_header_keeps_an_empty_remark() -> None:
    assert b'"remark":""' in encode_json_header(RemotingCommand(code=0, remark=""))


def test_json_header_writes_every_ext_value_as_a_string() -> None:
    cmd = RemotingCommand(code=0, ext_fields={"queueId": 1, "ok": True})  # type: ignore[dict-item]
    assert json.loads(encode_json_header(cmd))["extFields"] == {"queueId": "1", "ok": "true"}


def test_json_header_writes_non_ascii_as_raw_utf8_and_escapes_controls() -> None:
    cmd = RemotingCommand(code=0, ext_fields={"i": "TAGS\x01标签"})
    assert '"i":"TAGS\\u0001标签"'.encode() in encode_json_header(cmd)


def test_json_header_writes_language_name() -> None:
    cmd = RemotingCommand(code=0, language=LanguageCode.CPP)
    assert b'"language":"CPP"' in encode_json_header(cmd)


def test_json_header_rejects_opaque_outside_java_int() -> None:
    with pytest.raises(EncodeError, match="opaque"):
        encode_json_header(RemotingCommand(code=0, opaque=1 << 31))


# -- JSON: what we accept ----------------------------------------------------------------


def test_json_header_ext_fields_numbers_become_strings() -> None:
    cmd = decode_json_header(b'{"code":14,"extFields":{"queueId":0,"g":1700000000000,"neg":-1}}')
    assert cmd.ext_fields == {"queueId": "0", "g": "1700000000000", "neg": "-1"}


def test_json_header_ext_fields_booleans_become_lowercase_strings() -> None:
    cmd = decode_json_header(b'{"code":310,"extFields":{"k":false,"m":true}}')
    assert cmd.ext_fields == {"k": "false", "m": "true"}


def test_json_header_ext_fields_null_means_absent() -> None:
    cmd = decode_json_header(b'{"code":35,"extFields":{"clientID":"c","producerGroup":null}}')
    assert cmd.ext_fields == {"clientID": "c"}
    assert cmd.get_str("producerGroup") is None


def test_json_header_ext_fields_fractional_numbers_keep_their_literal_text() -> None:
    cmd = decode_json_header(b'{"code":0,"extFields":{"x":1.50,"y":1e3}}')
    assert cmd.ext_fields == {"x": "1.50", "y": "1e3"}


def test_json_header_ext_fields_nested_values_become_json_text() -> None:
    cmd = decode_json_header(b'{"code":0,"extFields":{"o":{"a":1},"l":[1,"x"]}}')
    assert cmd.ext_fields == {"o": '{"a":1}', "l": '[1,"x"]'}


def test_json_header_tolerates_missing_remark_and_ext_fields_and_empty_ext_fields() -> None:
    assert decode_json_header(b'{"code":0,"flag":1,"opaque":3}').ext_fields == {}
    assert decode_json_header(b'{"code":34,"extFields":{}}').ext_fields == {}
    assert decode_json_header(b'{"code":34,"extFields":null}').remark is None


def test_json_header_ignores_unknown_top_level_keys() -> None:
    cmd = decode_json_header(b'{"code":0,"serializeTypeCurrentRPC":"JSON","future":[1,2]}')
    assert cmd.code == 0
    assert cmd.serialize_type is SerializeType.JSON


def test_json_header_missing_numbers_take_java_defaults() -> None:
    cmd = decode_json_header(b"{}")
    assert (cmd.code, cmd.version, cmd.opaque, cmd.flag) == (0, 0, 0, 0)
    assert cmd.language is LanguageCode.JAVA


def test_json_header_unknown_language_name_becomes_other() -> None:
    assert decode_json_header(b'{"language":"COBOL"}').language is LanguageCode.OTHER


def test_json_header_language_ordinal_is_accepted() -> None:
    assert decode_json_header(b'{"language":1}').language is LanguageCode.CPP


def test_json_header_numeric_strings_are_accepted_for_int_fields() -> None:
    assert decode_json_header(b'{"code":"105","opaque":"7"}').opaque == 7


def test_json_header_invalid_utf8_is_replaced_like_java() -> None:
    cmd = decode_json_header(b'{"code":0,"remark":"\xff"}')
    assert cmd.remark == "\ufffd"


def test_json_header_body_is_attached() -> None:
    assert decode_json_header(b'{"code":0}', b"payload").body == b"payload"


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b'{"code":1} x', "not valid JSON"),
        (b"[1]", "array"),
        (b'"x"', "string"),
        (b'{"code":true}', "'code'"),
        (b'{"code":2147483648}', "'code'"),
        (b'{"code":1.5}', "'code'"),
        (b'{"extFields":[]}', "extFields"),
        (b"[" * 100000, "not valid JSON"),
    ],
)
def test_json_header_garbage_raises_header_decode_error(header: bytes, message: str) -> None:
    with pytest.raises(HeaderDecodeError, match=message):
        decode_json_header(header)


def test_json_header_error_carries_opaque_and_flag_when_readable() -> None:
    with pytest.raises(HeaderDecodeError) as info:
        decode_json_header(b'{"code":"x","opaque":9,"flag":0}')
    assert info.value.opaque == 9
    assert info.value.flag == 0
    assert info.value.resumable


def test_json_header_error_has_no_opaque_when_unparseable() -> None:
    with pytest.raises(HeaderDecodeError) as info:
        decode_json_header(b"{nope")
    assert info.value.opaque is None


# -- ROCKETMQ binary ---------------------------------------------------------------


def _binary(
    code: int = 0,
    language: int = 0,
    version: int = 409,
    opaque: int = 1,
    flag: int = 0,
    remark: bytes = b"",
    ext: bytes = b"",
) -> bytes:
    return (
        struct.pack(">hbhii", code, language, version, opaque, flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(ext))
        + ext
    )


def _entry(key: bytes, value: bytes) -> bytes:
    return struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value


def test_binary_header_fixed_fields_are_big_endian() -> None:
    cmd = RemotingCommand(
        code=310,
        language=LanguageCode.GO,
        version=121,
        opaque=0x01020304,
        flag=2,
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode_rocketmq_header(cmd) == bytes.fromhex(
        "013609007901020304000000020000000000000000"
    )


def test_binary_header_round_trips_remark_and_ext_fields() -> None:
    cmd = RemotingCommand(
        code=1,
        remark="é!",
        ext_fields={"k": "v", "ключ": "значение"},
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert decode_rocketmq_header(encode_rocketmq_header(cmd)) == cmd


def test_binary_header_ext_entries_are_sorted_by_key() -> None:
    cmd = RemotingCommand(
        code=1, ext_fields={"b": "2", "a": "1"}, serialize_type=SerializeType.ROCKETMQ
    )
    assert encode_rocketmq_header(cmd).endswith(_entry(b"a", b"1") + _entry(b"b", b"2"))


def test_binary_header_zero_length_remark_decodes_as_none() -> None:
    assert decode_rocketmq_header(_binary()).remark is None
    empty = RemotingCommand(code=0, remark="", serialize_type=SerializeType.ROCKETMQ)
    assert encode_rocketmq_header(empty) == _binary(version=409, opaque=0)


def test_binary_header_zero_length_key_or_value_is_dropped_like_java_null() -> None:
    ext = _entry(b"a", b"") + _entry(b"", b"x") + _entry(b"c", b"3")
    assert decode_rocketmq_header(_binary(ext=ext)).ext_fields == {"c": "3"}


def test_binary_header_code_and_version_are_signed_shorts() -> None:
    cmd = decode_rocketmq_header(_binary(code=-1, version=-2))
    assert (cmd.code, cmd.version) == (-1, -2)


def test_binary_header_unknown_language_byte_becomes_other() -> None:
    assert decode_rocketmq_header(_binary(language=99)).language is LanguageCode.OTHER


def test_binary_header_code_outside_16_bits_cannot_be_encoded() -> None:
    with pytest.raises(EncodeError, match="16 bits"):
        encode_rocketmq_header(RemotingCommand(code=40000, serialize_type=SerializeType.ROCKETMQ))


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (_binary()[:20], "fewer than the 21-byte minimum"),
        (_binary()[:13] + struct.pack(">i", 5) + b"ab" + b"\0\0\0\0", "remark length 5"),
        (_binary()[:13] + struct.pack(">i", -1) + b"\0\0\0\0", "remark length -1"),
        (_binary(ext=_entry(b"k", b"v"))[:-1], "extFields length"),
        (_binary() + b"\0", "after the extFields map"),
        (_binary(ext=b"\x00"), "inside a key length"),
        (_binary(ext=b"\x00\x09k\x00\x00\x00\x00"), "key length 9"),
        (_binary(ext=b"\xff\xffk\x00\x00\x00\x00"), "key length -1"),
        (_binary(ext=b"\x00\x01k\x00\x00\x00\x09"), "value length 9"),
    ],
)
def test_binary_header_garbage_raises_header_decode_error(header: bytes, message: str) -> None:
    with pytest.raises(HeaderDecodeError, match=message):
        decode_rocketmq_header(header)


def test_binary_header_error_after_fixed_fields_carries_opaque_and_flag() -> None:
    with pytest.raises(HeaderDecodeError) as info:
        decode_rocketmq_header(_binary(opaque=42, flag=0) + b"junk")
    assert (info.value.opaque, info.value.flag) == (42, 0)
