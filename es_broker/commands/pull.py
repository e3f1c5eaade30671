"""PULL_MESSAGE: the checks and the read in one read transaction, and the job that records it (B-31).

A pull reads without the writer: the topic's checks (B-21, B-13), the
group's config and the messages come from one read transaction, each check
made once. What the pull did is then recorded by one writer job: the
delivery (`messages_delivered`), or the corrected offset a consumer is sent
to (`pull_offset_moved`), and a piggybacked commit (B-31).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NamedTuple

from es_broker.commands import messages, offsets
from es_broker.commands.messages import GetResult, GetStatus
from es_broker.log import AppendContext
from es_broker.log.types import Cause, PullOffsetMoved
from es_broker.log.views import messages_delivered_record
from es_broker.remoting.bodies import SubscriptionGroupConfig
from es_broker.store import Store

# the statuses whose corrected next offset is recorded (B-59, B-60)
MOVED_STATUSES = frozenset(
    {GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.NO_MESSAGE_IN_QUEUE}
)
# read per pull, kept here: an enum member read off its class goes through the enum's machinery
FOUND: Final = GetStatus.FOUND
PULL_COMMIT: Final = Cause.PULL_COMMIT


class PullRequest(NamedTuple):
    """A pull as PULL_MESSAGE asks for it, built once from its header and passed through as it is.

    `tags_codes` (None: every tag) and `message_filter` (SQL92) select what it delivers; `client`
    is who pulls; `commit_offset` the offset it commits on the way (None: none, B-31). A named
    tuple: built per request on the hot path, where a frozen dataclass sets each field by a call.
    """

    group: str
    topic: str
    queue_id: int
    offset: int
    max_msg_nums: int = 32
    tags_codes: frozenset[int] | None = None
    message_filter: Callable[[bytes], bool] | None = None
    client: str = ""
    commit_offset: int | None = None


def read(store: Store, pull: PullRequest) -> tuple[GetResult, SubscriptionGroupConfig | None]:
    """The pull's checks and its messages, and the group's config (None: not created yet).

    Raises as the checks refuse: the arguments, then the broker's and the topic's perms and
    the queue id (`messages.check_readable`).
    """
    topic, queue_id, offset, max_msg_nums = (
        pull.topic,
        pull.queue_id,
        pull.offset,
        pull.max_msg_nums,
    )
    messages.check_pull_args(offset, max_msg_nums)
    with store.read() as txn:
        messages.check_readable(store, txn, topic, queue_id)
        group_config = store.groups.get(txn, pull.group)
        result = messages.read_messages(
            store, txn, topic, queue_id, offset, max_msg_nums, pull.tags_codes, pull.message_filter
        )
    return result, group_config


def recorded(result: GetResult, offset: int, commit: bool) -> bool:
    """Whether a pull is recorded: it delivered, its offset was corrected, or it commits."""
    return result.status is FOUND or moved(result, offset) or commit


def moved(result: GetResult, offset: int) -> bool:
    """The pull's offset was corrected (a first pull of an empty queue at 0 is not a move)."""
    return result.status in MOVED_STATUSES and not (
        result.status == GetStatus.NO_MESSAGE_IN_QUEUE and offset == 0
    )


def record_job(
    store: Store, pull: PullRequest, result: GetResult
) -> Callable[[AppendContext], int]:
    """The writer job recording a pull: its delivery or moved offset, then its commit, if any
    (`commit_offset`; None: none). Returns the commit's record, 0 when none was recorded."""
    found = result.status is FOUND
    record_moved = not found and moved(result, pull.offset)

    def job(ctx: AppendContext) -> int:
        ts = store.clock.now_ms()
        if found:
            ctx.append(
                messages_delivered_record(  # MessagesDelivered(...).to_record(ts)
                    ts,
                    group=pull.group,
                    topic=pull.topic,
                    queue_id=pull.queue_id,
                    offset=pull.offset,
                    offsets=list(result.offsets),
                    next_offset=result.next_begin_offset,
                    client=pull.client,
                )
            )
        elif record_moved:
            ctx.append(
                PullOffsetMoved(
                    group=pull.group,
                    topic=pull.topic,
                    queue_id=pull.queue_id,
                    offset=pull.offset,
                    status=result.status.value,
                    next_offset=result.next_begin_offset,
                    min_offset=result.min_offset,
                    max_offset=result.max_offset,
                    client=pull.client,
                ).to_record(ts)
            )
        if pull.commit_offset is not None:
            return offsets.commit_job(
                store,
                pull.group,
                pull.topic,
                pull.queue_id,
                pull.commit_offset,
                cause=PULL_COMMIT,
                requester=pull.client,
            )(ctx)
        return 0

    return job
