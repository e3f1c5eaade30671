"""The stats projection's message-size buckets of one send (rocketmq_message_size, B-362)."""

from __future__ import annotations

import bisect

from hypothesis import given
from hypothesis import strategies as st

from es_broker.projections.stats import MESSAGE_SIZE_BOUNDS, size_buckets

sizes_near_bounds = st.one_of(
    st.integers(0, 5 << 20),
    st.sampled_from([b + d for b in MESSAGE_SIZE_BOUNDS for d in (-1, 0, 1)]),
)


def one_by_one(sizes: list[int]) -> list[tuple[int, tuple[int, int]]]:
    buckets: dict[int, list[int]] = {}
    for size in sizes:
        acc = buckets.setdefault(bisect.bisect_left(MESSAGE_SIZE_BOUNDS, size), [0, 0])
        acc[0] += 1
        acc[1] += size
    return [(which, (k, s)) for which, (k, s) in sorted(buckets.items())]


@given(st.lists(sizes_near_bounds, max_size=40))
def test_a_sends_size_buckets_are_its_messages_counted_one_by_one(sizes):
    assert size_buckets(sizes) == one_by_one(sizes)


def test_a_send_whose_messages_share_a_bucket_counts_them_in_it():
    assert size_buckets([1100, 1200, 4096]) == [(1, (3, 6396))]
