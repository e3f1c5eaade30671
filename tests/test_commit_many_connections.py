"""Many connections with one request each share a group commit (B-672).

A read loop that started several requests in one read pass (a pipelined
connection) commits their writes itself before it waits again; one that
started a single request leaves it to the writer task, which runs after every
other connection read in the same scheduler pass. So sixteen connections that
each send one message at the same moment are stored by one or a few
transactions, not sixteen, and each is answered once its transaction is
committed.
"""

from __future__ import annotations

import os

import trio

from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode
from tests.server_fixtures import running  # noqa: F401  (the fixture)
from tests.test_ordered_sends import TOPIC, RawConnection, _single

CONNECTIONS = 16


async def _commits(running) -> tuple[int, int]:  # noqa: F811
    answer = await running.call(RequestCode.GET_BROKER_RUNTIME_INFO)
    table = fastjson.loads(answer.body)["table"]
    return int(table["groupCommitBatches"]), int(table["groupCommitJobs"])


async def test_b672_one_send_on_each_of_sixteen_connections_is_stored_by_one_shared_commit(
    running,  # noqa: F811
):
    await running.create_topic(TOPIC)
    host, port = running.addr.rsplit(":", 1)
    connections = [
        RawConnection(await trio.open_tcp_stream(host, int(port))) for _ in range(CONNECTIONS)
    ]
    frames = [raw.conn.send(_with_opaque(_single(n), 7)) for n, raw in enumerate(connections)]
    batches0, jobs0 = await _commits(running)
    for raw, frame in zip(connections, frames, strict=True):
        # every frame written before the broker runs: its read loops all wake in one pass
        assert os.write(raw.stream.socket.fileno(), frame) == len(frame)
    async with trio.open_nursery() as nursery:
        for raw in connections:
            nursery.start_soon(raw.read_until, {7})
    assert all(raw.answers[7].code == 0 for raw in connections)
    batches, jobs = await _commits(running)
    assert jobs - jobs0 == CONNECTIONS
    assert batches - batches0 < CONNECTIONS // 4, (
        f"{jobs - jobs0} sends took {batches - batches0} group commits"
    )
    for raw in connections:
        await raw.stream.aclose()


def _with_opaque(frame: tuple[int, dict, bytes], opaque: int):
    from dataclasses import replace

    from es_broker.remoting.command import request

    code, fields, body = frame
    return replace(request(code, fields, body), opaque=opaque)
