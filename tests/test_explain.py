"""`es-broker explain`: why each queue of a group started where it did (B-37, B-40, B-45, B-46)."""

from __future__ import annotations

from es_broker.commands.explain import explain
from es_broker.commands.placement import MessageIn
from tests.conftest import make_topic


async def test_b040_explain_says_a_new_group_on_a_young_topic_started_at_zero(broker):
    await make_topic(broker, queues=1)
    for i in range(5):
        await broker.put_message("T", 0, MessageIn(b"%d" % i))
    await broker.record_consumer_group(
        "G", ["10.0.0.5@1"], "CONSUME_FROM_LAST_OFFSET", "CLUSTERING", {"T": "*"}
    )
    await broker.query_consumer_offset("G", "T", 0, requester="10.0.0.5@1")
    await broker.commit_offset("G", "T", 0, 5, requester="10.0.0.5@1")
    report = explain(broker.store, "G", "T")
    (q,) = report["queues"]
    assert (
        q["start"]["row"] == 2
        and q["start"]["answer"] == 0
        and q["start"]["head_in_memory"] is True
    )
    assert "starts at 0 and consumes the queue's whole history (B-40)" in q["start"]["why"]
    assert (q["latest_change"]["new"], q["latest_change"]["cause"]) == (5, "client_commit")
    assert report["consume_from_where"] == "CONSUME_FROM_LAST_OFFSET"


async def test_b037_explain_says_query_not_found_sends_last_offset_to_max(
    broker, tmp_path, clock, nursery
):
    from es_broker.core.broker import Broker

    config = broker.config.replace(
        total_physical_memory_bytes=1000, storePathRootDir=str(tmp_path / "cold")
    )
    b = Broker.open(config.storePathRootDir, config, clock)
    await nursery.start(b.run)
    await make_topic(b, queues=1)
    await b.put_message("T", 0, MessageIn(b"x" * 3000))
    await b.put_message("T", 0, MessageIn(b"y"))
    await b.record_consumer_group(
        "G", ["c@1"], "CONSUME_FROM_LAST_OFFSET", "CLUSTERING", {"T": "*"}
    )
    await b.query_consumer_offset("G", "T", 0, requester="c@1")
    (q,) = explain(b.store, "G", "T")["queues"]
    assert q["start"]["answer"] == "QUERY_NOT_FOUND" and q["start"]["head_in_memory"] is False
    assert "started at the queue's max" in q["start"]["why"]


async def test_explain_of_a_group_that_already_had_offsets_shows_no_start(broker):
    await make_topic(broker, queues=1)
    await broker.commit_offset("G", "T", 0, 3, requester="ops")
    await broker.query_consumer_offset("G", "T", 0)
    (q,) = explain(broker.store, "G", "T")["queues"]
    assert q["start"] is None and q["current_offset"] == 3
