"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (4.9.8's SendMessageProcessor).

A send is read from its header, checked and queued for the writer as its
frame is decoded (`start_send`), so a connection's sends enter the log in the
order they were read (B-140); the writer's completion answers it. A send in
SYNC_MASTER that waits for a slave's ack returns that wait, run as a task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from es_broker.commands.errors import BrokerError, IllegalRequest
from es_broker.commands.messages import PutRequest
from es_broker.commands.placement import MessageIn, PutResult
from es_broker.core.broker import Broker
from es_broker.core.pending import Pending
from es_broker.ha.master import ReplicationMaster, wants_slave_ack
from es_broker.log import hops
from es_broker.net.channel import Channel
from es_broker.projections.topics import PERM_WRITE
from es_broker.remoting import message as wire
from es_broker.remoting.codes import RequestCode, ResponseCode, Version
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.errors import MissingField
from es_broker.remoting.headers import SendMessageRequestHeader
from es_broker.remoting.response_headers import SendMessageResponseHeader
from es_broker.server.edge.outbox import Outbox
from es_broker.server.edge.remoting_server import Handler, Start
from es_broker.server.processors.common import BrokerSettings, Requester, StoredSends, ipv4

#: told of every stored send: request-reply remembers requests (server/processors/reply.py)
OnSent = Callable[[list[MessageIn], PutResult], None]


_new = tuple.__new__
# the codes and version a send is held against, as ints: a comparison with an enum member, or the
# member's lookup on its class, costs more than the int's, once or twice a send
_SEND_BATCH_MESSAGE = int(RequestCode.SEND_BATCH_MESSAGE)
_V3_4_9 = int(Version.V3_4_9)
_SUCCESS = int(ResponseCode.SUCCESS)


class SendMessageProcessor(BrokerSettings):
    """Stores sends and answers where they went.

    `stored`: who waits on a stored send (held pulls, the name server of a new
    topic); `on_sent`: told of every stored send with its messages;
    `replication`: the master's replication in SYNC_MASTER (a send that asks
    for it is answered once a slave holds it), else None.
    """

    def __init__(
        self,
        broker: Broker,
        requester: Requester,
        stored: StoredSends,
        *,
        on_sent: OnSent | None = None,
        replication: ReplicationMaster | None = None,
    ) -> None:
        self.broker = broker
        self.requester = requester
        self.stored = stored
        self.on_sent = on_sent
        self.replication = replication

    def handlers(self) -> dict[int, Handler]:
        C = RequestCode
        return {
            C.SEND_MESSAGE: self.send_message,
            C.SEND_MESSAGE_V2: self.send_message,
            C.SEND_BATCH_MESSAGE: self.send_message,
        }

    def starts(self) -> dict[int, tuple[Handler, Start]]:
        """The sends' first part, run by the listener as their frame is decoded (`start_send`),
        each with the handler it stands in for."""
        C = RequestCode
        return {
            C.SEND_MESSAGE: (self.send_message, self.start_send),
            C.SEND_MESSAGE_V2: (self.send_message, self.start_send),
            C.SEND_BATCH_MESSAGE: (self.send_message, self.start_send),
        }

    async def send_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        send = self._put_request(channel, req)
        return await self._send_answer(req, send, await self.broker.put(send))

    def start_send(
        self, channel: Channel, req: RemotingCommand, outbox: Outbox
    ) -> Awaitable[RemotingCommand] | None:
        """`send_message` up to the writer's queue, run as the frame is decoded.

        The job is queued when this returns, so sends started in the order a
        connection's frames are read enter the log in that order (B-140). The
        writer's completion answers it into `outbox`; a send that waits for
        the slave returns that wait, to run as a task.
        """
        send = self._put_request(channel, req)
        if self.replication is not None and all(
            wants_slave_ack(m.properties) for m in send.messages
        ):
            return self._finish_send(req, send, self.broker.start_put(send))
        trace = hops.current() if hops.ON else None

        def answer(pending: Pending[PutResult]) -> None:
            if trace is not None:
                trace.mark(hops.WOKEN)
            try:
                result = pending.result()
                self.stored(result)
                if self.on_sent is not None:
                    self.on_sent(send.messages, result)
            except Exception as exc:
                outbox.fail(req, exc, trace)
                return
            response = self._send_response(req, result, _SUCCESS)
            if trace is not None:
                trace.mark(hops.ANSWERED)
            outbox.answer(req, response, trace)

        self.broker.start_put(send, answer)
        return None

    async def _finish_send(
        self, req: RemotingCommand, send: PutRequest, pending: Pending[PutResult]
    ) -> RemotingCommand:
        return await self._send_answer(req, send, await pending)

    def _put_request(self, channel: Channel, req: RemotingCommand) -> PutRequest:
        """The send as the broker stores it, read from its header; the header's checks here."""
        h = SendMessageRequestHeader.of(req)
        topic, queue_id, sys_flag, born = h.topic, h.queue_id, h.sys_flag, h.born_timestamp
        born_host = ipv4(channel.remote)
        reconsume = h.reconsume_times or 0
        if not self.config.brokerPermission & PERM_WRITE:
            config = self.broker.topic_config(topic)
            if config is not None and config.order:
                raise BrokerError(
                    f"the broker[{self.config.brokerIP1}] sending message is forbidden",
                    ResponseCode.NO_PERMISSION,
                )
        if req.code == _SEND_BATCH_MESSAGE or h.batch:
            # MessageIn's fields in order, built by tuple.__new__ (a named tuple's own __new__ is a
            # Python function: a call per message of every batch)
            batch = [
                _new(MessageIn, (body, props, flag, sys_flag, born, born_host, reconsume))
                for flag, body, props in decode_batch(req.body)
            ]
        else:
            if h.flag is None:
                raise MissingField("flag")
            props = wire.decode_properties(h.properties or "")
            batch = [MessageIn(req.body, props, h.flag, sys_flag, born, born_host, reconsume)]
        # a %RETRY% send's limit comes from the header for clients >= V3_4_9 (docs/protocol.md §7.2.1 step 5, B-95)
        max_reconsume = h.max_reconsume_times if req.version >= _V3_4_9 else None
        if hops.ON:
            hops.mark(hops.PARSED)
        return PutRequest(
            topic,
            queue_id,
            batch,
            self.requester(channel),
            h.producer_group or "",
            h.default_topic,
            h.default_topic_queue_nums or 4,
            max_reconsume,
        )

    async def _send_answer(
        self, req: RemotingCommand, send: PutRequest, result: PutResult
    ) -> RemotingCommand:
        self.stored(result)
        if self.on_sent is not None:
            self.on_sent(send.messages, result)
        code = ResponseCode.SUCCESS
        if self.replication is not None and all(
            wants_slave_ack(m.properties) for m in send.messages
        ):
            # stored either way (remoting 7.8)
            code = await self.replication.wait_replicated(result.seq)
        return self._send_response(req, result, code)

    @staticmethod
    def _send_response(req: RemotingCommand, result: PutResult, code: int) -> RemotingCommand:
        """The answer to a stored send: its message ids and where it went."""
        header = SendMessageResponseHeader.stored(
            ",".join(result.msg_ids), result.answer_queue_id, result.queue_offset
        )
        return response_to(req, code, None, header)


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """SEND_BATCH_MESSAGE body: (flag, body, properties) per entry; a malformed one is refused."""
    try:
        return wire.decode_batch(body)
    except wire.BatchDecodeError as exc:
        raise IllegalRequest(str(exc)) from None
