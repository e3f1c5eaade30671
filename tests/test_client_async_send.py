"""Pipelined async sends, sends to a chosen queue, and the hash selector (B-235..B-237)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from es_broker.client import Message, Producer, SendStatus
from es_broker.client.producer import ClientError
from es_broker.client.selectors import by_hash, hash_index, java_hash_code, java_string_hash
from es_broker.remoting.bodies import MessageQueue
from tests.helpers import topic_ready

# String#hashCode computed by the definition s[0]*31^(n-1) + ... + s[n-1] in 32-bit two's
# complement (java.lang.String javadoc); e.g. "hello" = 99162322, "polygenelubricants" = MIN_VALUE.
HASH_VECTORS = [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),
    ("order-42", None),
    ("polygenelubricants", -(2**31)),
    ("ключ", None),
    ("\U0001f600", None),  # a surrogate pair: two UTF-16 code units
]


def definition_hash(text: str) -> int:
    """String#hashCode by its javadoc definition, with big integers, then narrowed to int32."""
    units = text.encode("utf-16-be", "surrogatepass")
    codes = [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]
    n = len(codes)
    total = sum(c * 31 ** (n - 1 - i) for i, c in enumerate(codes)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@pytest.mark.parametrize(("key", "expected"), HASH_VECTORS)
def test_b237_string_hash_is_java_string_hashcode(key, expected):
    assert java_string_hash(key) == definition_hash(key)
    if expected is not None:
        assert java_string_hash(key) == expected


def test_b237_hash_selector_index_is_abs_of_javas_remainder():
    # Java: int value = arg.hashCode() % size; if (value < 0) value = Math.abs(value);
    for key in ["order-1", "order-2", "polygenelubricants", "Aa", "x" * 100, "ключ"]:
        for size in (1, 3, 4, 8, 16):
            h = definition_hash(key)
            java_rem = int(abs(h) % size) * (-1 if h < 0 else 1)  # truncating remainder
            assert hash_index(key, size) == abs(java_rem)
    assert hash_index("polygenelubricants", 8) == 0  # MIN_VALUE % 8 == 0
    assert hash_index("polygenelubricants", 3) == 2  # MIN_VALUE % 3 == -2 -> 2
    assert java_hash_code(-7) == -7 and hash_index(-7, 4) == 3  # an Integer arg
    assert java_hash_code(2**40 + 5) == 5 ^ 2**8  # a Long arg: (int) (value ^ (value >>> 32))


def test_b237_by_hash_picks_from_the_route_order():
    queues = [MessageQueue("T", "broker-a", q) for q in range(8)]
    assert by_hash("hello")(queues) == queues[99162322 % 8]


async def test_b235_many_async_sends_in_flight_are_stored_in_the_order_they_were_asked(
    process_running,
):
    await topic_ready(process_running, "Pipe", 4)
    async with Producer(process_running.namesrv_addr, "PG", client_ip="127.0.0.1") as producer:
        handles = [producer.send_async("Pipe", f"{i}".encode()) for i in range(2000)]
        assert len({h.msg_id for h in handles}) == 2000  # ids known before any answer
        results = [await h.result() for h in handles]
    assert all(r.status == SendStatus.SEND_OK for r in results)
    by_queue: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, result in enumerate(results):
        by_queue[result.queue.queue_id].append((i, result.queue_offset))
    assert len(by_queue) == 4
    for sends in by_queue.values():
        # within a queue, later sends got later offsets, with no hole
        offsets = [offset for _, offset in sends]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


async def test_b236_send_to_queue_and_ordered_sends_with_the_hash_selector(process_running):
    await topic_ready(process_running, "Ord", 8)
    async with Producer(process_running.namesrv_addr, "PG", client_ip="127.0.0.1") as producer:
        to_five = await producer.send_to_queue("Ord", 5, Message(b"x"))
        assert to_five.queue.queue_id == 5
        with pytest.raises(ClientError, match="no writable queue 9"):
            await producer.send_to_queue("Ord", 9, Message(b"x"))
        asked = [(key, seq) for seq in range(20) for key in ("order-1", "order-2", "order-3")]
        handles = [
            producer.send_async("Ord", f"{key}:{seq}".encode(), queue_selector=by_hash(key))
            for key, seq in asked
        ]
        results = [await h.result() for h in handles]
    for key in ("order-1", "order-2", "order-3"):
        mine = [r for r, (k, _) in zip(results, asked, strict=True) if k == key]
        assert {r.queue.queue_id for r in mine} == {hash_index(key, 8)}
        offsets = [r.queue_offset for r in mine]
        assert offsets == sorted(offsets)


async def test_b235_a_send_that_cannot_be_made_fails_its_handle_not_the_producer(process_running):
    async with Producer(process_running.namesrv_addr, "PG", client_ip="127.0.0.1") as producer:
        await topic_ready(process_running, "Two", 2)
        bad = producer.send_async("Two", b"x", queue_selector=lambda qs: qs[0])
        good = producer.send_async("Two", b"y")
        assert (await bad.result()).queue.queue_id == 0
        assert (await good.result()).status == SendStatus.SEND_OK
        missing = producer.send_message_async(
            "Two", Message(b"z"), queue_selector=lambda qs: (_ for _ in ()).throw(ValueError("no"))
        )
        with pytest.raises(ClientError, match="no"):
            await missing.result()
    with pytest.raises(ClientError, match="not started"):
        producer.send_async("Two", b"late")
