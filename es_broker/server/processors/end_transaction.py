"""END_TRANSACTION (4.9.8's EndTransactionProcessor), and es-broker's OPEN_TRANSACTIONS."""

from __future__ import annotations

from es_broker.commands import delay, transaction
from es_broker.commands.errors import IllegalRequest
from es_broker.config import BrokerRole
from es_broker.core.broker import Broker
from es_broker.net.channel import Channel
from es_broker.remoting import message as wire
from es_broker.remoting.admin_bodies import OpenTransaction, OpenTransactionsBody
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.es_headers import OpenTransactionsRequestHeader
from es_broker.remoting.headers import EndTransactionRequestHeader
from es_broker.server.edge.remoting_server import Handler
from es_broker.server.longpoll import PullHoldService
from es_broker.server.processors.common import ReadScope, Requester


class EndTransactionProcessor:
    """Commits or rolls back a half message; `holds` hears of a committed one's queue."""

    def __init__(
        self,
        broker: Broker,
        holds: PullHoldService,
        requester: Requester,
        scope: ReadScope | None = None,
    ) -> None:
        self.broker = broker
        self.holds = holds
        self.requester = requester
        self.scope = scope or ReadScope(None)  # what the caller may use under ACL (B-503)
        self.is_slave = broker.config.brokerRole == BrokerRole.SLAVE

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.END_TRANSACTION: self.end_transaction,
            EsRequestCode.OPEN_TRANSACTIONS: self.open_transactions,
        }

    async def end_transaction(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """END_TRANSACTION (4.9.8 EndTransactionProcessor, B-222..B-225).

        A slave answers SLAVE_NOT_AVAILABLE; UNKNOW (TRANSACTION_NOT_TYPE) changes
        nothing and answers SUCCESS with a remark saying so (4.9.8 gives no answer;
        the client sends it one way, where no answer goes out either); another
        type is SYSTEM_ERROR; commit and rollback answer SUCCESS, or SYSTEM_ERROR
        naming what did not match.
        """
        if self.is_slave:
            return response_to(req, ResponseCode.SLAVE_NOT_AVAILABLE)
        h = EndTransactionRequestHeader.of(req)
        end = transaction.EndRequest(
            producer_group=h.producer_group,
            tran_state_table_offset=h.tran_state_table_offset,
            commit_log_offset=h.commit_log_offset,
            commit_or_rollback=h.commit_or_rollback,
            from_check=bool(h.from_transaction_check),
            msg_id=h.msg_id,
            transaction_id=h.transaction_id,
        )
        if end.commit_or_rollback == transaction.TRANSACTION_NOT_TYPE:
            return response_to(
                req, ResponseCode.SUCCESS, "the state is unknown: the transaction stays open"
            )
        if end.commit_or_rollback not in (
            transaction.TRANSACTION_COMMIT_TYPE,
            transaction.TRANSACTION_ROLLBACK_TYPE,
        ):
            raise IllegalRequest(
                f"commitOrRollback {end.commit_or_rollback} is none of 0 (unknown), "
                "8 (commit), 12 (rollback)"
            )
        refused = self._refusal(channel, req, end.commit_log_offset)
        if refused is not None:
            return refused
        result = await self.broker.end_transaction(end, requester=self.requester(channel))
        if result.stored is not None:
            self.holds.notify(result.stored.topic, result.stored.queue_id)
        return response_to(req, ResponseCode.SUCCESS)

    def _refusal(
        self, channel: Channel, req: RemotingCommand, offset: int
    ) -> RemotingCommand | None:
        """Under ACL, the half message the request names must be of a topic the caller may
        publish to (B-503; 4.9.8 checks the signature only). None: go on."""
        scope = self.scope.limited(channel, req)
        if scope is None or offset < 0:
            return None
        raw = self.broker.message_at(offset)
        if raw is None:
            return None  # the job answers that it finds no prepared message there
        message = wire.decode_one(raw)[0]
        topic = message.properties.get(delay.PROPERTY_REAL_TOPIC) or message.topic
        if scope.may_publish(topic):
            return None
        what = f"the transaction of the message at offset {offset}"
        return self.scope.refuse(channel, req, scope, what, action="end", perm="PUB")

    async def open_transactions(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """OPEN_TRANSACTIONS (es-broker): the half messages still open, per producer group (B-232)."""
        rows = self.broker.open_transactions(
            OpenTransactionsRequestHeader.of(req).producer_group or None
        )
        body = OpenTransactionsBody(tuple(OpenTransaction.from_json(row) for row in rows))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())
