"""`to_json` writes the same text whichever encoder writes it.

The read model's `records.body`, every JSON column of its tables and of the export and the
archive's Parquet are `schema.families.to_json` of a record's values. Its fast path is orjson;
json's encoder (sorted keys, no spaces, non-ASCII escaped, bytes as {"$b64": ...}) is the
reference, and the text must not depend on which of them wrote it: a read model caught up by
an older follower and one caught up now hold the same rows.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from es_broker.schema import families
from es_broker.schema.families import from_json, to_json


def reference(value: Any) -> str:
    """json's encoder alone, as `to_json` wrote before orjson (bytes as {"$b64": ...})."""
    if families._str_keys_only(value):
        try:
            return families._ENCODER.encode(value)
        except (TypeError, ValueError):
            pass
    return families._PLAIN_ENCODER.encode(families._jsonable(value))


finite = st.floats(allow_nan=False, allow_infinity=False)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)  # past int64 and u64: orjson refuses
    | finite
    | st.text()  # control characters, DEL, non-ASCII, lone surrogates' neighbours
    | st.binary(max_size=40)
    | st.sampled_from([1e-05, 1.5e-07, 1e16, 0.0001, -0.0, 5e-324, 1e300, "é", "\x7f", "e-5"])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=5)
        | st.dictionaries(st.integers(-5, 5), inner, max_size=3)  # keys that are not text
    ),
    max_leaves=25,
)


@given(values)
@settings(max_examples=3000, deadline=None)
def test_to_json_writes_what_json_writes(value: Any) -> None:
    assert to_json(value) == reference(value)


def test_a_record_of_the_benchmark_shape_takes_the_fast_path_and_reads_back() -> None:
    record = {
        "type": "messages_delivered",
        "v": 1,
        "ts": 1_764_000_000_123,
        "topic": "BenchmarkShape",
        "queue_id": 3,
        "group": "benchmark_consumer",
        "offsets": [41, 42],
        "client": b"\x00\xff",
        "ratio": 0.25,
    }
    text = to_json(record)
    assert families._as_json_writes(text)  # orjson's text was kept
    assert text == reference(record)
    assert from_json(text) == record
    assert json.loads(text)["offsets"] == [41, 42]


def test_text_orjson_would_write_otherwise_is_json_s() -> None:
    odd = (
        {"a": 1e-05},
        {"a": "é"},
        {"a": "\x7f"},
        {"a": "\ud800"},
        {1: 2},
        {"a": 2**70},
        [1.5e-07],
    )
    for value in odd:
        assert to_json(value) == reference(value), value
    assert to_json({"a": "é"}) == '{"a":"\\u00e9"}'
    assert to_json([1e-05]) == "[1e-05]"


def test_a_float_that_is_not_finite_is_null() -> None:
    # no record holds one (records.check refuses it); orjson writes valid JSON for it
    assert to_json([math.inf]) == "[null]"
