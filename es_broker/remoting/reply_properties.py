"""The message properties and names of request-reply (4.9.8 MessageConst, MixAll), for broker and client."""

from __future__ import annotations

CORRELATION_ID = "CORRELATION_ID"  # MessageConst.PROPERTY_CORRELATION_ID
REPLY_TO_CLIENT = "REPLY_TO_CLIENT"  # MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT
TTL = "TTL"  # MessageConst.PROPERTY_MESSAGE_TTL
MSG_TYPE = "MSG_TYPE"  # MessageConst.PROPERTY_MESSAGE_TYPE
REPLY_FLAG = "reply"  # MixAll.REPLY_MESSAGE_FLAG
CLUSTER = "CLUSTER"  # MessageConst.PROPERTY_CLUSTER
PUSH_REPLY_TIME = "PUSH_REPLY_TIME"  # MessageConst.PROPERTY_PUSH_REPLY_TIME
ARRIVE_TIME = "ARRIVE_TIME"  # MessageConst.PROPERTY_REPLY_MESSAGE_ARRIVE_TIME
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"  # MixAll.REPLY_TOPIC_POSTFIX


def reply_topic(cluster: str) -> str:
    """`<cluster>_REPLY_TOPIC` (MixAll#getReplyTopic), created at a master's first start."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"
