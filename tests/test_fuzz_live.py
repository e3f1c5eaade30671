"""Fuzzing a live broker process: no frame, however malformed, takes it down (B-135).

Hypothesis generates batches of frames: requests of every served code built
from their declared shapes (es_broker.remoting.requests) with fields and
bodies mutated (out-of-range numbers, wrong types, missing fields, hostile
JSON, random bytes), truncated frames, random bytes and huge or negative
length prefixes. After each batch a fresh connection must be served, the
process must be alive with a bounded RSS; at the end the broker's log must
hold no traceback.

ES_BROKER_FUZZ_FRAMES sets how many frames (default 20,000);
ES_BROKER_FUZZ_RANDOM=1 draws new examples instead of the fixed sequence.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from es_broker.remoting.codes import RequestCode, ResponseCode, SerializeType
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.connection import CLOSED, NEED_DATA, Connection
from es_broker.remoting.errors import CommandError
from es_broker.remoting.frames import encode_frame
from es_broker.remoting.headers import SEND_V1_FIELDS
from es_broker.remoting.requests import SHAPES, HeaderField, Kind, RequestShape
from tests.process_fixtures import serve

FRAMES = int(os.environ.get("ES_BROKER_FUZZ_FRAMES", "20000"))
RANDOM = os.environ.get("ES_BROKER_FUZZ_RANDOM") == "1"
BATCH = 100
RSS_BOUND_KIB = 512 * 1024
TOPIC, GROUP = "FuzzTopic", "fuzz_group"

# names the edge must refuse (B-335, B-336): a lone surrogate (the JSON escape \ud800), a NUL,
# names over the byte limits, and groups whose derived %RETRY%/%DLQ% names are over them
LONE_SURROGATES = st.sampled_from(["\ud800", "\udfff", "\udc80", "\ud83d"]).map(
    lambda lone: st.sampled_from([f"T{lone}", f"{GROUP}{lone}", lone, f"%RETRY%{lone}"])
)
OVER_LONG_NAMES = st.sampled_from(
    [
        "G" * 120,
        "G" * 121,
        "G" * 127,
        "G" * 128,
        "G" * 255,
        "G" * 256,
        "%RETRY%" + "G" * 120,
        "%RETRY%" + "G" * 121,
        "%DLQ%" + "G" * 122,
        "%RETRY%" + "G" * 255,
        "%DLQ%" + "G" * 255,
        "\u00e9" * 64,
        "\U0001f600" * 32,
        "T\x00x",
    ]
)
HOSTILE_NAMES = st.one_of(LONE_SURROGATES.flatmap(lambda names: names), OVER_LONG_NAMES)
NAMES = st.sampled_from(
    [
        TOPIC,
        GROUP,
        "TBW102",
        f"%RETRY%{GROUP}",
        f"%DLQ%{GROUP}",
        "SCHEDULE_TOPIC_XXXX",
        "DefaultCluster",
        "broker-a",
        "x",
        "127.0.0.1:10911",
    ]
)
MAYBE_HOSTILE_NAMES = st.one_of(NAMES, NAMES, NAMES, HOSTILE_NAMES)
HOSTILE_TEXT = st.one_of(
    HOSTILE_NAMES,
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            " ",
            "-",
            "+",
            "0x1F",
            "1e30",
            "1.5",
            "NaN",
            "true",
            "null",
            "9" * 30,
            "-" + "9" * 30,
            "\x00",
            "%",
            "a" * 300,
            "\u202e",
            "9223372036854775808",
            "-9223372036854775809",
            "2147483648",
            "-2147483649",
        ]
    ),
    st.integers().map(str),
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | HOSTILE_NAMES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


def field_value(spec: HeaderField) -> st.SearchStrategy[str]:
    """A value that conforms to the field's declaration."""
    if spec.kind is Kind.STR:
        return st.sampled_from(sorted(spec.choices)) if spec.choices else MAYBE_HOSTILE_NAMES
    if spec.kind is Kind.BOOL:
        return st.sampled_from(["true", "false"])
    lo, hi = spec.min if spec.min is not None else -5, spec.max if spec.max is not None else 1 << 40
    small = st.integers(max(lo, -5), min(hi, 64))
    return st.one_of(small, small, st.integers(lo, hi)).map(str)


