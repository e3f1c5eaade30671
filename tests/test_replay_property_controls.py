"""Replay determinism for the offset controls: resets, retention, clone, removal, group changes (B-134)."""

from __future__ import annotations

import tempfile

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_broker.clock import ManualClock
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from tests.replay_histories import play

GROUPS = st.sampled_from(["G1", "G2"])
QIDS = st.integers(min_value=0, max_value=2)

ops = st.one_of(
    st.tuples(st.just("send"), QIDS, st.integers(1, 4)),
    st.tuples(st.just("commit"), GROUPS, QIDS, st.integers(-1, 12)),
    st.tuples(
        st.just("reset"),
        GROUPS,
        st.sampled_from(["time", "offset", "shift", "earliest", "latest"]),
        st.integers(-3, 12),
        st.booleans(),
        st.sampled_from(["compat", "server_side"]),
        st.sampled_from(["compat", "read_queues"]),
    ),
    st.tuples(st.just("retention")),
    st.tuples(st.just("clone"), GROUPS, GROUPS),
    st.tuples(st.just("remove"), GROUPS),
    st.tuples(
        st.just("members"), GROUPS, st.lists(st.sampled_from(["a@1", "b@1", "c@1"]), max_size=3)
    ),
    st.tuples(st.just("tick"), st.integers(0, 40 * 3_600_000)),
)


async def run(data_dir: str, history: list[tuple]) -> None:
    clock = ManualClock()
    config = BrokerConfig(
        storePathRootDir=data_dir,
        total_physical_memory_bytes=4000,
        mappedFileSizeCommitLog=600,
        fileReservedTime=1,
        reset_fence=True,
    )
    await play(
        Broker.open(data_dir, config, clock),
        clock,
        history,
        apply,
        setup=lambda broker: broker.update_topic(
            {"topicName": "T", "readQueueNums": 3, "writeQueueNums": 2}
        ),
    )


async def apply(broker: Broker, clock: ManualClock, op: tuple) -> None:
    kind, *args = op
    if kind == "send":
        qid, n = args
        await broker.put_messages("T", qid % 2, [MessageIn(b"x%d" % i) for i in range(n)])
    elif kind == "commit":
        group, qid, offset = args
        await broker.commit_offset(group, "T", qid, offset, requester="c")
    elif kind == "reset":
        group, target, value, force, mode, scope = args
        if target == "time":
            value = clock.now_ms() - value * 60_000
        await broker.plan_reset(
            group, "T", value, force, kind=target, mode=mode, scope=scope, requester="ops"
        )
    elif kind == "retention":
        await broker.retention_pass(manual=True)
    elif kind == "clone":
        await broker.clone_group_offset(args[0], args[1], "T", requester="ops")
    elif kind == "remove":
        await broker.delete_group(args[0], remove_offsets=True, requester="ops")
    elif kind == "members":
        await broker.record_consumer_group(
            args[0], args[1], "CONSUME_FROM_LAST_OFFSET", "CLUSTERING", {"T": "*"}
        )
    elif kind == "tick":
        clock.advance(args[0])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=10, max_size=60))
def test_b134_offset_controls_replay_byte_for_byte(history):
    with tempfile.TemporaryDirectory() as live:
        trio.run(run, live, history)
        assert verify(live) == []
