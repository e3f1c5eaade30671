"""The offset table, QUERY_CONSUMER_OFFSET (B-28, B-29, B-37, B-38, B-40) and S-6."""

from __future__ import annotations

from es_broker.commands.errors import Code
from es_broker.commands.messages import MessageIn
from es_broker.commands.offsets import QUERY_NOT_FOUND_REMARK
from es_broker.core.broker import Broker
from tests.conftest import make_topic


async def small_ram_broker(broker, tmp_path, clock, nursery, name: str, **switches) -> Broker:
    config = broker.config.replace(
        total_physical_memory_bytes=1000, storePathRootDir=str(tmp_path / name), **switches
    )
    b = Broker.open(config.storePathRootDir, config, clock)
    await nursery.start(b.run)
    await make_topic(b)
    return b


async def test_b028_commit_overwrites_lower_values_too(broker):
    await broker.commit_offset("G", "T", 0, 100)
    await broker.commit_offset("G", "T", 0, 90)
    assert broker.stored_offset("G", "T", 0) == 90


async def test_b028_negative_commit_is_stored_and_then_reads_as_no_offset(broker):
    await make_topic(broker)
    await broker.commit_offset("G", "T", 0, -5)
    assert broker.stored_offset("G", "T", 0) == -5
    answer = await broker.query_consumer_offset("G", "T", 0)
    assert answer.row == 2  # not row 1: -5 is "no offset"


async def test_b029_query_without_entry_is_minus_one(broker):
    assert broker.stored_offset("G", "T", 3) == -1


async def test_b037_row1_stored_offset_is_answered(broker):
    await make_topic(broker)
    await broker.commit_offset("G", "T", 0, 7)
    answer = await broker.query_consumer_offset("G", "T", 0)
    assert (answer.code, answer.offset, answer.row) == (Code.SUCCESS, 7, 1)


async def test_b037_row2_empty_queue_answers_zero(broker):
    await make_topic(broker)
    answer = await broker.query_consumer_offset("G", "T", 0)
    assert (answer.code, answer.offset, answer.row) == (Code.SUCCESS, 0, 2)


async def test_b037_row2_head_in_memory_answers_zero(broker):
    await make_topic(broker)
    for i in range(5):
        await broker.put_message("T", 0, MessageIn(b"%d" % i))
    answer = await broker.query_consumer_offset("G", "T", 0)
    assert (answer.code, answer.offset, answer.head_in_memory) == (Code.SUCCESS, 0, True)


async def test_b037_row3_head_on_disk_is_query_not_found(broker, tmp_path, clock, nursery):
    b = await small_ram_broker(broker, tmp_path, clock, nursery, "ondisk")
    await b.put_message("T", 0, MessageIn(b"first"))
    await b.put_message("T", 1, MessageIn(b"x" * 2000))  # other queues count too (B-38)
    answer = await b.query_consumer_offset("G", "T", 0)
    assert (answer.code, answer.offset, answer.row) == (Code.QUERY_NOT_FOUND, -1, 3)
    assert answer.remark == QUERY_NOT_FOUND_REMARK


async def test_b037_no_offset_answers_are_recorded_with_their_verdict(broker):
    await make_topic(broker)
    await broker.query_consumer_offset("G", "T", 0, requester="10.0.0.1@1")
    seq, record = list(broker.store.log.read())[-1]
    assert record["type"] == "offset_queried"
    assert (record["row"], record["offset"], record["requester"]) == (2, 0, "10.0.0.1@1")


def test_b038_in_memory_predicate_vector():
    from es_broker.config import BrokerConfig

    threshold = BrokerConfig(total_physical_memory_bytes=1000).in_memory_threshold
    assert threshold == 400
    phy_max = 10_000
    assert phy_max - 9_800 <= threshold  # p = 9 800: in memory
    assert phy_max - 9_000 > threshold  # p = 9 000: on disk


async def test_b040_new_group_on_young_topic_starts_at_zero(broker):
    await make_topic(broker)
    for i in range(500):
        await broker.put_message("T", 0, MessageIn(b"%d" % i))
    answer = await broker.query_consumer_offset("NEW", "T", 0)
    assert (answer.code, answer.offset) == (Code.SUCCESS, 0)


async def test_s006_strict_new_group_start_answers_not_found(broker, tmp_path, clock, nursery):
    b = await small_ram_broker(broker, tmp_path, clock, nursery, "strict", new_group_start="strict")
    await b.put_message("T", 0, MessageIn(b"x"))
    answer = await b.query_consumer_offset("NEW", "T", 0)
    assert answer.code == Code.QUERY_NOT_FOUND


async def test_b131_every_commit_is_in_the_history_with_cause_and_requester(broker):
    await broker.commit_offset("G", "T", 1, 10, requester="c1")
    await broker.commit_offset("G", "T", 1, 4, cause="admin", requester="ops")
    with broker.store.read() as txn:
        changes = list(broker.store.offsets.changes(txn, "T", "G", 1))
    assert [(c.old, c.new, c.cause, c.requester) for c in changes] == [
        (-1, 10, "client_commit", "c1"),
        (10, 4, "admin", "ops"),
    ]


async def test_b031_commit_piggybacked_on_pull_is_stored_with_its_cause(broker):
    await make_topic(broker)
    await broker.put_message("T", 0, MessageIn(b"x"))
    await broker.pull("G", "T", 0, 0, client="c1", commit_offset=1)
    with broker.store.read() as txn:
        (change,) = broker.store.offsets.changes(txn, "T", "G", 0)
    assert (change.new, change.cause) == (1, "pull_commit")
