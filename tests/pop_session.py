"""RocketMQ 5's pop requests as its proxy sends them to a broker (POP_MESSAGE, ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME), over a raw remoting session (tests/wire_session.py)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from es_broker.remoting import fastjson
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand
from es_broker.remoting.message import StoredMessage, decode_all, encode_properties
from tests.wire_session import Session


@dataclass
class Popped:
    response: RemotingCommand
    messages: list[StoredMessage]

    @property
    def offsets(self) -> list[int]:
        return [m.queue_offset for m in self.messages]

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


async def pop(
    s: Session,
    group: str,
    topic: str,
    *,
    queue_id: int = -1,
    max_nums: int = 32,
    invisible_ms: int = 60_000,
    poll_ms: int = 0,
    order: bool = False,
    exp: str | None = None,
    for_client: str | None = None,
) -> Popped:
    fields = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "maxMsgNums": max_nums,
        "invisibleTime": invisible_ms,
        "pollTime": poll_ms,
        "bornTime": 0,
        "initMode": 0,
        "order": order,
    }
    if exp is not None:
        fields.update(exp=exp, expType="TAG")
    if for_client is not None:
        fields["forClient"] = for_client
    r = await s.call(RequestCode.POP_MESSAGE, fields, timeout=poll_ms / 1000 + 15)
    assert r.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), (r.code, r.remark)
    return Popped(r, decode_all(r.body) if r.code == ResponseCode.SUCCESS else [])


def handle(message: StoredMessage) -> str:
    return message.properties["POP_CK"]


async def ack(
    s: Session,
    group: str,
    message: StoredMessage,
    extra_info: str | None = None,
    for_client: str | None = None,
) -> RemotingCommand:
    fields = {
        "consumerGroup": group,
        "topic": message.topic,
        "queueId": message.queue_id,
        "extraInfo": extra_info if extra_info is not None else handle(message),
        "offset": message.queue_offset,
    }
    if for_client is not None:
        fields["forClient"] = for_client
    return await s.call(RequestCode.ACK_MESSAGE, fields)


async def change(
    s: Session, group: str, message: StoredMessage, invisible_ms: int, extra_info: str | None = None
) -> RemotingCommand:
    return await s.call(
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        {
            "consumerGroup": group,
            "topic": message.topic,
            "queueId": message.queue_id,
            "extraInfo": extra_info if extra_info is not None else handle(message),
            "offset": message.queue_offset,
            "invisibleTime": invisible_ms,
        },
    )


async def committed(s: Session, group: str, topic: str, queue_id: int = 0) -> int:
    """The group's offset in the 4.x offset table (QUERY_CONSUMER_OFFSET), -1 when none."""
    r = await s.call(
        RequestCode.QUERY_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": queue_id},
    )
    return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else -1


async def journey(s: Session, msg_id: str) -> dict:
    r = await s.ok(EsRequestCode.MESSAGE_TRACE, {"msgId": msg_id})
    return json.loads(r.body)


async def last_seq(s: Session) -> int:
    """The broker's last record (GET_BROKER_RUNTIME_INFO's recordLogLastSeq)."""
    r = await s.ok(RequestCode.GET_BROKER_RUNTIME_INFO)
    return int(fastjson.loads(r.body)["table"]["recordLogLastSeq"])


async def send(
    s: Session, topic: str, body: bytes, *, queue_id: int = 0, props: dict[str, str] | None = None
) -> RemotingCommand:
    """SEND_MESSAGE_V2 of one message to one queue."""
    return await s.ok(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "PG",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": queue_id,
            "f": 0,
            "g": int(time.time() * 1000),
            "h": 0,
            "i": encode_properties(props or {"TAGS": "a"}).decode(),
            "j": 0,
            "k": False,
            "m": False,
        },
        body,
    )
