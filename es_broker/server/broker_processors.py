"""The broker's request processors: wire commands in, core API calls, wire answers out.

Every processor reads its header with the typed accessors of
`RemotingCommand` (a missing or malformed field answers SYSTEM_ERROR naming
it), calls the broker core, and builds the answer RocketMQ gives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import struct
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio

from es_broker.acl.access import AccessControl, Scope
from es_broker.acl.plain import group_resource
from es_broker.client.channel import Channel, ChannelClosed
from es_broker.commands import names, resets, retry, sql92, transaction
from es_broker.commands.errors import BrokerError, IllegalRequest
from es_broker.commands.messages import GetResult, MessageIn, PutResult
from es_broker.commands.queue_locks import QueueLocks
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.ha.master import wants_slave_ack
from es_broker.log import Queued, hops
from es_broker.log.arrival import pass_turn, unordered
from es_broker.log.types import Cause
from es_broker.projections.topics import PERM_WRITE
from es_broker.remoting import fastjson, requests
from es_broker.remoting import message as wire
from es_broker.remoting.admin_bodies import (
    OpenTransaction,
    OpenTransactionsBody,
    QueueResetRow,
    ResetOffsetResult,
)
from es_broker.remoting.bodies import (
    CheckClientRequestBody,
    ClientConnection,
    ConsumerConnection,
    ConsumerData,
    ConsumerOffsetSerializeWrapper,
    ConsumeStats,
    DataVersion,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ResetOffsetBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicOffset,
    TopicStatsTable,
    UnlockBatchRequestBody,
)
from es_broker.remoting.codes import EsRequestCode, LanguageCode, RequestCode, ResponseCode, Version
from es_broker.remoting.command import RemotingCommand, request, response_to
from es_broker.remoting.errors import MissingField
from es_broker.remoting.peer_outcomes import PeerRequests
from es_broker.remoting.pull_flags import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND
from es_broker.remoting.request_headers import SendMessageRequestHeader
from es_broker.server.clients import ClientInfo, ClientRegistry
from es_broker.server.longpoll import PullHoldService
from es_broker.server.outbox import Outbox
from es_broker.server.pull_codes import response_code, slave_correction
from es_broker.server.remoting_server import Handler, Start

log = logging.getLogger(__name__)

LOCK_EXPIRY_PERIOD = 10.0  # s between passes releasing lapsed queue locks (at most lockMaxLiveTime)
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll: a QUERY_MESSAGE by UNIQ_KEY


def _ipv4(addr: tuple[str, int]) -> tuple[str, int]:
    host = addr[0]
    if host.startswith("::ffff:"):
        host = host[7:]
    return (host if ":" not in host else "127.0.0.1", addr[1])


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """SEND_BATCH_MESSAGE body: (flag, body, properties) per entry; a malformed one is refused."""
    try:
        return wire.decode_batch(body)
    except wire.BatchDecodeError as exc:
        raise IllegalRequest(str(exc)) from None


def parse_subscription(
    expression: str | None, expression_type: str | None
) -> frozenset[int] | None:
    """A TAG expression -> the tag hash codes it accepts; None accepts every message."""
    if expression_type and expression_type.upper() != "TAG":
        raise BrokerError(
            f"The broker does not support consumer to filter message by {expression_type}",
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
        )
    text = (expression or "").strip()
    if text in ("", "*"):
        return None
    tags = [t.strip() for t in text.split("||") if t.strip()]
    if not tags:
        raise BrokerError(
            f"parse the consumer's subscription[{expression}] failed",
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
        )
    return frozenset(wire.tag_hash(t) for t in tags)


def is_tag_type(expression_type: str | None) -> bool:
    """A TAG subscription: no type, or TAG (es-broker takes it in any case)."""
    return not expression_type or expression_type.upper() == "TAG"


def property_filter_refusal(expression_type: str | None) -> BrokerError:
    """A SQL92 subscription on a broker with enablePropertyFilter=false (B-214)."""
    return BrokerError(
        f"The broker does not support consumer to filter message by {expression_type}",
        ResponseCode.SYSTEM_ERROR,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class PullFilter:
    """What a pull delivers: tag hash codes (None: all) and, for SQL92, a test of each message."""

    tags_codes: frozenset[int] | None = None
    message_filter: Callable[[bytes], bool] | None = None


async def compile_selector(text: str | None) -> sql92.Selector:
    """A SQL92 selector from the cache, else compiled in a worker thread (it is CPU work)."""
    found = sql92.cached_selector(text)
    if found is None:
        found = await trio.to_thread.run_sync(sql92.compile_selector, text)
    return found


def _shortened(text: str, limit: int = 256) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _consumer_dict(consumer: ConsumerData) -> dict[str, Any]:
    """A heartbeat's consumer as the client registry keeps it: Java's fields, enums by name."""
    data: dict[str, Any] = fastjson.loads(consumer.encode())
    for key, value, choices in (
        ("consumeFromWhere", consumer.consume_from_where, requests.CONSUME_FROM_WHERE),
        ("messageModel", consumer.message_model, requests.MESSAGE_MODEL),
        ("consumeType", consumer.consume_type, requests.CONSUME_TYPE),
    ):
        data[key] = requests.enum_name(value, choices) or value
    return data


async def _nothing(*_: object) -> None:
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class _Send:
    """A send request as read from its header: where it goes, its messages, put_messages' keywords."""

    topic: str
    queue_id: int
    batch: list[MessageIn]
    args: dict[str, Any]


