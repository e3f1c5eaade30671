"""The compiled hot path against its pure-Python reference: same bytes, same errors, same logs.

Runs the same way whichever implementation the suite runs on (ES_BROKER_PURE_PYTHON): the
compiled module is imported directly, the reference is a fresh copy of message.py loaded with
the compiled path switched off.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.util
import json
import os
import struct
import subprocess
import sys
import zlib
from types import ModuleType

import msgpack
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from es_broker import compiled
from es_broker.client import messages as client_messages
from es_broker.commands import messages as store_messages
from es_broker.commands import placement
from es_broker.log import chunks, records, typed, types
from es_broker.projections import consume_queue, key_index
from es_broker.remoting import command, frames, header, message, requests
from es_broker.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from es_broker.remoting.errors import EncodeError
from tests.helpers import cli
from tests.process_fixtures import ROOT, _env

fast = importlib.import_module("es_broker.remoting._speedups")
codec = importlib.import_module("es_broker.remoting._codec")
fast_projections = importlib.import_module("es_broker.projections._speedups")
fast_commands = importlib.import_module("es_broker.commands._speedups")
fast_log = importlib.import_module("es_broker.log._speedups")


def _pure_copy() -> ModuleType:
    saved = os.environ.get(compiled.ENV)
    os.environ[compiled.ENV] = "1"
    try:
        spec = importlib.util.spec_from_file_location(
            "es_broker_message_reference", message.__file__
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del os.environ[compiled.ENV]
        else:
            os.environ[compiled.ENV] = saved
    return module


ref = _pure_copy()
assert ref.decode_one is ref.REFERENCE["decode_one"]  # the copy runs no compiled code


def _plain(value):
    """Results made comparable across the two modules (each has its own StoredMessage class)."""
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, dataclasses.astuple(value))
    if isinstance(value, tuple | list):
        return type(value)([_plain(v) for v in value])
    return value


def outcome(function, *args):
    try:
        return ("ok", _plain(function(*args)))
    except Exception as exc:  # the error is part of the outcome: type name and text
        return ("error", type(exc).__name__, str(exc))


def same(name: str, *args) -> None:
    assert outcome(getattr(fast, name), *args) == outcome(getattr(ref, name), *args)


def test_compiled_stored_message_layout_is_the_one_message_py_declares():
    """One stored-message layout: the byte positions the compiled codec uses are message.py's."""
    assert fast.LAYOUT == message.LAYOUT


def test_the_suite_runs_the_implementation_it_was_asked_for():
    if compiled.pure_python_forced():
        assert message.decode_one is message.REFERENCE["decode_one"]
        assert header.decode_json_header is header.REFERENCE["decode_json_header"]
        assert frames.encode_frame is frames.REFERENCE["encode_frame"]
        assert command.response_to is command.REFERENCE["response_to"]
        assert requests.check is requests.REFERENCE["check"]
        assert requests.decode is requests.REFERENCE["decode"]
        assert requests.check_text is requests.REFERENCE["check_text"]
        assert consume_queue.queue_block is consume_queue.REFERENCE["queue_block"]
        assert consume_queue.queue_units is consume_queue.REFERENCE["queue_units"]
        assert key_index.index_entries is key_index.REFERENCE["index_entries"]
        assert chunks.reader is chunks.REFERENCE["reader"]
        assert records.check is records.REFERENCE["check"]
        assert typed.fill is typed.REFERENCE["fill"]
        assert records.packb is records.REFERENCE["packb"]
        assert store_messages.encode_batch is store_messages.REFERENCE["encode_batch"]
        assert client_messages.decode_pull_body is client_messages.REFERENCE["decode_pull_body"]
        assert compiled.active() == {
            "es_broker.commands._speedups": False,
            "es_broker.log._speedups": False,
            "es_broker.projections._speedups": False,
            "es_broker.remoting._codec": False,
            "es_broker.remoting._speedups": False,
        }
    else:
        assert message.decode_one is fast.decode_one
        assert message.encode_fields is fast.encode_fields
        assert header.decode_json_header is codec.decode_json_header
        assert header.encode_json_header is codec.encode_json_header
        assert frames.encode_frame is codec.encode_frame
        assert command.response_to is codec.response_to
        assert requests.check is codec.check
        assert requests.decode is codec.decode
        assert requests.check_text is codec.check_text
        assert consume_queue.queue_block is fast_projections.queue_block
        assert consume_queue.queue_units is fast_projections.queue_units
        assert key_index.index_entries is fast_projections.index_entries
        assert chunks.reader is fast_log.Reader
        assert records.check is fast_log.check
        assert typed.fill is fast_log.fill
        assert records.packb is fast_log.packb
        assert store_messages.encode_batch is fast_commands.encode_batch
        assert client_messages.decode_pull_body is fast.decode_pull_body
        assert compiled.active() == {
            "es_broker.commands._speedups": True,
            "es_broker.log._speedups": True,
            "es_broker.projections._speedups": True,
            "es_broker.remoting._codec": True,
            "es_broker.remoting._speedups": True,
        }


