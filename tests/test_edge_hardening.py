"""The fuzzer's last findings, replayed against a broker process (B-500, B-501).

A send to a retry or dead-letter topic with no group after its prefix is an
invalid topic, refused before anything is stored (B-500); a JSON body nested
deeper than the parser's bound is refused with a remark, and the HA codes that
write records are accepted only from a node of the broker group (B-501).
"""

from __future__ import annotations

import json

import msgpack

from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from tests.test_edge_regressions import live

REPORT = {
    "node": "n2",
    "epoch": 3,
    "common_seq": 10,
    "first_seq": 11,
    "last_seq": 12,
    "messages": 1,
    "msg_ids": ["AC11000100002A9F0000000000000000"],
    "export": "/tmp/x",
    "reason": "forged",
}


def _send(topic: str, queue: int = 0) -> dict[str, object]:
    return {
        "producerGroup": "pg",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue,
        "sysFlag": 0,
        "bornTimestamp": 1,
        "flag": 0,
        "properties": "",
    }


async def test_a_send_to_a_retry_or_dlq_prefix_without_a_group_is_an_invalid_topic(tmp_path):
    """B-500: `%RETRY%` and `%DLQ%` alone name no group's topic; refused at the edge, nothing stored."""
    async with live(tmp_path) as broker:
        for topic in ("%RETRY%", "%DLQ%"):
            for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE):
                answer = await broker.call(code, _send(topic), b"body")
                assert answer.code == ResponseCode.SYSTEM_ERROR, (topic, code, answer)
                assert "names no group" in (answer.remark or ""), answer.remark
            answer = await broker.call(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
            )
            assert answer.code == ResponseCode.SYSTEM_ERROR, answer
            assert "names no group" in (answer.remark or "")
        # the store still takes writes (no spoiled batch)
        ok = await broker.call(RequestCode.SEND_MESSAGE, _send("EdgeTopic"), b"after")
        assert ok.code == ResponseCode.SUCCESS, ok.remark


async def test_a_deeply_nested_json_body_is_refused_with_a_remark(tmp_path):
    """B-501: a set-aside report nested thousands deep is refused, no RecursionError."""
    async with live(tmp_path) as broker:
        for body in (b"[" * 5000 + b"]" * 5000, b'{"node":' * 3000 + b"1" + b"}" * 3000):
            answer = await broker.call(EsRequestCode.HA_REPORT_SET_ASIDE, body=body)
            assert answer.code in (ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION)
            assert answer.remark
        # a fastjson body of a served code nested too deep: refused by the body check
        deep = b'{"clientID":"c","producerDataSet":' + b"[" * 3000 + b"]" * 3000 + b"}"
        answer = await broker.call(RequestCode.HEART_BEAT, body=deep)
        assert answer.code == ResponseCode.SYSTEM_ERROR, answer
        assert "nest" in (answer.remark or ""), answer.remark


async def test_a_set_aside_report_from_a_node_outside_the_group_is_refused(tmp_path):
    """B-501: with ACL off, a forged report from a peer that is no node of the group records nothing."""
    async with live(tmp_path) as broker:
        before = await broker.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        answer = await broker.call(
            EsRequestCode.HA_REPORT_SET_ASIDE, body=json.dumps(REPORT).encode()
        )
        assert answer.code == ResponseCode.NO_PERMISSION, answer
        assert "node of broker group" in (answer.remark or ""), answer.remark
        merge = await broker.call(
            EsRequestCode.HA_MERGE_SLAVE_OFFSETS,
            {"slaveId": 1, "slaveAddr": "127.0.0.1:1", "journalUpto": 1},
            msgpack.packb({"commits": [], "deliveries": []}),
        )
        assert merge.code == ResponseCode.NO_PERMISSION, merge
        after = await broker.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        assert before.code == after.code == ResponseCode.SUCCESS
        assert "seq" not in answer.ext_fields  # no record was appended
