"""Frame layout (docs/protocol.md §1.2): length prefix, serType byte, 24-bit header length."""

from __future__ import annotations

import struct

import pytest

from es_broker.remoting import (
    DEFAULT_MAX_FRAME_LENGTH,
    EncodeError,
    FrameLengthInvalid,
    FrameTooLarge,
    HeaderDecodeError,
    HeaderLengthInvalid,
    ProtocolError,
    RemotingCommand,
    SerializeType,
    TrailingData,
    TruncatedFrame,
    UnknownSerializeType,
    check_frame_length,
    decode_frame,
    decode_payload,
    encode_frame,
)


def _frame(word: int, header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), word) + header + body


def test_default_max_frame_length_is_16_mib() -> None:
    assert DEFAULT_MAX_FRAME_LENGTH == 16777216


def test_length_counts_the_header_length_int_header_and_body() -> None:
    frame = encode_frame(RemotingCommand(code=0, body=b"12345"))
    length, word = struct.unpack_from(">iI", frame)
    assert length == len(frame) - 4
    assert word >> 24 == 0
    assert frame.endswith(b"12345")
    assert len(frame) == 8 + (word & 0xFFFFFF) + 5


def test_serialize_type_is_the_high_byte_of_the_second_int() -> None:
    frame = encode_frame(RemotingCommand(code=0, serialize_type=SerializeType.ROCKETMQ))
    assert frame[4] == 1
    assert int.from_bytes(frame[5:8], "big") == len(frame) - 8


def test_frame_round_trips_in_both_serialize_types() -> None:
    for serialize_type in SerializeType:
        cmd = RemotingCommand(
            code=310,
            opaque=9,
            remark="r",
            ext_fields={"a": "1"},
            body=b"\x00\xff",
            serialize_type=serialize_type,
        )
        assert decode_frame(encode_frame(cmd)) == cmd


def test_empty_body_decodes_as_empty_bytes() -> None:
    assert decode_frame(encode_frame(RemotingCommand(code=0))).body == b""


def test_frame_at_the_cap_is_accepted_and_one_byte_more_is_too_large() -> None:
    # The cap covers the whole frame, length prefix included (Netty's frame decoder).
    assert check_frame_length(DEFAULT_MAX_FRAME_LENGTH - 4) == DEFAULT_MAX_FRAME_LENGTH
    with pytest.raises(
        FrameTooLarge, match="16777217 bytes exceeds the maximum frame length 16777216"
    ):
        check_frame_length(DEFAULT_MAX_FRAME_LENGTH - 3)


def test_custom_max_frame_length_is_applied() -> None:
    with pytest.raises(FrameTooLarge) as info:
        check_frame_length(100, max_frame_length=64)
    assert (info.value.frame_length, info.value.max_frame_length) == (104, 64)
    assert not info.value.resumable


@pytest.mark.parametrize("length", [-1, -(1 << 31), 0, 3])
def test_negative_or_tiny_length_is_invalid(length: int) -> None:
    with pytest.raises(FrameLengthInvalid, match=str(length)):
        check_frame_length(length)


def test_header_length_beyond_frame_is_invalid_but_resumable() -> None:
    with pytest.raises(HeaderLengthInvalid, match="header length 50") as info:
        decode_payload(struct.pack(">I", 50) + b"{}")
    assert info.value.resumable


def test_unknown_serialize_type_is_a_header_decode_error() -> None:
    with pytest.raises(UnknownSerializeType, match="serialize type 2") as info:
        decode_frame(_frame((2 << 24) | 2, b"{}"))
    assert isinstance(info.value, HeaderDecodeError)


def test_json_header_of_length_zero_is_a_header_decode_error() -> None:
    with pytest.raises(HeaderDecodeError):
        decode_frame(_frame(0, b"", b"body"))


def test_decode_frame_rejects_truncated_and_trailing_bytes() -> None:
    frame = encode_frame(RemotingCommand(code=0))
    with pytest.raises(TruncatedFrame):
        decode_frame(frame[:-1])
    with pytest.raises(TruncatedFrame):
        decode_frame(frame[:3])
    with pytest.raises(TrailingData, match="1 bytes"):
        decode_frame(frame + b"\0")


def test_decode_frame_accepts_memoryview_and_bytearray() -> None:
    frame = encode_frame(RemotingCommand(code=7, body=b"b"))
    assert decode_frame(memoryview(frame)).code == 7
    assert decode_frame(bytearray(frame)).body == b"b"


def test_header_longer_than_24_bits_cannot_be_encoded() -> None:
    with pytest.raises(EncodeError, match="24-bit"):
        encode_frame(RemotingCommand(code=0, remark="x" * (1 << 24)))


def test_all_decode_errors_are_protocol_errors() -> None:
    for error in (
        FrameTooLarge,
        FrameLengthInvalid,
        TruncatedFrame,
        TrailingData,
        HeaderLengthInvalid,
        HeaderDecodeError,
        UnknownSerializeType,
    ):
        assert issubclass(error, ProtocolError)