def subscription() -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries(
        {
            "topic": MAYBE_HOSTILE_NAMES,
            "subString": st.sampled_from(["*", "TagA", "TagA || TagB", ""]),
            "subVersion": st.integers(0, 1 << 40),
            "expressionType": st.sampled_from(["TAG", "SQL92", "tag"]),
        }
    )


def json_body(shape: RequestShape) -> st.SearchStrategy[object]:
    """A body of the right structure for the JSON-bodied codes; None for the others."""
    code = shape.code
    if code == RequestCode.HEART_BEAT:
        consumer = st.fixed_dictionaries(
            {
                "groupName": MAYBE_HOSTILE_NAMES,
                "consumeType": st.sampled_from(["CONSUME_PASSIVELY", "CONSUME_ACTIVELY"]),
                "messageModel": st.sampled_from(["CLUSTERING", "BROADCASTING"]),
                "consumeFromWhere": st.sampled_from(
                    ["CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", 4]
                ),
                "subscriptionDataSet": st.lists(subscription(), max_size=2),
                "unitMode": st.booleans(),
            }
        )
        return st.fixed_dictionaries(
            {
                "clientID": MAYBE_HOSTILE_NAMES,
                "consumerDataSet": st.lists(consumer, max_size=2),
                "producerDataSet": st.lists(
                    st.fixed_dictionaries({"groupName": NAMES}), max_size=2
                ),
            }
        )
    if code == RequestCode.CHECK_CLIENT_CONFIG:
        return st.fixed_dictionaries(
            {"clientId": NAMES, "group": NAMES, "subscriptionData": subscription()}
        )
    if code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        mq = st.fixed_dictionaries(
            {"topic": MAYBE_HOSTILE_NAMES, "brokerName": NAMES, "queueId": st.integers(0, 8)}
        )
        return st.fixed_dictionaries(
            {
                "consumerGroup": MAYBE_HOSTILE_NAMES,
                "clientId": NAMES,
                "mqSet": st.lists(mq, max_size=3),
            }
        )
    if code == RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:
        return st.fixed_dictionaries(
            {
                "groupName": MAYBE_HOSTILE_NAMES,
                "retryQueueNums": st.integers(0, 4),
                "retryMaxTimes": st.integers(-1, 20),
                "brokerId": st.integers(0, 2),
            }
        )
    return st.none()


def mutate_json(value: object) -> st.SearchStrategy[object]:
    """The body with one value replaced by anything JSON can hold, or a whole other JSON value."""
    if isinstance(value, dict) and value:
        return st.sampled_from(sorted(value)).flatmap(
            lambda key: st.one_of(
                JSON_VALUES,
                st.integers(min_value=1 << 63),
                st.integers(max_value=-(1 << 63) - 1),
                mutate_json(value[key]),
            ).map(lambda new: {**value, key: new})
        )
    if isinstance(value, list) and value:
        return st.integers(0, len(value) - 1).flatmap(
            lambda i: mutate_json(value[i]).map(lambda new: [*value[:i], new, *value[i + 1 :]])
        )
    return JSON_VALUES


