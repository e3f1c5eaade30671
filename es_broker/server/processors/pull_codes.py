"""From a store read result to the pull response (B-59, B-61)."""

from __future__ import annotations

from es_broker.commands.messages import GetResult, GetStatus
from es_broker.remoting.codes import ResponseCode

_CORRECTED = frozenset(
    {
        GetStatus.NO_MESSAGE_IN_QUEUE,
        GetStatus.OFFSET_TOO_SMALL,
        GetStatus.OFFSET_OVERFLOW_ONE,
        GetStatus.OFFSET_OVERFLOW_BADLY,
        GetStatus.OFFSET_FOUND_NULL,
    }
)


def response_code(status: GetStatus, requested_offset: int) -> ResponseCode:
    """PullMessageProcessor's status mapping (B-59)."""
    if status == GetStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in (GetStatus.MESSAGE_WAS_REMOVING, GetStatus.NO_MATCHED_MESSAGE):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status == GetStatus.NO_MESSAGE_IN_QUEUE:
        return (
            ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND
        )
    if status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
        return ResponseCode.PULL_OFFSET_MOVED
    return ResponseCode.PULL_NOT_FOUND


def slave_correction(
    result: GetResult, requested_offset: int, offset_check_in_slave: bool
) -> GetResult:
    """On a slave without offset checks a corrected next offset stays the requested one (B-61)."""
    if offset_check_in_slave or result.status not in _CORRECTED:
        return result
    return result._replace(next_begin_offset=requested_offset)
