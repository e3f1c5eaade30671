"""What a consumer subscribes to and where it starts: message model, ConsumeFromWhere, SubscriptionData."""

from __future__ import annotations

import time
from enum import Enum

from es_broker.client.message_selector import TAG, MessageSelector
from es_broker.remoting.bodies import SubscriptionData
from es_broker.remoting.message import tag_hash


class MessageModel(Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(Enum):
    """Where a group without a stored offset starts (B-45); the deprecated three act like LAST."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = (
        "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    )
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"


def build_subscription(topic: str, expression: str | MessageSelector | None) -> SubscriptionData:
    """A subscription as Java's FilterAPI builds it: TAG `*` or tags split on `||`, or SQL92 as given."""
    now_ms = int(time.time() * 1000)
    if isinstance(expression, MessageSelector):
        if expression.expression_type != TAG:
            return SubscriptionData(
                topic=topic,
                sub_string=expression.expression,
                sub_version=now_ms,
                expression_type=expression.expression_type,
            )
        expression = expression.expression
    text = (expression or "").strip()
    if text in ("", "*"):
        return SubscriptionData(topic=topic, sub_string="*", sub_version=now_ms)
    tags = tuple(dict.fromkeys(t.strip() for t in text.split("||") if t.strip()))
    return SubscriptionData(
        topic=topic,
        sub_string=text,
        tags_set=tags,
        code_set=tuple(tag_hash(t) for t in tags),
        sub_version=now_ms,
    )


def parse_consume_timestamp(text: str) -> int:
    """yyyyMMddHHmmss in local time -> ms since the epoch (B-47)."""
    return int(time.mktime(time.strptime(text, "%Y%m%d%H%M%S")) * 1000)
