"""Refusals of the broker core: each carries the RocketMQ response code and a remark.

The wire server answers with `code` and `remark` as they are, so an error here
reads the same to an in-process caller and to a RocketMQ client.
"""

from __future__ import annotations

from enum import IntEnum


class Code(IntEnum):
    """The RocketMQ response codes the core can answer with (remoting spec 6.2)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    CONSUMER_NOT_ONLINE = 206


class BrokerError(Exception):
    """A request the broker refuses; nothing was changed."""

    code: Code = Code.SYSTEM_ERROR

    def __init__(self, remark: str, code: Code | None = None) -> None:
        super().__init__(remark)
        self.remark = remark
        if code is not None:
            self.code = code


class IllegalRequest(BrokerError):
    """A malformed or out-of-range request (SYSTEM_ERROR in RocketMQ)."""

    code = Code.SYSTEM_ERROR


class MessageIllegal(BrokerError):
    code = Code.MESSAGE_ILLEGAL


class NoPermission(BrokerError):
    code = Code.NO_PERMISSION


class TopicNotExist(BrokerError):
    code = Code.TOPIC_NOT_EXIST


class GroupNotExist(BrokerError):
    code = Code.SUBSCRIPTION_GROUP_NOT_EXIST


class ServiceNotAvailable(BrokerError):
    code = Code.SERVICE_NOT_AVAILABLE
