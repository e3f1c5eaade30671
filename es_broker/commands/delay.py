"""Delay levels: which level a message asks for, where it is parked, when it is due (B-06, B-96, B-97).

Pure functions over properties and numbers; the store path (messages.py) and
the delivery job (schedule.py) decide with them and write the results into
their records.
"""

from __future__ import annotations

from es_broker.commands.errors import MessageIllegal

PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_WAIT = "WAIT"


def requested_level(properties: dict[str, str]) -> int:
    """The DELAY property as a level; 0 when absent (a level <= 0 means no delay)."""
    raw = properties.get(PROPERTY_DELAY)
    if raw is None or raw.strip() == "":
        return 0
    try:
        return int(raw.strip())
    except ValueError:
        raise MessageIllegal(f"the DELAY property {raw!r} is not an integer delay level") from None


def clamp_level(level: int, levels_ms: list[int]) -> int:
    """A level above the highest configured one is stored as the highest (B-06)."""
    return min(level, len(levels_ms))


def schedule_queue(level: int) -> int:
    """Level L is parked in SCHEDULE_TOPIC_XXXX queue L - 1 (B-96)."""
    return level - 1


def parked_properties(
    properties: dict[str, str], real_topic: str, real_queue_id: int, level: int
) -> dict[str, str]:
    """The properties of a message parked for delay: the real destination kept aside (B-96)."""
    props = dict(properties)
    props[PROPERTY_DELAY] = str(level)
    props[PROPERTY_REAL_TOPIC] = real_topic
    props[PROPERTY_REAL_QID] = str(real_queue_id)
    return props


def delivered_properties(properties: dict[str, str]) -> dict[str, str]:
    """The properties of the copy delivered to the real topic: DELAY removed, WAIT=false (B-97, docs/protocol.md §10.4).

    REAL_TOPIC and REAL_QID stay on the copy, as in RocketMQ (B-97 note, B-105).
    """
    props = {k: v for k, v in properties.items() if k != PROPERTY_DELAY}
    props[PROPERTY_WAIT] = "false"
    return props


def deliver_at(store_time: int, level: int, levels_ms: list[int]) -> int:
    """The consume-queue tagsCode of a parked message: store time + delay(L) (B-96)."""
    return store_time + levels_ms[level - 1]


def corrected_due(tags_code: int, now: int, level: int, levels_ms: list[int]) -> int:
    """correctDeliverTimestamp (B-97): a due time further ahead than delay(L) means now."""
    return now if tags_code > now + levels_ms[level - 1] else tags_code
