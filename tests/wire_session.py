"""Raw requests to one broker as a RocketMQ 4.x client sends them, and a broker.conf of short delays."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import trio

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.message import StoredMessage, decode_all, encode_properties
from tests.process_fixtures import ServedBroker
from tests.waiting import poll_until

T = TypeVar("T")
CLIENT_ID = "10.0.0.7@4242"


@dataclass
class Session:
    """Raw requests to one broker, as a RocketMQ 4.x client sends them."""

    client: RemotingClient
    addr: str
    namesrv: str

    async def call(
        self,
        code: int,
        fields: dict | None = None,
        body: bytes = b"",
        timeout: float = 5.0,
        addr: str | None = None,
    ) -> RemotingCommand:
        return await self.client.invoke(
            addr or self.addr, request(code, fields or {}, body), timeout
        )

    async def ok(
        self, code: int, fields: dict | None = None, body: bytes = b"", **kw
    ) -> RemotingCommand:
        response = await self.call(code, fields, body, **kw)
        assert response.code == ResponseCode.SUCCESS, (code, response.code, response.remark)
        return response

    async def create_topic(self, topic: str, queues: int = 1) -> None:
        await self.ok(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            },
        )

    async def heartbeat(self, group: str, topics: list[str]) -> None:
        subs = [{"topic": t, "subString": "*", "subVersion": 1} for t in topics]
        body = {
            "clientID": CLIENT_ID,
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": subs,
                }
            ],
        }
        await self.ok(RequestCode.HEART_BEAT, {}, fastjson.dumps(body).encode())

    async def send(self, topic: str, body: bytes, props: dict[str, str]) -> RemotingCommand:
        return await self.ok(RequestCode.SEND_MESSAGE_V2, send_fields(topic, props), body)

    async def pull(
        self, topic: str, offset: int, *, group: str = "G", hold_ms: int = 0
    ) -> list[StoredMessage]:
        """PULL_MESSAGE on queue 0; with hold_ms the broker holds it until a message arrives (B-63)."""
        response = await self.call(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": group,
                "topic": topic,
                "queueId": 0,
                "queueOffset": offset,
                "maxMsgNums": 32,
                "sysFlag": 6 if hold_ms else 4,
                "commitOffset": 0,
                "suspendTimeoutMillis": hold_ms,
                "subscription": "*",
                "subVersion": 0,
            },
            timeout=hold_ms / 1000 + 10,
        )
        assert response.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), response.remark
        return decode_all(response.body) if response.code == ResponseCode.SUCCESS else []

    async def send_back(
        self, message: StoredMessage, original_topic: str, max_times: int = 16
    ) -> None:
        """CONSUMER_SEND_MSG_BACK as the concurrent consume service sends it (B-88)."""
        await self.ok(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": message.physical_offset,
                "group": "G",
                "delayLevel": 0,
                "originMsgId": message.msg_id,
                "originTopic": original_topic,
                "unitMode": False,
                "maxReconsumeTimes": max_times,
            },
        )

    async def commit(self, topic: str, offset: int) -> None:
        await self.ok(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "G", "topic": topic, "queueId": 0, "commitOffset": offset},
        )

    async def wait_for_route(self, topic: str) -> None:
        """Bounded wait until the name server lists topic (the broker re-registers after creating it)."""

        async def routed() -> bool:
            r = await self.call(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, addr=self.namesrv
            )
            return r.code == ResponseCode.SUCCESS

        await poll_until(routed, 10, f"{topic} in the name server")


def on_wire(served: ServedBroker, scenario: Callable[[Session], Awaitable[T]]) -> T:
    async def main() -> T:
        async with trio.open_nursery() as nursery:
            session = Session(RemotingClient(nursery), served.broker, served.namesrv)
            try:
                return await scenario(session)
            finally:
                nursery.cancel_scope.cancel()

    return trio.run(main)


def conf(tmp_path: Path, levels: str) -> str:
    path = tmp_path / "broker.conf"
    path.write_text(f"# short delays for tests\nmessageDelayLevel={levels}\n", encoding="utf-8")
    return str(path)


def send_fields(topic: str, props: dict[str, str]) -> dict[str, object]:
    """SEND_MESSAGE_V2's header for one message of producer group PG to `topic`, 4 queues."""
    return {
        "a": "PG",
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": 0,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": encode_properties(props).decode(),
        "j": 0,
        "k": False,
        "m": False,
    }
