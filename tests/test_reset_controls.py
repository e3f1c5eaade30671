"""es-broker's reset controls beyond RocketMQ: targets, dry run, server side, fence, scope (S-2, S-3, S-13)."""

from __future__ import annotations

import pytest

from es_broker.commands.errors import BrokerError
from es_broker.commands.placement import MessageIn
from tests.conftest import make_topic


@pytest.fixture
async def topic(broker, clock):
    """T with 2 queues of 10 messages (store times 0..9 s after START); G at {0: 8, 1: 4}."""
    await make_topic(broker, queues=2)
    start = clock.now_ms()
    for i in range(10):
        clock.set(start + i * 1000)
        for q in (0, 1):
            await broker.put_message("T", q, MessageIn(b"%d" % i))
    await broker.commit_offset("G", "T", 0, 8)
    await broker.commit_offset("G", "T", 1, 4)
    return start


def finals(plan) -> dict[int, int]:
    return plan.table()


async def test_s002_dry_run_reports_current_target_final_and_changes_nothing(broker, topic):
    before = broker.store.log.last_seq
    plan = await broker.plan_reset("G", "T", 2, True, kind="offset", dry_run=True)
    assert [(q.current, q.target, q.final) for q in plan.queues] == [(8, 2, 2), (4, 2, 2)]
    assert plan.seq is None and broker.store.log.last_seq == before
    assert broker.stored_offset("G", "T", 0) == 8


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("offset", 5, {0: 5, 1: 5}),
        ("shift", -3, {0: 5, 1: 1}),
        ("shift", 100, {0: 108, 1: 104}),
        ("earliest", 0, {0: 0, 1: 0}),
        ("latest", 0, {0: 10, 1: 10}),
    ],
)
async def test_s002_targets_by_offset_shift_earliest_latest(broker, topic, kind, value, expected):
    plan = await broker.plan_reset("G", "T", value, True, kind=kind, dry_run=True)
    assert finals(plan) == expected


async def test_s002_target_by_time_uses_the_time_lookup(broker, topic):
    plan = await broker.plan_reset("G", "T", topic + 3000, True, kind="time", dry_run=True)
    assert finals(plan) == {0: 3, 1: 3}


async def test_s002_server_side_reset_moves_offsets_in_the_reset_record(broker, topic):
    plan = await broker.plan_reset(
        "G", "T", 0, True, kind="earliest", mode="server_side", requester="ops"
    )
    assert (broker.stored_offset("G", "T", 0), broker.stored_offset("G", "T", 1)) == (0, 0)
    with broker.store.read() as txn:
        change = list(broker.store.offsets.changes(txn, "T", "G", 0))[-1]
    assert (change.seq, change.old, change.new, change.cause, change.requester) == (
        plan.seq,
        8,
        0,
        "reset",
        "ops",
    )


async def test_b078_client_commit_of_the_reset_value_is_recorded_with_cause_reset(broker, topic):
    await broker.plan_reset("G", "T", 2, True, kind="offset", notified=["c@1"])
    # compat: nothing moves until the client commits (B-77)
    assert broker.stored_offset("G", "T", 0) == 8
    await broker.commit_offset("G", "T", 0, 2, requester="c@1")
    await broker.commit_offset("G", "T", 0, 3, requester="c@1")
    with broker.store.read() as txn:
        causes = [(c.new, c.cause) for c in broker.store.offsets.changes(txn, "T", "G", 0)][-2:]
    assert causes == [(2, "reset"), (3, "client_commit")]


async def test_s003_fence_ignores_a_late_commit_that_would_undo_the_reset(
    broker, topic, tmp_path, clock, nursery
):
    from es_broker.core.broker import Broker

    fenced = broker.config.replace(reset_fence=True, storePathRootDir=str(tmp_path / "fenced"))
    b = Broker.open(fenced.storePathRootDir, fenced, clock)
    await nursery.start(b.run)
    await make_topic(b, queues=1)
    for i in range(10):
        await b.put_message("T", 0, MessageIn(b"%d" % i))
    await b.commit_offset("G", "T", 0, 9)
    await b.plan_reset("G", "T", 2, True, kind="offset", notified=["c@1"])
    # a periodic commit from before the reset
    await b.commit_offset("G", "T", 0, 9, requester="c@1")
    assert b.stored_offset("G", "T", 0) == 9  # unchanged: compat mode waits for the client
    _, record = list(b.store.log.read())[-1]
    assert (record["type"], record["reason"], record["target"]) == (
        "offset_commit_ignored",
        "reset_fence",
        2,
    )
    await b.commit_offset("G", "T", 0, 2, requester="c@1")
    assert b.stored_offset("G", "T", 0) == 2
    clock.advance(61_000)
    await b.commit_offset("G", "T", 0, 7, requester="c@1")  # the fence is gone after it was met
    assert b.stored_offset("G", "T", 0) == 7


async def test_s012_per_queue_outcome_is_in_the_record(broker, topic):
    plan = await broker.plan_reset("G", "T", 6, False, kind="offset")
    assert [q.outcome for q in plan.queues] == ["moved", "unchanged_not_force"]
    _, record = list(broker.store.log.read())[-1]
    assert [q[4] for q in record["queues"]] == ["moved", "unchanged_not_force"]


async def test_b074_compat_scope_fails_when_a_write_queue_has_no_offset(broker, topic):
    await broker.update_topic({"topicName": "T", "readQueueNums": 3, "writeQueueNums": 3})
    with pytest.raises(BrokerError, match="THe consumer group <G> not exist"):
        await broker.plan_reset("G", "T", 0, True, kind="earliest")


async def test_s013_read_queues_scope_covers_every_read_queue_and_creates_missing_offsets(
    broker, topic
):
    await broker.update_topic({"topicName": "T", "readQueueNums": 3, "writeQueueNums": 2})
    plan = await broker.plan_reset(
        "G", "T", 0, True, kind="earliest", scope="read_queues", mode="server_side"
    )
    assert [(q.queue_id, q.outcome) for q in plan.queues] == [
        (0, "moved"),
        (1, "moved"),
        (2, "created"),
    ]
    assert broker.stored_offset("G", "T", 2) == 0


def test_s002_reset_verb_from_the_command_line(served):
    served.admin("updateTopic", "-b", served.broker, "-t", "T", "-r", "1", "-w", "1")
    for i in range(4):
        served.admin("sendMessage", "-t", "T", "-p", f"m{i}", "-i", "0")
    served.admin("resetOffsetByTimeOld", "-g", "G", "-t", "T", "-s", "now")  # G at 4
    (dry,) = served.admin_json("resetOffset", "-g", "G", "-t", "T", "--shift-by", "-3", "--dry-run")
    assert (dry["dryRun"], dry["queues"][0]["final"]) == (True, 1)
    assert served.admin_json("consumerProgress", "-g", "G")["queues"][0]["consumerOffset"] == 4
    (done,) = served.admin_json(
        "resetOffset", "-g", "G", "-t", "T", "--to-earliest", "--mode", "server_side"
    )
    assert done["queues"][0]["outcome"] == "moved"
    assert served.admin_json("consumerProgress", "-g", "G")["queues"][0]["consumerOffset"] == 0
    text = served.admin("resetOffset", "-g", "G", "-t", "T", "--to-latest", "--dry-run").stdout
    assert "#queueId  #current  #target  #final  #outcome" in text
