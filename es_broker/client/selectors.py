"""Queue selectors for sends to a chosen queue (Java's MessageQueueSelector implementations).

A selector here is what `Producer.send(..., queue_selector=...)` takes: a
function from the topic's writable queues (in route order, as Java's
`topicPublishInfo.getMessageQueueList()`) to one of them. `by_hash(key)` is
Java's SelectMessageQueueByHash with `arg = key`, bit for bit, so a Python and
a Java producer put the same key on the same queue (B-237).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from es_broker.remoting.bodies import MessageQueue

QueueSelector = Callable[[Sequence[MessageQueue]], MessageQueue]

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def java_string_hash(text: str) -> int:
    """java.lang.String#hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as int32."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return _to_int32(h)


def java_hash_code(key: str | int) -> int:
    """hashCode of the selector's `arg`: a str as String, an int as Integer (Long beyond int32)."""
    if isinstance(key, bool):
        return 1231 if key else 1237  # Boolean#hashCode
    if isinstance(key, int):
        if _INT_MIN <= key <= _INT_MAX:
            return key  # Integer#hashCode
        value = key & 0xFFFFFFFFFFFFFFFF  # Long#hashCode: (int) (value ^ (value >>> 32))
        return _to_int32(value ^ (value >> 32))
    return java_string_hash(key)


def hash_index(key: str | int, size: int) -> int:
    """SelectMessageQueueByHash's index: hashCode % size (Java's remainder truncates), then abs."""
    if size <= 0:
        raise ValueError("no queue to select from")
    h = java_hash_code(key)
    value = abs(h) % size  # Java's % keeps the dividend's sign; abs of it is |h| % size
    return value


def by_hash(key: str | int) -> QueueSelector:
    """Java's SelectMessageQueueByHash with `arg = key`: every message of a key goes to one queue."""

    def select(queues: Sequence[MessageQueue]) -> MessageQueue:
        return queues[hash_index(key, len(queues))]

    return select


def by_queue_id(queue_id: int, broker_name: str | None = None) -> QueueSelector:
    """The queue with this id (of `broker_name` if given): Java's `send(msg, mq)`.

    Raises ValueError when the topic's route has no such writable queue.
    """

    def select(queues: Sequence[MessageQueue]) -> MessageQueue:
        for mq in queues:
            if mq.queue_id == queue_id and (broker_name is None or mq.broker_name == broker_name):
                return mq
        where = f" of broker {broker_name}" if broker_name else ""
        raise ValueError(f"the topic has no writable queue {queue_id}{where}")

    return select