texts = st.text(alphabet=st.characters(codec=None), max_size=20)
ints = st.one_of(
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.integers(-(1 << 64), 1 << 64),
    st.sampled_from([0, 1, -1, (1 << 31), (1 << 63) - 1, -(1 << 63), (1 << 63)]),
    st.booleans(),
)
hosts = st.one_of(
    st.tuples(
        st.sampled_from(
            [
                "127.0.0.1",
                "10.1.2.3",
                "255.255.255.255",
                "::ffff:1.2.3.4",
                "::1",
                "fe80::1",
                "not-an-ip",
            ]
        ),
        st.integers(-(1 << 32), 1 << 32),
    )
)
properties = st.dictionaries(texts, texts, max_size=6)


@given(texts)
def test_tag_hash(tag):
    same("tag_hash", tag)


@given(properties)
def test_encode_properties(props):
    same("encode_properties", props)


@given(
    st.one_of(
        st.binary(max_size=60),
        st.lists(
            st.sampled_from([b"\x01", b"\x02", b"a", b"KEYS", b"\xe4\xb8", b"\xff", b"\xf0\x9f"]),
            max_size=30,
        ).map(b"".join),
    )
)
def test_decode_properties(raw):
    same("decode_properties", raw)
    same("decode_properties", raw.decode("utf-8", "replace"))
    # text with a lone surrogate (a JSON header may escape one) has no UTF-8 bytes
    same("decode_properties", raw.decode("utf-8", "surrogateescape"))


def field_values():
    return st.tuples(
        st.one_of(texts, st.just("T" * 128)),
        ints,
        st.binary(max_size=40),
        properties,
        ints,
        ints,
        ints,
        ints,
        ints,
        hosts,
        ints,
        hosts,
        ints,
        ints,
        st.one_of(st.none(), ints),
    )


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(field_values())
def test_encode_fields(fields):
    same("encode_fields", *fields)


@given(st.binary(min_size=0, max_size=100), ints, ints, ints, ints)
def test_stamp(raw, queue_id, queue_offset, physical, ts):
    same("stamp", raw, queue_id, queue_offset, physical, ts)


def _valid_message(topic, body, props, sys_flag, hosts_pair):
    return ref.encode_fields(
        topic,
        3,
        body,
        props,
        0,
        sys_flag,
        7,
        1000,
        123,
        hosts_pair[0],
        456,
        hosts_pair[1],
        2,
        0,
        None,
    )


encodable = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
valid_messages = st.builds(
    _valid_message,
    encodable.filter(bool),
    st.binary(max_size=50),
    st.dictionaries(encodable, encodable, max_size=4),
    st.integers(0, 0xFFFF),
    st.tuples(
        st.sampled_from([("127.0.0.1", 1), ("10.0.0.9", 65535)]),
        st.sampled_from([("192.168.1.1", 10911), ("1.2.3.4", -5)]),
    ),
)


@st.composite
def damaged(draw, whole):
    """Valid bytes, then maybe cut, maybe with a few bytes overwritten."""
    data = bytearray(draw(whole))
    if data and draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    for _ in range(draw(st.integers(0, 3))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(valid_messages, min_size=1, max_size=4).map(b"".join), st.data())
def test_decode_one_and_all(pull_body, data):
    same("decode_all", pull_body)
    same("decode_one", pull_body, 0)
    same("decode_all", data.draw(damaged(st.just(pull_body))))
    same("decode_one", data.draw(damaged(st.just(pull_body))), data.draw(st.integers(-3, 200)))


def _entry(flag, body, props):
    props_raw = ref.encode_properties(props)
    return (
        struct.pack(">iiiii", 20 + len(body) + 2 + len(props_raw), 0, 0, flag, len(body))
        + body
        + struct.pack(">h", len(props_raw))
        + props_raw
    )


batches = st.lists(
    st.builds(
        _entry,
        st.integers(-(1 << 31), (1 << 31) - 1),
        st.binary(max_size=30),
        st.dictionaries(encodable, encodable, max_size=4),
    ),
    max_size=5,
).map(b"".join)


@given(batches, st.data())
def test_decode_batch(body, data):
    same("decode_batch", body)
    same("decode_batch", data.draw(damaged(st.just(body))))


# ---------------------------------------------------------------------- logs written by either path

HISTORY = [
    ("topic", "T1", 2, 6),
    ("send", "T1", 0, b"x", "A"),
    ("batch", "T1", 1, 5),
    ("send", "T1", 1, b"\xff" * 300, "\u00e9t\u00e9"),
    ("commit", "G1", "T1", 0, 1),
    ("pull", "G1", "T1", 1, 0, True),
    ("batch", "T1", 0, 32),
]


def _write(path, pure: bool) -> None:
    env = dict(_env(), **{compiled.ENV: "1" if pure else "0"})
    script = (
        "import sys, trio; from tests.replay_histories import run_history; "
        f"trio.run(run_history, sys.argv[1], {HISTORY!r})"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(path)], env=env, cwd=ROOT, check=True, timeout=120
    )


