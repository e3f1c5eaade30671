"""The broker's connections served by edge processes in front of its writer (edge_processes, B-671).

Every test runs `es-broker serve` with two edge processes: the clients'
connections are spread over them by the kernel, and the writer process serves
what each edge relays. A connection's pipelined sends keep their order, a pull
held on one edge wakes on a send through the other, and a kill -9 of an edge
or of the writer loses nothing acknowledged.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import time
from collections import Counter
from pathlib import Path

import trio

from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.message import decode_all
from tests.chaos_load import Ledger, Producer, run_worker
from tests.ha_fixtures import _BROKER, start
from tests.helpers import cli_ok
from tests.process_fixtures import serve
from tests.test_chaos import (
    GROUPS,
    check_offsets,
    check_restarted,
    create_topic,
    run_load,
    serve_args,
    write_conf,
)
from tests.test_ordered_sends import RawConnection, _pull, _single, create_topic_frame
from tests.waiting import poll_until

EDGES = 2
SENDS_PER_CONNECTION = 400


class Connections:
    """Raw connections to the broker, each known by the edge process that relays it."""

    def __init__(self, addr: str) -> None:
        self.host, port = addr.rsplit(":", 1)
        self.port = int(port)
        self.opaque = 1
        self.by_edge: dict[int, list[RawConnection]] = {}

    async def call(self, raw: RawConnection, frame: tuple[int, dict, bytes]):
        opaque = self.opaque
        self.opaque += 1
        await raw.write_all([frame], opaque)
        await raw.read_until({opaque})
        return raw.answers.pop(opaque)

    async def edges(self, raw: RawConnection) -> Counter:
        """The connections each edge process relays (pid -> count), asked on `raw`."""
        answer = await self.call(raw, (RequestCode.GET_BROKER_RUNTIME_INFO, {}, b""))
        table = fastjson.loads(answer.body)["table"]
        assert table["edgeProcesses"] == str(EDGES)
        relayed = Counter()
        for item in filter(None, table["edgeConnections"].split(",")):
            pid, count = item.split(":")
            relayed[int(pid)] = int(count)
        return relayed

    async def open_on_every_edge(self, each: int) -> None:
        """Open connections until every edge relays at least `each` of them (bounded)."""
        seen: Counter = Counter()
        for _ in range(64 * each):
            raw = RawConnection(await trio.open_tcp_stream(self.host, self.port))
            now = await self.edges(raw)  # asked on the new connection: it is counted already
            (pid,) = [p for p in now if now[p] > seen[p]] or [None]
            seen = now
            assert pid is not None, f"no edge relays the new connection: {now}"
            self.by_edge.setdefault(pid, []).append(raw)
            if len(self.by_edge) == EDGES and all(len(c) >= each for c in self.by_edge.values()):
                return
        raise AssertionError(f"the connections did not reach every edge: {seen}")

    async def aclose(self) -> None:
        for connections in self.by_edge.values():
            for raw in connections:
                await raw.stream.aclose()


async def test_b671_pipelined_sends_on_connections_of_both_edges_are_stored_in_each_connections_order(
    tmp_path,
):
    """Two connections on each edge write 400 sends each to one queue, in one write each, all at
    once: every send is stored, and each connection's sends are in the queue in the order written."""
    with serve(tmp_path / "data", conf=[f"edge_processes={EDGES}"], log_file=tmp_path / "log") as b:
        connections = Connections(b.broker)
        await connections.open_on_every_edge(2)
        writers = [raw for edge in connections.by_edge.values() for raw in edge[:2]]
        answer = await connections.call(writers[0], create_topic_frame())
        assert answer.code == 0, answer.remark

        def frames(c: int) -> list[tuple[int, dict, bytes]]:
            return [
                (code, fields, b"c%d-%05d" % (c, n))
                for n in range(SENDS_PER_CONNECTION)
                for code, fields, _ in [_single(n)]
            ]

        first = 10_000
        async with trio.open_nursery() as nursery:
            for c, raw in enumerate(writers):
                nursery.start_soon(raw.write_all, frames(c), first)
        async with trio.open_nursery() as nursery:
            for raw in writers:
                nursery.start_soon(raw.read_until, set(range(first, first + SENDS_PER_CONNECTION)))
        for c, raw in enumerate(writers):
            answers = [raw.answers[first + n] for n in range(SENDS_PER_CONNECTION)]
            assert all(a.code == 0 for a in answers)
            queue_offsets = [a.require_long("queueOffset") for a in answers]
            assert queue_offsets == sorted(queue_offsets), f"connection {c}: offsets out of order"

        bodies: list[bytes] = []
        total = SENDS_PER_CONNECTION * len(writers)
        while len(bodies) < total:
            answer = await connections.call(writers[0], _pull(0, len(bodies), 0))
            assert answer.code == 0, answer.remark
            bodies += [m.body for m in decode_all(answer.body)]
        await connections.aclose()
    for c in range(len(writers)):
        mine = [body for body in bodies if body.startswith(b"c%d-" % c)]
        assert mine == [b"c%d-%05d" % (c, n) for n in range(SENDS_PER_CONNECTION)]
    assert len(bodies) == total


