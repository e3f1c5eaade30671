"""The bound check of `make` (B-138) answers as its plain recursive definition does, at any depth.

`records._fits` checks the two levels a record usually has in its own loops
(a batch's units: a list of tuples of ints); this pins it against the
definition on arbitrary nested values, edges of every range included.
"""

from __future__ import annotations

import enum
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from es_broker.log.records import INT64_MAX, INT64_MIN, MAX_TEXT, _fits


class _Level(enum.IntEnum):
    LOW = 1
    HUGE = 1 << 70


def _defined(value: Any) -> bool:
    """Fits: ints (IntEnum members too, not bools) in int64, finite floats, texts up to MAX_TEXT,
    None, bools and bytes; containers when every key and value inside fits."""
    if isinstance(value, dict):
        return all(type(k) is str or _defined(k) for k in value) and all(
            _defined(v) for v in value.values()
        )
    if isinstance(value, list | tuple):
        return all(_defined(v) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, bytes):
        return True
    if isinstance(value, int):
        return INT64_MIN <= value <= INT64_MAX
    if isinstance(value, str):
        return len(value) <= MAX_TEXT
    if isinstance(value, float):
        return math.isfinite(value)
    return False


_ints = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.sampled_from([INT64_MIN - 1, INT64_MAX + 1, INT64_MIN, INT64_MAX, 1 << 64]),
    st.sampled_from(list(_Level)),
)
_scalars = st.one_of(
    _ints,
    st.booleans(),
    st.none(),
    st.binary(max_size=4),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.sampled_from(["x" * MAX_TEXT, "x" * (MAX_TEXT + 1)]),
    st.just(object()),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=5).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), _ints, st.tuples(_ints)), inner, max_size=4),
    ),
    max_leaves=30,
)


@given(_values)
def test_the_bound_check_of_a_record_answers_as_its_definition_B138(value):
    assert _fits(value) is _defined(value)


@given(st.lists(st.tuples(_ints, _ints, _ints, _ints), max_size=40))
def test_a_batch_of_units_fits_exactly_when_every_unit_does_B138(units):
    record = {"type": "messages_stored", "v": 1, "ts": 1, "units": units}
    assert _fits(record) is all(_defined(u) for u in units)