@st.composite
def shaped_request(draw: st.DrawFn) -> RemotingCommand:
    """A request of a served code, each field and the body valid or mutated."""
    shape: RequestShape = draw(st.sampled_from(sorted(SHAPES.values(), key=lambda s: s.code)))
    fields: dict[str, str] = {}
    for spec in shape.fields:
        choice = draw(st.integers(0, 9))
        if choice == 0 and not spec.required:
            continue
        if choice == 1:
            continue  # a required field missing, or an optional one absent
        fields[spec.name] = draw(HOSTILE_TEXT if choice == 2 else field_value(spec))
    if draw(st.booleans()):
        fields.update(draw(st.dictionaries(st.text(max_size=8), HOSTILE_TEXT, max_size=2)))
    if shape.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        fields = {SEND_V1_FIELDS.get(k, k): v for k, v in fields.items()}
    structured = draw(json_body(shape))
    body_kind = draw(st.integers(0, 5))
    if body_kind == 0:
        body = draw(st.binary(max_size=200))
    elif body_kind == 1:
        body = json.dumps(draw(JSON_VALUES)).encode()
    elif structured is not None and body_kind == 2:
        body = json.dumps(draw(mutate_json(structured))).encode()
    elif structured is not None:
        body = json.dumps(structured).encode()
    else:
        body = draw(st.binary(max_size=64))
    oneway = draw(st.integers(0, 19)) == 0
    serialize = draw(st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))
    if shape.code > 0x7FFF:  # RocketMQ 5's pop codes: a ROCKETMQ header holds a 16-bit code
        serialize = SerializeType.JSON
    return request(
        shape.code,
        fields,
        body,
        oneway=oneway,
        version=draw(st.sampled_from([409, 121, 0, -1, 32767])),
        serialize_type=serialize,
    )


