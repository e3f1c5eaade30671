"""Queue locks of orderly consumers, as RocketMQ 4.9.8's RebalanceLockManager (B-142..B-147)."""

from __future__ import annotations

import trio

from es_broker.commands.queue_locks import QueueLocks
from es_broker.remoting import fastjson
from es_broker.remoting.codes import RequestCode
from es_broker.remoting.command import request
from es_broker.schema.families import RunningTime
from es_broker.schema.rows import lock_holder_at, rows_of
from es_broker.store import Store
from tests.helpers import cli_checked
from tests.process_fixtures import serve
from tests.waiting import poll_until

G = "OrderlyGroup"
QUEUES = [("T", "broker-a", q) for q in range(8)]
MAX_LIVE = 60_000


def _locks(broker) -> QueueLocks:
    return QueueLocks(broker.submit, broker.store.clock, MAX_LIVE)


def _records(broker) -> list[dict]:
    return [r for _, r in broker.store.log.read() if r["type"] == "queue_locks_changed"]


async def test_b142_a_free_queue_goes_to_the_first_client_and_is_refused_to_the_second(broker):
    locks = _locks(broker)
    assert await locks.lock_batch(G, "A", QUEUES) == QUEUES
    assert await locks.lock_batch(G, "B", QUEUES) == []
    assert [locks.owner(G, q) for q in QUEUES] == ["A"] * 8
    [record] = _records(broker)
    assert record["cause"] == "lock" and record["client"] == "A"
    assert record["changes"] == [[*q, "A", "", -1] for q in QUEUES]


async def test_b143_a_renewal_keeps_the_lock_and_records_nothing(broker, clock):
    locks = _locks(broker)
    await locks.lock_batch(G, "A", QUEUES)
    for _ in range(5):  # renewed well within the live time, for five live times
        clock.advance(MAX_LIVE - 1)
        assert await locks.lock_batch(G, "A", QUEUES) == QUEUES
        assert await locks.lock_batch(G, "B", QUEUES) == []
    assert len(_records(broker)) == 1


async def test_b143_a_lock_not_renewed_for_more_than_its_live_time_goes_to_another_client(
    broker, clock
):
    locks = _locks(broker)
    await locks.lock_batch(G, "A", QUEUES[:2])
    taken_at = clock.now_ms()
    clock.advance(MAX_LIVE)  # exactly the live time: still held (RocketMQ expires strictly after)
    assert await locks.lock_batch(G, "B", QUEUES[:2]) == []
    clock.advance(1)
    assert await locks.lock_batch(G, "B", QUEUES[:2]) == QUEUES[:2]
    assert await locks.lock_batch(G, "A", QUEUES[:2]) == []
    last = _records(broker)[-1]
    assert last["changes"] == [[*q, "B", "A", taken_at] for q in QUEUES[:2]]


async def test_b144_unlock_releases_only_the_callers_own_queues(broker):
    locks = _locks(broker)
    await locks.lock_batch(G, "A", QUEUES[:4])
    await locks.lock_batch(G, "B", QUEUES[4:])
    assert await locks.unlock_batch(G, "B", QUEUES)  # B's own four go; A's stay
    assert [locks.owner(G, q) for q in QUEUES] == ["A"] * 4 + [None] * 4
    assert await locks.lock_batch(G, "C", QUEUES) == QUEUES[4:]


async def test_b145_a_closed_channel_or_an_unregistered_client_releases_its_queues(broker):
    locks = _locks(broker)
    channel_a, channel_b = object(), object()
    await locks.lock_batch(G, "A", QUEUES[:4], holder=channel_a)
    await locks.lock_batch(G, "B", QUEUES[4:], holder=channel_b)
    assert await locks.release_holder(channel_a)
    assert [locks.owner(G, q) for q in QUEUES[:4]] == [None] * 4
    assert await locks.release_client(G, "B")
    assert locks.table == {}
    assert [r["cause"] for r in _records(broker)] == [
        "lock",
        "lock",
        "channel_closed",
        "unregistered",
    ]


async def test_b146_the_expiry_pass_records_when_an_unrenewed_lock_lapsed(broker, clock):
    locks = _locks(broker)
    await locks.lock_batch(G, "A", QUEUES[:1])
    taken_at = clock.now_ms()
    clock.advance(MAX_LIVE)
    assert await locks.expire() == 0
    clock.advance(1)
    assert await locks.expire() == 1
    last = _records(broker)[-1]
    assert (last["cause"], last["changes"]) == ("expired", [[*QUEUES[0], "", "A", taken_at]])


