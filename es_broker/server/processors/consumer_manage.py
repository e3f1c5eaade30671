"""A group's offsets and members (4.9.8's ConsumerManageProcessor).

QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET and GET_CONSUMER_LIST_BY_GROUP.
An offset commit runs its first part as its frame is decoded
(`start_commit_offset`), so a consumer's next offset query finds its commit
queued (B-312).
"""

from __future__ import annotations

from collections.abc import Awaitable

from es_broker.commands.offsets import OffsetCommit
from es_broker.core.broker import Broker
from es_broker.core.pending import Pending
from es_broker.log.types import Cause
from es_broker.net.channel import Channel
from es_broker.remoting.bodies import GetConsumerListByGroupResponseBody
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.headers import (
    ConsumerGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from es_broker.remoting.response_headers import QueryConsumerOffsetResponseHeader
from es_broker.server.clients import ClientRegistry
from es_broker.server.edge.outbox import Outbox
from es_broker.server.edge.remoting_server import Handler, Start
from es_broker.server.processors.common import CommitConfirmation, Requester


class ConsumerManageProcessor:
    """Offset queries and commits, and the client ids of a group.

    `confirm_commit`: when a commit is answered (a SYNC_MASTER under the
    fail-over coordinator waits for a follower, B-383).
    """

    def __init__(
        self,
        broker: Broker,
        clients: ClientRegistry,
        requester: Requester,
        confirm_commit: CommitConfirmation,
    ) -> None:
        self.broker = broker
        self.clients = clients
        self.requester = requester
        self.confirm_commit = confirm_commit

    def handlers(self) -> dict[int, Handler]:
        C = RequestCode
        return {
            C.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            C.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            C.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
        }

    def starts(self) -> dict[int, tuple[Handler, Start]]:
        """Offset commits' first part, run by the listener as their frame is decoded (B-312)."""
        return {
            RequestCode.UPDATE_CONSUMER_OFFSET: (
                self.update_consumer_offset,
                self.start_commit_offset,
            )
        }

    async def query_consumer_offset(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.of(req)
        answer = await self.broker.query_consumer_offset(
            h.consumer_group, h.topic, h.queue_id, requester=self.requester(channel)
        )
        if answer.code == ResponseCode.SUCCESS:
            stored = QueryConsumerOffsetResponseHeader(offset=answer.offset)
            return response_to(req, ResponseCode.SUCCESS, None, stored.to_fields())
        return response_to(req, int(answer.code), answer.remark)

    async def update_consumer_offset(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET as a task: its record enters the writer's queue in its connection's
        arrival order (after an earlier pull's piggybacked commit, B-312)."""
        commit = self._commit(channel, req)
        seq = await self.broker.in_turn(self.broker.start_commit_offset, commit)
        return self._commit_response(req, await self.confirm_commit(seq))

    def start_commit_offset(
        self, channel: Channel, req: RemotingCommand, outbox: Outbox | None = None
    ) -> Awaitable[RemotingCommand]:
        """UPDATE_CONSUMER_OFFSET up to the writer's queue as the frame is decoded (the listener
        starts it only when no earlier ordered request of the connection is still to be queued)."""
        return self._offset_committed(
            req, self.broker.start_commit_offset(self._commit(channel, req))
        )

    def _commit(self, channel: Channel, req: RemotingCommand) -> OffsetCommit:
        h = UpdateConsumerOffsetRequestHeader.of(req)
        group = h.consumer_group
        info = self.clients.consumer_group(group)
        return OffsetCommit(
            group,
            h.topic,
            h.queue_id,
            h.commit_offset,
            # a commit from a connection that is no consumer of the group is an operator's (B-131)
            Cause.CLIENT_COMMIT if info and channel in info.channels else Cause.ADMIN,
            self.requester(channel),
        )

    async def _offset_committed(
        self, req: RemotingCommand, committed: Pending[int]
    ) -> RemotingCommand:
        seq = await committed
        return self._commit_response(req, await self.confirm_commit(seq))

    @staticmethod
    def _commit_response(req: RemotingCommand, code: ResponseCode) -> RemotingCommand:
        if code == ResponseCode.SUCCESS:
            return response_to(req, code)
        # recorded on the leader, not confirmed by a follower: the consumer commits again (B-383)
        return response_to(
            req, code, "the offset is recorded on the master, no follower confirmed it"
        )

    async def consumer_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = ConsumerGroupRequestHeader.of(req).consumer_group
        info = self.clients.consumer_group(group)
        if info is None or not info.channels:
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}"
            )
        body = GetConsumerListByGroupResponseBody(tuple(info.client_ids()))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())