def _verify(*args: str, pure: bool) -> subprocess.CompletedProcess:
    return cli("verify", *args, env=dict(_env(), **{compiled.ENV: "1" if pure else "0"}))


@pytest.mark.parametrize("written_pure", [True, False], ids=["written-pure", "written-compiled"])
def test_a_log_written_by_one_path_verifies_under_the_other(tmp_path, written_pure):
    _write(tmp_path / "d", pure=written_pure)
    done = _verify("--data-dir", str(tmp_path / "d"), pure=not written_pure)
    assert done.returncode == 0, done.stdout + done.stderr


def test_both_paths_write_identical_logs_and_projections(tmp_path):
    _write(tmp_path / "pure", pure=True)
    _write(tmp_path / "compiled", pure=False)
    done = _verify(
        "--data-dir", str(tmp_path / "pure"), "--against", str(tmp_path / "compiled"), pure=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(valid_messages, max_size=6), st.data())
def test_place_batch(encoded, data):
    codes = data.draw(
        st.lists(ints, min_size=len(encoded), max_size=len(encoded) + data.draw(st.integers(0, 1)))
    )
    file_size = data.draw(st.one_of(st.integers(1, 2000), st.just(1 << 30), st.integers(-5, 0)))
    args = (
        encoded,
        codes,
        data.draw(ints),
        data.draw(st.one_of(st.integers(0, 1 << 40), ints)),
        data.draw(st.one_of(st.integers(0, 1 << 40), ints)),
        data.draw(ints),
        file_size,
        data.draw(st.sampled_from(["7F00000100002A9F", ""])),
    )
    same("place_batch", *args)
    same("place_batch", tuple(encoded), tuple(codes), *args[2:])


keyed_properties = st.dictionaries(
    st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "XKEYS", "KEYS\x01", "K"]),
    st.sampled_from(["", "a b", " k1  k2 ", "UNIQ_KEY\x01x", "KEYS\x01y", "\u00e9"]),
    max_size=4,
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.builds(
        _valid_message,
        encodable.filter(bool),
        st.binary(max_size=30),
        keyed_properties,
        st.integers(0, 0xFFFF),
        st.just((("127.0.0.1", 1), ("10.0.0.1", 2))),
    ),
    st.data(),
)
def test_message_keys(raw, data):
    same("message_keys", raw)
    same("message_keys", data.draw(damaged(st.just(raw))))
    same("message_keys", raw + b"\x02KEYS\x01tail")


# ---------------------------------------------------------------------- frames and headers
# The codec's references live in command.py, header.py and frames.py (their REFERENCE dicts,
# pure in either mode); both sides build the same RemotingCommand class.

I32 = st.integers(-(1 << 31), (1 << 31) - 1)
HOT_CODES = st.sampled_from([310, 320, 11, 15, 14, 0, 1, 17, 25, 26, 34, 9999])
ext_texts = st.text(alphabet=st.characters(codec=None), max_size=12)
commands = st.builds(
    command.RemotingCommand,
    code=st.one_of(HOT_CODES, I32),
    language=st.sampled_from(list(LanguageCode)),
    version=st.one_of(st.just(409), I32),
    opaque=I32,
    flag=st.sampled_from([0, 1, 2, 3]) | I32,
    remark=st.none() | ext_texts,
    ext_fields=st.dictionaries(ext_texts, ext_texts, max_size=8),
    body=st.binary(max_size=64),
    serialize_type=st.sampled_from(list(SerializeType)),
)
# what the reference also takes: numbers, booleans and null among extFields, floats and numeric
# strings for ints, unknown keys, ordinals for the language
loose_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 40), 1 << 40)
    | st.floats(allow_nan=False)
    | ext_texts
    | st.sampled_from(["12", "1.0", "-0", "1e3", "JAVA", "GO"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ext_texts, inner, max_size=3),
    max_leaves=6,
)
header_objects = st.fixed_dictionaries(
    {},
    optional={
        "code": st.one_of(HOT_CODES, I32, loose_values),
        "extFields": st.dictionaries(ext_texts, ext_texts, max_size=6) | loose_values,
        "flag": st.one_of(I32, loose_values),
        "language": st.sampled_from(["JAVA", "CPP", "GO", "NOPE"]) | loose_values,
        "opaque": st.one_of(I32, loose_values),
        "remark": ext_texts | loose_values,
        "serializeTypeCurrentRPC": st.just("JSON"),
        "version": st.one_of(I32, loose_values),
        "unknownKey": loose_values,
    },
)


def _json_texts(obj: dict) -> st.SearchStrategy[bytes]:
    compact = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return st.sampled_from(
        [
            compact.encode("utf-8", "surrogatepass"),
            json.dumps(obj).encode(),  # ASCII escapes, blanks after separators
            json.dumps(obj, indent=1).encode(),
            compact.encode("utf-8", "replace"),
        ]
    )


def same_codec(name: str, *args) -> None:
    reference = {**command.REFERENCE, **header.REFERENCE, **frames.REFERENCE, **requests.REFERENCE}[
        name
    ]
    assert outcome(getattr(codec, name), *args) == outcome(reference, *args)


