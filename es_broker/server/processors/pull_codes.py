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


# the statuses as module names, compared by identity (an enum member is its own only instance), and
# the answer codes as ints: a member's lookup on its class, or a comparison with it, costs more than
# a global's, several times a pull
_FOUND = GetStatus.FOUND
_NO_MATCHED_MESSAGE = GetStatus.NO_MATCHED_MESSAGE
_MESSAGE_WAS_REMOVING = GetStatus.MESSAGE_WAS_REMOVING
_NO_MESSAGE_IN_QUEUE = GetStatus.NO_MESSAGE_IN_QUEUE
_OFFSET_TOO_SMALL = GetStatus.OFFSET_TOO_SMALL
_OFFSET_OVERFLOW_BADLY = GetStatus.OFFSET_OVERFLOW_BADLY
SUCCESS = int(ResponseCode.SUCCESS)
PULL_NOT_FOUND = int(ResponseCode.PULL_NOT_FOUND)
PULL_RETRY_IMMEDIATELY = int(ResponseCode.PULL_RETRY_IMMEDIATELY)
PULL_OFFSET_MOVED = int(ResponseCode.PULL_OFFSET_MOVED)


def response_code(status: GetStatus, requested_offset: int) -> int:
    """PullMessageProcessor's status mapping (B-59), as the response code's int."""
    if status is _FOUND:
        return SUCCESS
    if status is _MESSAGE_WAS_REMOVING or status is _NO_MATCHED_MESSAGE:
        return PULL_RETRY_IMMEDIATELY
    if status is _NO_MESSAGE_IN_QUEUE:
        return PULL_OFFSET_MOVED if requested_offset != 0 else PULL_NOT_FOUND
    if status is _OFFSET_TOO_SMALL or status is _OFFSET_OVERFLOW_BADLY:
        return PULL_OFFSET_MOVED
    return PULL_NOT_FOUND


def slave_correction(
    result: GetResult, requested_offset: int, offset_check_in_slave: bool
) -> GetResult:
    """On a slave without offset checks a corrected next offset stays the requested one (B-61)."""
    if offset_check_in_slave or result.status not in _CORRECTED:
        return result
    return result._replace(next_begin_offset=requested_offset)
