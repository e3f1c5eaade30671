"""Connection: buffering, sentinels, EOF and error handling (h11 style)."""

from __future__ import annotations

import struct

import pytest

from es_broker.remoting import (
    CLOSED,
    NEED_DATA,
    Connection,
    FrameLengthInvalid,
    FrameTooLarge,
    HeaderDecodeError,
    HeaderLengthInvalid,
    RemotingCommand,
    SerializeType,
    TruncatedFrame,
    UnknownSerializeType,
    encode_frame,
    request,
)


def _cmd(opaque: int, body: bytes = b"") -> RemotingCommand:
    return request(30, {"topic": "T", "queueId": opaque}, body, opaque=opaque)


def _drain(conn: Connection) -> list[RemotingCommand]:
    out = []
    while isinstance(event := conn.next_event(), RemotingCommand):
        out.append(event)
    return out


def test_empty_connection_needs_data() -> None:
    assert Connection().next_event() is NEED_DATA


def test_frame_fed_one_byte_at_a_time_decodes_once_complete() -> None:
    frame = encode_frame(_cmd(1, b"body"))
    conn = Connection()
    for i, byte in enumerate(frame):
        assert conn.next_event() is NEED_DATA, i
        conn.receive_data(bytes([byte]))
    assert conn.next_event() == _cmd(1, b"body")
    assert conn.next_event() is NEED_DATA
    assert conn.buffered == 0


def test_several_frames_in_one_chunk_come_out_in_order() -> None:
    conn = Connection()
    conn.receive_data(b"".join(encode_frame(_cmd(i)) for i in range(5)))
    assert [cmd.opaque for cmd in _drain(conn)] == [0, 1, 2, 3, 4]


def test_frames_of_both_serialize_types_mix_on_one_connection() -> None:
    conn = Connection()
    binary = RemotingCommand(code=1, opaque=2, serialize_type=SerializeType.ROCKETMQ)
    conn.receive_data(encode_frame(_cmd(1)) + encode_frame(binary))
    assert _drain(conn) == [_cmd(1), binary]


def test_many_frames_across_compaction_threshold_decode_intact() -> None:
    frames = [encode_frame(_cmd(i, bytes([i % 256]) * 1000)) for i in range(300)]
    stream = b"".join(frames)
    conn = Connection()
    got: list[RemotingCommand] = []
    for start in range(0, len(stream), 7777):  # chunks that straddle frame boundaries
        conn.receive_data(stream[start : start + 7777])
        got += _drain(conn)
    assert [cmd.opaque for cmd in got] == list(range(300))
    assert all(cmd.body == bytes([cmd.opaque % 256]) * 1000 for cmd in got)


def test_buffered_counts_exactly_the_bytes_of_a_partial_frame() -> None:
    frame = encode_frame(_cmd(1, b"x" * 100_000))
    conn = Connection()
    for sent in (3, 40_000, 90_000):
        conn.receive_data(frame[conn.buffered : sent])
        assert conn.next_event() is NEED_DATA
        assert conn.buffered == sent
    conn.receive_data(frame[conn.buffered :])
    assert conn.next_event() == _cmd(1, b"x" * 100_000)
    assert conn.buffered == 0


def test_large_frame_arriving_in_reads_of_every_size_decodes_intact() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    frame = encode_frame(_cmd(5, body)) + encode_frame(_cmd(6))
    conn = Connection()
    sizes = [1, 3, 5, 16 * 1024 - 1, 16 * 1024, 300_000, 7, 65_536]
    sent = 0
    got: list[RemotingCommand] = []
    while sent < len(frame):
        size = sizes[sent % len(sizes)]
        conn.receive_data(frame[sent : sent + size])
        sent += size
        got += _drain(conn)
    assert got == [_cmd(5, body), _cmd(6)]
    assert conn.buffered == 0


