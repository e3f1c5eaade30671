"""RocketMQ 5's pop consumption over remoting, as its broker serves it to its proxy (B-580..B-599).

POP_MESSAGE (200050) hands a group up to 32 messages of a queue (queueId -1: any
read queue) for an invisible time and answers them as a pull does (stored
messages back to back), each carrying its receipt handle in the POP_CK property
and its delivery count as reconsumeTimes; with `pollTime` a pop that finds
nothing waits for an arrival in its queues, an ack that frees a FIFO queue, or a
message coming back after its invisible time, and looks again until the poll
time is over (PopLongPollingService). ACK_MESSAGE (200051) and
CHANGE_MESSAGE_INVISIBLETIME (200053) take a handle back: an invalid one (not
made by this broker for this group, topic, queue and offset) is refused with
INVALID_PARAMETER, a stale one with NO_MESSAGE, nothing recorded either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import trio

from es_broker.commands import sql92
from es_broker.commands.errors import BrokerError
from es_broker.commands.pop import Handed, PopRequest, PopResult
from es_broker.commands.pop_ack import HandleUse
from es_broker.core.broker import Broker
from es_broker.core.pop import PopOperations
from es_broker.net.channel import Channel
from es_broker.remoting import message as wire
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.pop_headers import (
    ORDER_REVIVE_QID,
    PROPERTY_FIRST_POP_TIME,
    PROPERTY_POP_CK,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from es_broker.server.edge.remoting_server import Handler
from es_broker.server.longpoll import PullHoldService
from es_broker.server.pop_revive import PopReviveService
from es_broker.server.processors.common import Requester
from es_broker.server.processors.subscription import (
    compile_selector,
    is_tag_type,
    parse_subscription,
    property_filter_refusal,
)

NORMAL = "0"  # ExtraInfoUtil's mark of a normal topic (not a retry topic) in the offset infos


class PopWakeups:
    """What a held pop waits for: an arrival in one of its queues (the pull holds' events, set by
    every store), or a queue of the topic freed for the group (an ack, a message come back)."""

    def __init__(self, holds: PullHoldService) -> None:
        self.holds = holds
        self._freed: dict[tuple[str, int], trio.Event] = {}

    def events(self, topic: str, queues: tuple[int, ...]) -> list[trio.Event]:
        out = []
        for queue_id in queues:
            out.append(self.holds.arrival(topic, queue_id))
            key = (topic, queue_id)
            freed = self._freed.get(key)
            if freed is None:
                freed = self._freed[key] = trio.Event()
            out.append(freed)
        return out

    def freed(self, topic: str, queue_id: int) -> None:
        event = self._freed.pop((topic, queue_id), None)
        if event is not None:
            event.set()


async def any_of(events: list[trio.Event], deadline: float) -> None:
    """Wait until one of `events` is set, or until `deadline` (trio time)."""
    if any(e.is_set() for e in events):
        return
    if not events:
        await trio.sleep_until(deadline)
        return
    with trio.move_on_at(deadline):
        async with trio.open_nursery() as nursery:

            async def wait(event: trio.Event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            for event in events:
                nursery.start_soon(wait, event)


class PopProcessor:
    """Serves POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME with the broker's pop core."""

    def __init__(
        self,
        ops: PopOperations,
        wakeups: PopWakeups,
        requester: Requester,
        on_popped: Callable[[], None] = lambda: None,
    ) -> None:
        self.ops = ops
        self.wakeups = wakeups
        self.requester = requester
        self.on_popped = on_popped  # handles went out: the revive service looks at its deadline

    @classmethod
    def serving(
        cls, broker: Broker, holds: PullHoldService, requester: Requester
    ) -> tuple[PopProcessor, PopReviveService]:
        """The processor of `broker`'s pops and its revive service (run on a master only)."""
        ops = PopOperations(broker)
        wakeups = PopWakeups(holds)
        revive = PopReviveService(ops, wakeups.freed)
        return cls(ops, wakeups, requester, revive.wake), revive

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.POP_MESSAGE: self.pop_message,
            RequestCode.ACK_MESSAGE: self.ack_message,
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change_invisible_time,
        }

    async def pop_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = PopMessageRequestHeader.of(req)
        request = PopRequest(
            h.consumer_group,
            h.topic,
            h.queue_id if h.queue_id >= 0 else -1,
            h.max_msg_nums,
            h.invisible_time,
            bool(h.order),
            h.init_mode,
            self.requester(channel),
            for_client=h.for_client,
        )
        request = await self._filtered(request, h.exp, h.exp_type)
        deadline = trio.current_time() + h.poll_time / 1000
        queues = self._queues(request)
        while True:
            # registered before the pop looks, so what arrives meanwhile is not missed
            events = self.wakeups.events(request.topic, queues)
            result = await self.ops.pop(request)
            if result.handed:
                self.on_popped()
                break
            if trio.current_time() >= deadline:
                break
            await any_of(events, deadline)
        return self._answer(req, request, result)

    def _queues(self, request: PopRequest) -> tuple[int, ...]:
        if request.queue_id >= 0:
            return (request.queue_id,)
        config = self.ops.broker.topic_config(request.topic)
        return tuple(range(config.read_queue_nums)) if config is not None else ()

    async def _filtered(
        self, request: PopRequest, exp: str | None, exp_type: str | None
    ) -> PopRequest:
        """The pop's filter: a TAG expression's hash codes, or a SQL92 selector (5.x's exp)."""
        if is_tag_type(exp_type):
            return dataclasses.replace(request, tags_codes=parse_subscription(exp, exp_type))
        if exp_type is not None and exp_type.upper() == sql92.SQL92:
            if not self.ops.broker.config.enablePropertyFilter:
                raise property_filter_refusal(exp_type)
            try:
                selector = await compile_selector(exp)
            except sql92.SelectorError as exc:
                raise BrokerError(
                    f"parse the consumer's subscription failed: {exc}",
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                ) from None
            return dataclasses.replace(request, message_filter=selector.matches_message)
        return dataclasses.replace(request, tags_codes=parse_subscription(exp, exp_type))

    def _answer(
        self, req: RemotingCommand, request: PopRequest, result: PopResult
    ) -> RemotingCommand:
        header = PopMessageResponseHeader(
            pop_time=result.pop_time,
            invisible_time=result.invisible_time,
            revive_qid=ORDER_REVIVE_QID if request.order else 0,
            rest_num=result.rest,
            start_offset_info=_start_offset_info(result.handed) or None,
            msg_offset_info=_msg_offset_info(result.handed) or None,
            order_count_info=_order_count_info(result.handed) if request.order else None,
        )
        if not result.handed:
            return response_to(req, ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE", header.to_fields())
        body = b"".join(self._with_handle(request, result, item) for item in result.handed)
        return response_to(req, ResponseCode.SUCCESS, "FOUND", header.to_fields(), body)

    def _with_handle(self, request: PopRequest, result: PopResult, item: Handed) -> bytes:
        """The stored message as the pop hands it out: its handle in POP_CK, its delivery count
        as reconsumeTimes, the time of its first pop (1ST_POP_TIME) kept once set."""
        message = wire.decode_one(item.raw)[0]
        handle = self.ops.handle(
            request.group,
            item.topic,
            item.queue_id,
            item.queue_offset,
            ck_offset=item.start_offset,
            pop_time=result.pop_time,
            invisible_time=result.invisible_time,
            order=request.order,
            physical_offset=message.physical_offset,
        )
        props = dict(message.properties)
        props[PROPERTY_POP_CK] = handle.encode()
        props.setdefault(PROPERTY_FIRST_POP_TIME, str(result.pop_time))
        shown = dataclasses.replace(
            message, properties=props, reconsume_times=message.reconsume_times + item.times - 1
        )
        return wire.encode(shown)

    def _handle_use(
        self, channel: Channel, h: AckMessageRequestHeader | ChangeInvisibleTimeRequestHeader
    ) -> HandleUse:
        """The handle an ack or a change names, its MAC checked (nothing recorded when refused)."""
        return self.ops.use(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.offset,
            h.extra_info,
            self.requester(channel),
            h.for_client,
        )

    async def ack_message(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = AckMessageRequestHeader.of(req)
        use = self._handle_use(channel, h)
        await self.ops.ack(use)
        self.wakeups.freed(h.topic, h.queue_id)  # a FIFO queue's next message may go out now
        return response_to(req, ResponseCode.SUCCESS)

    async def change_invisible_time(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        h = ChangeInvisibleTimeRequestHeader.of(req)
        use = self._handle_use(channel, h)
        changed = await self.ops.change(use, h.invisible_time)
        old = self.ops.decoded(h.extra_info)
        handle = self.ops.handle(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.offset,
            ck_offset=old.ck_queue_offset,
            pop_time=changed.pop_time,
            invisible_time=changed.invisible_time,
            order=old.revive_qid == ORDER_REVIVE_QID,
            physical_offset=old.commit_log_offset,
        )
        header = ChangeInvisibleTimeResponseHeader(
            pop_time=changed.pop_time,
            invisible_time=changed.invisible_time,
            revive_qid=old.revive_qid,
            extra_info=handle.encode(),
        )
        return response_to(req, ResponseCode.SUCCESS, None, header.to_fields())


def _by_queue(handed: tuple[Handed, ...]) -> dict[int, list[Handed]]:
    out: dict[int, list[Handed]] = {}
    for item in handed:
        out.setdefault(item.queue_id, []).append(item)
    return out


def _start_offset_info(handed: tuple[Handed, ...]) -> str:
    """ExtraInfoUtil's startOffsetInfo: `0 queueId startOffset` per queue, `;` between."""
    return ";".join(
        f"{NORMAL} {qid} {items[0].start_offset}" for qid, items in _by_queue(handed).items()
    )


def _msg_offset_info(handed: tuple[Handed, ...]) -> str:
    """ExtraInfoUtil's msgOffsetInfo: `0 queueId offset,offset,...` per queue."""
    return ";".join(
        f"{NORMAL} {qid} {','.join(str(i.queue_offset) for i in items)}"
        for qid, items in _by_queue(handed).items()
    )


def _order_count_info(handed: tuple[Handed, ...]) -> str | None:
    """ExtraInfoUtil's orderCountInfo: `0 qo<queueId>%<offset> <times redelivered>` per message."""
    return (
        ";".join(f"{NORMAL} qo{i.queue_id}%{i.queue_offset} {i.times - 1}" for i in handed) or None
    )