async def test_b671_a_pull_held_on_one_edge_wakes_on_each_send_through_the_other(tmp_path):
    """A consumer's connection on one edge long-polls (60 s) queue 1 while another connection, on
    the other edge, sends to queue 0 continuously: each send to queue 1, through that other edge,
    answers the held pull with its message. The wake-up latency (send written to the held pull's
    answer read) is printed, not asserted: bench/ reports speed."""
    waits: list[float] = []
    with serve(tmp_path / "data", conf=[f"edge_processes={EDGES}"], log_file=tmp_path / "log") as b:
        connections = Connections(b.broker)
        await connections.open_on_every_edge(2)
        (consumer, *_), (producer, busy, *_) = connections.by_edge.values()
        answer = await connections.call(producer, create_topic_frame())
        assert answer.code == 0, answer.remark
        stop = trio.Event()

        async def continuous() -> None:
            n = 0
            while not stop.is_set():
                answer = await connections.call(busy, _single(n))
                assert answer.code == 0, answer.remark
                n += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(continuous)
            for n in range(200):
                held = connections.opaque
                connections.opaque += 1
                await consumer.write_all([_pull(1, n, 60_000)], held)
                # the pull is held once the broker found queue 1 empty at offset n; it answers on arrival
                wake = (RequestCode.SEND_MESSAGE_V2, {**_single(n)[1], "e": 1}, b"wake-%d" % n)
                sent = connections.opaque
                connections.opaque += 1
                await producer.write_all([wake], sent)
                began = time.perf_counter()
                with trio.fail_after(30):  # far inside the 60 s suspension: woken by the send
                    await consumer.read_until({held})
                waits.append(time.perf_counter() - began)
                answer = consumer.answers.pop(held)
                assert answer.code == 0, answer.remark
                assert [m.body for m in decode_all(answer.body)] == [b"wake-%d" % n]
                await producer.read_until({sent})
                assert producer.answers.pop(sent).code == 0
            stop.set()
        await connections.aclose()
    waits.sort()
    print(
        f"\nheld pull woken through the other edge: p50 {statistics.median(waits) * 1e3:.2f} ms, "
        f"p90 {waits[int(len(waits) * 0.9)] * 1e3:.2f} ms over {len(waits)} sends"
    )


def _edge_pids(writer_pid: int) -> list[int]:
    """The edge processes the writer runs (its children running es_broker.server.edge.relay)."""
    children = set()  # each thread's (a process is started from a worker thread)
    for task in Path(f"/proc/{writer_pid}/task").iterdir():
        try:
            children.update(map(int, (task / "children").read_text().split()))
        except FileNotFoundError:
            continue
    pids = []
    for child in children:
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"es_broker.server.edge.relay" in command:
            pids.append(child)
    return sorted(pids)


async def test_b671_kill9_of_an_edge_then_of_the_writer_loses_nothing_acknowledged_and_verify_passes(
    tmp_path,
):
    """Under the chaos test's mixed load: kill -9 one edge process (its clients' requests in flight
    stay unanswered, the broker goes on serving through the other edge and starts the killed one
    again), then kill -9 the writer (its edges exit with their link); restarted, the broker holds
    every acknowledged message, send-back and offset change, and `es-broker verify` passes."""
    seed = str(random.randrange(1 << 32))
    print(f"\nseed {seed}")
    data_dir = tmp_path / "data"
    conf = write_conf(tmp_path / "broker.conf", "ASYNC_FLUSH")
    conf.write_text(conf.read_text() + f"edge_processes={EDGES}\n")
    ledger = Ledger()
    positions: dict[str, dict[int, int]] = {g: {} for g in GROUPS}
    proc = await start("load", tmp_path, serve_args(data_dir, conf), _BROKER)
    killed_edge = 0
    edges_before: list[int] = []
    try:
        await create_topic(proc.addr)
        edges_before = _edge_pids(proc.process.pid)
        assert len(edges_before) == EDGES

        async def kill_an_edge_then_the_writer(nursery: trio.Nursery) -> None:
            nonlocal killed_edge
            await ledger.arm(300).wait()
            killed_edge = edges_before[0]
            os.kill(killed_edge, signal.SIGKILL)
            # new producers connect (to the other edge, or the killed one started again) and are served
            for i in range(2):
                nursery.start_soon(
                    run_worker,
                    proc.addr,
                    Producer(f"after{i}", random.Random(f"{seed}:after{i}"), ledger),
                )
            await ledger.arm(300).wait()

            def replaced() -> bool:
                pids = _edge_pids(proc.process.pid)
                return len(pids) == EDGES and killed_edge not in pids

            await poll_until(replaced, 30, "the killed edge started again")
            await ledger.arm(100).wait()
            proc.kill9()  # every worker ends on its closed connection

        await run_load(proc.addr, ledger, seed, positions, kill_an_edge_then_the_writer)
    finally:
        proc.stop()
    assert proc.process.returncode == -9

    def edges_gone() -> bool:
        return not any(Path(f"/proc/{pid}").exists() for pid in edges_before)

    await poll_until(edges_gone, 30, "the killed writer's edges exited")

    proc = await start("check", tmp_path, serve_args(data_dir, conf), _BROKER)
    try:
        lost, live = await check_restarted(
            proc.addr, ledger, list(ledger.sends.values()), ledger.send_backs, set()
        )
    finally:
        proc.stop()
    assert proc.process.returncode == 0, proc.text()[-2000:]
    await cli_ok("verify", "--data-dir", str(data_dir))
    offsets_lost, _ = await check_offsets(data_dir, ledger, live)
    print(
        f"killed edge {killed_edge} then the writer: {len(ledger.sends)} messages acknowledged, "
        f"{ledger.commits} commits, {sum(ledger.send_backs.values())} send-backs, "
        f"{ledger.cut} requests cut, lost {lost + offsets_lost}"
    )
    assert not ledger.mismatches, "\n".join(ledger.mismatches[:40])
    assert lost + offsets_lost == 0
