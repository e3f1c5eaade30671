"""QUERY_MESSAGE and VIEW_MESSAGE_BY_ID (4.9.8's QueryMessageProcessor): messages by key or offset.

(es-broker's own time-travel queries are in time_travel.py.)
"""

from __future__ import annotations

from es_broker.core.broker import Broker
from es_broker.net.channel import Channel
from es_broker.remoting import message as wire
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.headers import QueryMessageRequestHeader, ViewMessageRequestHeader
from es_broker.remoting.response_headers import QueryMessageResponseHeader
from es_broker.server.edge.remoting_server import Handler
from es_broker.server.processors.common import BrokerSettings, ReadScope


class QueryMessageProcessor(BrokerSettings):
    """Stored messages by KEYS or UNIQ_KEY, or by their commit-log offset; `scope`: what the
    caller may read under ACL (a message of a topic it may not SUB is refused, B-350)."""

    def __init__(self, broker: Broker, scope: ReadScope) -> None:
        self.broker = broker
        self.scope = scope

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            RequestCode.QUERY_MESSAGE: self.query_message,
        }

    async def view_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        offset = ViewMessageRequestHeader.of(req).offset
        raw = self.broker.message_at(offset)
        if raw is None:
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        scope = self.scope.limited(channel, req)
        if scope is not None and not scope.may_read(wire.decode_one(raw)[0].topic):
            # the same answer whatever the topic: the refusal names neither it nor the message
            return self.scope.refuse(channel, req, scope, f"the message at offset {offset}")
        return response_to(req, ResponseCode.SUCCESS, body=raw)

    async def query_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.of(req)
        max_num = h.max_num
        # set by the client after signing, beside the header's fields (MixAll)
        if h.unique_key_query == "true":  # by UNIQ_KEY: the broker's cap (B-202)
            max_num = self.config.defaultQueryMaxNum
        found = self.broker.query_messages_by_key(
            h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp
        )
        header = QueryMessageResponseHeader(
            index_last_update_timestamp=0, index_last_update_phyoffset=0
        ).to_fields()
        if not found:
            return response_to(
                req,
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct",
                header,
            )
        return response_to(req, ResponseCode.SUCCESS, None, header, b"".join(found))
