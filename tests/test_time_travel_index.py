"""Offsets at any moment from the time index (B-131..B-133, S-1), and the TIME arguments."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_broker.clock import ManualClock
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.replay import verify
from es_broker.store import Store
from es_broker.timetravel import timeline
from es_broker.timetravel.query import IndexMissing, TimeTravel, persist_tick
from es_broker.timetravel.timeparse import parse_time
from tests.conftest import START, make_topic
from tests.helpers import cli_checked
from tests.process_fixtures import ROOT
from tests.timetravel_histories import build, histories, moments, reference_table, reset_by_time


def answer(data_dir: Path, at: int, **kw) -> dict:
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        with store.read() as txn:
            rows = TimeTravel(store).offsets_at(txn, at, **kw)
        return {(r.group, r.topic, r.queue_id): r for r in rows}
    finally:
        store.close()


# ---------------------------------------------------------------------- property


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories, st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_b132_offsets_at_t_equal_a_replay_of_every_record_up_to_t(history, picks):
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        build(data_dir, history)
        for at in moments(data_dir, picks):
            got = answer(data_dir, at)
            assert {k: (r.offset, r.max_offset) for k, r in got.items()} == reference_table(
                data_dir, at
            )
            for r in got.values():
                assert r.lag == (r.max_offset - r.offset if r.offset >= 0 else None)
        assert verify(data_dir) == []  # the time index replays byte for byte like every projection


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories, st.sampled_from(["G1", "G2"]), st.integers(1, 8))
def test_recent_changes_are_the_newest_entries_of_the_history_walked_backwards(
    history, group, limit
):
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        build(data_dir, history)
        store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
        try:
            with store.read() as txn:
                travel = TimeTravel(store)
                whole = travel.history(txn, group)
                everything, more = timeline.recent_changes(travel, txn, group, limit=10_000)
                assert not more
                # entries of one record come in another order; as a whole they are the same
                assert sorted(map(repr, everything)) == sorted(map(repr, whole))
                newest, more = timeline.recent_changes(travel, txn, group, limit=limit)
                assert [e.seq for e in newest] == [e.seq for e in whole][-limit:]
                assert more == (len(whole) > limit)
                events = [e for e in whole if e.kind not in ("offset_change", "offset_removed")]
                newest, more = timeline.recent_changes(
                    travel, txn, group, limit=limit, events_only=True
                )
                assert [e.seq for e in newest] == [e.seq for e in events][-limit:]
                assert more == (len(events) > limit)
        finally:
            store.close()


# ---------------------------------------------------------------------- examples


async def test_b132_the_answer_at_now_is_the_current_table(broker, clock):
    await make_topic(broker, "T", 2)
    for i in range(5):
        clock.advance(100)
        await broker.put_message("T", i % 2, MessageIn(b"x"))
        await broker.commit_offset("G", "T", i % 2, i, requester="c")
    with broker.store.read() as txn:
        rows = TimeTravel(broker.store).offsets_at(txn, clock.now_ms() + 10**9)
    assert sorted((r.topic, r.queue_id, r.offset) for r in rows) == sorted(
        (t, q, o) for t, g, q, o in broker.offset_table()
    )


async def test_a_clock_stepping_back_keeps_each_answer_a_state_the_broker_was_in(broker, clock):
    await make_topic(broker, "T", 1)
    clock.set(START + 10_000)
    await broker.commit_offset("G", "T", 0, 5)
    clock.set(START + 9_000)  # NTP steps the broker clock back
    await broker.commit_offset("G", "T", 0, 3)
    with broker.store.read() as txn:
        travel = TimeTravel(broker.store)
        at_9500 = travel.offsets_at(txn, START + 9_500)
        (at_10000,) = travel.offsets_at(txn, START + 10_000)
    # the second commit happened "at or after 10 000" (its effective time): 3 is never seen before 5
    assert at_9500 == []
    assert (at_10000.offset, at_10000.time) == (3, START + 10_000)


async def test_b133_durable_offset_is_the_value_at_the_last_persist_tick(broker, clock):
    await make_topic(broker, "T", 1)  # the first record: the persist schedule starts here
    start = clock.now_ms()
    clock.advance(11_000)
    await broker.commit_offset("G", "T", 0, 7)  # after the first tick (start + 10 s)
    clock.advance(3_000)
    await broker.commit_offset("G", "T", 0, 9)  # start + 14 s, before the tick at 15 s
    with broker.store.read() as txn:
        travel = TimeTravel(broker.store)
        (row,) = travel.offsets_at(txn, start + 14_500, durable=True)
        # a crash now restores the table of tick 10 s: no entry
        assert (row.offset, row.durable) == (
            9,
            -1,
        )
        (row,) = travel.offsets_at(txn, start + 15_000, durable=True)
        assert (row.offset, row.durable) == (9, 9)
        assert travel.persist_tick(txn, start + 14_500) == start + 10_000
    assert persist_tick(start, start + 9_999, 5000) is None
    assert persist_tick(start, start + 24_999, 5000) == start + 20_000


async def test_reset_by_time_reads_naturally_in_history(broker, clock):
    await make_topic(broker, "T", 2)
    for _ in range(6):
        clock.advance(1000)
        for q in (0, 1):
            await broker.put_message("T", q, MessageIn(b"m"))
    for q in (0, 1):
        await broker.commit_offset("G", "T", q, 6, requester="10.0.0.5@7")
    clock.advance(1000)
    await reset_by_time(broker, "G", "T", START + 3000, True)
    with broker.store.read() as txn:
        entries = TimeTravel(broker.store).history(txn, "G", topic="T")
    assert [(e.kind, e.queue_id, e.old, e.new, e.cause) for e in entries] == [
        ("offset_change", 0, -1, 6, "client_commit"),
        ("offset_change", 1, -1, 6, "client_commit"),
        ("reset_requested", None, None, None, "reset_requested"),
        ("offset_change", 0, 6, 2, "reset"),
        ("offset_change", 1, 6, 2, "reset"),
    ]
    reset = entries[2]
    assert reset.requester == "admin@10.0.0.9"
    assert [q[:4] for q in reset.detail["queues"]] == [[0, 6, 2, 2], [1, 6, 2, 2]]


async def test_history_since_and_until_bound_by_effective_time(broker, clock):
    await make_topic(broker, "T", 1)
    for i in range(5):
        clock.advance(1000)
        await broker.commit_offset("G", "T", 0, i)
    with broker.store.read() as txn:
        entries = TimeTravel(broker.store).history(txn, "G", since=START + 2000, until=START + 4000)
    assert [e.new for e in entries] == [1, 2, 3]


def test_the_index_is_built_for_a_log_written_before_it(tmp_path):
    build(
        tmp_path,
        [
            ("topic", "T1", 2),
            ("send", "T1", 0, 3),
            ("commit", "G1", "T1", 0, 2),
            ("tick", 500),
            ("commit", "G1", "T1", 1, 1),
        ],
    )
    before = answer(tmp_path, START + 10**6)
    store = Store.open(tmp_path, BrokerConfig(storePathRootDir=str(tmp_path)))
    with store.log.env.begin(write=True) as txn:  # what an older es-broker left: no time index
        for name in store.timeindex.databases:
            txn.drop(store.log.db(name), delete=False)
    store.close()
    with pytest.raises(IndexMissing):
        answer(tmp_path, START + 10**6)
    Store.open(
        tmp_path, BrokerConfig(storePathRootDir=str(tmp_path))
    ).close()  # what a broker start does
    assert answer(tmp_path, START + 10**6) == before
    assert verify(tmp_path) == []


# ---------------------------------------------------------------------- command line


@pytest.fixture(scope="module")
def reset_dir(tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("reset")

    async def scenario() -> None:
        from es_broker.core.broker import Broker

        clock = ManualClock(START)
        broker = Broker.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), clock)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            await make_topic(broker, "T", 2)
            for i in range(20):
                clock.advance(1000)
                for q in (0, 1):
                    await broker.put_message("T", q, MessageIn(b"m"))
                if i % 4 == 3:
                    for q in (0, 1):
                        await broker.commit_offset("G", "T", q, i + 1, requester="10.0.0.5@7")
            clock.advance(1000)
            await reset_by_time(broker, "G", "T", START + 5000, True)
            nursery.cancel_scope.cancel()
        broker.close()

    trio.run(scenario)
    return data_dir


def test_cli_offsets_json_gives_offset_max_and_lag_at_the_moment(reset_dir):
    out = json.loads(
        cli_checked(
            "offsets",
            "--data-dir",
            str(reset_dir),
            "--group",
            "G",
            "--topic",
            "T",
            "--at",
            str(START + 12_500),
            "--json",
        ).stdout
    )
    assert [(q["queue_id"], q["offset"], q["max_offset"], q["lag"]) for q in out["queues"]] == [
        (0, 12, 12, 0),
        (1, 12, 12, 0),
    ]
    now = json.loads(
        cli_checked(
            "offsets",
            "--data-dir",
            str(reset_dir),
            "--group",
            "G",
            "--at",
            "now",
            "--durable",
            "--json",
        ).stdout
    )
    assert [
        (q["offset"], q["max_offset"], q["lag"], q["cause"], q["durable"]) for q in now["queues"]
    ] == [(4, 20, 16, "reset", 4), (4, 20, 16, "reset", 4)]


def test_cli_history_tells_who_reset_when_from_what_to_what(reset_dir):
    text = cli_checked(
        "history",
        "--data-dir",
        str(reset_dir),
        "--group",
        "G",
        "--topic",
        "T",
        "--since",
        str(START + 20_000),
    ).stdout
    lines = text.splitlines()
    assert lines[0] == "history of group G on topic T: 5 entries"
    assert "T reset requested by admin@10.0.0.9: to time" in lines[3]
    assert "force, mode compat; q0 20 -> 4 moved; q1 20 -> 4 moved; notified 10.0.0.5@7" in lines[3]
    assert lines[4].endswith("T q0  20 -> 4  (reset) by 10.0.0.5@7")


def test_cli_refuses_a_directory_without_a_broker(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "es_broker.cli",
            "offsets",
            "--data-dir",
            str(tmp_path),
            "--group",
            "G",
            "--at",
            "now",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert "no broker data in" in done.stderr


# ---------------------------------------------------------------------- TIME


def test_b072_time_argument_forms():
    assert parse_time("now", now=lambda: 42) == 42
    assert parse_time("1700000000123") == 1_700_000_000_123
    local = datetime(2024, 5, 1, 10, 42, 0, 123_000).astimezone()
    assert parse_time("2024-05-01#10:42:00:123") == round(local.timestamp() * 1000)
    assert parse_time("2024-05-01T10:42:00.123") == round(local.timestamp() * 1000)
    assert parse_time("2024-05-01T10:42:00Z") == 1_714_560_120_000
    assert parse_time("2024-05-01T12:42:00+02:00") == 1_714_560_120_000
    with pytest.raises(ValueError, match="is not 'now', epoch millis"):
        parse_time("yesterday")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories, st.sampled_from(["G1", "G2"]), st.integers(2, 40))
def test_b292_b296_each_queue_line_equals_offsets_at_at_every_sample_moment(history, group, points):
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        build(data_dir, history)
        store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
        try:
            with store.read() as txn:
                travel = TimeTravel(store)
                whole = timeline.window(travel, txn, group, None)
                if whole is None:
                    return
                # from before the first change to after the last record: quiet stretches included
                since, until = whole[0] - 5, whole[1] + 5
                samples, lines = timeline.timeline_by_queue(
                    travel, txn, group, since=since, until=until, points=points
                )
                for i, sample in enumerate(samples):
                    rows = {
                        (r.topic, r.queue_id): r
                        for r in travel.offsets_at(txn, sample.at, group=group)
                    }
                    for line in lines:
                        row = rows.get((line.topic, line.queue_id))
                        assert line.offsets[i] == (row.offset if row and row.offset >= 0 else None)
                        assert line.lags[i] == (row.lag if row else None)
                        if row is not None:
                            assert line.max_offsets[i] == row.max_offset
                    assert sample.queues == len(rows)
                    assert sample.offset == sum(max(r.offset, 0) for r in rows.values())
                    assert sample.max_offset == sum(r.max_offset for r in rows.values())
        finally:
            store.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories, st.sampled_from(["G1", "G2"]), st.integers(1, 8))
def test_b294_changes_only_lists_each_offset_change_once_without_the_records_beside_them(
    history, group, limit
):
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        build(data_dir, history)
        store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
        try:
            with store.read() as txn:
                travel = TimeTravel(store)
                changes = [
                    e
                    for e in travel.history(txn, group)
                    if e.kind in ("offset_change", "offset_removed")
                ]
                newest, more = timeline.recent_changes(
                    travel, txn, group, limit=limit, changes_only=True
                )
                assert [e.seq for e in newest] == [e.seq for e in changes][-limit:]
                keys = [(e.seq, e.topic, e.queue_id) for e in newest]
                assert len(set(keys)) == len(keys)
                assert all(e.queue_id is not None for e in newest)
                assert more == (len(changes) > limit)
        finally:
            store.close()
