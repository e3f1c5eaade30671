"""Each bad-input finding of the robust-edge review, replayed against a broker process.

Every case must be answered with RocketMQ's code and a remark naming the
field, leave the broker serving (a fresh connection is answered), print no
traceback, and leave a data directory that a restart serves (B-135..B-138).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from tests.helpers import cli_ok
from tests.process_fixtures import ServedBroker, serve

TOPIC = "EdgeTopic"
GROUP = "edge_group"


class Live:
    """A broker process and a client for it."""

    def __init__(self, served: ServedBroker, client: RemotingClient, log_file: Path) -> None:
        self.served = served
        self.client = client
        self.log_file = log_file

    async def call(
        self, code: int, fields: dict | None = None, body: bytes = b""
    ) -> RemotingCommand:
        return await self.client.invoke(
            self.served.broker, request(code, fields or {}, body), timeout=10.0
        )

    async def assert_serving(self) -> None:
        """A fresh connection is answered: the process is alive and its listener works."""
        async with trio.open_nursery() as nursery:
            fresh = RemotingClient(nursery)
            answer = await fresh.invoke(
                self.served.broker, request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout=10
            )
            assert answer.code == ResponseCode.SUCCESS
            nursery.cancel_scope.cancel()
        assert self.served.process.poll() is None

    def tracebacks(self) -> list[str]:
        text = self.log_file.read_text()
        return [block for block in text.split("Traceback")[1:]]


@asynccontextmanager
async def live(tmp_path: Path) -> AsyncIterator[Live]:
    """A broker process with a topic of two queues and a group at offset 5 on both; restarted at the end."""
    data, log_file = tmp_path / "data", tmp_path / "broker.log"
    async with trio.open_nursery() as nursery:
        with serve(data, log_file=log_file) as served:
            broker = Live(served, RemotingClient(nursery), log_file)
            answer = await broker.call(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
            )
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            for queue in (0, 1):
                answer = await broker.call(
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue, "commitOffset": 5},
                )
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            yield broker
            await broker.assert_serving()
            assert broker.tracebacks() == []
        # the same data directory serves after a restart
        restart_log = tmp_path / "broker-restart.log"
        with serve(data, log_file=restart_log) as again:
            restarted = Live(again, RemotingClient(nursery), restart_log)
            await restarted.assert_serving()
            answer = await restarted.call(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0},
            )
            assert answer.code == ResponseCode.SUCCESS
        assert restarted.tracebacks() == []
        nursery.cancel_scope.cancel()


def heartbeat(consumer: dict) -> bytes:
    data = {
        "clientID": "127.0.0.1@edge",
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": GROUP,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [],
                "unitMode": False,
                **consumer,
            }
        ],
    }
    return json.dumps(data).encode()


async def test_heartbeat_with_consume_from_where_beyond_a_long_is_refused_and_the_broker_lives(
    tmp_path,
):
    async with live(tmp_path) as broker:
        answer = await broker.call(
            RequestCode.HEART_BEAT,
            body=heartbeat({"consumeFromWhere": 100000000000000000000000000000}),
        )
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "consumeFromWhere" in answer.remark
        assert "\n" not in answer.remark


async def test_heartbeat_with_an_unknown_consume_from_where_names_the_field(tmp_path):
    async with live(tmp_path) as broker:
        answer = await broker.call(
            RequestCode.HEART_BEAT, body=heartbeat({"consumeFromWhere": "NOWHERE"})
        )
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "consumerDataSet[0].consumeFromWhere" in answer.remark
        fine = await broker.call(RequestCode.HEART_BEAT, body=heartbeat({"consumeFromWhere": 4}))
        assert fine.code == ResponseCode.SUCCESS, fine.remark  # an ordinal, as fastjson reads enums


async def test_reset_by_a_shift_of_long_max_saturates_and_the_log_stays_replayable(tmp_path):
    async with live(tmp_path) as broker:
        answer = await broker.call(
            EsRequestCode.RESET_OFFSET,
            {
                "topic": TOPIC,
                "group": GROUP,
                "kind": "shift",
                "value": (1 << 63) - 1,
                "isForce": True,
                "mode": "server_side",
            },
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        queues = {q["queueId"]: q for q in json.loads(answer.body)["queues"]}
        assert queues[0]["target"] == (1 << 63) - 1
    await cli_ok("verify", "--data-dir", str(tmp_path / "data"))


async def test_negative_queue_id_is_refused_at_the_edge(tmp_path):
    async with live(tmp_path) as broker:
        for code, fields in [
            (RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": -1}),
            (
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -7},
            ),
            (
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -1, "commitOffset": 1},
            ),
            (
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": GROUP,
                    "topic": TOPIC,
                    "queueId": -2147483648,
                    "queueOffset": 0,
                    "maxMsgNums": 32,
                    "sysFlag": 0,
                    "commitOffset": 0,
                },
            ),
        ]:
            answer = await broker.call(code, fields)
            assert answer.code == ResponseCode.SYSTEM_ERROR, (code, answer)
            assert "'queueId' must be >= 0" in answer.remark


async def test_view_message_by_id_with_an_offset_out_of_range_names_the_field(tmp_path):
    async with live(tmp_path) as broker:
        for offset in (-1, "99999999999999999999", "0x10"):
            answer = await broker.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert "'offset'" in answer.remark
        answer = await broker.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": (1 << 63) - 1})
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "can not find message" in answer.remark


async def test_check_client_config_with_a_non_object_subscription_is_refused(tmp_path):
    async with live(tmp_path) as broker:
        for sub in (7, "x", [1, 2]):
            body = json.dumps({"clientId": "c", "group": GROUP, "subscriptionData": sub}).encode()
            answer = await broker.call(RequestCode.CHECK_CLIENT_CONFIG, body=body)
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert "subscriptionData" in answer.remark


async def test_consume_message_directly_with_a_msg_id_that_is_no_offset_id_is_refused(tmp_path):
    async with live(tmp_path) as broker:
        ok = await broker.call(RequestCode.HEART_BEAT, body=heartbeat({}))
        assert ok.code == ResponseCode.SUCCESS
        for msg_id in ("broker-a", "G" * 32, "F" * 31):
            answer = await broker.call(
                RequestCode.CONSUME_MESSAGE_DIRECTLY,
                {"consumerGroup": GROUP, "clientId": "127.0.0.1@edge", "msgId": msg_id},
            )
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert "'msgId' is not an offset message id" in answer.remark
