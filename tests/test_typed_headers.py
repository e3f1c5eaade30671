"""Request headers are typed classes declared once: the shape table, the check, the processors'
reads and the clients' writes all come from them (es_broker/remoting/headers.py)."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from es_broker.acl.access import AccessControl, AclSources
from es_broker.acl.rules import BROKER_RULES
from es_broker.acl.signing import sign
from es_broker.remoting import requests
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import bind_header, request
from es_broker.remoting.errors import MissingField
from es_broker.remoting.header_fields import NO_HEADER, rules_of
from es_broker.remoting.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from tests.acl_fixtures import ACL_YAML, PRODUCER


def _sample(shape: requests.RequestShape) -> dict[str, str]:
    """A conforming value of every declared field, by its Java name."""
    out = {}
    for rule in shape.fields:
        if rule.kind is requests.Kind.STR:
            if rule.pattern is not None:
                out[rule.name] = "0A" * 16
            elif rule.choices:
                out[rule.name] = sorted(rule.choices)[0]
            else:
                out[rule.name] = "Bench"
        elif rule.kind is requests.Kind.BOOL:
            out[rule.name] = "true"
        else:
            out[rule.name] = str(max(rule.min or 0, 1) if rule.max is None else rule.min)
    return out


def test_every_declared_shape_is_its_header_class() -> None:
    for code, shape in requests.SHAPES.items():
        if shape.header is None:
            assert shape.fields == (), code
            continue
        assert shape.fields == rules_of(shape.header), code
        assert dataclasses.is_dataclass(shape.header) and shape.header.__slots__, code


@pytest.mark.parametrize("code", sorted(requests.SHAPES))
def test_decoding_builds_the_header_its_fields_write(code: int) -> None:
    shape = requests.SHAPES[code]
    cmd = request(code, _sample(shape), b"{}" if shape.body is not None else b"")
    decoded = requests.decode(cmd)
    if shape.body is not None and isinstance(decoded, requests.Refusal):
        return  # a body this sample does not hold; the header part is the same
    assert not isinstance(decoded, requests.Refusal), decoded
    if shape.header is None:
        assert decoded is NO_HEADER
        return
    assert type(decoded) is shape.header
    again = requests.decode(request(code, decoded.to_fields(code)))
    assert again == decoded


def test_a_refused_header_is_the_same_refusal_as_the_check() -> None:
    cmd = request(RequestCode.PULL_MESSAGE, {"consumerGroup": "G", "topic": "T", "queueId": "-1"})
    refusal = requests.decode(cmd)
    assert refusal == requests.check(cmd)
    assert refusal == requests.Refusal(
        ResponseCode.SYSTEM_ERROR, "PULL_MESSAGE: header field 'queueId' must be >= 0, got -1"
    )


def test_the_processor_reads_the_header_the_edge_decoded() -> None:
    fields = {"consumerGroup": "G", "topic": "T", "queueId": "1", "commitOffset": "5"}
    cmd = request(RequestCode.UPDATE_CONSUMER_OFFSET, fields)
    decoded = requests.decode(cmd)
    bind_header(cmd, decoded)
    assert UpdateConsumerOffsetRequestHeader.of(cmd) is decoded
    assert decoded == UpdateConsumerOffsetRequestHeader(
        consumer_group="G", topic="T", queue_id=1, commit_offset=5
    )


def test_a_header_read_without_the_edge_names_its_first_missing_field() -> None:
    with pytest.raises(MissingField, match="'topic'"):
        PullMessageRequestHeader.of(request(RequestCode.PULL_MESSAGE, {"consumerGroup": "G"}))


def test_a_client_writes_the_v2_letters_and_the_java_names_from_one_class() -> None:
    header = SendMessageRequestHeader(topic="T", queue_id=1, sys_flag=0, born_timestamp=2)
    assert header.to_fields(RequestCode.SEND_MESSAGE_V2) == {
        "b": "T",
        "e": "1",
        "f": "0",
        "g": "2",
    }
    assert header.to_fields(RequestCode.SEND_MESSAGE) == {
        "topic": "T",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "2",
    }


class _Channel:
    remote = ("127.0.0.1", 40000)

    def __init__(self) -> None:
        self.attributes: dict[str, Any] = {}


def test_b420_a_v2_send_naming_its_topic_in_java_is_checked_against_that_topic(
    tmp_path: Path,
) -> None:
    """B-420: the ACL reads a V2 send's topic as the send path does, under its letter or its Java name."""
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_YAML)
    control = AccessControl(AclSources(acl_file, tmp_path / "acl"), BROKER_RULES)
    letters = SendMessageRequestHeader(
        producer_group="PG", topic="TopicD", queue_id=0, sys_flag=0, born_timestamp=1
    ).v2_fields()
    letters["topic"] = letters.pop("b")  # the topic under its Java name, the rest in letters
    fields = sign(letters, b"body", PRODUCER.access_key, PRODUCER.secret_key)
    send = request(RequestCode.SEND_MESSAGE_V2, fields, b"body")
    assert SendMessageRequestHeader.of(send).topic == "TopicD"  # where the send path stores it
    refusal = control.check(_Channel(), send)
    assert refusal is not None and "permission for topic:TopicD" in refusal.remark
    allowed = dict(letters, topic="TopicA")
    fields = sign(allowed, b"body", PRODUCER.access_key, PRODUCER.secret_key)
    assert control.check(_Channel(), request(RequestCode.SEND_MESSAGE_V2, fields, b"body")) is None


