"""The answers a refused request gets: a 5.x status in the response, or a gRPC status.

RocketMQ 5's proxy answers most refusals inside the response (`Status{code,
message}` with the v2 `Code`), which the client turns into its exceptions;
what stops a call before a response can be built (a malformed request, a
failed signature, a broker's permission refusal, an RPC not served) ends the
call with a gRPC status instead.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import definition_pb2 as pb

from es_broker.client.send_tries import BrokerRefused
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.codes import ResponseCode

Code = pb.Code


class Refused(Exception):
    """Refuse a request with a 5.x status in its response (`Code` and a remark)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Abort(Exception):
    """End the call with a gRPC status (no response is written)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


OK = Code.OK
ACL_REFUSAL = "org.apache.rocketmq.acl.common.AclException"

# a broker's refusal (4.x ResponseCode) as the 5.x status RocketMQ 5's proxy gives it
_BROKER_CODES: dict[int, int] = {
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
}


def broker_refusal(code: int, remark: str | None, what: str) -> Refused | Abort:
    """What a broker's error answer to `what` becomes; NO_PERMISSION ends the call."""
    text = f"{what}: the broker refused ({code}): {remark or ''}".rstrip(": ")
    # 4.9.8 answers an ACL refusal with SYSTEM_ERROR and the AclException's text (B-161)
    if code == ResponseCode.NO_PERMISSION or ACL_REFUSAL in (remark or ""):
        return Abort(grpc.StatusCode.PERMISSION_DENIED, text)
    return Refused(_BROKER_CODES.get(code, Code.INTERNAL_ERROR), text)


def parse(cls: Any, raw: bytes) -> Any:
    """A request's bytes as `cls`; a malformed one ends the call with INVALID_ARGUMENT."""
    try:
        return cls.FromString(raw)
    except (DecodeError, RuntimeWarning) as exc:
        raise Abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"malformed {cls.DESCRIPTOR.name}: the bytes are not that protobuf message ({exc})",
        ) from None


def translate(exc: Exception, what: str) -> Refused | Abort:
    """A failure toward the brokers as the 5.x client is told it."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, BrokerRefused):
        cause = cause.__cause__  # the last refusal behind a send's "still failed"
    if isinstance(cause, BrokerRefused):
        return broker_refusal(cause.code, cause.remark, what)
    if isinstance(exc, RemotingError):
        return Refused(Code.PROXY_TIMEOUT, f"{what}: no broker answered: {exc}")
    text = str(exc)
    if text.startswith("No route info of this topic"):
        return Refused(Code.TOPIC_NOT_FOUND, f"{what}: {text}")
    return Refused(Code.INTERNAL_ERROR, f"{what}: {text}")