def _pure_frame(cmd: command.RemotingCommand) -> bytes:
    if cmd.serialize_type == SerializeType.JSON:
        head = header.REFERENCE["encode_json_header"](cmd)
    else:
        head = header.encode_rocketmq_header(cmd)
    return (
        struct.pack(
            ">iI", 4 + len(head) + len(cmd.body), (int(cmd.serialize_type) << 24) | len(head)
        )
        + head
        + cmd.body
    )


@given(commands)
def test_encode_json_header_and_frame(cmd):
    same_codec("encode_json_header", cmd)
    assert outcome(codec.encode_frame, cmd) == outcome(_pure_frame, cmd)


ascii_texts = st.text(alphabet=st.characters(max_codepoint=127), max_size=12)


@given(
    commands,
    st.dictionaries(ascii_texts, st.none() | ascii_texts, max_size=8),
    st.none() | ascii_texts,
)
def test_encode_json_header_of_ascii_text(cmd, fields, remark):
    """The header written at once (every text ASCII with nothing to escape; null values left out)
    or by parts (anything else): the reference's bytes either way."""
    cmd = dataclasses.replace(cmd, ext_fields=fields, remark=remark)
    same_codec("encode_json_header", cmd)
    assert outcome(codec.encode_frame, cmd) == outcome(_pure_frame, cmd)


@given(commands)
def test_decode_what_either_side_encoded(cmd):
    head = header.REFERENCE["encode_json_header"](cmd)
    same_codec("decode_json_header", head, cmd.body)
    same_codec("decode_json_header", bytearray(head), cmd.body)
    same_codec("decode_json_header", codec.encode_json_header(cmd), cmd.body)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(header_objects.flatmap(_json_texts), st.data())
def test_decode_json_header_of_any_text(text, data):
    same_codec("decode_json_header", text, b"body")
    same_codec("decode_json_header", data.draw(damaged(st.just(text))), b"")


@given(
    st.one_of(
        st.none(), st.dictionaries(ext_texts | st.integers(), loose_values | ints, max_size=6)
    ),
    st.one_of(HOT_CODES, st.sampled_from(list(ResponseCode))),
    st.none() | ext_texts,
    st.binary(max_size=16),
    commands,
)
def test_normalize_ext_fields_and_response_to(fields, code, remark, body, request):
    same_codec("normalize_ext_fields", fields)
    same_codec("response_to", request, code, remark, fields, body)


@given(commands)
def test_a_frame_decodes_through_the_connection_as_the_reference_decodes_it(cmd):
    from es_broker.remoting.connection import Connection

    try:
        data = _pure_frame(cmd)
    except EncodeError:
        assume(False)  # a ROCKETMQ header holds 16-bit code and version only
    head = data[8 : 8 + (struct.unpack_from(">I", data, 4)[0] & 0xFFFFFF)]
    if cmd.serialize_type == SerializeType.JSON:
        expected = header.REFERENCE["decode_json_header"](head, cmd.body)
    else:
        expected = header.decode_rocketmq_header(head, cmd.body)
    for split in (None, 9):  # in one read, and across two (the connection's other path)
        connection = Connection()
        for part in (data,) if split is None else (data[:split], data[split:]):
            connection.receive_data(part)
        assert connection.next_event() == expected


@given(commands, st.dictionaries(ext_texts, ext_texts, max_size=4))
def test_with_ext_fields(cmd, fields):
    same_codec("with_ext_fields", cmd, fields)
    assert codec.with_ext_fields(cmd, fields) == dataclasses.replace(cmd, ext_fields=fields)


# ---------------------------------------------------------------------- the declared-shape check


def _check_by_renaming(cmd: command.RemotingCommand) -> requests.Refusal | None:
    """The check as it reads a V2 header without the wire-name shortcut: rename every key first."""
    shape = requests.SHAPES[cmd.code]
    renamed = {shape.renames.get(k, k): v for k, v in cmd.ext_fields.items()}
    return requests.check(dataclasses.replace(cmd, ext_fields=renamed), shape=_plain_shape(shape))


def _plain_shape(shape: requests.RequestShape) -> requests.RequestShape:
    return requests.RequestShape(shape.code, shape.name, shape.fields, shape.body)


header_values = st.sampled_from(["", "0", "7", "-3", "+4", "Bench", "99999999999", "1x", "TBW102"])
v2_keys = st.sampled_from([*requests.SEND_V2_FIELDS, *requests.SEND_V2_FIELDS.values(), "bname"])


@given(
    st.sampled_from([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE]),
    st.dictionaries(v2_keys, header_values, max_size=16),
)
def test_a_v2_header_is_checked_as_its_renamed_v1_header(code, fields):
    cmd = command.request(code, fields, b"")
    assert requests.check(cmd) == _check_by_renaming(cmd)


