"""A connection's answers are written whole, one after the other, each request answered once
(B-310): sends answered from the writer's completion, refusals answered from the read loop and
pull answers of hundreds of KiB from their tasks share one socket, while the peer reads slower than they come.
"""

from __future__ import annotations

import trio

from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.message import decode_all
from tests.process_fixtures import serve
from tests.test_ordered_sends import TOPIC, RawConnection, _pull, _single

BIG = 60 * 1024  # a pull answer carries 4 of them: ~240 KiB, more than a socket takes at once
UNSERVED = 9_999


def _create_topic() -> tuple[int, dict, bytes]:
    fields = {
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "readQueueNums": 2,
        "writeQueueNums": 2,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    return RequestCode.UPDATE_AND_CREATE_TOPIC, fields, b""


def _big(n: int) -> tuple[int, dict, bytes]:
    code, fields, _ = _single(n)
    return code, fields, bytes([n]) * BIG


async def test_b310_answers_of_every_path_are_written_whole_and_once_whatever_their_size(tmp_path):
    with serve(tmp_path / "data") as served:
        host, port = served.broker.rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        raw = RawConnection(stream)
        await raw.write_all([_create_topic()], 1)
        await raw.read_until({1})
        assert raw.answers[1].code == ResponseCode.SUCCESS, raw.answers[1].remark
        await raw.write_all([_big(n) for n in range(16)], 10)
        await raw.read_until(set(range(10, 26)))
        assert all(raw.answers[o].code == ResponseCode.SUCCESS for o in range(10, 26))

        # one write: pulls of ~240 KiB each (a task each), small sends to queue 1 (answered by the
        # writer's completion) and unserved codes (answered by the read loop), interleaved
        frames: list[tuple[int, dict, bytes]] = []
        kinds: list[str] = []
        for i in range(60):
            if i % 10 == 0:
                frames.append(_pull(0, 0, 0))
                kinds.append("pull")
            elif i % 10 == 5:
                frames.append((UNSERVED, {}, b""))
                kinds.append("unserved")
            else:
                code, fields, body = _single(i)
                frames.append((code, {**fields, "e": 1}, body))
                kinds.append("send")
        await raw.write_all(frames, 1_000)
        await raw.read_until({1_000 + i for i in range(len(frames))})
        await stream.aclose()

    assert len(raw.answers) == 1 + 16 + len(frames)  # nothing answered twice or unasked
    for i, kind in enumerate(kinds):
        answer = raw.answers[1_000 + i]
        if kind == "pull":
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            bodies = [m.body for m in decode_all(answer.body)]
            # as many as a pull may carry (maxTransferBytesOnMessageInMemory), from the first
            assert bodies and bodies == [bytes([n]) * BIG for n in range(len(bodies))]
        elif kind == "send":
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert answer.ext_fields["queueId"] == "1"
        else:
            assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