@st.composite
def breaking_frame(draw: st.DrawFn) -> bytes:
    """Bytes that break the framing: the broker closes that connection."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.binary(min_size=1, max_size=300))
    if kind == 1:  # a length prefix beyond the maximum, or negative, or too small
        return struct.pack(
            ">i", draw(st.sampled_from([1 << 30, 0x7FFFFFFF, -1, 0, 3, 16 * 1024 * 1024 + 1]))
        )
    frame = wire_frame(draw(shaped_request()))
    if kind == 2:  # truncated: the connection closes mid-frame
        return frame[: draw(st.integers(1, len(frame) - 1))]
    if kind == 3:  # a header length overrunning the frame
        return frame[:4] + struct.pack(">I", 0x00FFFFFF) + frame[8:]
    return frame[:8] + draw(st.binary(min_size=1, max_size=40)) + frame[8:]  # a corrupted header


ITEMS = st.one_of(shaped_request(), shaped_request(), shaped_request(), breaking_frame())


def wire_frame(cmd: RemotingCommand) -> bytes:
    """The frame of `cmd` with its text as a hostile peer writes it: a lone surrogate as the JSON
    escape \\ud800 in a JSON header, as the bytes ED A0 80 (not UTF-8) in a ROCKETMQ one, where a
    name may also carry a raw byte that is not UTF-8 (B-335). encode_frame would write "?"."""
    if cmd.serialize_type is SerializeType.JSON:
        obj: dict[str, object] = {
            "code": cmd.code,
            "language": cmd.language.name,
            "version": cmd.version,
            "opaque": cmd.opaque,
            "flag": cmd.flag,
            "extFields": cmd.ext_fields,
        }
        header = json.dumps(obj).encode()
        kind = 0
    else:

        def text(value: str) -> bytes:
            raw = value.encode("utf-8", "surrogatepass")
            return raw.replace(b"\xc3\xa9", b"\xe9")  # é as Latin-1: a byte that is not UTF-8

        ext = b"".join(
            struct.pack(">h", len(k := text(key)))
            + k
            + struct.pack(">i", len(v := text(value)))
            + v
            for key, value in cmd.ext_fields.items()
        )
        header = (
            struct.pack(
                ">hbhiiii",
                cmd.code,
                cmd.language.value,
                cmd.version,
                cmd.opaque,
                cmd.flag,
                0,
                len(ext),
            )
            + ext
        )
        kind = 1
    body = cmd.body
    return (
        struct.pack(">iI", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body
    )


def _connect(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


ANSWERS: Counter[int] = Counter()  # response codes seen, for the summary


def _held(command: RemotingCommand) -> bool:
    """A pull that asks to be held (sysFlag suspend bit): answered when a message arrives or it times out."""
    if command.code != RequestCode.PULL_MESSAGE:
        return False
    try:
        return bool(command.require_int("sysFlag") & 0x2)
    except CommandError:
        return False


def _send_framed(addr: str, commands: list[RemotingCommand]) -> None:
    """Pipeline the requests on one connection and read until every one that wants an answer has it.

    Held pulls are not waited for. Every other request must be answered: a request the
    broker swallowed would hang here until the socket timeout fails the test.
    """
    numbered = [dataclasses.replace(c, opaque=n) for n, c in enumerate(commands, start=1)]
    waiting = {c.opaque for c in numbered if not c.is_oneway and not _held(c)}
    with _connect(addr) as sock:
        sock.sendall(b"".join(wire_frame(c) for c in numbered))
        conn = Connection()
        while waiting:
            event = conn.next_event()
            assert event is not CLOSED, (
                "the broker closed a connection that sent only well-framed requests"
            )
            if event is NEED_DATA:
                conn.receive_data(sock.recv(1 << 16))
                continue
            if event.is_response:
                ANSWERS[event.code] += 1
                waiting.discard(event.opaque)


def _send_breaking(addr: str, data: bytes) -> None:
    with _connect(addr) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(1 << 16):
                pass
        except OSError:
            pass


def _served(addr: str) -> bool:
    with _connect(addr) as sock:
        sock.sendall(encode_frame(request(RequestCode.GET_BROKER_RUNTIME_INFO, opaque=1)))
        conn = Connection()
        while (event := conn.next_event()) is NEED_DATA:
            conn.receive_data(sock.recv(1 << 16))
        return event is not CLOSED and event.code == ResponseCode.SUCCESS


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _prepare(addr: str) -> None:
    """A topic with messages and a group, so that fuzzed requests reach real data."""
    setup = [
        request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": TOPIC, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
            opaque=1,
        )
    ]
    for n in range(16):
        setup.append(
            request(
                RequestCode.SEND_MESSAGE,
                {
                    "producerGroup": "pg",
                    "topic": TOPIC,
                    "queueId": n % 4,
                    "sysFlag": 0,
                    "bornTimestamp": 1,
                    "flag": 0,
                    "properties": "TAGS\x01TagA\x02",
                },
                b"body %d" % n,
                opaque=2 + n,
            )
        )
    _send_framed(addr, setup)


def test_fuzzed_frames_never_take_the_broker_down(tmp_path):
    log_file = tmp_path / "broker.log"
    sent = {"framed": 0, "breaking": 0, "batches": 0}
    with serve(tmp_path / "data", log_file=log_file) as broker:
        addr, pid = broker.broker, broker.process.pid
        _prepare(addr)

        @settings(
            max_examples=max(FRAMES // BATCH, 1),
            deadline=None,
            database=None,
            derandomize=not RANDOM,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(st.lists(ITEMS, min_size=BATCH, max_size=BATCH))
        def batch(items: list[RemotingCommand | bytes]) -> None:
            framed = [item for item in items if isinstance(item, RemotingCommand)]
            _send_framed(addr, framed)
            for item in items:
                if isinstance(item, bytes):
                    _send_breaking(addr, item)
            sent["framed"] += len(framed)
            sent["breaking"] += len(items) - len(framed)
            sent["batches"] += 1
            assert broker.process.poll() is None, "the broker process exited"
            assert _served(addr), "a fresh connection was not served"
            assert _rss_kib(pid) < RSS_BOUND_KIB, f"RSS {_rss_kib(pid)} KiB"

        batch()
        rss = _rss_kib(pid)
    total = sent["framed"] + sent["breaking"]
    log_text = log_file.read_text()
    print(
        f"fuzz: {total} frames ({sent['framed']} well framed, {sent['breaking']} breaking the framing) "
        f"in {sent['batches']} batches; {log_text.count('Traceback')} tracebacks in the broker's log; "
        f"broker RSS at the end {rss // 1024} MiB; answers by code {dict(sorted(ANSWERS.items()))}"
    )
    first = log_text.find("Traceback")
    assert first == -1, (
        f"{log_text.count('Traceback')} tracebacks; the first:\n{log_text[first - 300 : first + 3000]}"
    )
    assert total >= min(FRAMES, 50000) * 0.99
