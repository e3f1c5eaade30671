"""Property tests: the decoder only ever yields commands, asks for data, or raises ProtocolError."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_broker.remoting import (
    CLOSED,
    NEED_DATA,
    Bean,
    BodyDecodeError,
    Connection,
    LanguageCode,
    ProtocolError,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode_frame,
)
from es_broker.remoting.fastjson import dumps, freeze, loads

# REMOTING_FUZZ_EXAMPLES=20000 for a deeper run than the default quick one.
FUZZ = settings(
    max_examples=int(os.environ.get("REMOTING_FUZZ_EXAMPLES", "300")),
    suppress_health_check=[HealthCheck.too_slow],
)

_nonempty_text = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=20)

commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    language=st.sampled_from(LanguageCode),
    version=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    # The binary form cannot tell "" from null: keep remarks either absent or non-empty.
    remark=st.none() | _nonempty_text,
    ext_fields=st.dictionaries(_nonempty_text, _nonempty_text, max_size=5),
    body=st.binary(max_size=64),
    serialize_type=st.sampled_from(SerializeType),
)


def _run(conn: Connection, budget: int) -> list[RemotingCommand]:
    """Pull events until the decoder stops; fails if it loops past `budget` events."""
    out: list[RemotingCommand] = []
    for _ in range(budget):
        try:
            event = conn.next_event()
        except ProtocolError as exc:
            if exc.resumable:
                continue
            return out
        if event is NEED_DATA or event is CLOSED:
            return out
        assert isinstance(event, RemotingCommand)
        out.append(event)
    raise AssertionError("decoder did not settle: it kept producing events")


def _feed(data: bytes, cuts: list[int], eof: bool) -> list[RemotingCommand]:
    conn = Connection(max_frame_length=1 << 16)
    budget = len(data) // 8 + 3  # every command or skipped frame consumes at least 8 bytes
    out: list[RemotingCommand] = []
    start = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}) + [len(data)]:
        if cut > start:
            conn.receive_data(data[start:cut])
            start = cut
            out += _run(conn, budget)
    if eof:
        conn.receive_data(b"")
        out += _run(conn, budget)
    return out


@FUZZ
@given(commands)
def test_any_command_round_trips_through_its_frame(cmd: RemotingCommand) -> None:
    assert decode_frame(encode_frame(cmd)) == cmd


@FUZZ
@given(st.lists(commands, max_size=4), st.lists(st.integers(0, 10_000), max_size=8))
def test_valid_frames_split_anywhere_decode_to_the_same_commands(
    cmds: list[RemotingCommand], cuts: list[int]
) -> None:
    data = b"".join(encode_frame(cmd) for cmd in cmds)
    assert _feed(data, cuts, eof=True) == cmds


@FUZZ
@given(st.binary(max_size=512), st.lists(st.integers(0, 512), max_size=4), st.booleans())
def test_random_bytes_only_yield_commands_need_data_or_protocol_errors(
    data: bytes, cuts: list[int], eof: bool
) -> None:
    _feed(data, cuts, eof)


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    frames = bytearray(
        b"".join(encode_frame(cmd) for cmd in draw(st.lists(commands, min_size=1, max_size=3)))
    )
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        pos = draw(st.integers(0, max(len(frames) - 1, 0)))
        if kind == "flip" and frames:
            frames[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and frames:
            frames[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            frames[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del frames[pos : pos + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del frames[pos:]
    return bytes(frames)


@FUZZ
@given(mutated_frames(), st.lists(st.integers(0, 2000), max_size=4), st.booleans())
def test_mutated_valid_frames_only_yield_commands_need_data_or_protocol_errors(
    data: bytes, cuts: list[int], eof: bool
) -> None:
    _feed(data, cuts, eof)


@FUZZ
@given(
    st.dictionaries(
        st.text(max_size=8),
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=8)
        | st.lists(st.integers(), max_size=3),
        max_size=6,
    )
)
def test_json_header_with_any_ext_value_types_decodes_to_strings(ext: dict[str, Any]) -> None:
    header = json.dumps({"code": 1, "opaque": 2, "extFields": ext}).encode()
    frame = (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header
    cmd = decode_frame(frame)
    assert all(type(value) is str for value in cmd.ext_fields.values())
    assert set(cmd.ext_fields) == {key for key, value in ext.items() if value is not None}


# -- fastjson ------------------------------------------------------------------------------

present_scalars = (
    st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_scalars = st.none() | present_scalars
json_keys = st.text(max_size=6) | st.integers(-(2**40), 2**40)


def _json_values(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Map values are never None: fastjson omits null entries, so they would not round-trip.
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(json_keys, inner.filter(lambda v: v is not None), max_size=4)
        ),
        max_leaves=20,
    )


json_values = _json_values(json_scalars)
object_keys = st.dictionaries(st.text(max_size=6), _json_values(present_scalars), max_size=3).map(
    freeze
)


@FUZZ
@given(json_values)
def test_fastjson_dumps_then_loads_is_identity(value: Any) -> None:
    assert loads(dumps(value)) == value


@FUZZ
@given(st.dictionaries(json_keys | object_keys, present_scalars, max_size=4))
def test_fastjson_string_integer_and_object_keys_round_trip(value: dict[Any, Any]) -> None:
    assert loads(dumps(value)) == value


@FUZZ
@given(st.text(alphabet='{}[]:,"0123456789-ab \\etrufalsn.', max_size=60))
def test_fastjson_loads_only_returns_values_or_raises_body_decode_error(text: str) -> None:
    with contextlib.suppress(BodyDecodeError):
        loads(text)


@FUZZ
@given(
    st.sampled_from(
        sorted(
            (c for c in Bean.__subclasses__() if dataclasses.is_dataclass(c)),
            key=lambda c: c.__name__,
        )
    ),
    json_values,
)
def test_bodies_decode_any_json_to_a_body_or_body_decode_error(cls: type[Bean], value: Any) -> None:
    try:
        decoded = cls.from_json(value)
    except BodyDecodeError:
        return
    assert cls.decode(decoded.encode()) == decoded
