"""Refusals of the broker core: each carries the RocketMQ response code and a remark.

The wire server answers with `code` and `remark` as they are, so an error here
reads the same to an in-process caller and to a RocketMQ client.
"""

from __future__ import annotations

from es_broker.remoting.codes import ResponseCode


class BrokerError(Exception):
    """A request the broker refuses; nothing was changed."""

    code: ResponseCode = ResponseCode.SYSTEM_ERROR

    def __init__(self, remark: str, code: ResponseCode | None = None) -> None:
        super().__init__(remark)
        self.remark = remark
        if code is not None:
            self.code = code


class IllegalRequest(BrokerError):
    """A malformed or out-of-range request (SYSTEM_ERROR in RocketMQ)."""

    code = ResponseCode.SYSTEM_ERROR


class MessageIllegal(BrokerError):
    code = ResponseCode.MESSAGE_ILLEGAL


class NoPermission(BrokerError):
    code = ResponseCode.NO_PERMISSION


class TopicNotExist(BrokerError):
    code = ResponseCode.TOPIC_NOT_EXIST


class GroupNotExist(BrokerError):
    code = ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


class ServiceNotAvailable(BrokerError):
    code = ResponseCode.SERVICE_NOT_AVAILABLE