shape_codes = st.sampled_from(sorted(requests.SHAPES))
field_values = st.one_of(
    header_values,
    st.sampled_from(
        ["true", "FALSE", "-0", "2147483648", "-9223372036854775809", "00012", "\u0661"]
    ),
    st.sampled_from(["9223372036854775807", "CONSUME_FROM_LAST_OFFSET", "TAG", "SQL92"]),
    st.text(max_size=5),
    st.text(min_size=250, max_size=300),
    st.from_regex(r"[0-9A-F]{32}", fullmatch=True),
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(shape_codes, st.data())
def test_check(code, data):
    shape = requests.SHAPES[code]
    names = [f.name for f in shape.fields] + list(shape.renames or ()) + ["unknown"]
    fields = data.draw(st.dictionaries(st.sampled_from(names), field_values, max_size=len(names)))
    if data.draw(st.booleans()):  # every declared field given a value of its kind
        for spec in shape.fields:
            fields.setdefault(spec.name, "1" if spec.kind is not requests.Kind.STR else "Bench")
    body = data.draw(st.sampled_from([b"", b"{}", b'{"a":1}', b"\xff", b"[1]"]))
    cmd = command.request(code, fields, body)
    same_codec("check", cmd)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(shape_codes, st.data())
def test_decode_builds_the_reference_header(code, data):
    """Decoding is the check: the same typed header, or the same refusal, either way."""
    shape = requests.SHAPES[code]
    names = [f.name for f in shape.fields] + list(shape.renames or ()) + ["unknown"]
    fields = data.draw(st.dictionaries(st.sampled_from(names), field_values, max_size=len(names)))
    if data.draw(st.booleans()):
        for spec in shape.fields:
            fields.setdefault(spec.name, "1" if spec.kind is not requests.Kind.STR else "Bench")
    body = data.draw(st.sampled_from([b"", b"{}", b"\xff"]))
    same_codec("decode", command.request(code, fields, body))


name_values = st.one_of(
    field_values,
    st.sampled_from(
        ["%RETRY%", "%DLQ%", "%RETRY%g", "a\x00b", "\x00", "", "\udcff", "\u00e9" * 40]
    ),
    st.sampled_from(["x" * n for n in (120, 121, 127, 128, 255, 256)]),
)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=300)
@given(shape_codes, st.data())
def test_check_text(code, data):
    """B-335: the same refusal, or None, either way: names and values that are not UTF-8 text,
    topic and group names with a NUL, a bare retry or dead-letter prefix, or too long for their
    keys (a deriving group's limit included), a remark."""
    shape = requests.SHAPES[code]
    names = [f.name for f in shape.fields] + list(shape.renames or ()) + ["unknown", "\udcff"]
    fields = data.draw(st.dictionaries(st.sampled_from(names), name_values, max_size=len(names)))
    remark = data.draw(st.sampled_from([None, "remark", "\udcff"]))
    cmd = dataclasses.replace(command.request(code, fields, b""), remark=remark)
    same_codec("check_text", cmd)
    back = {"group": data.draw(name_values), "originTopic": data.draw(name_values)}
    same_codec("check_text", command.request(int(RequestCode.CONSUMER_SEND_MSG_BACK), back, b""))


# ---------------------------------------------------------------------- the projections' loops


def same_projection(name: str, reference, *args) -> None:
    assert outcome(getattr(fast_projections, name), *args) == outcome(reference[name], *args)


unit_fields = st.one_of(ints, st.just(1.5), st.none())
units = st.lists(
    st.one_of(
        st.tuples(ints, ints, ints),
        st.lists(st.integers(0, 1 << 40), min_size=3, max_size=3),
        st.lists(unit_fields, max_size=4),
    ),
    max_size=6,
)


@given(st.one_of(units, units.map(tuple), st.just("T")), ints)
def test_queue_block(units, ts):
    same_projection("queue_block", consume_queue.REFERENCE, units, ts)


def _keyed_message(topic: str, props: dict[str, str], sys_flag: int) -> bytes:
    return ref.encode_fields(
        topic,
        0,
        b"body",
        props,
        0,
        sys_flag,
        0,
        0,
        0,
        ("127.0.0.1", 1),
        0,
        ("10.0.0.1", 2),
        0,
        0,
        None,
    )


index_values = st.one_of(
    st.sampled_from(["", "k1", " a  b ", "A" * 300, "x" * 600, "\u00e9 \u00e9"]), encodable
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.dictionaries(
                st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS"]), index_values, max_size=3
            ),
            st.sampled_from([0, 0x4, 0x8, 0xC, 0x10C]),
            st.booleans(),  # the bytes are present (False: expired before the index was built)
        ),
        max_size=5,
    ),
    st.sampled_from([b"T\x00", b"Topic" * 40 + b"\x00", "T"]),
    st.data(),
)
def test_index_entries(messages, topic, data):
    stored, unit_list = {}, []
    for i, (props, sys_flag, present) in enumerate(messages):
        # past 48 bits the reference refuses the offset (B-470); the twin hands it over
        phy = data.draw(st.sampled_from([1000 * i, (1 << 48) + i]))
        if present:
            stored[phy] = _keyed_message("T", props, sys_flag)
        unit_list.append([phy, 100, 0])
    if unit_list and data.draw(st.booleans()):
        unit_list[-1] = data.draw(
            st.one_of(st.tuples(ints, ints, ints), st.lists(ints, max_size=4))
        )
    read = stored.get  # message bytes by physical offset, as the commit log's chunks answer
    same_projection("index_entries", key_index.REFERENCE, read, unit_list, topic)
    same_projection("index_entries", key_index.REFERENCE, read, tuple(unit_list), topic)


