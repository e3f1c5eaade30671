"""apache.rocketmq.v2.MessagingService on grpc.aio: every RPC, served or refused by name.

Each handler takes the request's raw bytes and parses them itself, so a
malformed request ends with INVALID_ARGUMENT and a message that says so
rather than grpc's bare deserialization failure. A call is authenticated
first (auth.py), then handled on the `Side` of its account (cluster.py).
A refusal the 5.x protocol has a code for is answered in the response's
status (status.py); an RPC the proxy does not serve ends with UNIMPLEMENTED
and says why (docs/protocol.md §15).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from es_broker.acl.plain import Account
from es_broker.client.send_tries import BrokerRefused, ClientError
from es_broker.net.remoting_client import RemotingError
from es_broker.proxy import receiving, sending
from es_broker.proxy.auth import Authenticator
from es_broker.proxy.cluster import Cluster, Side
from es_broker.proxy.registry import Registry
from es_broker.proxy.renewal import Renewals
from es_broker.proxy.sessions import Sessions
from es_broker.proxy.status import Abort, Code, Refused, parse, status, translate
from es_broker.remoting.bodies import TopicRouteData

log = logging.getLogger(__name__)

SERVICE = "apache.rocketmq.v2.MessagingService"
READ, WRITE = 4, 2  # PermName
ALL_TYPES = (
    pb.MessageType.NORMAL,
    pb.MessageType.FIFO,
    pb.MessageType.DELAY,
    pb.MessageType.TRANSACTION,
)
TYPES = {
    "NORMAL": (pb.MessageType.NORMAL,),
    "FIFO": (pb.MessageType.FIFO,),
    "DELAY": (pb.MessageType.DELAY,),
    "TRANSACTION": (pb.MessageType.TRANSACTION,),
}
NOT_SERVED = {
    "PullMessage": "PullMessage (5.x's offset-based pull) is not served: use ReceiveMessage, "
    "or a 4.x client's pull",
    "UpdateOffset": "UpdateOffset is not served: it belongs to 5.x's offset-based pull, which the "
    "proxy does not serve",
    "GetOffset": "GetOffset is not served: it belongs to 5.x's offset-based pull, which the proxy "
    "does not serve",
    "QueryOffset": "QueryOffset is not served: it belongs to 5.x's offset-based pull, which the "
    "proxy does not serve",
    "RecallMessage": "RecallMessage is not served: the brokers keep no recall handles of delayed "
    "messages",
    "SyncLiteSubscription": "SyncLiteSubscription is not served: lite topics are not served",
}


@dataclass(frozen=True, slots=True)
class Call:
    """Who made a call and the side of the cluster it is served on."""

    client_id: str
    account: Account | None
    side: Side
    language: str = "OTHER"  # x-mq-language


class MessagingService:
    """The servicer: `handler()` is what the grpc.aio server is given."""

    def __init__(
        self,
        cluster: Cluster,
        auth: Authenticator,
        sessions: Sessions,
        endpoint: tuple[str, int],
        renewals: Renewals,
        registry: Registry,
    ) -> None:
        self.cluster = cluster
        self.registry = registry
        self.auth = auth
        self.sessions = sessions
        self.endpoint = endpoint
        self.renewals = renewals

    # ------------------------------------------------------------------ plumbing
    async def call_of(self, context: Any) -> Call:
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        account = self.auth.account(metadata)
        client_id = metadata.get("x-mq-client-id", "")
        language = metadata.get("x-mq-language", "OTHER")
        return Call(client_id, account, await self.cluster.side(account), language)

    def _unary(
        self, name: str, request_type: Any, response_type: Any, fn: Callable[..., Awaitable[Any]]
    ) -> Any:
        async def behaviour(raw: bytes, context: Any) -> Any:
            try:
                request = parse(request_type, raw)
                call = await self.call_of(context)
                try:
                    return await fn(request, call)
                except (BrokerRefused, ClientError, RemotingError) as exc:
                    raise translate(exc, name) from None
            except Refused as refused:
                return response_type(status=status(refused.code, refused.message))
            except Abort as abort:
                failure = abort
            except Exception as exc:  # a defect of the proxy: said, logged, the proxy goes on
                log.exception("%s failed", name)
                failure = Abort(grpc.StatusCode.INTERNAL, f"{name}: the proxy failed: {exc!r}")
            await context.abort(failure.code, failure.message)

        return grpc.unary_unary_rpc_method_handler(
            behaviour, response_serializer=response_type.SerializeToString
        )

    def _refused(self, name: str, kind: Callable[..., Any]) -> Any:
        why = NOT_SERVED[name]

        async def behaviour(raw: Any, context: Any) -> None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, why)

        return kind(behaviour)

    def handler(self) -> Any:
        rs, U = spb, self._unary
        handlers = {
            "QueryRoute": U(
                "QueryRoute", rs.QueryRouteRequest, rs.QueryRouteResponse, self.query_route
            ),
            "Heartbeat": U("Heartbeat", rs.HeartbeatRequest, rs.HeartbeatResponse, self.heartbeat),
            "SendMessage": U(
                "SendMessage",
                rs.SendMessageRequest,
                rs.SendMessageResponse,
                lambda r, c: sending.send_message(c.side, r),
            ),
            "QueryAssignment": U(
                "QueryAssignment",
                rs.QueryAssignmentRequest,
                rs.QueryAssignmentResponse,
                self.query_assignment,
            ),
            "EndTransaction": U(
                "EndTransaction",
                rs.EndTransactionRequest,
                rs.EndTransactionResponse,
                lambda r, c: sending.end_transaction(c.side, r),
            ),
            "NotifyClientTermination": U(
                "NotifyClientTermination",
                rs.NotifyClientTerminationRequest,
                rs.NotifyClientTerminationResponse,
                self.notify_client_termination,
            ),
            "AckMessage": U(
                "AckMessage",
                rs.AckMessageRequest,
                rs.AckMessageResponse,
                lambda r, c: receiving.ack_message(c.side, r, self.renewals, c.client_id),
            ),
            "ChangeInvisibleDuration": U(
                "ChangeInvisibleDuration",
                rs.ChangeInvisibleDurationRequest,
                rs.ChangeInvisibleDurationResponse,
                lambda r, c: receiving.change_invisible_duration(
                    c.side, r, self.renewals, c.client_id
                ),
            ),
            "ForwardMessageToDeadLetterQueue": U(
                "ForwardMessageToDeadLetterQueue",
                rs.ForwardMessageToDeadLetterQueueRequest,
                rs.ForwardMessageToDeadLetterQueueResponse,
                lambda r, c: receiving.forward_to_dlq(c.side, r, self.renewals, c.client_id),
            ),
            "ReceiveMessage": grpc.unary_stream_rpc_method_handler(
                self.receive_message,
                response_serializer=rs.ReceiveMessageResponse.SerializeToString,
            ),
            "Telemetry": grpc.stream_stream_rpc_method_handler(
                self.telemetry, response_serializer=rs.TelemetryCommand.SerializeToString
            ),
            "PullMessage": self._refused("PullMessage", grpc.unary_stream_rpc_method_handler),
            "RecallMessage": self._refused("RecallMessage", grpc.unary_unary_rpc_method_handler),
            "SyncLiteSubscription": self._refused(
                "SyncLiteSubscription", grpc.unary_unary_rpc_method_handler
            ),
        }
        for name in ("UpdateOffset", "GetOffset", "QueryOffset"):
            handlers[name] = self._refused(name, grpc.unary_unary_rpc_method_handler)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    # ------------------------------------------------------------------ routes
    def _endpoints(self, given: Any) -> Any:
        if given is not None and given.addresses:
            return given
        out = pb.Endpoints(scheme=pb.AddressScheme.IPv4)
        out.addresses.add(host=self.endpoint[0], port=self.endpoint[1])
        return out

    async def _route(self, side: Side, topic: Any) -> tuple[TopicRouteData, tuple[int, ...]]:
        if not topic.name:
            raise Refused(Code.ILLEGAL_TOPIC, "no topic named")
        route = await side.route(topic.name)
        if route is None or not route.queue_datas:
            raise Refused(Code.TOPIC_NOT_FOUND, f"the topic {topic.name} does not exist")
        kind = await side.message_type(topic.name, route)
        return route, TYPES.get(kind or "", ALL_TYPES)

    def _queue(
        self, topic: Any, qid: int, perm: int, broker: str, endpoints: Any, types: Any
    ) -> Any:
        queue = pb.MessageQueue(id=qid, permission=perm, accept_message_types=types)
        queue.topic.CopyFrom(topic)
        queue.broker.name = broker
        queue.broker.id = 0
        queue.broker.endpoints.CopyFrom(endpoints)
        return queue

    async def query_route(self, request: Any, call: Call) -> Any:
        """The topic's queues on each broker with a master, all reached through this proxy."""
        route, types = await self._route(call.side, request.topic)
        endpoints = self._endpoints(request.endpoints if request.HasField("endpoints") else None)
        masters = {b.broker_name for b in route.broker_datas if 0 in b.broker_addrs}
        queues = []
        for data in sorted(route.queue_datas, key=lambda d: d.broker_name):
            if data.broker_name not in masters:
                continue
            readable, writable = bool(data.perm & READ), bool(data.perm & WRITE)
            both = min(data.read_queue_nums, data.write_queue_nums) if readable and writable else 0
            reads = data.read_queue_nums - both if readable else 0
            writes = data.write_queue_nums - both if writable else 0
            perms = [pb.Permission.READ_WRITE] * both + [pb.Permission.READ] * reads
            perms += [pb.Permission.WRITE] * writes
            for qid, perm in enumerate(perms):
                queues.append(
                    self._queue(request.topic, qid, perm, data.broker_name, endpoints, types)
                )
        return spb.QueryRouteResponse(status=status(Code.OK), message_queues=queues)

    async def query_assignment(self, request: Any, call: Call) -> Any:
        """One assignment per readable broker (queue id -1: the broker pops from every queue)."""
        if not request.group.name:
            raise Refused(Code.ILLEGAL_CONSUMER_GROUP, "QueryAssignment names no group")
        route, types = await self._route(call.side, request.topic)
        endpoints = self._endpoints(request.endpoints if request.HasField("endpoints") else None)
        masters = {b.broker_name for b in route.broker_datas if 0 in b.broker_addrs}
        assignments = [
            pb.Assignment(
                message_queue=self._queue(
                    request.topic, -1, pb.Permission.READ_WRITE, d.broker_name, endpoints, types
                )
            )
            for d in sorted(route.queue_datas, key=lambda d: d.broker_name)
            if d.broker_name in masters and d.perm & READ and d.read_queue_nums > 0
        ]
        return spb.QueryAssignmentResponse(status=status(Code.OK), assignments=assignments)

    # ------------------------------------------------------------------ clients
    async def heartbeat(self, request: Any, call: Call) -> Any:
        if not call.client_id:
            raise Refused(Code.CLIENT_ID_REQUIRED, "the call carries no x-mq-client-id")
        if request.client_type not in pb.ClientType.values() or request.client_type == 0:
            raise Refused(
                Code.UNRECOGNIZED_CLIENT_TYPE, f"the client type {request.client_type} is unknown"
            )
        if request.client_type != pb.ClientType.PRODUCER and not request.group.name:
            raise Refused(Code.ILLEGAL_CONSUMER_GROUP, "a consumer's heartbeat names no group")
        await self.registry.heartbeat(
            call.client_id, call.account, request.group.name, call.language
        )
        return spb.HeartbeatResponse(status=status(Code.OK))

    async def notify_client_termination(self, request: Any, call: Call) -> Any:
        if call.client_id:
            self.sessions.forget(call.client_id)
            self.renewals.forget_client(call.client_id)
            await self.registry.forget(call.client_id)
        return spb.NotifyClientTerminationResponse(status=status(Code.OK))

    # ------------------------------------------------------------------ streams
    async def receive_message(self, raw: bytes, context: Any) -> AsyncIterator[Any]:
        try:
            request = parse(spb.ReceiveMessageRequest, raw)
            call = await self.call_of(context)
        except Abort as abort:
            await context.abort(abort.code, abort.message)
            return
        try:
            async for response in receiving.receive(
                call.side, request, context, self.renewals, call.client_id
            ):
                yield response
            return
        except Exception as exc:  # a defect of the proxy: said, logged, the proxy goes on
            log.exception("ReceiveMessage failed")
            failure = Abort(grpc.StatusCode.INTERNAL, f"ReceiveMessage: the proxy failed: {exc!r}")
        await context.abort(failure.code, failure.message)

    async def telemetry(self, requests: Any, context: Any) -> None:
        try:
            call = await self.call_of(context)
            if not call.client_id:
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT, "the stream carries no x-mq-client-id"
                )
            key = call.account.access_key if call.account is not None else None
            await self.sessions.serve(context, call.client_id, key)
            return
        except Abort as abort:
            failure = abort
        except Exception as exc:  # a defect of the proxy: said, logged, the proxy goes on
            log.exception("Telemetry failed")
            failure = Abort(grpc.StatusCode.INTERNAL, f"Telemetry: the proxy failed: {exc!r}")
        await context.abort(failure.code, failure.message)