async def test_b147_history_answers_who_held_a_queue_at_a_time(broker, clock):
    locks = _locks(broker)
    t0 = clock.now_ms()
    await locks.lock_batch(G, "A", QUEUES[:1])
    clock.advance(1000)
    await locks.unlock_batch(G, "A", QUEUES[:1])
    clock.advance(1000)
    await locks.lock_batch(G, "B", QUEUES[:1])
    running = RunningTime()
    rows = [
        row
        for seq, r in broker.store.log.read()
        for family, row in rows_of(seq, r, running.advance(r["ts"]))
        if family == "queue_locks"
    ]
    assert [
        lock_holder_at(rows, G, "T", 0, t) for t in (t0 - 1, t0, t0 + 999, t0 + 1000, t0 + 2000)
    ] == [None, "A", "A", None, "B"]


async def test_b142_one_request_changes_one_lock_at_a_time(broker):
    """Two clients asking at once: each queue ends with exactly one owner, and the answers do not overlap."""
    locks = _locks(broker)
    answers: dict[str, list] = {}

    async def ask(client: str) -> None:
        answers[client] = await locks.lock_batch(G, client, QUEUES)

    async with trio.open_nursery() as nursery:
        for client in ("A", "B", "C"):
            nursery.start_soon(ask, client)
    owners = [c for c, held in answers.items() if held]
    assert len(owners) == 1 and answers[owners[0]] == QUEUES


def _body(client: str, queues: list[int]) -> bytes:
    return fastjson.dumps(
        {
            "consumerGroup": G,
            "clientId": client,
            "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": q} for q in queues],
        }
    ).encode()


async def test_b142_to_b146_two_clients_over_eight_queues_against_a_broker_process(tmp_path):
    """Lock, renew, refuse, unlock, expiry, channel close and unregister, over the wire; then verify and export."""
    from es_broker.net.remoting_client import RemotingClient

    conf = tmp_path / "broker.conf"
    conf.write_text("rocketmq.broker.rebalance.lockMaxLiveTime=1500\n")
    data = tmp_path / "data"
    with serve(data, "--config", str(conf)) as served:
        async with trio.open_nursery() as nursery:
            a, b = RemotingClient(nursery), RemotingClient(nursery)

            async def lock(client, name: str, queues=range(8)) -> set[int]:
                answer = await client.invoke(
                    served.broker, request(RequestCode.LOCK_BATCH_MQ, {}, _body(name, list(queues)))
                )
                assert answer.code == 0, answer.remark
                return {mq["queueId"] for mq in fastjson.loads(answer.body)["lockOKMQSet"]}

            async def until(client, name: str, wanted: set[int]) -> None:
                async def all_locked() -> bool:
                    got = await lock(client, name, wanted)
                    assert got <= wanted
                    return got == wanted

                await poll_until(all_locked, what=f"{name} holding queues {sorted(wanted)}")

            assert await lock(a, "A") == set(range(8))
            assert await lock(b, "B") == set()  # refused while A holds them
            assert await lock(a, "A") == set(range(8))  # renewed
            unlock = await a.invoke(
                served.broker, request(RequestCode.UNLOCK_BATCH_MQ, {}, _body("A", [0, 1]))
            )
            assert unlock.code == 0
            assert await lock(b, "B") == {0, 1}
            await until(b, "B", set(range(8)))  # A stopped renewing: its six expire and go to B
            await b.aclose()  # B's connection closes: its eight are released
            await until(a, "A", set(range(8)))
            bye = await a.invoke(
                served.broker,
                request(RequestCode.UNREGISTER_CLIENT, {"clientID": "A", "consumerGroup": G}),
            )
            assert bye.code == 0
            c = RemotingClient(nursery)
            assert await lock(c, "C") == set(range(8))  # nothing left of A's after it unregistered
            nursery.cancel_scope.cancel()
    cli_checked("verify", "--data-dir", str(data))
    store = Store.open(data, readonly=True)
    try:
        records = [r for _, r in store.log.read() if r["type"] == "queue_locks_changed"]
    finally:
        store.close()
    causes = [r["cause"] for r in records]
    for cause in ("lock", "unlock", "channel_closed", "unregistered"):
        assert cause in causes
    owners: dict[
        int, str
    ] = {}  # at every change, each queue has at most one owner, taken only when free
    for record in records:
        for _topic, _broker, q, owner, previous, _renewed in record["changes"]:
            assert owners.get(q, "") == previous, (record, owners)
            owners[q] = owner


async def test_b148_a_pull_from_a_client_that_does_not_hold_the_lock_is_served(broker):
    """PullMessageProcessor (4.9.8) never consults the lock table: orderly consumption is the client's rule."""
    from es_broker.commands.messages import GetStatus
    from es_broker.commands.placement import MessageIn
    from tests.conftest import make_topic

    await make_topic(broker, "T", 8)
    await broker.put_message("T", 0, MessageIn(b"m"))
    locks = _locks(broker)
    assert await locks.lock_batch(G, "A", QUEUES[:1]) == QUEUES[:1]
    result = await broker.pull(G, "T", 0, 0, client="B")
    assert result.status == GetStatus.FOUND