# a consume queue's units as a pull reads them (`queue_units`): blocks of a few queues, in one
# database, read from wherever a cursor starts (the twin hands offsets past 2**62 back)
_QUEUES = (b"A\x00\x00\x00\x00\x01", b"A\x00\x00\x00\x00\x02", b"AB\x00\x00\x00\x00\x01")
_CQ_ENV = None


def _cq_env():
    global _CQ_ENV
    if _CQ_ENV is None:
        import tempfile

        import lmdb

        env = lmdb.open(tempfile.mkdtemp(prefix="cq-identity-"), max_dbs=2, map_size=1 << 24)
        _CQ_ENV = (env, env.open_db(b"cq_pages"))
    return _CQ_ENV


cq_units = st.lists(
    st.tuples(
        st.integers(-(1 << 63), (1 << 63) - 1),
        st.integers(-(1 << 31), (1 << 31) - 1),
        st.integers(-(1 << 63), (1 << 63) - 1),
        st.integers(-(1 << 63), (1 << 63) - 1),
    ),
    min_size=1,
    max_size=6,
)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_QUEUES),
            st.one_of(st.integers(0, 40), st.just((1 << 62) + 1), st.just((1 << 64) - 3)),
            cq_units,
        ),
        max_size=10,
    ),
    st.sampled_from(_QUEUES),
    st.one_of(st.integers(-3, 50), st.just(1 << 62), st.just(1 << 63)),
    st.one_of(st.integers(-3, 50), st.just((1 << 62) + 4), st.just(1 << 64)),
    st.binary(max_size=16),
    st.booleans(),
    st.booleans(),
)
def test_queue_units(blocks, queue, start, end, seek, timed, buffers):
    env, db = _cq_env()
    with env.begin(write=True, buffers=buffers) as txn:
        txn.drop(db, delete=False)
        for name, first, unit_rows in blocks:
            value = b"".join(consume_queue.UNIT.pack(*row) for row in unit_rows)
            txn.put(name + first.to_bytes(8, "big"), value, db=db)

        def read(units_of):
            cur = txn.cursor(db=db)
            if not cur.set_range(seek):
                cur.last()
            return outcome(lambda: list(units_of(cur, queue, start, end, timed)))

        assert read(fast_projections.queue_units) == read(consume_queue.REFERENCE["queue_units"])


# ---------------------------------------------------------------------- the commit log's reader


class _Chunks:
    """A transaction's `get` over commit-log chunks by their 8-byte big-endian offsets."""

    def __init__(self, stored: dict[bytes, object]) -> None:
        self.stored = stored
        self.gets = 0

    def get(self, key, default=None, db=None):
        assert db == "chunks"
        self.gets += 1
        return self.stored.get(key, default)


@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(8, 5000), st.sampled_from([0, 1, 2, 3, 7, 900])),
        max_size=12,
    ),
    st.integers(0, 5000),
    st.data(),
)
def test_commit_log_reader(messages, start, data):
    stream, phys = bytearray(start), []
    for seed, size, gap in messages:
        stream += bytes(gap)
        phys.append(len(stream))
        stream += struct.pack(">ii", size, -626843481) + bytes([seed]) * (size - 8)
    first = start - start % chunks.CHUNK
    stored: dict[bytes, object] = {
        struct.pack(">Q", at): bytes(stream[at : at + chunks.CHUNK])
        for at in range(first, len(stream), chunks.CHUNK)
    }
    if stored and data.draw(st.booleans()):  # a transaction answering memoryviews
        key = data.draw(st.sampled_from(sorted(stored)))
        stored[key] = memoryview(stored[key])  # type: ignore[arg-type]
    probes = st.one_of(
        st.sampled_from(phys or [0]),
        st.integers(0, len(stream) + 3000),
        st.sampled_from([-1, 1 << 63, 1 << 70, True, 2.0, "7"]),
    )
    reads = data.draw(st.lists(probes, max_size=20))
    fast_reader = fast_log.Reader(_Chunks(stored), "chunks")
    reference = chunks.REFERENCE["reader"](_Chunks(stored), "chunks")
    for phy in reads:  # in turn: each keeps a window of what it read before
        assert outcome(fast_reader, phy) == outcome(reference, phy)


def test_commit_log_reader_reads_each_chunk_once_for_adjacent_messages():
    stream = b"".join(struct.pack(">ii", 700, -626843481) + bytes([i]) * 692 for i in range(30))
    stored = {
        struct.pack(">Q", at): stream[at : at + chunks.CHUNK]
        for at in range(0, len(stream), chunks.CHUNK)
    }
    for make in (fast_log.Reader, chunks.REFERENCE["reader"]):
        txn = _Chunks(stored)
        read = make(txn, "chunks")
        assert [read(700 * i) for i in range(30)] == [
            stream[700 * i : 700 * (i + 1)] for i in range(30)
        ]
        assert txn.gets == len(stored)


