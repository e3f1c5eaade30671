"""Prefix scans of LMDB keys (es_broker/log/scan.py) agree with filtering every key by hand.

The projections' reads (offset history, key index, trace links, time travel)
rely on them, so replayed projections answer the same only if the scans do.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import lmdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from es_broker.log.scan import prefix_end, prefixed, prefixed_keys

# few distinct bytes, so prefixes collide with keys often; 0xff and 0x00 are the edge cases
_BYTES = st.binary(max_size=4).map(lambda b: bytes(x % 4 * 85 for x in b))
KEYS = st.sets(_BYTES.filter(bool), max_size=24)
BOUND = st.none() | _BYTES


@pytest.fixture(scope="module")
def env() -> Iterator[lmdb.Environment]:
    with tempfile.TemporaryDirectory() as path:
        environment = lmdb.open(path, map_size=1 << 24, max_dbs=2)
        yield environment
        environment.close()


def expected(
    keys: set[bytes], prefix: bytes, start: bytes | None, stop: bytes | None, reverse: bool
) -> list[tuple[bytes, bytes]]:
    chosen = sorted(
        k
        for k in keys
        if k.startswith(prefix) and (start is None or k >= start) and (stop is None or k < stop)
    )
    return [(k, b"v" + k) for k in (reversed(chosen) if reverse else chosen)]


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(keys=KEYS, prefix=_BYTES, start=BOUND, stop=BOUND, reverse=st.booleans())
@example(
    keys={b"\xff", b"\xff\xff", b"\xff\xff\x00", b"\xfe\xff"},
    prefix=b"\xff",
    start=None,
    stop=None,
    reverse=True,
)
@example(
    keys={b"\xaa\xff", b"\xaa\xff\xff", b"\xab"},
    prefix=b"\xaa\xff",
    start=None,
    stop=None,
    reverse=True,
)
@example(keys={b"\x00", b"\xff"}, prefix=b"", start=None, stop=None, reverse=True)
def test_a_prefix_scan_yields_exactly_the_keys_with_the_prefix_in_order(
    env: lmdb.Environment,
    keys: set[bytes],
    prefix: bytes,
    start: bytes | None,
    stop: bytes | None,
    reverse: bool,
) -> None:
    db = env.open_db(b"scan")
    with env.begin(write=True, buffers=False) as txn:
        try:
            for key in keys:
                txn.put(key, b"v" + key, db=db)
            want = expected(keys, prefix, start, stop, reverse)
            assert list(prefixed(txn, db, prefix, start=start, stop=stop, reverse=reverse)) == want
            assert list(
                prefixed_keys(txn, db, prefix, start=start, stop=stop, reverse=reverse)
            ) == [k for k, _ in want]
        finally:
            txn.drop(db, delete=False)


@given(prefix=st.binary(max_size=6), key=st.binary(min_size=1, max_size=8))
def test_prefix_end_is_above_every_key_with_the_prefix_and_at_most_every_key_after_them(
    prefix: bytes, key: bytes
) -> None:
    end = prefix_end(prefix)
    if key.startswith(prefix):
        assert end is None or key < end
    elif key > prefix:
        # a key above the prefix without starting with it lies at or above the prefix's end
        assert end is not None and key >= end
