"""Generated broker histories for the replay properties (B-134): operations, and a broker running them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypothesis import strategies as st

from es_broker.clock import ManualClock
from es_broker.commands.errors import BrokerError
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker

TOPICS = st.sampled_from(["T1", "T2", "%RETRY%G1"])
GROUPS = st.sampled_from(["G1", "G2"])
QIDS = st.integers(min_value=-1, max_value=4)

ops = st.one_of(
    st.tuples(st.just("topic"), TOPICS, st.integers(1, 4), st.sampled_from([2, 4, 6])),
    st.tuples(st.just("perm"), TOPICS, st.sampled_from([2, 4, 6])),
    st.tuples(
        st.just("send"), TOPICS, QIDS, st.binary(max_size=64), st.sampled_from(["", "A", "B"])
    ),
    st.tuples(st.just("batch"), TOPICS, QIDS, st.integers(1, 5)),
    st.tuples(st.just("pull"), GROUPS, TOPICS, QIDS, st.integers(0, 6), st.booleans()),
    st.tuples(st.just("commit"), GROUPS, TOPICS, QIDS, st.integers(-2, 10)),
    st.tuples(st.just("query"), GROUPS, TOPICS, QIDS),
    st.tuples(st.just("delete"), TOPICS),
    st.tuples(st.just("group"), GROUPS, st.integers(0, 3)),
    st.tuples(st.just("tick"), st.integers(0, 5000)),
)


async def run_history(data_dir: str, history: list[tuple]) -> None:
    clock = ManualClock()
    config = BrokerConfig(storePathRootDir=data_dir, total_physical_memory_bytes=4000)
    await play(Broker.open(data_dir, config, clock), clock, history, apply)


Apply = Callable[[Broker, ManualClock, tuple[Any, ...]], Awaitable[None]]


async def play(
    broker: Broker,
    clock: ManualClock,
    history: list[tuple[Any, ...]],
    apply: Apply,
    setup: Callable[[Broker], Awaitable[object]] | None = None,
) -> None:
    """Run the broker, `setup`, then every operation of the history; stop and close the broker.

    Refusals are part of a history: they must leave no trace.
    """
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        if setup is not None:
            await setup(broker)
        for op in history:
            with contextlib.suppress(BrokerError):
                await apply(broker, clock, op)
        nursery.cancel_scope.cancel()
    broker.close()


async def apply(broker: Broker, clock: ManualClock, op: tuple) -> None:
    kind, *args = op
    if kind == "topic":
        topic, n, perm = args
        await broker.update_topic(
            {"topicName": topic, "readQueueNums": n, "writeQueueNums": n, "perm": perm}
        )
    elif kind == "perm":
        await broker.update_topic_perm(args[0], args[1], requester="ops")
    elif kind == "send":
        topic, qid, body, tag = args
        await broker.put_message(topic, qid, MessageIn(body, {"TAGS": tag} if tag else {}))
    elif kind == "batch":
        topic, qid, n = args
        await broker.put_messages(topic, qid, [MessageIn(b"b%d" % i) for i in range(n)])
    elif kind == "pull":
        group, topic, qid, offset, commit = args
        await broker.pull(
            group, topic, qid, offset, client="c", commit_offset=offset if commit else None
        )
    elif kind == "commit":
        group, topic, qid, offset = args
        await broker.commit_offset(group, topic, max(qid, 0), offset, requester="c")
    elif kind == "query":
        group, topic, qid = args
        await broker.query_consumer_offset(group, topic, max(qid, 0))
    elif kind == "delete":
        await broker.delete_topic(args[0])
    elif kind == "group":
        await broker.update_group({"groupName": args[0], "retryQueueNums": args[1]})
    elif kind == "tick":
        clock.advance(args[0])


def small_history(path: str | os.PathLike[str]) -> None:
    """A data directory holding a few records of each common kind: topic, sends, commit, pull."""
    trio.run(
        run_history,
        str(path),
        [
            ("topic", "T1", 2, 6),
            ("send", "T1", 0, b"x", "A"),
            ("batch", "T1", 1, 3),
            ("commit", "G1", "T1", 0, 1),
            ("pull", "G1", "T1", 1, 0, True),
        ],
    )