# ---------------------------------------------------------------------- the send path's loop

send_properties = st.dictionaries(
    st.one_of(texts, st.sampled_from(["WAIT", "CLUSTER", "TAGS", "DELAY"])),
    st.one_of(texts, st.just("\ud800")),
    max_size=5,
)
messages_in = st.builds(
    placement.MessageIn,
    st.one_of(st.binary(max_size=60), st.just(bytearray(b"b"))),
    send_properties,
    ints,
    ints,
    ints,
    hosts,
    ints,
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(messages_in, messages_in.map(tuple)),
        max_size=5,
    ),
    st.one_of(texts, st.just("T" * 128)),
    st.one_of(ints, st.just(3)),
    st.one_of(texts, st.just("DefaultCluster")),
    st.one_of(hosts, st.just(("10.0.0.1", 10911))),
    st.one_of(st.integers(0, 100), st.just(4 << 20), st.just(1.5)),
    st.one_of(st.integers(0, 300), st.just(1 << 30)),
)
def test_encode_batch(batch, topic, queue_id, cluster, store_host, max_body, file_size):
    args = (topic, queue_id, batch, cluster, store_host, max_body, file_size)
    expected = outcome(store_messages.REFERENCE["encode_batch"], *args)
    assert outcome(fast_commands.encode_batch, *args) == expected
    assert outcome(fast_commands.encode_batch, *args[:2], tuple(batch), *args[3:]) == expected


# ---------------------------------------------------------------------- a consumer's pull body

tagged_messages = st.builds(
    _valid_message,
    st.one_of(encodable.filter(bool), st.just("Bench")),
    st.one_of(st.binary(max_size=50), st.just(zlib.compress(b"packed"))),
    st.dictionaries(
        st.one_of(encodable, st.sampled_from(["TAGS", "MIN_OFFSET", "MAX_OFFSET"])),
        st.one_of(encodable, st.sampled_from(["A", "B"])),
        max_size=4,
    ),
    st.one_of(st.integers(0, 0xFFFF), st.sampled_from([0, 0x1, 0x301, 0x101])),
    st.tuples(
        st.sampled_from([("127.0.0.1", 1), ("10.0.0.9", 65535)]),
        st.sampled_from([("192.168.1.1", 10911), ("1.2.3.4", -5)]),
    ),
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(tagged_messages, max_size=4).map(b"".join),
    st.sampled_from([frozenset(), frozenset({"A"}), frozenset({"A", "B"})]),
    st.data(),
)
def test_decode_pull_body(pull_body, tags_set, data):
    queue = client_messages.MessageQueue("Bench", "broker-a", 3)
    reference = client_messages.REFERENCE["decode_pull_body"]
    for body in (pull_body, data.draw(damaged(st.just(pull_body))), bytearray(pull_body)):
        bounds = (data.draw(ints), data.draw(st.integers(0, 1 << 40)))
        args = (body, queue, tags_set, *bounds)
        assert outcome(fast.decode_pull_body, *args) == outcome(reference, *args)


# ---------------------------------------------------------------------- a record's check


class _Level(enum.IntEnum):
    LOW = 1
    HUGE = 1 << 64


class _Text(str):
    pass


record_scalars = st.one_of(
    ints,
    st.integers(-(1 << 70), 1 << 70),
    st.sampled_from([-(1 << 63) - 1, 1 << 62, -(1 << 62), 1 << 60, -(1 << 60) - 1]),
    texts,
    st.sampled_from(["\ud800", "a\udfffb", "\u00e9", "x" * (records.MAX_TEXT + 1)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.binary(max_size=8),
    st.sampled_from([_Level.LOW, _Level.HUGE, _Text("t"), _Text("\ud800"), bytearray(b"b")]),
    st.sampled_from([{1}, frozenset(), object, 1j]),
)
record_keys = st.one_of(texts, ints, st.none(), st.tuples(ints), st.just(_Text("k")))
record_values = st.recursive(
    record_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(record_keys, inner, max_size=3),
    ),
    max_leaves=12,
)
range_fields = st.dictionaries(
    st.sampled_from(sorted(records.FIELD_RANGES)),
    st.one_of(st.integers(-3, 3), st.sampled_from([(1 << 31) - 1, 1 << 31, 1 << 63]), texts),
    max_size=3,
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.just("messages_stored"), texts, ints),
    st.dictionaries(texts, record_values, max_size=5),
    range_fields,
    st.booleans(),
)
def test_record_check(kind, fields, ranged, typed):
    record = {"type": kind, "v": 1, "ts": 5, **fields, **ranged}
    if not typed:
        del record["type"]  # a misfit then raises the reference's KeyError
    reference = records.REFERENCE["check"]
    expected = outcome(reference, record)
    assert outcome(fast_log.check, record) == expected
    if expected[0] == "ok":  # the record itself, not a copy
        assert fast_log.check(record) is record