def test_frame_without_body_spanning_two_reads_decodes() -> None:
    frame = encode_frame(_cmd(7))
    conn = Connection()
    conn.receive_data(frame[:9])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(frame[9:])
    assert conn.next_event() == _cmd(7)
    assert conn.buffered == 0


def test_fed_bytearray_is_copied_so_the_caller_may_reuse_it() -> None:
    frame = bytearray(encode_frame(_cmd(1)))
    conn = Connection()
    conn.receive_data(frame[:10])
    chunk = bytearray(frame[10:])
    conn.receive_data(chunk)
    chunk[:] = b"\0" * len(chunk)
    assert conn.next_event() == _cmd(1)


def test_clean_eof_between_frames_is_closed() -> None:
    conn = Connection()
    conn.receive_data(encode_frame(_cmd(1)))
    conn.receive_data(b"")
    assert conn.next_event() == _cmd(1)
    assert conn.next_event() is CLOSED
    assert conn.next_event() is CLOSED
    assert conn.closed_by_peer


def test_eof_inside_a_frame_raises_truncated_frame_with_sizes() -> None:
    frame = encode_frame(_cmd(1))
    conn = Connection()
    conn.receive_data(frame[:-3])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")
    with pytest.raises(TruncatedFrame, match=f"after {len(frame) - 3} of the {len(frame)} bytes"):
        conn.next_event()


def test_eof_inside_the_length_prefix_raises_truncated_frame() -> None:
    conn = Connection()
    conn.receive_data(b"\x00\x00")
    conn.receive_data(b"")
    with pytest.raises(TruncatedFrame, match="2 of the 4 bytes of a frame length prefix"):
        conn.next_event()


def test_data_after_eof_is_a_usage_error() -> None:
    conn = Connection()
    conn.receive_data(b"")
    with pytest.raises(RuntimeError):
        conn.receive_data(b"x")


def test_too_large_frame_is_refused_from_its_prefix_alone() -> None:
    conn = Connection(max_frame_length=1024)
    conn.receive_data(struct.pack(">i", 2000))  # no need to wait for 2000 bytes
    with pytest.raises(FrameTooLarge):
        conn.next_event()


def test_fatal_error_is_raised_again_on_every_later_call() -> None:
    conn = Connection()
    conn.receive_data(struct.pack(">i", -5) + encode_frame(_cmd(1)))
    with pytest.raises(FrameLengthInvalid) as first:
        conn.next_event()
    assert not first.value.resumable
    with pytest.raises(FrameLengthInvalid) as second:
        conn.next_event()
    assert second.value is first.value


def test_corrupt_header_with_valid_length_is_skipped_and_decoding_resumes() -> None:
    bad = b'{"code":"x","opaque":8,"flag":0}'
    conn = Connection()
    conn.receive_data(struct.pack(">iI", 4 + len(bad), len(bad)) + bad + encode_frame(_cmd(9)))
    with pytest.raises(HeaderDecodeError) as info:
        conn.next_event()
    assert info.value.resumable
    assert info.value.opaque == 8  # enough to address a SYSTEM_ERROR answer
    assert conn.next_event() == _cmd(9)


def test_header_length_overrunning_its_frame_is_skipped_and_decoding_resumes() -> None:
    conn = Connection()
    conn.receive_data(struct.pack(">iI", 6, 100) + b"{}" + encode_frame(_cmd(3)))
    with pytest.raises(HeaderLengthInvalid) as info:
        conn.next_event()
    assert info.value.resumable
    assert conn.next_event() == _cmd(3)


def test_unknown_serialize_type_is_skipped_and_decoding_resumes() -> None:
    conn = Connection()
    conn.receive_data(struct.pack(">iI", 6, (7 << 24) | 2) + b"{}" + encode_frame(_cmd(4)))
    with pytest.raises(UnknownSerializeType):
        conn.next_event()
    assert conn.next_event() == _cmd(4)


def test_send_returns_the_encoded_frame() -> None:
    assert Connection().send(_cmd(5)) == encode_frame(_cmd(5))