class BrokerProcessors:
    def __init__(
        self,
        broker: Broker,
        clients: ClientRegistry,
        holds: PullHoldService,
        on_topics_changed: Any = None,
    ) -> None:
        self.broker = broker
        self.clients = clients
        self.holds = holds
        self.on_topics_changed = on_topics_changed or (lambda *_: None)
        # admin changes wait for the name-server registration that carries them (BrokerServer.registered)
        self.registered: Callable[..., Awaitable[None]] = _nothing
        self.is_slave = self.config.brokerRole == "SLAVE"
        # SYNC_MASTER: answers SEND_OK only once a slave holds the record (es_broker.ha.master)
        self.replication: Any = None
        # told of every stored send: request-reply remembers requests (server/reply_processors.py)
        self.on_sent: Callable[[list[MessageIn], PutResult], None] | None = None
        # master/slave state for GET_BROKER_RUNTIME_INFO (es_broker.ha)
        self.ha_status: Any = dict
        # the one-way notices to clients (consumer ids changed, offset resets) not written (B-319)
        self.notices = PeerRequests("notice to client", log)
        # the plain ACL when aclEnable: reads are filtered to what the caller may SUB (B-350, B-351)
        self.access: AccessControl | None = None
        # orderly consumers' queue locks, in memory; owner changes are records (B-142..B-147)
        self.locks = QueueLocks(
            broker.submit, broker.store.clock, self.config.rebalanceLockMaxLiveTime
        )

    def handlers(self) -> dict[int, Handler]:
        C = RequestCode
        return {
            C.SEND_MESSAGE: self.send_message,
            C.SEND_MESSAGE_V2: self.send_message,
            C.SEND_BATCH_MESSAGE: self.send_message,
            C.PULL_MESSAGE: self.pull_message,
            C.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            C.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            C.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            C.GET_MAX_OFFSET: self.get_max_offset,
            C.GET_MIN_OFFSET: self.get_min_offset,
            C.GET_EARLIEST_MSG_STORETIME: self.earliest_store_time,
            C.VIEW_MESSAGE_BY_ID: self.view_message,
            C.QUERY_MESSAGE: self.query_message,
            C.HEART_BEAT: self.heartbeat,
            C.UNREGISTER_CLIENT: self.unregister_client,
            C.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            C.CHECK_CLIENT_CONFIG: self.check_client_config,
            C.LOCK_BATCH_MQ: self.lock_batch,
            C.UNLOCK_BATCH_MQ: self.unlock_batch,
            C.UPDATE_AND_CREATE_TOPIC: self.update_topic,
            C.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            C.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
            C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_group_config,
            C.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            C.GET_TOPIC_STATS_INFO: self.topic_stats,
            C.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            C.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            C.GET_CONSUME_STATS: self.consume_stats,
            C.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offset,
            C.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            C.GET_BROKER_CONFIG: self.broker_config,
            C.INVOKE_BROKER_TO_RESET_OFFSET: self.invoke_reset_offset,
            EsRequestCode.RESET_OFFSET: self.reset_offset,
            C.CLONE_GROUP_OFFSET: self.clone_group_offset,
            C.UPDATE_BROKER_CONFIG: self.update_broker_config,
            C.END_TRANSACTION: self.end_transaction,
            EsRequestCode.OPEN_TRANSACTIONS: self.open_transactions,
            C.GET_CONSUMER_RUNNING_INFO: self.forward_to_consumer,
            C.CONSUME_MESSAGE_DIRECTLY: self.forward_to_consumer,
        }

    def starts(self) -> dict[int, tuple[Handler, Start]]:
        """The requests whose first part the listener runs as their frame is decoded, each with the
        handler it stands in for: sends (`start_send`), and offset commits (`start_commit_offset`),
        so a consumer's next offset query finds its commit queued (B-312)."""
        C = RequestCode
        return {
            C.SEND_MESSAGE: (self.send_message, self.start_send),
            C.SEND_MESSAGE_V2: (self.send_message, self.start_send),
            C.SEND_BATCH_MESSAGE: (self.send_message, self.start_send),
            C.UPDATE_CONSUMER_OFFSET: (self.update_consumer_offset, self.start_commit_offset),
        }

    def requester(self, channel: Channel) -> str:
        return self.clients.client_id(channel)

    # ------------------------------------------------------------------ producer
    async def send_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        send = self._send_request(channel, req)
        result = await self.broker.put_messages(send.topic, send.queue_id, send.batch, **send.args)
        return await self._send_answer(req, send, result)

    def start_send(
        self, channel: Channel, req: RemotingCommand, outbox: Outbox
    ) -> Awaitable[RemotingCommand] | None:
        """`send_message` up to the writer's queue, run as the frame is decoded.

        The job is queued when this returns, so sends started in the order a
        connection's frames are read enter the log in that order (B-140). The
        writer's completion answers it into `outbox`; a send that waits for
        the slave returns that wait, to run as a task.
        """
        send = self._send_request(channel, req)
        if self.replication is not None and all(wants_slave_ack(m.properties) for m in send.batch):
            queued = self.broker.enqueue_put(send.topic, send.queue_id, send.batch, **send.args)
            return self._finish_send(req, send, queued)
        trace = hops.current() if hops.ON else None

        def answer(queued: Queued[PutResult]) -> None:
            if trace is not None:
                trace.mark(hops.WOKEN)
            try:
                result = self.broker.put_done(queued)
                self._stored(result)
                if self.on_sent is not None:
                    self.on_sent(send.batch, result)
            except Exception as exc:
                outbox.fail(req, exc, trace)
                return
            response = self._send_response(req, result, ResponseCode.SUCCESS)
            if trace is not None:
                trace.mark(hops.ANSWERED)
            outbox.answer(req, response, trace)

        self.broker.enqueue_put(send.topic, send.queue_id, send.batch, **send.args, then=answer)
        return None

    async def _finish_send(
        self, req: RemotingCommand, send: _Send, queued: Queued[PutResult]
    ) -> RemotingCommand:
        return await self._send_answer(req, send, await self.broker.put_result(queued))

    def _send_request(self, channel: Channel, req: RemotingCommand) -> _Send:
        h = SendMessageRequestHeader.read(req)
        topic, queue_id, sys_flag, born = h.topic, h.queue_id, h.sys_flag, h.born_timestamp
        born_host = _ipv4(channel.remote)
        reconsume = h.reconsume_times or 0
        if not self.config.brokerPermission & PERM_WRITE:
            config = self.broker.topic_config(topic)
            if config and config.get("order"):
                raise BrokerError(
                    f"the broker[{self.config.brokerIP1}] sending message is forbidden",
                    ResponseCode.NO_PERMISSION,
                )
        if req.code == RequestCode.SEND_BATCH_MESSAGE or h.batch:
            batch = [
                MessageIn(body, props, flag, sys_flag, born, born_host, reconsume)
                for flag, body, props in decode_batch(req.body)
            ]
        else:
            if h.flag is None:
                raise MissingField("flag")
            props = wire.decode_properties(h.properties or "")
            batch = [MessageIn(req.body, props, h.flag, sys_flag, born, born_host, reconsume)]
        # a %RETRY% send's limit comes from the header for clients >= V3_4_9 (docs/protocol.md §7.2.1 step 5, B-95)
        max_reconsume = h.max_reconsume_times if req.version >= Version.V3_4_9 else None
        if hops.ON:
            hops.mark(hops.PARSED)
        return _Send(
            topic,
            queue_id,
            batch,
            {
                "requester": self.requester(channel),
                "producer_group": h.producer_group or "",
                "default_topic": h.default_topic,
                "default_topic_queue_nums": h.default_topic_queue_nums or 4,
                "max_reconsume_times": max_reconsume,
            },
        )

    async def _send_answer(
        self, req: RemotingCommand, send: _Send, result: PutResult
    ) -> RemotingCommand:
        self._stored(result)
        if self.on_sent is not None:
            self.on_sent(send.batch, result)
        code = ResponseCode.SUCCESS
        if self.replication is not None and all(wants_slave_ack(m.properties) for m in send.batch):
            # stored either way (remoting 7.8)
            code = await self.replication.wait_replicated(result.seq)
        return self._send_response(req, result, code)

    def _stored(self, result: PutResult) -> None:
        """Tell who waits on a stored send: held pulls of its queue, the name server of a new topic."""
        self.holds.notify(result.topic, result.queue_id)
        if result.created_topic or result.diverted_from is not None:
            # a new topic, or maybe a new %DLQ%G, goes to the name server (that topic alone, B-391)
            self.on_topics_changed([result.topic])

    @staticmethod
    def _send_response(req: RemotingCommand, result: PutResult, code: int) -> RemotingCommand:
        """The answer to a stored send: its message ids and where it went."""
        return response_to(
            req,
            code,
            None,
            {
                "msgId": ",".join(result.msg_ids),
                "queueId": result.answer_queue_id,
                "queueOffset": result.queue_offset,
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )

    # ------------------------------------------------------------------ consumer
    async def pull_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.require_str("consumerGroup")
        topic = req.require_str("topic")
        queue_id = req.require_int("queueId")
        offset = req.require_long("queueOffset")
        max_nums = req.require_int("maxMsgNums")
        sys_flag = req.require_int("sysFlag")
        commit = req.require_long("commitOffset") if sys_flag & PULL_COMMIT_OFFSET else None
        suspend_ms = req.get_long("suspendTimeoutMillis", 15000) or 0
        pull_filter = await self._subscription(group, topic, req, sys_flag)
        tags, message_filter = pull_filter.tags_codes, pull_filter.message_filter
        client = self.requester(channel)
        # register for arrivals before reading, so a message stored meanwhile is not missed
        arrival = self.holds.arrival(topic, queue_id)
        read = functools.partial(
            self.broker.pull,
            group,
            topic,
            queue_id,
            offset,
            max_nums,
            tags_codes=tags,
            message_filter=message_filter,
            client=client,
        )
        # a pull waits for no earlier request (a consumer has one pull per queue in flight), but the
        # commits and queries after it wait for its record (B-312): its turn is given up once that
        # is queued (or there is none), before it long-polls
        with unordered():
            result = await read(commit_offset=commit)
        pass_turn()
        if result.commit_seq:
            # answered either way: the messages are read, only the commit waits (B-383)
            await self._commit_replicated(result.commit_seq)
        code = response_code(result.status, offset)
        if code == ResponseCode.PULL_NOT_FOUND and sys_flag & PULL_SUSPEND:
            hold = (
                suspend_ms / 1000
                if self.config.longPollingEnable
                else self.config.shortPollingTimeMills / 1000
            )
            with trio.move_on_after(hold):
                await arrival.wait()
            # the re-run neither suspends nor stores the commit again (B-63)
            result = await read()
            code = response_code(result.status, offset)
        return self._pull_answer(req, group, result, code, offset)

    async def _subscription(
        self, group: str, topic: str, req: RemotingCommand, sys_flag: int
    ) -> PullFilter:
        """The pull's filter: from the request (subscription flag) or the group's heartbeat (B-57, B-215)."""
        if sys_flag & PULL_SUBSCRIPTION:
            expression, expression_type = req.get_str("subscription"), req.get_str("expressionType")
            if expression_type == sql92.SQL92:
                try:
                    selector = await compile_selector(expression)
                except sql92.SelectorError as exc:
                    raise BrokerError(
                        f"parse the consumer's subscription failed: {exc}",
                        ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    ) from None
                return self._sql92_pull_filter(selector, expression_type)
            return await self._tag_pull_filter(group, topic, expression, expression_type)
        info = self.clients.consumer_group(group)
        if info is None:
            raise BrokerError(
                f"the consumer's group info not exist, group: {group}",
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
            )
        sub = info.subscriptions.get(topic)
        if sub is None:
            raise BrokerError(
                f"the consumer's subscription not exist, group: {group}, topic: {topic}",
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
            )
        if int(sub.get("subVersion", 0)) < (req.get_long("subVersion", 0) or 0):
            raise BrokerError(
                "the consumer's subscription not latest", ResponseCode.SUBSCRIPTION_NOT_LATEST
            )
        if sub.get("expressionType") == sql92.SQL92:
            try:
                selector = await compile_selector(sub.get("subString"))
            except sql92.SelectorError:
                # 4.9.8 keeps no filter data for an expression it cannot compile
                raise BrokerError(
                    "The broker's consumer filter data is not exist!Your expression may be wrong!",
                    ResponseCode.FILTER_DATA_NOT_EXIST,
                ) from None
            return self._sql92_pull_filter(selector, sql92.SQL92)
        return await self._tag_pull_filter(
            group, topic, sub.get("subString"), sub.get("expressionType")
        )

    def _sql92_pull_filter(self, selector: sql92.Selector, expression_type: str) -> PullFilter:
        if not self.config.enablePropertyFilter:
            raise property_filter_refusal(expression_type)
        return PullFilter(None, selector.matches_message)

    async def _tag_pull_filter(
        self, group: str, topic: str, expression: str | None, expression_type: str | None
    ) -> PullFilter:
        tags = parse_subscription(expression, expression_type)
        if self.config.filterSupportRetry and topic.startswith(names.RETRY_PREFIX):
            return PullFilter(tags, await self._retry_filter(group))
        return PullFilter(tags)

    async def _retry_filter(self, group: str) -> Callable[[bytes], bool] | None:
        """filterSupportRetry: a retry message passes the group's SQL92 filter of its first topic (B-217)."""
        info = self.clients.consumer_group(group)
        if info is None:
            return None
        selectors: dict[str, sql92.Selector] = {}
        for sub_topic, sub in info.subscriptions.items():
            if sub.get("expressionType") == sql92.SQL92:
                with contextlib.suppress(sql92.SelectorError):
                    selectors[sub_topic] = await compile_selector(sub.get("subString"))
        if not selectors:
            return None

        def matches(raw: bytes) -> bool:
            try:
                props = sql92.message_properties(raw)
            except (IndexError, ValueError, struct.error):
                return False
            selector = selectors.get(props.get(retry.PROPERTY_RETRY_TOPIC, ""))
            return selector is None or selector.matches(props)

        return matches

    def _pull_answer(
        self,
        req: RemotingCommand,
        group: str,
        result: GetResult,
        code: ResponseCode,
        offset: int,
    ) -> RemotingCommand:
        group_config = self.broker.group_config(group) or {}
        if not self.config.slaveReadEnable:
            suggest = 0
        elif result.slow:
            suggest = group_config.get("whichBrokerWhenConsumeSlowly", 1)
        else:
            suggest = group_config.get("brokerId", 0)
        if self.is_slave:
            result = slave_correction(result, offset, self.config.offsetCheckInSlave)
            if code == ResponseCode.PULL_OFFSET_MOVED and not self.config.offsetCheckInSlave:
                # no correction on a slave: retry the same offset, asked to go to the group's broker (B-61, B-119)
                code = ResponseCode.PULL_RETRY_IMMEDIATELY
                suggest = group_config.get("brokerId", 0)
        header = {
            "suggestWhichBrokerId": suggest,
            "nextBeginOffset": result.next_begin_offset,
            "minOffset": result.min_offset,
            "maxOffset": result.max_offset,
        }
        body = result.body if code == ResponseCode.SUCCESS else b""
        return response_to(req, int(code), result.status.value, header, body)

    async def query_consumer_offset(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        answer = await self.broker.query_consumer_offset(
            req.require_str("consumerGroup"),
            req.require_str("topic"),
            req.require_int("queueId"),
            requester=self.requester(channel),
        )
        if answer.code == ResponseCode.SUCCESS:
            return response_to(req, ResponseCode.SUCCESS, None, {"offset": answer.offset})
        return response_to(req, int(answer.code), answer.remark)

    async def update_consumer_offset(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET as a task: its record enters the writer's queue in its connection's
        arrival order (after an earlier pull's piggybacked commit, B-312)."""
        seq = await self.broker.commit_offset(**self._commit(channel, req))
        return self._commit_response(req, await self._commit_replicated(seq))

    def start_commit_offset(
        self, channel: Channel, req: RemotingCommand, outbox: Outbox | None = None
    ) -> Awaitable[RemotingCommand]:
        """UPDATE_CONSUMER_OFFSET up to the writer's queue as the frame is decoded (the listener
        starts it only when no earlier ordered request of the connection is still to be queued)."""
        return self._offset_committed(
            req, self.broker.begin_commit_offset(**self._commit(channel, req))
        )

    def _commit(self, channel: Channel, req: RemotingCommand) -> dict[str, Any]:
        group = req.require_str("consumerGroup")
        info = self.clients.consumer_group(group)
        return {
            "group": group,
            "topic": req.require_str("topic"),
            "queue_id": req.require_int("queueId"),
            "offset": req.require_long("commitOffset"),
            # a commit from a connection that is no consumer of the group is an operator's (B-131)
            "cause": Cause.CLIENT_COMMIT if info and channel in info.channels else Cause.ADMIN,
            "requester": self.requester(channel),
        }

    async def _offset_committed(
        self, req: RemotingCommand, committed: Awaitable[int]
    ) -> RemotingCommand:
        seq = await committed
        return self._commit_response(req, await self._commit_replicated(seq))

    async def _commit_replicated(self, seq: int) -> ResponseCode:
        """A leader in SYNC_MASTER under the fail-over coordinator answers an offset commit once a
        follower holds its record and the published `acked` covers it, as a send (B-376, B-383);
        RocketMQ, and a master/slave pair without a coordinator, answer at once."""
        if self.replication is None or self.replication.publish_acked is None:
            return ResponseCode.SUCCESS
        code: ResponseCode = await self.replication.wait_replicated(seq)
        return code

    @staticmethod
    def _commit_response(req: RemotingCommand, code: ResponseCode) -> RemotingCommand:
        if code == ResponseCode.SUCCESS:
            return response_to(req, code)
        # recorded on the leader, not confirmed by a follower: the consumer commits again (B-383)
        return response_to(
            req, code, "the offset is recorded on the master, no follower confirmed it"
        )

    async def search_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        offset = self.broker.search_offset(
            req.require_str("topic"), req.require_int("queueId"), req.require_long("timestamp")
        )
        return response_to(req, ResponseCode.SUCCESS, None, {"offset": offset})

    async def get_max_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        offset = self.broker.max_offset(req.require_str("topic"), req.require_int("queueId"))
        return response_to(req, ResponseCode.SUCCESS, None, {"offset": offset})

    async def get_min_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        offset = self.broker.min_offset(req.require_str("topic"), req.require_int("queueId"))
        return response_to(req, ResponseCode.SUCCESS, None, {"offset": offset})

    async def earliest_store_time(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        ts = self.broker.earliest_msg_store_time(
            req.require_str("topic"), req.require_int("queueId")
        )
        return response_to(req, ResponseCode.SUCCESS, None, {"timestamp": ts})

    def _limited(self, channel: Channel, req: RemotingCommand) -> Scope | None:
        """The caller's scope when ACL limits what it reads; None: it sees everything (B-351)."""
        if self.access is None:
            return None
        scope = self.access.scope(channel, req)
        return None if scope.sees_all else scope

    def _refuse_read(
        self, channel: Channel, req: RemotingCommand, scope: Scope, what: str
    ) -> RemotingCommand:
        assert self.access is not None
        refusal = self.access.refuse_read(channel, req, scope, what)
        return response_to(req, refusal.code, refusal.remark)

    async def view_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        offset = req.require_long("offset")
        raw = self.broker.message_at(offset)
        if raw is None:
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        scope = self._limited(channel, req)
        if scope is not None and not scope.may_read(wire.decode_one(raw)[0].topic):
            # the same answer whatever the topic: the refusal names neither it nor the message
            return self._refuse_read(channel, req, scope, f"the message at offset {offset}")
        return response_to(req, ResponseCode.SUCCESS, body=raw)

    async def query_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        max_num = req.require_int("maxNum")
        if req.get_str(UNIQUE_MSG_QUERY_FLAG) == "true":  # by UNIQ_KEY: the broker's cap (B-202)
            max_num = self.config.defaultQueryMaxNum
        found = self.broker.query_messages_by_key(
            req.require_str("topic"),
            req.require_str("key"),
            max_num,
            req.require_long("beginTimestamp"),
            req.require_long("endTimestamp"),
        )
        header = {"indexLastUpdateTimestamp": 0, "indexLastUpdatePhyoffset": 0}
        if not found:
            return response_to(
                req,
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct",
                header,
            )
        return response_to(req, ResponseCode.SUCCESS, None, header, b"".join(found))

    # ------------------------------------------------------------------ clients
    async def heartbeat(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        # shape checked at the edge
        data = HeartbeatData.decode(req.body) if req.body else HeartbeatData()
        client_id = data.client_id or channel.remote_addr
        language = req.language.name
        for consumer in data.consumer_data_set:
            group = names.check_group_name(consumer.group_name)
            group_config = await self.broker.ensure_group(group, requester=client_id)
            created = await self.broker.ensure_retry_topic(
                group, group_config["retryQueueNums"], requester=client_id
            )
            if created:
                self.on_topics_changed([names.retry_topic(group)])
            self.clients.register_consumer(
                channel, client_id, language, req.version, _consumer_dict(consumer)
            )
        for producer in data.producer_data_set:
            self.clients.register_producer(
                channel, client_id, language, req.version, producer.group_name
            )
        return response_to(req, ResponseCode.SUCCESS)

    async def unregister_client(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.get_str("consumerGroup")
        self.clients.unregister(channel, group, req.get_str("producerGroup"))
        if group and not self.is_slave:  # its queue locks of the group go too (B-145)
            await self.locks.release_client(
                group, req.get_str("clientID") or self.requester(channel)
            )
        return response_to(req, ResponseCode.SUCCESS)

    async def channel_closed(self, channel: Channel) -> None:
        """A connection closed: its queue locks are released (B-145), unless queueLockReleaseOnClose=false."""
        if self.config.queueLockReleaseOnClose and not self.is_slave:
            await self.locks.release_holder(channel)

    async def lock_expiry_loop(self) -> None:
        """Release lapsed queue locks, so the history shows when they ended (B-146)."""
        if self.is_slave:
            return
        while True:
            await trio.sleep(min(self.locks.max_live_ms / 1000, LOCK_EXPIRY_PERIOD))
            await self.locks.expire()

    async def consumer_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.require_str("consumerGroup")
        info = self.clients.consumer_group(group)
        if info is None or not info.channels:
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}"
            )
        body = GetConsumerListByGroupResponseBody(tuple(info.client_ids()))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def check_client_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: a Java consumer's SQL92 subscription is compiled at start (B-214, B-215)."""
        data = CheckClientRequestBody.decode(req.body) if req.body else CheckClientRequestBody()
        sub = data.subscription_data
        if sub is None or is_tag_type(sub.expression_type):
            return response_to(req, ResponseCode.SUCCESS)
        if not self.config.enablePropertyFilter:
            raise property_filter_refusal(sub.expression_type)
        if sub.expression_type != sql92.SQL92:
            parse_subscription(sub.sub_string, sub.expression_type)  # refuses the type
        try:
            await compile_selector(sub.sub_string)
        except sql92.SelectorError as exc:
            return response_to(
                req,
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"Invalid MessageSelector [{_shortened(sub.sub_string)}]: {exc}",
            )
        return response_to(req, ResponseCode.SUCCESS)

    async def lock_batch(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """LOCK_BATCH_MQ (B-142, B-143): answers only the queues the client holds after the call."""
        data = LockBatchRequestBody.decode(req.body)  # shape checked at the edge
        # a slave records nothing of its own; orderly consumers lock at the master
        if self.is_slave:
            return response_to(req, ResponseCode.SUCCESS, body=LockBatchResponseBody().encode())
        group = names.check_group_name(data.consumer_group)
        client_id = data.client_id or self.requester(channel)  # RocketMQ takes the body's clientId
        wanted = {(mq.topic, mq.broker_name, mq.queue_id): mq for mq in data.mq_set}
        held = await self.locks.lock_batch(group, client_id, list(wanted), holder=channel)
        body = LockBatchResponseBody(tuple(wanted[q] for q in held))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def unlock_batch(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """UNLOCK_BATCH_MQ (B-144): releases the client's own queues; others' are left as they are."""
        data = UnlockBatchRequestBody.decode(req.body) if req.body else UnlockBatchRequestBody()
        if self.is_slave or not data.mq_set:
            return response_to(req, ResponseCode.SUCCESS)
        group = names.check_group_name(data.consumer_group)
        client_id = data.client_id or self.requester(channel)
        if not await self.locks.unlock_batch(
            group, client_id, [(mq.topic, mq.broker_name, mq.queue_id) for mq in data.mq_set]
        ):
            raise self.broker.disk_full_refusal()  # kept until it expires; the release is not recorded
        return response_to(req, ResponseCode.SUCCESS)

    def notify_consumer_ids_changed(
        self, group: str, channels: list[Channel], nursery: trio.Nursery
    ) -> None:
        group_config = self.broker.group_config(group) or {}
        if not (
            self.config.notifyConsumerIdsChangedEnable
            and group_config.get("notifyConsumerIdsChangedEnable", True)
        ):
            return
        for ch in channels:
            nursery.start_soon(
                self._send_oneway,
                ch,
                request(
                    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True
                ),
            )

    async def _send_oneway(self, channel: Channel, command: RemotingCommand) -> None:
        """A one-way notice to a client: no answer comes; one that cannot be written is logged (B-319)."""
        try:
            await channel.invoke_oneway(command)
        except ChannelClosed as exc:
            self.notices.no_answer(channel.remote_addr, exc)
            return
        self.notices.ok(channel.remote_addr)

    def reset_body(self, plan: resets.ResetPlan, list_form: bool) -> bytes:
        """ResetOffsetBody (docs/protocol.md §9.6): MessageQueue-keyed map, or the list C++ clients take."""
        table = {self._mq(plan.topic, q): off for q, off in plan.table().items()}
        return ResetOffsetBody(table).encode(for_cpp=list_form)

    async def invoke_reset_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: compute, record, notify online clients oneway (B-74..B-77)."""
        topic, group = req.require_str("topic"), req.require_str("group")
        timestamp, force = req.require_long("timestamp"), req.get_bool("isForce", True)
        info = self.clients.consumer_group(group)
        members = list(info.channels.items()) if info else []
        supported = [(ch, c) for ch, c in members if c.version >= Version.V3_0_7_SNAPSHOT]
        plan = await self.broker.plan_reset(
            group,
            topic,
            timestamp,
            force,
            requester=self.requester(channel),
            notified=[c.client_id for _, c in supported],
        )
        if not members and plan.mode != "server_side":
            raise resets.not_online(group, topic, timestamp)
        body = self.reset_body(plan, req.language == LanguageCode.CPP)
        notice = request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            {"topic": topic, "group": group, "timestamp": timestamp, "isForce": "false"},
            body,
            oneway=True,
        )
        for ch, _ in supported:
            await self._send_oneway(ch, notice)
        if len(supported) < len(members):
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, "the client does not support this feature"
            )
        return response_to(req, ResponseCode.SUCCESS, body=body)

    async def clone_group_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """CLONE_GROUP_OFFSET (B-35)."""
        src = req.require_str("srcGroup")
        info = self.clients.consumer_group(src)
        online = None if req.get_bool("offline", False) or info is None else set(info.subscriptions)
        await self.broker.clone_group_offset(
            src,
            req.require_str("destGroup"),
            req.get_str("topic") or None,
            online_topics=online,
            requester=self.requester(channel),
        )
        return response_to(req, ResponseCode.SUCCESS)

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings as they are now (read through the store's ConfigOwner)."""
        return self.broker.config

    async def update_broker_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG: only keys that are safe to change while running, recorded (B-270)."""
        changes: dict[str, str] = {}
        for line in req.body.decode("utf-8", errors="replace").splitlines():
            key, sep, value = line.strip().partition("=")
            if not sep or key.startswith("#"):
                continue
            changes[key.strip()] = value
        await self.broker.update_config(changes, self.requester(channel))
        if "brokerPermission" in changes:
            await self.registered()  # the route shows the broker's perm (B-23)
        return response_to(req, ResponseCode.SUCCESS)

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
        end = transaction.EndRequest(
            producer_group=req.require_str("producerGroup"),
            tran_state_table_offset=req.require_long("tranStateTableOffset"),
            commit_log_offset=req.require_long("commitLogOffset"),
            commit_or_rollback=req.require_int("commitOrRollback"),
            from_check=bool(req.get_bool("fromTransactionCheck", False)),
            msg_id=req.require_str("msgId"),
            transaction_id=req.get_str("transactionId"),
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
        result = await self.broker.end_transaction(end, requester=self.requester(channel))
        if result.stored is not None:
            self.holds.notify(result.stored.topic, result.stored.queue_id)
        return response_to(req, ResponseCode.SUCCESS)

    async def open_transactions(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """OPEN_TRANSACTIONS (es-broker): the half messages still open, per producer group (B-232)."""
        rows = self.broker.open_transactions(req.get_str("producerGroup") or None)
        body = OpenTransactionsBody(tuple(OpenTransaction.from_json(row) for row in rows))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def reset_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """es-broker's reset (S-2, S-13): any target, a dry run, or server-side; answers the per-queue table."""
        topic, group = req.require_str("topic"), req.require_str("group")
        kind, value = req.require_str("kind"), req.get_long("value", 0) or 0
        dry_run = req.get_bool("dryRun", False)
        info = self.clients.consumer_group(group)
        members = list(info.channels.items()) if info else []
        plan = await self.broker.plan_reset(
            group,
            topic,
            value,
            req.get_bool("isForce", True),
            requester=self.requester(channel),
            notified=[c.client_id for _, c in members],
            kind=kind,
            mode=req.get_str("mode"),
            scope=req.get_str("scope"),
            dry_run=dry_run,
        )
        if not dry_run and members:
            notice = request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                {"topic": topic, "group": group, "timestamp": plan.timestamp, "isForce": "false"},
                self.reset_body(plan, False),
                oneway=True,
            )
            for ch, _ in members:
                await self._send_oneway(ch, notice)
        if not dry_run and not members and plan.mode != "server_side":
            outcome = (
                "consumer_not_online: nothing changes until a consumer of the group applies it"
            )
        else:
            outcome = (
                "dry run: nothing changed"
                if dry_run
                else f"{plan.mode}: notified {len(members)} client(s)"
            )
        body = ResetOffsetResult(
            group=group,
            topic=topic,
            broker_name=self.config.brokerName,
            kind=kind,
            value=value,
            mode=plan.mode,
            dry_run=bool(dry_run),
            seq=plan.seq,
            outcome=outcome,
            queues=tuple(
                QueueResetRow(q.queue_id, q.current, q.target, q.final, q.outcome)
                for q in plan.queues
            ),
        )
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def forward_to_consumer(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO / CONSUME_MESSAGE_DIRECTLY: relay to the client's channel, answer verbatim."""
        group, client_id = req.require_str("consumerGroup"), req.require_str("clientId")
        info = self.clients.consumer_group(group)
        target = next(
            (ch for ch, c in (info.channels.items() if info else ()) if c.client_id == client_id),
            None,
        )
        if target is None:
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        body = req.body
        if req.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            # its form checked at the edge
            (_, phy) = wire.parse_offset_msg_id(req.require_str("msgId"))
            body = (self.broker.message_at(phy) if phy >= 0 else None) or b""
        forwarded = request(req.code, req.ext_fields, body)
        try:
            answer = await target.invoke(forwarded, timeout=10.0)
        except (TimeoutError, ChannelClosed):  # Channel.invoke times out with TimeoutError
            return response_to(
                req,
                ResponseCode.CONSUME_MSG_TIMEOUT,
                f"consumer <{group}> <{client_id}> did not answer in 10 s",
            )
        return response_to(req, answer.code, answer.remark, answer.ext_fields, answer.body)

    # ------------------------------------------------------------------ admin
    async def update_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = req.require_str("topic")
        config = {
            "topicName": topic,
            "readQueueNums": req.require_int("readQueueNums"),
            "writeQueueNums": req.require_int("writeQueueNums"),
            "perm": req.require_int("perm"),
            "topicFilterType": req.get_str("topicFilterType", "SINGLE_TAG"),
            "topicSysFlag": req.get_int("topicSysFlag", 0),
            "order": req.get_bool("order", False),
        }
        await self.broker.update_topic(config, requester=self.requester(channel))
        await self.registered([topic])  # this topic alone (registerIncrementBrokerData, B-391)
        return response_to(req, ResponseCode.SUCCESS)

    async def delete_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = req.require_str("topic")
        await self.broker.delete_topic(topic, requester=self.requester(channel))
        await self.registered([topic])  # the name server drops this broker's queues of it (B-391)
        return response_to(req, ResponseCode.SUCCESS)

    def topic_configs_of(self, topics: Iterable[str]) -> tuple[dict[str, TopicConfig], int]:
        """The configs of those of `topics` that exist, as registered (B-23), and their newest change."""
        perm = self.config.brokerPermission
        configs: dict[str, TopicConfig] = {}
        version = 0
        for name in topics:
            stored = self.broker.topic_config(name)
            if stored is None:
                continue
            version = max(version, stored.get("dataVersion", 0))
            config = TopicConfig.from_json({k: v for k, v in stored.items() if k != "dataVersion"})
            # a read-only or write-only broker shows its perm on every topic (B-23)
            configs[name] = (
                config if perm & 4 and perm & 2 else dataclasses.replace(config, perm=perm)
            )
        return configs, version

    def topic_config_wrapper(self) -> TopicConfigSerializeWrapper:
        table, version = self.broker.topic_table()
        perm = self.config.brokerPermission
        configs = {name: TopicConfig.from_json(config) for name, config in table.items()}
        # a read-only or write-only broker shows its perm on every topic (B-23)
        if not (perm & 4 and perm & 2):
            configs = {name: dataclasses.replace(c, perm=perm) for name, c in configs.items()}
        return TopicConfigSerializeWrapper(configs, DataVersion(timestamp=version, counter=version))

    async def all_topic_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        wrapper = self.topic_config_wrapper()
        scope = self._limited(channel, req)
        if scope is not None:  # the topics the account may PUB or SUB (B-351)
            wrapper = dataclasses.replace(
                wrapper,
                topic_config_table={
                    name: config
                    for name, config in wrapper.topic_config_table.items()
                    if scope.may_see(name)
                },
            )
        return response_to(req, ResponseCode.SUCCESS, body=wrapper.encode())

    async def update_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        sent = fastjson.loads(req.body)  # shape checked at the edge
        # Java's fields and types
        typed = fastjson.loads(SubscriptionGroupConfig.from_json(sent).encode())
        config = {key: value for key, value in typed.items() if key in sent}
        await self.broker.update_group(config, requester=self.requester(channel))
        return response_to(req, ResponseCode.SUCCESS)

    async def all_group_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        table, version = self.broker.group_table()
        scope = self._limited(channel, req)
        if scope is not None:  # the groups the account may use (B-351)
            table = {name: c for name, c in table.items() if scope.may_see(group_resource(name))}
        body = SubscriptionGroupWrapper(
            {name: SubscriptionGroupConfig.from_json(config) for name, config in table.items()},
            DataVersion(timestamp=version, counter=version),
        )
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def delete_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        await self.broker.delete_group(
            req.require_str("groupName"),
            requester=self.requester(channel),
            remove_offsets=req.get_bool("removeOffset", False),
        )
        return response_to(req, ResponseCode.SUCCESS)

    def _mq(self, topic: str, queue_id: int) -> MessageQueue:
        return MessageQueue(topic, self.config.brokerName, queue_id)

    async def topic_stats(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = req.require_str("topic")
        config = self.broker.topic_config(topic)
        if config is None:
            return response_to(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table = {}
        for q in range(config["writeQueueNums"]):
            lo, hi = self.broker.min_offset(topic, q), self.broker.max_offset(topic, q)
            last = self.broker.store_time_at(topic, q, hi - 1) if hi > 0 else 0
            table[self._mq(topic, q)] = TopicOffset(lo, hi, last)
        return response_to(req, ResponseCode.SUCCESS, body=TopicStatsTable(table).encode())

    async def consume_stats(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.require_str("consumerGroup")
        only = req.get_str("topic") or None
        scope = self._limited(channel, req)  # SUB on the group: the access rule (B-350)
        table = {}
        for topic, queue_id, offset in self.broker.group_offsets(group):
            if only and topic != only:
                continue
            if scope is not None and not scope.may_read(topic):
                continue
            consumer = max(offset, 0)
            last = self.broker.store_time_at(topic, queue_id, consumer - 1) if consumer > 0 else 0
            table[self._mq(topic, queue_id)] = OffsetWrapper(
                self.broker.max_offset(topic, queue_id), consumer, last
            )
        return response_to(req, ResponseCode.SUCCESS, body=ConsumeStats(table, 0.0).encode())

    @staticmethod
    def _connection(info: tuple[Channel, ClientInfo]) -> ClientConnection:
        ch, client = info
        return ClientConnection(client.client_id, ch.remote_addr, client.language, client.version)

    async def consumer_connections(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.require_str("consumerGroup")
        info = self.clients.consumer_group(group)
        if info is None or not info.channels:
            return response_to(
                req, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        body = ConsumerConnection(
            connection_set=tuple(self._connection(i) for i in info.channels.items()),
            subscription_table={
                topic: SubscriptionData.from_json(sub) for topic, sub in info.subscriptions.items()
            },
            consume_type=info.consume_type,
            message_model=info.message_model,
            consume_from_where=info.consume_from_where,
        )
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def producer_connections(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.require_str("producerGroup")
        channels = self.clients.producers.get(group) or {}
        if not channels:
            return response_to(
                req, ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        body = ProducerConnection(tuple(self._connection(i) for i in channels.items()))
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def all_consumer_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        table: dict[str, dict[int, int]] = {}
        scope = self._limited(channel, req)
        for topic, group, queue_id, offset in self.broker.offset_table():
            if scope is not None and not (
                scope.may_read(topic) and scope.may_read(group_resource(group))
            ):
                continue  # the offsets of a (topic, group) the account may not SUB (B-350)
            table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        body = ConsumerOffsetSerializeWrapper(table)
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def runtime_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        table = {k: str(v) for k, v in {**self.broker.runtime_info(), **self.ha_status()}.items()}
        table["aclEnable"] = "true" if self.config.aclEnable else "false"  # B-353
        return response_to(req, ResponseCode.SUCCESS, body=KVTable(table).encode())

    async def broker_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        import dataclasses

        # the broker's own secret key never leaves it, nor its account's name; the ACL file's
        # path only to admins (B-352)
        scope = self._limited(channel, req)
        text = "\n".join(
            f"{f.name}={getattr(self.config, f.name)}"
            for f in dataclasses.fields(self.config)
            if not f.metadata.get("secret")
            and not f.metadata.get("account")
            and not (scope is not None and f.metadata.get("admin_only"))
        )
        return response_to(
            req,
            ResponseCode.SUCCESS,
            None,
            {"version": DataVersion().encode().decode()},
            text.encode(),
        )
