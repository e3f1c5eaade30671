"""Chaos: kill -9 an `es-broker serve` process under mixed wire load, round after round.

Each round starts the broker on the same data directory, alternating
flushDiskType SYNC_FLUSH and ASYNC_FLUSH, runs producers and consumers
(tests/chaos_load.py) and SIGKILLs the broker once a random number of
operations were acknowledged, with requests of every kind in flight. Then
it starts the broker again and checks what the broker promised:

- every acknowledged message is in its queue at its offset with its body and
  msgId (a pull of each whole queue), and VIEW_MESSAGE_BY_ID finds it;
- every acknowledged send-back is in the original message's trace, and each
  retry it parked in the delay schedule is delivered to %RETRY%G once, not
  twice, whatever the kills interrupted;
- after a clean stop, `es-broker verify` rebuilds the same projections, and
  `es-broker history` holds every acknowledged offset change (commits,
  piggybacked commits, reset results), each queue's last change being the
  last acknowledged one or the one in flight at the kill; the restarted
  broker answers QUERY_CONSUMER_OFFSET with that value.

The seed is printed; ES_BROKER_CHAOS_SEED replays its choices (the
interleaving of the workers is the scheduler's), ES_BROKER_CHAOS_ROUNDS runs
more rounds (default 6).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from es_broker.remoting import fastjson
from es_broker.remoting import message as wire
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from tests.chaos_load import ANY, QUEUES, TOPIC, Consumer, Ledger, Producer, WireSession, run_worker
from tests.ha_fixtures import _BROKER, start
from tests.helpers import cli_ok
from tests.waiting import poll_until

ROUNDS = int(os.environ.get("ES_BROKER_CHAOS_ROUNDS", "6"))
FLUSH_MODES = ("SYNC_FLUSH", "ASYNC_FLUSH")
PRODUCERS = 3
GROUPS = ("CHAOS_G0", "CHAOS_G1", "CHAOS_G2")
CHECK_GROUP = "CHAOS_CHECK"
# acknowledged operations in a round before the kill: mostly a few seconds of load, sometimes
# next to nothing, so that a kill also lands while the broker is still catching up after its start
KILL_AFTER, KILL_EARLY, EARLY_SHARE = (300, 3000), (1, 40), 0.25
VIEW_SAMPLE = 200
ROUND_TIMEOUT = 120.0
SETTLE_TIMEOUT = 60.0


def write_conf(path: Path, flush: str) -> Path:
    path.write_text(
        f"flushDiskType={flush}\n"
        "messageDelayLevel=1s 2s 3s\n"  # send-backs come back as retries during the round
        "reset_mode=server_side\n"  # INVOKE_BROKER_TO_RESET_OFFSET moves offsets without a consumer
        "reset_scope=read_queues\n"
    )
    return path


def serve_args(data_dir: Path, conf: Path) -> list[str]:
    return [
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--namesrv-listen",
        "127.0.0.1:0",
        "--config",
        str(conf),
        "--readmodel-url",
        "none",
    ]


async def create_topic(addr: str) -> None:
    session = await WireSession.open(addr)
    try:
        r = await session.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": TOPIC,
                "defaultTopic": "TBW102",
                "readQueueNums": QUEUES,
                "writeQueueNums": QUEUES,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            },
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await session.aclose()


async def load_and_kill(
    addr: str,
    proc,
    ledger: Ledger,
    seed: str,
    positions: dict[str, dict[int, int]],
    kill_after: int,
) -> None:
    """Run every worker until `kill_after` more acknowledgements, then SIGKILL the broker mid-load."""

    async def kill(nursery: trio.Nursery) -> None:
        await ledger.arm(kill_after).wait()
        proc.kill9()  # the workers' requests in flight stay unanswered; each worker ends on its closed connection

    await run_load(addr, ledger, seed, positions, kill)


async def run_load(
    addr: str,
    ledger: Ledger,
    seed: str,
    positions: dict[str, dict[int, int]],
    until: Callable[[trio.Nursery], Awaitable[None]],
) -> None:
    """Run every worker until `until` (given the workers' nursery, to start more) has returned and
    the broker went away, bounded by ROUND_TIMEOUT."""
    async with trio.open_nursery() as nursery:
        for i in range(PRODUCERS):
            nursery.start_soon(
                run_worker, addr, Producer(f"p{i}", random.Random(f"{seed}:p{i}"), ledger)
            )
        for group in GROUPS:
            nursery.start_soon(
                run_worker,
                addr,
                Consumer(group, random.Random(f"{seed}:{group}"), ledger, positions[group]),
            )
        with trio.fail_after(ROUND_TIMEOUT):
            await until(nursery)


async def whole_queue(session: WireSession, q: int) -> dict[int, wire.StoredMessage]:
    """Every message of a queue, pulled from offset 0 to its max."""
    r = await session.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q})
    top, offset, out = r.require_long("offset"), 0, {}
    while offset < top:
        r = await session.call(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": CHECK_GROUP,
                "topic": TOPIC,
                "queueId": q,
                "queueOffset": offset,
                "maxMsgNums": 32,
                "sysFlag": 0x4,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
                "expressionType": "TAG",
            },
        )
        assert r.code == ResponseCode.SUCCESS, (
            f"q{q} pull at {offset} of {top}: {r.code} {r.remark}"
        )
        for m in wire.decode_all(r.body):
            out[m.queue_offset] = m
        offset = r.require_long("nextBeginOffset")
    return out


async def trace_events(session: WireSession, msg_id: str) -> list[dict]:
    r = await session.call(EsRequestCode.MESSAGE_TRACE, {"msgId": msg_id})
    return fastjson.loads(r.body)["events"] if r.code == ResponseCode.SUCCESS else []


def retries(events: list[dict]) -> tuple[int, int]:
    """(retries parked in the delay schedule, retries delivered from it to %RETRY%G)."""
    return (
        sum(1 for e in events if e["event"] == "sent_back"),
        sum(1 for e in events if e["event"] == "delay_delivered"),
    )


async def all_retries_delivered(session: WireSession, msg_ids: set[str]) -> None:
    """Wait (bounded) until every parked retry of these messages is delivered, then none more than once."""
    waiting = set(msg_ids)

    async def delivered() -> bool:
        for msg_id in sorted(waiting):
            parked, done = retries(await trace_events(session, msg_id))
            assert done <= parked, f"{msg_id}: {parked} retries parked, {done} delivered"
            if done == parked:
                waiting.discard(msg_id)
        return not waiting

    await poll_until(delivered, SETTLE_TIMEOUT, f"retries of {len(msg_ids)} messages delivered")


async def check_restarted(
    addr: str, ledger: Ledger, new_sends: list, new_send_backs: Counter, settle: set[str]
) -> tuple[int, dict]:
    """On the restarted broker: lost acknowledged messages, wrong ones recorded in the ledger; live offsets.

    `settle`: messages sent back long enough ago that every parked retry must have been delivered, once.
    """
    session = await WireSession.open(addr)
    lost = 0
    try:
        stored = {q: await whole_queue(session, q) for q in range(QUEUES)}
        for (q, offset), sent in ledger.sends.items():
            m = stored[q].get(offset)
            if m is None:
                lost += 1
                ledger.mismatches.append(
                    f"acknowledged message {sent.msg_id} at q{q}/{offset} is gone"
                )
            elif m.body != sent.body or m.msg_id != sent.msg_id:
                ledger.mismatches.append(
                    f"q{q}/{offset} holds {m.msg_id}, acknowledged {sent.msg_id}"
                )
        for sent in random.Random(len(ledger.sends)).sample(
            new_sends, min(VIEW_SAMPLE, len(new_sends))
        ):
            _, phy = wire.parse_offset_msg_id(sent.msg_id)
            r = await session.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phy})
            if r.code != ResponseCode.SUCCESS or wire.decode_one(r.body)[0].body != sent.body:
                lost += 1
                ledger.mismatches.append(f"VIEW_MESSAGE_BY_ID {sent.msg_id}: {r.code} {r.remark}")
        traces = {}
        for msg_id in sorted({msg_id for _, msg_id in new_send_backs}):
            traces[msg_id] = await trace_events(session, msg_id)
            # each retry parked in the delay schedule reaches %RETRY%G once at most, restarts or not (B-97)
            parked, delivered = retries(traces[msg_id])
            ledger.delay_delivered += delivered
            if delivered > parked:
                ledger.mismatches.append(
                    f"{msg_id}: {parked} retries parked, {delivered} delivered"
                )
        for (group, msg_id), count in new_send_backs.items():
            found = sum(
                1
                for e in traces[msg_id]
                if e["event"] in ("sent_back", "dead_lettered") and e["group"] == group
            )
            if found < count:
                lost += 1
                ledger.mismatches.append(
                    f"{group} sent {msg_id} back {count} times, the trace shows {found}"
                )
        await all_retries_delivered(session, settle)
        live = {}
        for group in GROUPS:
            for q in range(QUEUES):
                r = await session.call(
                    RequestCode.QUERY_CONSUMER_OFFSET,
                    {"consumerGroup": group, "topic": TOPIC, "queueId": q},
                )
                live[(group, q)] = (r.code, r.get_long("offset", -1))
    finally:
        await session.aclose()
    return lost, live


async def check_offsets(
    data_dir: Path, ledger: Ledger, live: dict
) -> tuple[int, dict[str, dict[int, int]]]:
    """Against `es-broker history`: acknowledged changes lost, and each group's offsets for the next round."""
    lost = 0
    positions: dict[str, dict[int, int]] = {}
    history: Counter = Counter()
    for group in GROUPS:
        doc = json.loads(
            (
                await cli_ok(
                    "history",
                    "--group",
                    group,
                    "--topic",
                    TOPIC,
                    "--json",
                    "--data-dir",
                    str(data_dir),
                )
            ).stdout
        )
        last: dict[int, int] = {}
        for e in doc["entries"]:
            if e["kind"] in ("offset_change", "offset_removed"):
                history[(group, e["queue_id"], e["new"])] += 1
                last[e["queue_id"]] = e["new"]
        for q in range(QUEUES):
            now = last.get(q, -1)
            allowed = ledger.possible.get((group, q), {-1})
            if ANY not in allowed and now not in allowed:
                lost += 1
                ledger.mismatches.append(
                    f"{group} q{q} ends at {now}, acknowledged: one of {sorted(allowed)}"
                )
            code, answered = live[(group, q)]
            if now >= 0 and (code != ResponseCode.SUCCESS or answered != now):
                ledger.mismatches.append(
                    f"{group} q{q}: history says {now}, QUERY_CONSUMER_OFFSET {code} {answered}"
                )
            ledger.possible[(group, q)] = {now}
        positions[group] = {q: max(v, 0) for q, v in last.items()}
    for key, count in ledger.changes.items():
        if history[key] < count:
            lost += count - history[key]
            ledger.mismatches.append(
                f"acknowledged offset change {key} x{count}, history has {history[key]}"
            )
    return lost, positions


async def test_sigkill_under_mixed_load_loses_nothing_acknowledged_in_either_flush_mode(tmp_path):
    seed = os.environ.get("ES_BROKER_CHAOS_SEED") or str(random.randrange(1 << 32))
    print(f"\nchaos seed {seed} (ES_BROKER_CHAOS_SEED={seed} replays its choices), {ROUNDS} rounds")
    began = time.monotonic()
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    ledger = Ledger()
    positions: dict[str, dict[int, int]] = {g: {} for g in GROUPS}
    lost = 0
    previous_sent_back: set[str] = set()
    for n in range(ROUNDS):
        flush = FLUSH_MODES[n % 2]
        conf = write_conf(tmp_path / f"{flush}.conf", flush)
        kill_after = rng.randrange(*(KILL_EARLY if rng.random() < EARLY_SHARE else KILL_AFTER))
        sends_before, backs_before, cut_before = (
            set(ledger.sends),
            Counter(ledger.send_backs),
            ledger.cut,
        )

        proc = await start(f"round{n}-load", tmp_path, serve_args(data_dir, conf), _BROKER)
        try:
            if n == 0:
                await create_topic(proc.addr)
            await load_and_kill(proc.addr, proc, ledger, f"{seed}:{n}", positions, kill_after)
        finally:
            proc.stop()
        assert proc.process.returncode == -9

        proc = await start(f"round{n}-check", tmp_path, serve_args(data_dir, conf), _BROKER)
        try:
            new_sends = [s for k, s in ledger.sends.items() if k not in sends_before]
            new_backs = ledger.send_backs - backs_before
            sent_back = {msg_id for _, msg_id in new_backs}
            # the retries parked in the previous round are due (levels 1s..3s); in the last round this one's too
            settle = previous_sent_back | (sent_back if n == ROUNDS - 1 else set())
            round_lost, live = await check_restarted(
                proc.addr, ledger, new_sends, new_backs, settle
            )
            previous_sent_back = sent_back
        finally:
            proc.stop()
        assert proc.process.returncode == 0, proc.text()[-2000:]
        await cli_ok("verify", "--data-dir", str(data_dir))  # exits 1 on the first differing key
        offsets_lost, positions = await check_offsets(data_dir, ledger, live)
        lost += round_lost + offsets_lost
        print(
            f"round {n + 1} {flush}: killed after {kill_after} acknowledgements, {ledger.cut - cut_before} "
            "requests in flight; "
            f"so far {len(ledger.sends)} messages, {ledger.commits} commits, {ledger.resets} resets, "
            f"{sum(ledger.send_backs.values())} send-backs, lost {lost}"
        )

    print(
        f"chaos summary: seed {seed}, rounds {ROUNDS}, acknowledged sends {len(ledger.sends)}, "
        f"acknowledged commits {ledger.commits}, resets {ledger.resets}, "
        f"send-backs {sum(ledger.send_backs.values())} ({ledger.delay_delivered} retries seen delivered), "
        f"pulled {ledger.pulled}, lost {lost}, "
        f"{time.monotonic() - began:.0f} s"
    )
    assert not ledger.mismatches, "\n".join(ledger.mismatches[:40])
    assert lost == 0
