"""PULL_MESSAGE (4.9.8's PullMessageProcessor): read, record the delivery, long-poll when empty.

The pull's filter comes from the request (subscription flag) or from the
group's heartbeat (B-57, B-215); a pull that finds nothing and may suspend
waits for an arrival in its queue (longPollingEnable) and reads once more,
without suspending or committing again (B-63).
"""

from __future__ import annotations

import contextlib
import functools
import struct
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import trio

from es_broker.commands import names, retry, sql92
from es_broker.commands.errors import BrokerError
from es_broker.commands.messages import GetResult
from es_broker.commands.pull import PullRequest
from es_broker.core.broker import Broker
from es_broker.core.pending import Pending
from es_broker.log import hops
from es_broker.log.arrival import pass_turn, unordered
from es_broker.net.channel import Channel
from es_broker.remoting.bodies import SubscriptionGroupConfig
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.headers import PullMessageRequestHeader
from es_broker.remoting.pull_flags import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND
from es_broker.remoting.response_headers import PullMessageResponseHeader
from es_broker.server.clients import ClientRegistry
from es_broker.server.edge.outbox import Outbox
from es_broker.server.edge.remoting_server import DECLINED, Declined, Handler, Start
from es_broker.server.longpoll import PullHoldService
from es_broker.server.processors.common import BrokerSettings, CommitConfirmation, Requester
from es_broker.server.processors.pull_codes import (
    PULL_NOT_FOUND,
    PULL_OFFSET_MOVED,
    PULL_RETRY_IMMEDIATELY,
    SUCCESS,
    response_code,
    slave_correction,
)
from es_broker.server.processors.subscription import (
    compile_selector,
    parse_subscription,
    property_filter_refusal,
)


class PullFilter(NamedTuple):
    """What a pull delivers: tag hash codes (None: all) and, for SQL92, a test of each message
    (a named tuple: one built per pull, on the hot path)."""

    tags_codes: frozenset[int] | None = None
    message_filter: Callable[[bytes], bool] | None = None


@functools.lru_cache(maxsize=1024)
def _kept_tag_filter(expression: str | None, expression_type: str | None) -> PullFilter:
    return PullFilter(parse_subscription(expression, expression_type))


def tag_filter(expression: str | None, expression_type: str | None) -> PullFilter:
    """A TAG subscription's filter, kept per expression: a consumer's pulls repeat its subscription
    (the filter is immutable; a refused expression raises each time, as it is not kept)."""
    try:
        return _kept_tag_filter(expression, expression_type)
    except TypeError:
        # a heartbeat's subscription that is no text (a JSON list) cannot be kept: parsed as it
        # was, to the same refusal
        return PullFilter(parse_subscription(expression, expression_type))


