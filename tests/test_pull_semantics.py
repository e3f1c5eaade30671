"""The pull read result and next-offset rules (B-58..B-62)."""

from __future__ import annotations

import pytest

from es_broker.commands.messages import GetStatus
from es_broker.commands.placement import MessageIn
from es_broker.remoting.message import decode_all, tag_hash
from tests.conftest import make_topic


async def fill(
    broker,
    n: int,
    topic: str = "T",
    queue_id: int = 0,
    tags: list[str] | None = None,
    body: bytes = b"m",
) -> None:
    for i in range(n):
        props = {"TAGS": tags[i % len(tags)]} if tags else {}
        await broker.put_message(topic, queue_id, MessageIn(body + str(i).encode(), props))


async def test_b058_empty_queue_is_no_message_in_queue_with_next_zero(broker):
    await make_topic(broker)
    r = broker.get_message("T", 0, 0)
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (
        GetStatus.NO_MESSAGE_IN_QUEUE,
        0,
        0,
        0,
    )


async def test_b058_offset_equal_to_max_is_overflow_one_and_stays(broker):
    await make_topic(broker)
    await fill(broker, 3)
    r = broker.get_message("T", 0, 3)
    assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 3)


async def test_b058_offset_beyond_max_is_overflow_badly(broker):
    await make_topic(broker)
    await fill(broker, 3)
    r = broker.get_message("T", 0, 7)
    assert r.status == GetStatus.OFFSET_OVERFLOW_BADLY


async def test_b058_found_returns_messages_in_offset_order_and_next_after_them(broker):
    await make_topic(broker)
    await fill(broker, 5)
    r = broker.get_message("T", 0, 1, max_msg_nums=3)
    assert r.status == GetStatus.FOUND
    assert r.next_begin_offset == 4
    assert [m.queue_offset for m in decode_all(r.body)] == [1, 2, 3]
    assert [m.body for m in decode_all(r.body)] == [b"m1", b"m2", b"m3"]


async def test_b058_filter_matching_nothing_is_no_matched_and_advances(broker):
    await make_topic(broker)
    await fill(broker, 4, tags=["TagA"])
    r = broker.get_message("T", 0, 0, tags_codes=frozenset({tag_hash("TagB")}))
    assert (r.status, r.next_begin_offset, r.messages) == (GetStatus.NO_MATCHED_MESSAGE, 4, ())


async def test_b058_filter_returns_only_matching_tags_and_skips_the_rest(broker):
    await make_topic(broker)
    await fill(broker, 6, tags=["TagA", "TagB"])
    r = broker.get_message("T", 0, 0, tags_codes=frozenset({tag_hash("TagB")}))
    assert r.status == GetStatus.FOUND
    assert [m.queue_offset for m in decode_all(r.body)] == [1, 3, 5]
    assert r.next_begin_offset == 6


async def test_b058_scan_is_capped_at_800_units(broker):
    await make_topic(broker)
    await broker.put_messages("T", 0, [MessageIn(b"x", {"TAGS": "A"}) for _ in range(1000)])
    r = broker.get_message("T", 0, 0, tags_codes=frozenset({tag_hash("B")}))
    assert (r.status, r.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 800)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (GetStatus.FOUND, 0),
        (GetStatus.NO_MATCHED_MESSAGE, 20),
        (GetStatus.MESSAGE_WAS_REMOVING, 20),
        (GetStatus.OFFSET_TOO_SMALL, 21),
        (GetStatus.OFFSET_OVERFLOW_BADLY, 21),
        (GetStatus.OFFSET_OVERFLOW_ONE, 19),
        (GetStatus.OFFSET_FOUND_NULL, 19),
    ],
)
def test_b059_store_status_maps_to_response_code(status, code):
    from es_broker.server.processors.pull_codes import response_code

    assert response_code(status, requested_offset=5) == code


def test_b059_no_message_in_queue_is_moved_unless_offset_zero():
    from es_broker.server.processors.pull_codes import response_code

    assert response_code(GetStatus.NO_MESSAGE_IN_QUEUE, requested_offset=0) == 19
    assert response_code(GetStatus.NO_MESSAGE_IN_QUEUE, requested_offset=3) == 21


async def test_b060_overflow_badly_next_is_max_by_default(broker):
    await make_topic(broker)
    await fill(broker, 20)
    assert broker.get_message("T", 0, 25).next_begin_offset == 20


async def test_b060_legacy_overflow_badly_restarts_at_zero_when_min_is_zero(
    broker, tmp_path, clock, nursery
):
    from es_broker.core.broker import Broker

    legacy = broker.config.replace(
        overflow_badly_next="legacy", storePathRootDir=str(tmp_path / "legacy")
    )
    b = Broker.open(legacy.storePathRootDir, legacy, clock)
    await nursery.start(b.run)
    await make_topic(b)
    await fill(b, 20)
    assert b.get_message("T", 0, 25).next_begin_offset == 0


async def test_b061_slave_never_corrects_next_offset(broker, tmp_path, clock, nursery):
    from es_broker.server.processors.pull_codes import slave_correction

    await make_topic(broker)
    await fill(broker, 5)
    r = broker.get_message("T", 0, 9)
    assert (
        slave_correction(r, requested_offset=9, offset_check_in_slave=False).next_begin_offset == 9
    )
    assert (
        slave_correction(r, requested_offset=9, offset_check_in_slave=True).next_begin_offset == 5
    )


async def test_b062_in_memory_batch_is_capped_at_32_messages(broker):
    await make_topic(broker)
    await broker.put_messages("T", 0, [MessageIn(b"x") for _ in range(100)])
    r = broker.get_message("T", 0, 0, max_msg_nums=64)
    assert len(r.messages) == 32 and r.next_begin_offset == 32


async def test_b062_in_memory_batch_is_capped_at_256_kib_but_first_always_fits(broker):
    await make_topic(broker)
    await broker.put_messages("T", 0, [MessageIn(b"x" * 100_000) for _ in range(5)])
    r = broker.get_message("T", 0, 0, max_msg_nums=32)
    assert len(r.messages) == 2  # a third would pass 262144 bytes
    big = await broker.put_message("T", 1, MessageIn(b"y" * 300_000))
    assert len(broker.get_message("T", 1, big.queue_offset).messages) == 1


async def test_b062_on_disk_batch_is_capped_at_8_messages(broker, tmp_path, clock, nursery):
    from es_broker.core.broker import Broker

    small_ram = broker.config.replace(
        total_physical_memory_bytes=1000, storePathRootDir=str(tmp_path / "small")
    )
    b = Broker.open(small_ram.storePathRootDir, small_ram, clock)
    await nursery.start(b.run)
    await make_topic(b)
    await b.put_messages("T", 0, [MessageIn(b"x") for _ in range(40)])
    await b.put_messages("T", 1, [MessageIn(b"z" * 1000)])  # pushes queue 0's head out of memory
    r = b.get_message("T", 0, 0, max_msg_nums=32)
    assert len(r.messages) == 8 and r.slow


async def test_b013_pull_from_queue_beyond_read_queues_is_illegal(broker):
    from es_broker.commands.errors import IllegalRequest
    from es_broker.remoting.codes import ResponseCode

    await make_topic(broker, queues=2)
    with pytest.raises(IllegalRequest) as err:
        broker.get_message("T", 2, 0)
    assert (
        err.value.code == ResponseCode.SYSTEM_ERROR and "queueId[2] is illegal" in err.value.remark
    )
