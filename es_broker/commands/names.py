"""RocketMQ's rules for topic and group names (TopicValidator, B-24)."""

from __future__ import annotations

from es_broker.commands.errors import IllegalRequest, NoPermission
from es_broker.remoting.requests import LEGAL_NAME

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
AUTO_CREATE_TEMPLATE = "TBW102"
BENCHMARK_TOPIC = "BenchmarkTest"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # BrokerConfig.msgTraceTopicName's default
TIMER_TOPIC = "rmq_sys_wheel_timer"  # RocketMQ 5's timer messages wait here (B-589)
MAX_NAME_LENGTH = 127

_LEGAL = LEGAL_NAME

SYSTEM_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        OFFSET_MOVED_EVENT,
        AUTO_CREATE_TEMPLATE,
        BENCHMARK_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        TRACE_TOPIC,
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        SELF_TEST_TOPIC,
        TIMER_TOPIC,
    }
)
NOT_SENDABLE = frozenset(
    {
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        OFFSET_MOVED_EVENT,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        SELF_TEST_TOPIC,
    }
)


def check_topic_name(topic: object) -> str:
    """Return topic if it is a legal name, else raise with RocketMQ's remark."""
    if not isinstance(topic, str) or not topic:
        raise IllegalRequest("The specified topic is blank.")
    if len(topic) > MAX_NAME_LENGTH:
        raise IllegalRequest(
            f"The specified topic is longer than topic max length {MAX_NAME_LENGTH}."
        )
    if topic in (RETRY_PREFIX, DLQ_PREFIX):  # B-500: the prefix alone names no group
        raise IllegalRequest(
            f"The specified topic[{topic}] names no group: a retry or dead-letter topic is the "
            "prefix followed by its consumer group's name"
        )
    if not _LEGAL.match(topic):
        raise IllegalRequest(
            f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    return topic


def check_group_name(group: object) -> str:
    if not isinstance(group, str) or not group:
        raise IllegalRequest("The specified group is blank.")
    if len(group) > 255 or not _LEGAL.match(group):
        raise IllegalRequest(
            f"the specified group[{group}] contains illegal characters or is too long"
        )
    return group


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(("rmq_sys_", "RMQ_SYS_TRANS_"))


def check_sendable(topic: str) -> None:
    if topic in NOT_SENDABLE:
        raise NoPermission(f"Sending message to topic[{topic}] is forbidden.")


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group
