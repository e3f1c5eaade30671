"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue.

These ride on the brokers' pop consumption (POP_MESSAGE, ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME), which the brokers do not serve yet: each ends
with UNIMPLEMENTED and says so rather than pretending.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from es_broker.proxy.cluster import Side
from es_broker.proxy.status import Abort

WHY = "{} is not served yet: it needs the brokers' pop consumption (POP_MESSAGE)"


async def receive(side: Side, request: Any, context: Any) -> AsyncIterator[Any]:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, WHY.format("ReceiveMessage"))
    yield None


async def ack_message(side: Side, request: Any) -> Any:
    raise Abort(grpc.StatusCode.UNIMPLEMENTED, WHY.format("AckMessage"))


async def change_invisible_duration(side: Side, request: Any) -> Any:
    raise Abort(grpc.StatusCode.UNIMPLEMENTED, WHY.format("ChangeInvisibleDuration"))


async def forward_to_dlq(side: Side, request: Any) -> Any:
    raise Abort(grpc.StatusCode.UNIMPLEMENTED, WHY.format("ForwardMessageToDeadLetterQueue"))
