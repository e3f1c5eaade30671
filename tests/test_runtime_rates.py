"""putTps, getFoundTps and getTransferedTps of GET_BROKER_RUNTIME_INFO, counted from records (B-293)."""

from __future__ import annotations

from es_broker.commands.runtime_stats import RecordRates
from es_broker.log import make

T0 = 1_700_000_000_000


def stored(ts: int, messages: int) -> dict:
    units = [[i * 100, 100, 0] for i in range(messages)]
    return make("messages_stored", ts, topic="T", queue_id=0, queue_offset=0, units=units)


def delivered(ts: int, offsets: list[int]) -> dict:
    return make(
        "messages_delivered",
        ts,
        group="G",
        topic="T",
        queue_id=0,
        offset=offsets[0],
        offsets=offsets,
        next_offset=offsets[-1] + 1,
        client="c",
    )


def test_b293_rates_are_the_records_messages_per_second_over_10s_1min_10min():
    rates = RecordRates(started_ms=T0 - 1000)  # it has run 10 minutes at `now`
    for second in range(600):  # one message a second for 10 minutes, 5 a second in the last 10 s
        rates.apply(None, second + 1, stored(T0 + second * 1000, 5 if second >= 590 else 1))  # type: ignore[arg-type]
    rates.apply(None, 601, delivered(T0 + 599_000, [0, 1, 2]))  # type: ignore[arg-type]
    now = T0 + 599_500
    assert rates.rates(now) == {
        "putTps": f"{50 / 10!r} {(50 + 50) / 60!r} {(50 + 590) / 600!r}",
        "getFoundTps": f"{1 / 10!r} {1 / 60!r} {1 / 600!r}",
        "getTransferedTps": f"{3 / 10!r} {3 / 60!r} {3 / 600!r}",
    }


def test_b293_a_window_longer_than_the_broker_ran_has_no_rate_yet():
    rates = RecordRates(started_ms=T0)
    rates.apply(None, 1, stored(T0 + 1000, 2))  # type: ignore[arg-type]
    assert rates.rates(T0 + 30_000)["putTps"] == f"{0.0!r} " + " "
