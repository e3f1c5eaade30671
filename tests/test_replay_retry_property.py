"""Replay rebuilds identical projections for histories with retries, delays and dead letters (B-134).

The base operations of tests/replay_histories.py, plus delayed sends, send-backs
(random retry queues, DLQ decisions), delivery passes at moving times,
sends to `%RETRY%G` past the limit and re-drives: the records carry every
decision, so a replay decides nothing and `verify` finds no difference.
"""

from __future__ import annotations

import contextlib
import tempfile

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_broker.clock import ManualClock
from es_broker.commands.errors import BrokerError
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from tests.replay_histories import GROUPS, QIDS, TOPICS
from tests.replay_histories import apply as apply_base
from tests.replay_histories import ops as base_ops

retry_ops = st.one_of(
    st.tuples(st.just("delayed"), TOPICS, QIDS, st.integers(-1, 20)),
    st.tuples(
        st.just("send_back"),
        GROUPS,
        st.integers(0, 50),
        st.sampled_from([-1, 0, 0, 2, 30]),
        st.sampled_from([None, 0, 1, 3]),
    ),
    st.tuples(st.just("deliver"), st.integers(0, 40_000)),
    st.tuples(st.just("retry_send"), GROUPS, st.integers(0, 20)),
    st.tuples(st.just("redrive"), GROUPS, st.sampled_from(["retry", "original"]), st.booleans()),
    st.tuples(st.just("group"), GROUPS, st.integers(0, 3)),
)


# every history starts with topics and messages, so that send-backs and deliveries have work
PRELUDE = [
    ("topic", "T1", 2, 6),
    ("topic", "T2", 1, 6),
    ("send", "T1", 0, b"a", "A"),
    ("send", "T2", 0, b"b", ""),
    ("delayed", "T1", 1, 1),
]


async def run_history(data_dir: str, history: list[tuple]) -> Broker:
    clock = ManualClock()
    # short levels so that deliveries happen within the generated ticks
    config = BrokerConfig(
        storePathRootDir=data_dir,
        total_physical_memory_bytes=4000,
        messageDelayLevel="1s 2s 3s 5s 8s 13s",
    )
    broker = Broker.open(data_dir, config, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        for op in history:
            with contextlib.suppress(BrokerError):  # refusals must leave no trace
                await apply(broker, clock, op)
        nursery.cancel_scope.cancel()
    broker.close()
    return broker


async def apply(broker: Broker, clock: ManualClock, op: tuple) -> None:
    kind, *args = op
    if kind == "delayed":
        topic, qid, level = args
        await broker.put_message(topic, qid, MessageIn(b"d", {"DELAY": str(level), "TAGS": "A"}))
    elif kind == "send_back":
        group, pick, level, max_times = args
        with broker.store.read() as txn:
            phys = [phy for phy, _ in broker.store.log.payloads_in(txn)]
        offset = phys[pick % len(phys)] if phys else pick
        await broker.send_back(group, offset, level, max_reconsume_times=max_times, requester="c")
    elif kind == "deliver":
        clock.advance(args[0])
        await broker.deliver_delayed()
    elif kind == "retry_send":
        group, rt = args
        await broker.put_message(
            f"%RETRY%{group}",
            -1,
            MessageIn(b"r", {"RETRY_TOPIC": "T1", "DELAY": "3"}, reconsume_times=rt),
        )
    elif kind == "redrive":
        group, target, dry_run = args
        await broker.redrive_dlq(group, target=target, dry_run=dry_run, requester="ops")
    else:
        await apply_base(broker, clock, op)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(base_ops, retry_ops, retry_ops), min_size=8, max_size=40))
def test_b134_replay_is_identical_with_retries_delays_and_dead_letters(history):
    with tempfile.TemporaryDirectory() as live:
        trio.run(run_history, live, PRELUDE + history)
        assert verify(live) == []


def test_a_delivered_delay_is_replayed_not_redecided(tmp_path):
    history = [
        ("topic", "T1", 2, 6),
        ("delayed", "T1", 0, 2),
        ("send", "T1", 1, b"x", "A"),
        ("send_back", "G1", 0, 0, None),
        ("deliver", 60_000),
        ("send_back", "G2", 1, -1, None),
        ("redrive", "G2", "retry", False),
        ("deliver", 60_000),
    ]
    live = str(tmp_path / "live")
    trio.run(run_history, live, history)
    assert verify(live) == []