def test_reset_modes_on_the_wire_are_the_reset_records_modes() -> None:
    """The dashboard offers RESET_OFFSET's modes from the wire's vocabulary (it imports nothing of
    the log); they are the ResetMode values the reset records."""
    from es_broker.log.vocabulary import ResetMode
    from es_broker.remoting.es_headers import RESET_MODES

    assert set(RESET_MODES) == {mode.value for mode in ResetMode}


# -- the generated writers (header_fields._writer) against the loop they replaced ----------


def _loop_fields(header, code=None):
    """A header's extFields as a loop over its fields writes them: the reference of `to_fields`."""
    from es_broker.remoting.command import ext_value_to_str
    from es_broker.remoting.header_fields import rules_of

    v2 = code is not None and header.uses_v2_names(code)
    out = {}
    for rule in rules_of(type(header)):
        value = getattr(header, rule.attr)
        if value is None:
            continue
        kind = type(value)
        if kind is str:
            out[rule.v2 or rule.name if v2 else rule.name] = value
        elif kind is int:
            out[rule.v2 or rule.name if v2 else rule.name] = str(value)
        elif kind is bool:
            out[rule.v2 or rule.name if v2 else rule.name] = "true" if value else "false"
        else:
            out[rule.v2 or rule.name if v2 else rule.name] = ext_value_to_str(value) or ""
    return out


def _header_classes():
    from es_broker.remoting import es_headers, headers, response_headers  # noqa: F401
    from es_broker.remoting.header_fields import CustomHeader

    found, todo = [], [CustomHeader]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if dataclasses.is_dataclass(sub):
                found.append(sub)
    return sorted(found, key=lambda c: c.__qualname__)


class _Level(enum.IntEnum):
    LOW = 1


class _Word(enum.StrEnum):
    WORD = "word"


_ODD = st.sampled_from([_Level.LOW, _Word.WORD, 1.5, "text", 7, True, False])


@pytest.mark.parametrize("cls", _header_classes(), ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_headers_generated_writer_writes_what_the_loop_over_its_fields_did(cls, data):
    """Every header class: values of the field's kind, None, and values of another type (an
    enum, a float, text in a number's field) are written as the loop over the fields wrote
    them, under both name sets."""
    from es_broker.remoting.header_fields import Kind, rules_of

    kinds = {
        Kind.STR: st.text(max_size=8),
        Kind.INT: st.integers(-(2**31), 2**31 - 1),
        Kind.LONG: st.integers(-(2**63), 2**63 - 1),
        Kind.BOOL: st.booleans(),
    }
    values = {
        rule.attr: data.draw(st.one_of(st.none(), kinds[rule.kind], _ODD)) for rule in rules_of(cls)
    }
    header = cls(**values)
    for code in (None, 310, 320):
        assert header.to_fields(code) == _loop_fields(header, code)
        assert list(header.to_fields(code)) == list(_loop_fields(header, code))
