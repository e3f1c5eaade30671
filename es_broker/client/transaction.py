"""A transactional producer (Java TransactionMQProducer, B-220..B-234).

`send_in_transaction` sends a half message (TRAN_MSG=true, PGROUP=group), runs
the local transaction, and ends the broker's transaction one way with its
answer: COMMIT_MESSAGE makes the message visible, ROLLBACK_MESSAGE discards
it, UNKNOW leaves it to the broker's check. When the broker checks
(CHECK_TRANSACTION_STATE), the producer's `check_listener` answers for the
half message and the producer sends END_TRANSACTION with
fromTransactionCheck=true, as DefaultMQProducerImpl#checkTransactionState does.

Either callback may be a plain function or a coroutine function; one that
raises counts as UNKNOW, with the error in the END_TRANSACTION remark.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from es_broker.client.messages import TRAN_MSG, Message, ReceivedMessage, SendResult, SendStatus
from es_broker.client.producer import Producer
from es_broker.client.send_tries import ClientError
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.bodies import MessageQueue
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.headers import EndTransactionRequestHeader
from es_broker.remoting.message import StoredMessage, parse_offset_msg_id
from es_broker.remoting.response_headers import CheckTransactionStateRequestHeader

log = logging.getLogger(__name__)

PGROUP = "PGROUP"
# MessageSysFlag: END_TRANSACTION's commitOrRollback
TRANSACTION_NOT_TYPE = 0
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


class LocalTransactionState(Enum):
    """Java's LocalTransactionState (UNKNOW is spelt as Java spells it)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


_COMMIT_OR_ROLLBACK = {
    LocalTransactionState.COMMIT_MESSAGE: TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK_MESSAGE: TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOW: TRANSACTION_NOT_TYPE,
}
# a half message stored but not SEND_OK is rolled back (DefaultMQProducerImpl#sendMessageInTransaction)
_ROLLED_BACK_STATUSES = frozenset(
    {SendStatus.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}
)

State = LocalTransactionState | None
LocalTransaction = Callable[[Message, SendResult, Any], State | Awaitable[State]]
CheckListener = Callable[[ReceivedMessage], State | Awaitable[State]]


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """Java's TransactionSendResult: the half message's send result and the local state sent."""

    send_result: SendResult
    local_state: LocalTransactionState
    transaction_id: str  # the half message's UNIQ_KEY

    @property
    def msg_id(self) -> str:
        return self.send_result.msg_id


async def _call(fn: Callable[..., Any], *args: Any) -> LocalTransactionState:
    value = fn(*args)
    if inspect.isawaitable(value):
        value = await value
    if value is None:
        return LocalTransactionState.UNKNOW
    if not isinstance(value, LocalTransactionState):
        raise ClientError(f"a transaction callback returned {value!r}, not a LocalTransactionState")
    return value


class TransactionProducer(Producer):
    """A producer whose sends are transactional (TransactionMQProducer).

    `check_listener(message)` answers the broker's check of a half message whose
    transaction was left UNKNOW (or whose END_TRANSACTION was lost).
    """

    def __init__(
        self, namesrv_addr: str, group: str, *, check_listener: CheckListener, **kw: Any
    ) -> None:
        super().__init__(namesrv_addr, group, **kw)
        self.check_listener = check_listener

    async def send_in_transaction(
        self,
        topic: str,
        message: Message,
        local_transaction: LocalTransaction,
        arg: Any = None,
    ) -> TransactionSendResult:
        """Send a half message, run `local_transaction(message, send_result, arg)`, end the transaction."""
        props = dict(message.properties)
        props[TRAN_MSG] = "true"
        props[PGROUP] = self.group
        # a delay level is ignored for a transactional message (as Java clears it)
        half = dataclasses.replace(message, properties=props, delay_level=0)
        result = await self.send_message(topic, half)
        state = LocalTransactionState.UNKNOW
        remark = None
        if result.status == SendStatus.SEND_OK:
            try:
                state = await _call(local_transaction, half, result, arg)
            except Exception as exc:  # an error is UNKNOW: the broker will check
                log.info("local transaction of %s raised: %r", result.msg_id, exc)
                remark = f"executeLocalTransactionBranch exception: {exc!r}"
        elif result.status in _ROLLED_BACK_STATUSES:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        try:
            await self.end_transaction(result, state, remark)
        except (RemotingError, ClientError) as exc:  # the broker's check settles it later
            log.warning("local transaction %s, but ending it at the broker failed: %s", state, exc)
        return TransactionSendResult(result, state, result.msg_id)

    async def end_transaction(
        self, result: SendResult, state: LocalTransactionState, remark: str | None = None
    ) -> None:
        """END_TRANSACTION, one way, to the broker that stored the half message."""
        addr = self.instance.find_broker_address_in_publish(result.queue.broker_name)
        if addr is None:
            raise ClientError(f"The broker[{result.queue.broker_name}] not exist")
        _, commit_log_offset = parse_offset_msg_id(result.offset_msg_id)
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=_COMMIT_OR_ROLLBACK[state],
            from_transaction_check=False,
            msg_id=result.msg_id,
            transaction_id=result.msg_id,
        )
        await self.instance.invoke_oneway(addr, self._end_request(header, remark))

    def _end_request(
        self, header: EndTransactionRequestHeader, remark: str | None
    ) -> RemotingCommand:
        command = self.instance.request(RequestCode.END_TRANSACTION, header, oneway=True)
        return dataclasses.replace(command, remark=remark) if remark else command

    async def check_transaction_state(
        self, addr: str, stored: StoredMessage, command: RemotingCommand
    ) -> None:
        """CHECK_TRANSACTION_STATE from the broker at addr: ask the check listener, answer one way."""
        message = ReceivedMessage.from_stored(
            stored, MessageQueue(stored.topic, "", stored.queue_id)
        )
        state = LocalTransactionState.UNKNOW
        remark = None
        try:
            state = await _call(self.check_listener, message)
        except Exception as exc:
            log.warning("check listener raised for %s: %r", message.msg_id, exc)
            remark = f"checkLocalTransactionState Exception: {exc!r}"
        check = CheckTransactionStateRequestHeader.of(command)
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=check.tran_state_table_offset or 0,
            commit_log_offset=check.commit_log_offset or 0,
            commit_or_rollback=_COMMIT_OR_ROLLBACK[state],
            from_transaction_check=True,
            msg_id=message.msg_id,
            transaction_id=check.transaction_id or None,
        )
        try:
            await self.instance.invoke_oneway(addr, self._end_request(header, remark))
        except RemotingError as exc:
            log.warning("answering the check of %s failed: %s", message.msg_id, exc)


__all__ = [
    "CheckListener",
    "LocalTransaction",
    "LocalTransactionState",
    "TransactionProducer",
    "TransactionSendResult",
]
