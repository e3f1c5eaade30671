"""Telemetry: the 5.x clients' bidirectional streams, their settings, and what the proxy pushes.

A 5.x client opens one Telemetry stream per endpoint and sends its Settings
first; the proxy answers with the settings it imposes (RocketMQ 5's
GrpcClientSettingsManager: the retry backoff, the largest body, for a
consumer the receive batch size, the long-polling time and whether the group
consumes FIFO) and keeps the stream, through which it later sends a producer
the brokers' transaction checks (RecoverOrphanedTransactionCommand). A stream
that sends no Settings within the settings timeout is closed with
FAILED_PRECONDITION. A PrintThreadStackTraceCommand a client sends is answered
with the proxy's own thread stacks. The proxy asks a client for its stacks
(`thread_stacks`) when a broker or an admin tool asks for the running info of
a 5.x consumer (registry.py); the client's ThreadStackTrace answers it by its
nonce. A VerifyMessageResult, which the proxy never asks for, is logged.
"""

from __future__ import annotations

import logging
import sys
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from es_broker.proxy.cluster import Check
from es_broker.proxy.convert import to_v5
from es_broker.proxy.status import Abort, Code, parse, status

log = logging.getLogger(__name__)

MAX_BODY = 4 * 1024 * 1024  # maxMessageSize
RECEIVE_BATCH = 32  # RocketMQ 5's receive batch size of a consumer's settings
LONG_POLLING = 30  # s, when the client names none
# a consumer's attempts: its group's retryMaxTimes + 1; when the brokers have no such group, those
# of a group with the default retryMaxTimes (16)
CONSUMER_ATTEMPTS = 17
PRODUCER_ATTEMPTS = 3
# a consumer's redelivery backoff: the broker's delay levels 3..18 (10s .. 2h) as 5.x gives them
RETRY_LEVELS_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
CONSUMERS = frozenset(
    {pb.ClientType.SIMPLE_CONSUMER, pb.ClientType.PUSH_CONSUMER, pb.ClientType.PULL_CONSUMER}
)


@dataclass(eq=False)
class Session:
    """One client's Telemetry stream."""

    client_id: str
    account: str | None
    context: Any  # grpc.aio.ServicerContext
    settings: Any = None  # the client's last Settings
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    @property
    def client_type(self) -> int:
        return int(self.settings.client_type) if self.settings is not None else 0

    def publishes(self, topic: str) -> bool:
        return self.settings is not None and any(
            t.name == topic for t in self.settings.publishing.topics
        )

    async def write(self, command: Any) -> None:
        async with self.lock:
            await self.context.write(command)