class PullMessageProcessor(BrokerSettings):
    """Serves pulls from the consume queues.

    `clients`: the heartbeats' subscriptions; `holds`: where a suspended pull
    waits for an arrival; `confirm_commit`: when a piggybacked commit is
    answered (a SYNC_MASTER under the fail-over coordinator waits for it).
    """

    def __init__(
        self,
        broker: Broker,
        clients: ClientRegistry,
        holds: PullHoldService,
        requester: Requester,
        confirm_commit: CommitConfirmation,
    ) -> None:
        self.broker = broker
        self.clients = clients
        self.holds = holds
        self.requester = requester
        self.confirm_commit = confirm_commit
        self.is_slave = broker.role.follows_master

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.PULL_MESSAGE: self.pull_message}

    def starts(self) -> dict[int, tuple[Handler, Start]]:
        """The pull's first part, run by the listener as its frame is decoded (`start_pull`)."""
        return {RequestCode.PULL_MESSAGE: (self.pull_message, self.start_pull)}

    def start_pull(
        self, channel: Channel, req: RemotingCommand, outbox: Outbox
    ) -> Awaitable[RemotingCommand | None] | Declined | None:
        """`pull_message` up to its wait, when nothing before the wait waits: a tag filter, the group
        created, a commit answered at once. Its record is queued when this returns (the requests read
        after it queue theirs after it, B-312). Messages found or no long poll: the writer's
        completion answers it into `outbox`. Nothing found and a long poll: it is registered for
        arrivals, and its wait and second read (`_held`) return to run as a task. Anything else is
        DECLINED before anything is recorded (the read is side-effect free), for `pull_message` to
        serve from the start."""
        if not self.confirm_commit.at_once:
            return DECLINED
        h = PullMessageRequestHeader.of(req)
        pull_filter = self._subscription_now(h)
        if pull_filter is None:
            return DECLINED
        request = self._pull_request(channel, h, pull_filter)
        broker = self.broker
        result, group_config = broker.read_pull(request)
        if group_config is None:  # created by the handler (B-03)
            return DECLINED
        offset = request.offset
        code = response_code(result.status, offset)
        if code == PULL_NOT_FOUND and h.sys_flag & PULL_SUSPEND:
            # registered before anything else runs on this thread since the read: a message stored
            # after it is announced (by its completion, on this thread) to this wait
            arrival = self.holds.arrival(request.topic, request.queue_id)
            recorded = broker.start_pull(request, result, group_config)
            return self._held(req, request, h.suspend_timeout_millis, arrival, recorded)
        trace = hops.current() if hops.ON else None

        def answer(pending: Pending[int]) -> None:
            try:
                pending.result()
                response = self._pull_answer(req, request.group, result, code, offset, group_config)
            except Exception as exc:
                outbox.fail(req, exc, trace)
                return
            if trace is not None:
                trace.mark(hops.ANSWERED)
            outbox.answer(req, response, trace)

        broker.start_pull(request, result, group_config, answer)
        return None

    def _pull_request(
        self, channel: Channel, h: PullMessageRequestHeader, pull_filter: PullFilter
    ) -> PullRequest:
        """The pull as the broker serves it, from its header and its filter."""
        return PullRequest(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.queue_offset,
            h.max_msg_nums,
            pull_filter.tags_codes,
            pull_filter.message_filter,
            self.requester(channel),
            h.commit_offset if h.sys_flag & PULL_COMMIT_OFFSET else None,
        )

    def _subscription_now(self, h: PullMessageRequestHeader) -> PullFilter | None:
        """`_subscription` when it needs no wait: a tag filter (SQL92 compiles in a thread, a retry
        topic's filterSupportRetry may too); None otherwise. Refuses as `_subscription` refuses."""
        group, topic = h.consumer_group, h.topic
        if self.config.filterSupportRetry and topic.startswith(names.RETRY_PREFIX):
            return None
        if h.sys_flag & PULL_SUBSCRIPTION:
            if h.expression_type == sql92.SQL92:
                return None
            return tag_filter(h.subscription, h.expression_type)
        info = self.clients.consumer_group(group)
        if info is None or topic not in info.subscriptions:
            return None  # refused by `_subscription`
        sub = info.subscriptions[topic]
        if int(sub.get("subVersion", 0)) < (h.sub_version or 0):
            return None
        if sub.get("expressionType") == sql92.SQL92:
            return None
        return tag_filter(sub.get("subString"), sub.get("expressionType"))

    async def pull_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = PullMessageRequestHeader.of(req)
        sys_flag = h.sys_flag
        suspend_ms = _suspend_ms(h.suspend_timeout_millis)
        request = self._pull_request(channel, h, await self._subscription(h))
        group, offset = request.group, request.offset
        # register for arrivals before reading, so a message stored meanwhile is not missed
        arrival = self.holds.arrival(request.topic, request.queue_id)
        # a pull waits for no earlier request (a consumer has one pull per queue in flight), but the
        # commits and queries after it wait for its record (B-312): its turn is given up once that
        # is queued (or there is none), before it long-polls
        with unordered():
            result = await self.broker.serve_pull(request)
        pass_turn()
        if result.commit_seq:
            # answered either way: the messages are read, only the commit waits (B-383)
            await self.confirm_commit(result.commit_seq)
        code = response_code(result.status, offset)
        if code == PULL_NOT_FOUND and sys_flag & PULL_SUSPEND:
            return await self._hold(req, request, suspend_ms, arrival)
        return self._pull_answer(req, group, result, code, offset, result.group_config)

    async def _held(
        self,
        req: RemotingCommand,
        request: PullRequest,
        suspend_ms: int | None,
        arrival: trio.Event,
        recorded: Pending[int],
    ) -> RemotingCommand:
        """The rest of a long poll `start_pull` read nothing for: its record's outcome, then `_hold`."""
        await recorded  # the commit it carried, answered at once (`start_pull` asks for that)
        return await self._hold(req, request, _suspend_ms(suspend_ms), arrival)

    async def _hold(
        self, req: RemotingCommand, request: PullRequest, suspend_ms: int, arrival: trio.Event
    ) -> RemotingCommand:
        """A long poll that read nothing: wait for an arrival in its queue (or the hold's end), then
        read once more and answer that."""
        hold = (
            suspend_ms / 1000
            if self.config.longPollingEnable
            else self.config.shortPollingTimeMills / 1000
        )
        with trio.move_on_after(hold):
            await arrival.wait()
        # the re-run neither suspends nor stores the commit again (B-63)
        result = await self.broker.serve_pull(request._replace(commit_offset=None))
        code = response_code(result.status, request.offset)
        return self._pull_answer(
            req, request.group, result, code, request.offset, result.group_config
        )

    async def _subscription(self, h: PullMessageRequestHeader) -> PullFilter:
        """The pull's filter: from the request (subscription flag) or the group's heartbeat (B-57, B-215)."""
        group, topic = h.consumer_group, h.topic
        if h.sys_flag & PULL_SUBSCRIPTION:
            expression, expression_type = h.subscription, h.expression_type
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
        if int(sub.get("subVersion", 0)) < (h.sub_version or 0):
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
        if self.config.filterSupportRetry and topic.startswith(names.RETRY_PREFIX):
            tags = parse_subscription(expression, expression_type)
            return PullFilter(tags, await self._retry_filter(group))
        return tag_filter(expression, expression_type)

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
        code: int,
        offset: int,
        group_config: SubscriptionGroupConfig | None,
    ) -> RemotingCommand:
        # as the pull read it: no second read; a read that is no group's takes the defaults
        group_config = group_config or SubscriptionGroupConfig()
        if not self.config.slaveReadEnable:
            suggest = 0
        elif result.slow:
            suggest = group_config.which_broker_when_consume_slowly
        else:
            suggest = group_config.broker_id
        if self.is_slave:
            result = slave_correction(result, offset, self.config.offsetCheckInSlave)
            if code == PULL_OFFSET_MOVED and not self.config.offsetCheckInSlave:
                # no correction on a slave: retry the same offset, asked to go to the group's broker (B-61, B-119)
                code = PULL_RETRY_IMMEDIATELY
                suggest = group_config.broker_id
        header = PullMessageResponseHeader.pulled(
            suggest, result.next_begin_offset, result.min_offset, result.max_offset
        )
        body = result.body if code == SUCCESS else b""
        # the status's name as the remark: `_value_` is the member's value, without the Python-level
        # getter of its `value` property
        return response_to(req, code, result.status._value_, header, body)


def _suspend_ms(requested: int | None) -> int:
    """A long poll's hold: the request's suspendTimeoutMillis, 15 s when it names none."""
    return 15000 if requested is None else requested