@given(st.one_of(record_values, st.just([[[[[[[[[[[[[[[[[[[1 << 64]]]]]]]]]]]]]]]]]]])))
def test_record_check_of_what_is_not_a_record_map(value):
    reference = records.REFERENCE["check"]
    assert outcome(fast_log.check, value) == outcome(reference, value)
    deep = {"type": "t", "deep": value}
    assert outcome(fast_log.check, deep) == outcome(reference, deep)


# ---------------------------------------------------------------------- a record's msgpack bytes

packed_scalars = st.one_of(
    record_scalars,
    st.sampled_from([(1 << 64) - 1, 1 << 64, -(1 << 63) - 1, -0x21, -0x81, -0x8001, 0xFFFF]),
    st.sampled_from([-0x80000001, 0xFFFFFFFF, 1 << 32, 0x7F, 0x80, 0xFF, 0x100, -0x20]),
    st.text(max_size=300),
    st.sampled_from(["x" * 31, "x" * 32, "\u00e9" * 128, "y" * 65536, b"z" * 65536, b"w" * 256]),
    st.binary(max_size=300),
)
packed_values = st.recursive(
    packed_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=20),
        st.lists(inner, max_size=20).map(tuple),
        st.dictionaries(
            st.one_of(record_keys, st.binary(max_size=4), st.floats()), inner, max_size=17
        ),
    ),
    max_leaves=40,
)


def _nested(depth: int, leaf: object) -> object:
    for n in range(depth):
        leaf = [leaf] if n % 2 else {"k": leaf}
    return leaf


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(packed_values, st.integers(0, 600).map(lambda d: _nested(d, 1))))
def test_packb(value):
    expected = outcome(records.REFERENCE["packb"], value)
    assert outcome(fast_log.packb, value) == expected
    assert outcome(msgpack.Packer(use_bin_type=True).pack, value) == expected


def test_packb_writes_a_records_values_itself():
    """The twin hands the reference only what it does not write: a record's usual values it
    packs itself (the reference's frame never runs)."""
    record = {
        "type": "messages_stored",
        "v": 1,
        "ts": 1795921818834,
        "units": [[1 << 40, 1100, -7], (0, 0x80, -0x81)],
        "topic": "T\u00e9" * 20,
        "body": b"b" * 300,
        "rate": 1.5,
        "flags": [None, True, False],
        "nested": {"k": {"deep": [1, 2]}},
    }
    frames = []

    def seen(frame, event, arg):
        if event == "call":
            frames.append(frame.f_code)

    sys.setprofile(seen)
    try:
        raw = fast_log.packb(record)
    finally:
        sys.setprofile(None)
    assert raw == msgpack.packb(record, use_bin_type=True)
    assert records.REFERENCE["packb"].__code__ not in frames


# ---------------------------------------------------------------------- a record object's slots

record_classes = st.sampled_from(
    [types.MessagesStored, types.MessagesDelivered, types.OffsetCommitted]
)


def _slots(obj, names):
    """What each slot holds after a fill (unset ones read as the error they raise)."""
    return [outcome(getattr, obj, name) for name in names]


@given(record_classes, record_classes, st.lists(record_scalars, max_size=12), st.data())
def test_fill_a_record_objects_slots(cls, other, values, data):
    names = [f.name for f in dataclasses.fields(cls)]
    members = tuple(cls.__dict__[n] for n in names)
    shape = data.draw(st.sampled_from(["as built", "a list", "another class", "not members"]))
    if shape == "a list":
        members = list(members)  # type: ignore[assignment]
    elif shape == "another class":  # a descriptor for another class' objects: the same TypeError
        members = tuple(other.__dict__[f.name] for f in dataclasses.fields(other))
    elif shape == "not members" and members:
        members = (*members[:-1], data.draw(st.sampled_from([1, "x", property(len)])))
    if data.draw(st.booleans()):  # as many values as slots, as __init__ passes them
        values = (values + [None] * len(members))[: len(members)]
    packed = tuple(values) if data.draw(st.booleans()) else values
    fast_obj, ref_obj = object.__new__(cls), object.__new__(cls)
    assert outcome(fast_log.fill, fast_obj, members, packed) == outcome(
        typed.REFERENCE["fill"], ref_obj, members, packed
    )
    assert _slots(fast_obj, names) == _slots(ref_obj, names)


@given(
    st.sampled_from(sorted(st_name for st_name in typed._CLASSES)),
    st.data(),
)
def test_a_record_class_builds_the_same_object_either_way(kind, data):
    cls = typed._CLASSES[kind]
    fields = dataclasses.fields(cls)
    values = {f.name: data.draw(record_scalars) for f in fields}
    built = cls(**values)
    by_reference = object.__new__(cls)
    typed.REFERENCE["fill"](
        by_reference, tuple(cls.__dict__[f.name] for f in fields), tuple(values.values())
    )
    assert built == by_reference
    assert [getattr(built, f.name) for f in fields] == list(values.values())