def _stacks() -> str:
    out = []
    for ident, frame in sys._current_frames().items():
        out.append(f"Thread {ident}:\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(out)


FifoOf = Callable[[Any, str | None], Awaitable[bool]]
# a consumer's subscription, the account -> its group's retryMaxTimes (None: no such group)
RetryMaxTimesOf = Callable[[Any, str | None], Awaitable[int | None]]


def consumer_attempts(retry_max_times: int | None) -> int:
    """A consumer's max attempts: its group's retryMaxTimes + 1 (GrpcClientSettingsManager), at
    least 1 (retryMaxTimes -1: 4.x dead-letters at the first failure); the default group's
    without a group."""
    if retry_max_times is None:
        return CONSUMER_ATTEMPTS
    return max(retry_max_times + 1, 1)


class Sessions:
    """The Telemetry streams open now, by client id."""

    def __init__(
        self, settings_timeout: float, fifo_of: FifoOf, retry_max_times_of: RetryMaxTimesOf
    ) -> None:
        self.settings_timeout = settings_timeout
        self.fifo_of = fifo_of  # whether a consumer's subscription is of a FIFO topic
        self.retry_max_times_of = retry_max_times_of
        self.by_client: dict[str, Session] = {}
        self._turn = 0
        self._stacks_asked: dict[str, _Answer] = {}  # by nonce

    def forget(self, client_id: str) -> None:
        self.by_client.pop(client_id, None)

    async def server_settings(self, mine: Any, account: str | None) -> Any:
        """The settings the proxy answers a client's Settings with."""
        out = pb.Settings(client_type=mine.client_type)
        out.access_point.CopyFrom(mine.access_point)
        out.request_timeout.CopyFrom(mine.request_timeout)
        out.metric.on = False
        if mine.client_type == pb.ClientType.PRODUCER:
            out.publishing.CopyFrom(mine.publishing)
            out.publishing.max_body_size = MAX_BODY
            out.publishing.validate_message_type = True
            policy = out.backoff_policy
            policy.max_attempts = PRODUCER_ATTEMPTS
            policy.exponential_backoff.initial.FromMilliseconds(10)
            policy.exponential_backoff.max.FromMilliseconds(1000)
            policy.exponential_backoff.multiplier = 2.0
        elif mine.client_type in CONSUMERS:
            out.subscription.CopyFrom(mine.subscription)
            out.subscription.receive_batch_size = RECEIVE_BATCH
            if not mine.subscription.HasField("long_polling_timeout"):
                out.subscription.long_polling_timeout.seconds = LONG_POLLING
            out.subscription.fifo = await self.fifo_of(mine.subscription, account)
            policy = out.backoff_policy
            retry_max_times = await self.retry_max_times_of(mine.subscription, account)
            policy.max_attempts = consumer_attempts(retry_max_times)
            for seconds in RETRY_LEVELS_S:
                policy.customized_backoff.next.add(seconds=seconds)
        else:
            raise Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Settings of an unknown client type {mine.client_type}",
            )
        return out

    async def serve(self, context: Any, client_id: str, account: str | None) -> None:
        """One Telemetry stream, from its first Settings to its end."""
        first = None
        with anyio.move_on_after(self.settings_timeout):
            first = await context.read()
        if first is None:
            raise Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"no Settings on this Telemetry stream within {self.settings_timeout:g} s: "
                "the stream is closed",
            )
        if first is grpc.aio.EOF:
            return
        session = Session(client_id, account, context)
        try:
            command = _parse(first)
            if not command.HasField("settings"):
                raise Abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "the first command of a Telemetry stream must be Settings",
                )
            while True:
                await self._handle(session, command)
                raw = await context.read()
                if raw is grpc.aio.EOF:
                    return
                command = _parse(raw)
        finally:
            if self.by_client.get(client_id) is session:
                self.forget(client_id)

    async def _handle(self, session: Session, command: Any) -> None:
        which = command.WhichOneof("command")
        if which == "settings":
            answer = await self.server_settings(command.settings, session.account)
            session.settings = command.settings
            self.by_client[session.client_id] = session
            await session.write(spb.TelemetryCommand(status=status(Code.OK), settings=answer))
        elif which == "print_thread_stack_trace_command":
            nonce = command.print_thread_stack_trace_command.nonce
            trace = spb.ThreadStackTrace(nonce=nonce, thread_stack_trace=_stacks())
            await session.write(
                spb.TelemetryCommand(status=status(Code.OK), thread_stack_trace=trace)
            )
        elif which == "thread_stack_trace":
            answer = command.thread_stack_trace
            waiting = self._stacks_asked.get(answer.nonce)
            if waiting is None:
                log.info("telemetry of %s: thread stacks nobody waits for", session.client_id)
            elif command.status.code not in (Code.OK, 0):
                waiting.give(None)
            else:
                waiting.give(answer.thread_stack_trace)
        elif which == "verify_message_result":
            log.info("telemetry of %s: an answer (%s) to nothing asked", session.client_id, which)
        else:
            await session.write(
                spb.TelemetryCommand(
                    status=status(
                        Code.BAD_REQUEST, f"a Telemetry command the proxy does not take: {which}"
                    )
                )
            )

    async def thread_stacks(self, client_id: str, timeout: float) -> str | None:
        """The client's thread stacks (PrintThreadStackTraceCommand over its Telemetry stream);
        None when it has no stream or does not answer within `timeout` seconds."""
        session = self.by_client.get(client_id)
        if session is None:
            return None
        nonce = uuid.uuid4().hex
        waiting = self._stacks_asked[nonce] = _Answer()
        try:
            command = spb.TelemetryCommand(
                print_thread_stack_trace_command=spb.PrintThreadStackTraceCommand(nonce=nonce)
            )
            await session.write(command)
            with anyio.move_on_after(timeout):
                await waiting.done.wait()
            return waiting.text
        except Exception as exc:  # the stream went away
            log.info("thread stacks of %s not asked: %r", client_id, exc)
            return None
        finally:
            del self._stacks_asked[nonce]

    async def forward_check(self, check: Check) -> None:
        """A broker's transaction check, to one producer of that topic (of the same account)."""
        account = check.side.instance.config.credentials
        key = account.access_key if account is not None else None
        producers = [
            s
            for s in list(self.by_client.values())
            if s.client_type == pb.ClientType.PRODUCER
            and s.account == key
            and s.publishes(check.topic)
        ]
        if not producers:
            log.info(
                "transaction check for %s: no 5.x producer of that topic is connected", check.topic
            )
            return
        self._turn += 1
        session = producers[self._turn % len(producers)]
        command = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=to_v5(check.stored, check.topic), transaction_id=check.transaction_id.text()
            )
        )
        try:
            await session.write(command)
        except Exception as exc:  # the stream went away: the broker checks again later
            log.info(
                "transaction check for %s not delivered to %s: %r",
                check.topic,
                session.client_id,
                exc,
            )


@dataclass(eq=False)
class _Answer:
    """A client's answer the proxy waits for."""

    text: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    def give(self, text: str | None) -> None:
        self.text = text
        self.done.set()


def _parse(raw: bytes) -> Any:
    return parse(spb.TelemetryCommand, raw)
