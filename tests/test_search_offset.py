"""Timestamp -> offset: RocketMQ's lookup (B-68..B-70) and the lower/upper bound switch (S-7)."""

from __future__ import annotations

import pytest

from es_broker.commands.placement import MessageIn
from tests.conftest import make_topic


async def put_at(broker, clock, times: list[int], queue_id: int = 0) -> None:
    for t in times:
        clock.set(t)
        await broker.put_message("T", queue_id, MessageIn(b"%d" % t))


@pytest.mark.parametrize(
    ("ts", "offset"),
    [(500, 0), (1000, 0), (1500, 0), (1600, 1), (2000, 2), (2400, 3), (2600, 4), (9999, 4)],
)
async def test_b070_vectors_five_messages(broker, clock, ts, offset):
    await make_topic(broker)
    await put_at(broker, clock, [1000, 2000, 2000, 2000, 3000])
    assert broker.search_offset("T", 0, ts) == offset


@pytest.mark.parametrize(("ts", "offset"), [(150, 0), (160, 1), (140, 0)])
async def test_b070_vectors_three_messages(broker, clock, ts, offset):
    await make_topic(broker)
    await put_at(broker, clock, [100, 200, 300])
    assert broker.search_offset("T", 0, ts) == offset


async def test_b069_empty_queue_answers_zero(broker):
    await make_topic(broker)
    assert broker.search_offset("T", 0, 12345) == 0


async def test_b069_after_last_message_answers_last_not_max(broker, clock):
    await make_topic(broker)
    await put_at(broker, clock, [100, 200, 300])
    assert broker.search_offset("T", 0, 10_000) == 2


async def test_b068_tie_goes_to_the_earlier_message(broker, clock):
    await make_topic(broker)
    await put_at(broker, clock, [100, 200])
    assert broker.search_offset("T", 0, 150) == 0


async def test_s007_lower_bound_is_first_at_or_after(broker, clock):
    await make_topic(broker)
    await put_at(broker, clock, [1000, 2000, 2000, 2000, 3000])
    look = lambda ts: broker.search_offset("T", 0, ts, mode="lower_bound")  # noqa: E731
    assert [look(t) for t in (500, 1000, 1500, 2000, 2600, 9999)] == [0, 0, 1, 1, 4, 5]


async def test_s007_upper_bound_is_first_after(broker, clock):
    await make_topic(broker)
    await put_at(broker, clock, [1000, 2000, 2000, 2000, 3000])
    assert broker.search_offset("T", 0, 2000, mode="upper_bound") == 4


async def test_b071_earliest_store_time_and_min_max(broker, clock):
    await make_topic(broker)
    assert broker.earliest_msg_store_time("T", 0) == -1
    await put_at(broker, clock, [700, 800])
    assert broker.earliest_msg_store_time("T", 0) == 700
    assert (broker.min_offset("T", 0), broker.max_offset("T", 0)) == (0, 2)


async def test_b011_unknown_queue_has_min_and_max_zero(broker):
    assert (broker.min_offset("NOPE", 3), broker.max_offset("NOPE", 3)) == (0, 0)
