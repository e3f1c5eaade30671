"""The fastjson dialect (docs/protocol.md §9.1): bare numeric keys and object keys."""

from __future__ import annotations

import pytest

from es_broker.remoting import BodyDecodeError, MessageQueue, ObjectKey
from es_broker.remoting.fastjson import dumps, freeze, loads


def test_loads_reads_standard_json() -> None:
    assert loads(b'{"a":[1,2.5,"x",true,null]}') == {"a": [1, 2.5, "x", True, None]}


def test_loads_reads_bare_integer_keys_as_ints() -> None:
    assert loads('{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911",-1:"x"}}') == {
        "brokerAddrs": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911", -1: "x"}
    }


def test_loads_reads_object_keys_as_object_keys() -> None:
    value = loads('{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:12}}')
    ((key, offset),) = value["offsetTable"].items()
    assert key == ObjectKey((("brokerName", "broker-a"), ("queueId", 0), ("topic", "T")))
    assert key.as_dict() == {"brokerName": "broker-a", "queueId": 0, "topic": "T"}
    assert offset == 12


def test_loads_tolerates_whitespace_around_nonstandard_keys() -> None:
    text = '{ "t" : { 0 : 1 , { "a" : [ ] } : { } } }'
    assert loads(text) == {"t": {0: 1, ObjectKey((("a", ()),)): {}}}


def test_loads_object_keys_with_nested_objects_are_hashable() -> None:
    value = loads('{{"a":{"b":[1,{"c":2}]}}:1}')
    (key,) = value
    hash(key)


@pytest.mark.parametrize(
    "text",
    ["", "{", "{0}", "{0:}", "{0:1,}", "{true:1}", "[1,]", "{} x", '{"a" 1}', "{[1]:2}", "{0:1 2}"],
)
def test_loads_rejects_broken_text_with_body_decode_error(text: str) -> None:
    with pytest.raises(BodyDecodeError):
        loads(text)


def test_loads_rejects_absurd_nesting_without_recursion_error() -> None:
    with pytest.raises(BodyDecodeError):
        loads("{0:" * 5000)
    with pytest.raises(BodyDecodeError):
        loads("[" * 100000 + "]" * 100000)


def test_dumps_sorts_keys_omits_null_values_and_writes_java_doubles() -> None:
    assert (
        dumps({"b": 1, "a": None, "c": 0.0, "d": [True, None]}) == '{"b":1,"c":0.0,"d":[true,null]}'
    )


def test_dumps_writes_int_keys_bare_in_ascending_order() -> None:
    assert dumps({10: "x", 2: "y"}) == '{2:"y",10:"x"}'


def test_dumps_writes_bean_keys_as_nested_objects() -> None:
    mq = MessageQueue(topic="T", broker_name="broker-a", queue_id=0)
    assert dumps({mq: 42}) == '{{"brokerName":"broker-a","queueId":0,"topic":"T"}:42}'


def test_dumps_browser_compatible_quotes_keys_escapes_non_ascii_and_big_longs() -> None:
    mq = MessageQueue("T", "b", 1)
    assert dumps({0: "é", mq: 2**60}, browser_compatible=True) == (
        '{"0":"\\u00e9","{\\"brokerName\\":\\"b\\",\\"queueId\\":1,\\"topic\\":\\"T\\"}":"1152921504606846976"}'
    )


def test_dumps_writes_non_ascii_raw_by_default() -> None:
    assert dumps({"k": "标签"}) == '{"k":"标签"}'


def test_dumps_nan_is_null_like_fastjson() -> None:
    assert dumps([float("nan"), float("inf")]) == "[null,null]"


def test_dumps_sets_are_sorted_arrays() -> None:
    assert dumps({"s": {"b", "a"}}) == '{"s":["a","b"]}'


def test_dumps_refuses_unknown_types() -> None:
    with pytest.raises(TypeError):
        dumps({"x": object()})


def test_dumps_then_loads_round_trips_nonstandard_keys() -> None:
    value = {"t": {0: {"x": 1}, 7: []}, "o": {freeze({"a": 1, "b": "c"}): "v"}}
    assert loads(dumps(value)) == value
