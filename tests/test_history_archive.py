"""Sealed segments and the archive (B-401..B-410): a history of days, sealed but for its last day,
answers every verb as it did before, and `verify` and `verify --full` pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from es_broker.acl.plain import combine, parse_file
from es_broker.cli.timetravel import acl_answer
from es_broker.clock import ManualClock
from es_broker.commands import transaction as tx
from es_broker.commands.acl_audit import denial_record, load_fields
from es_broker.commands.explain import explain
from es_broker.commands.placement import MessageIn
from es_broker.commands.trace import journey
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.history import seal as sealing
from es_broker.log import make
from es_broker.log.types import RecordType
from es_broker.projections.store_format import CURRENT
from es_broker.remoting import message as wire
from es_broker.store import Store
from es_broker.timetravel import timeline
from es_broker.timetravel.query import TimeTravel
from tests.acl_fixtures import ACL_YAML
from tests.helpers import cli, cli_checked
from tests.replay_histories import play

START = 1_700_000_000_000
HOUR = 3_600_000
DAYS = 5
SEGMENT = 16
PG = "PG"


async def _day(broker: Broker, clock: ManualClock, day: int) -> None:
    """One simulated day: sends, pulls, commits, a reset, a send-back, a perm change, a transaction, an ACL load."""
    for n in range(3):
        put = await broker.put_message(
            "T1", n % 2, MessageIn(b"d%d-%d" % (day, n), {"UNIQ_KEY": f"U{day}-{n}"})
        )
        await broker.put_messages("T2", n % 3, [MessageIn(b"b%d" % i) for i in range(2)])
        got = await broker.pull("G1", "T1", n % 2, 0, client="c1", commit_offset=n)
        await broker.commit_offset("G2", "T2", n % 3, n + day, requester="c2")
        clock.advance(HOUR)
        if n == 1 and got.messages:
            await broker.send_back("G1", put.physical_offsets[0], 1, requester="c1")
    await broker.plan_reset(
        "G2",
        "T2",
        clock.now_ms() - 2 * HOUR,
        True,
        requester="ops",
        notified=[],
        mode="server_side",
    )
    await broker.update_topic_perm("T2", 6 if day % 2 else 4, requester="ops")
    half = MessageIn(
        b"tx%d" % day,
        {"TRAN_MSG": "true", "PGROUP": PG, "UNIQ_KEY": f"TX{day}"},
        sys_flag=tx.TRANSACTION_PREPARED_TYPE,
        born_timestamp=clock.now_ms(),
    )
    result = await broker.put_message("T1", 0, half)
    kind = tx.TRANSACTION_COMMIT_TYPE if day % 2 == 0 else tx.TRANSACTION_ROLLBACK_TYPE
    await broker.end_transaction(
        tx.EndRequest(PG, result.queue_offset, result.physical_offsets[0], kind, False, "m")
    )
    acl = combine([parse_file("/etc/plain_acl.yml", ACL_YAML.encode())])
    load = make(
        RecordType.ACL_LOADED,
        clock.now_ms(),
        **load_fields(acl, "admin request", "ops", day + 1, b"s" * 32),
    )
    await broker.submit(lambda ctx: ctx.append(load))
    counts = {("ProducerKey", "10.0.0.7", 10): day + 1}
    refusal = denial_record(counts, clock.now_ms() - HOUR, clock.now_ms(), 60, day + 1)
    await broker.submit(lambda ctx: ctx.append(refusal))
    # B-461: the commit-log files older than fileReservedTime (72 h) expire: their messages leave
    # the consume queues and their deliveries the trace index when sealing passes them
    await broker.retention_pass(manual=True)
    clock.advance(24 * HOUR - 3 * HOUR)


async def _history(data_dir: str) -> None:
    clock = ManualClock(START)
    config = BrokerConfig(
        storePathRootDir=data_dir,
        total_physical_memory_bytes=1024**3,
        mappedFileSizeCommitLog=1000,
    )
    ops = [("topics",)] + [("day", d) for d in range(DAYS)]

    async def apply(broker: Broker, clock: ManualClock, op: tuple) -> None:
        if op[0] == "topics":
            for topic, n in (("T1", 2), ("T2", 3)):
                await broker.update_topic(
                    {"topicName": topic, "readQueueNums": n, "writeQueueNums": n, "perm": 6},
                    requester="ops",
                )
        else:
            await _day(broker, clock, op[1])

    await play(Broker.open(data_dir, config, clock), clock, ops, apply)


def message_ids(data_dir: Path) -> list[str]:
    """The offset msg id of every message stored (expired ones included), from the records."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        return [
            wire.offset_msg_id(("127.0.0.1", 10911), phy)
            for _, record in store.log.read()
            if record["type"] == "messages_stored"
            for phy, _, _ in record["units"]
        ]
    finally:
        store.close()


def answers(data_dir: Path, ids: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """Every verb's answer for moments across the history (where they read from left aside);
    `ids`: offset msg ids to trace (an expired message is found by its offset only)."""
    moments = [START - 10] + [START + k * 7 * HOUR + 1234 for k in range(DAYS * 24 // 7 + 2)]
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    out: dict[str, Any] = {}
    try:
        travel = TimeTravel(store)
        with store.read() as txn:
            for at in moments:
                out[f"offsets@{at}"] = [
                    r.as_dict() for r in travel.offsets_at(txn, at, durable=True)
                ]
                for group in ("G1", "G2"):
                    out[f"history {group}@{at}"] = [
                        e.as_dict() for e in travel.history(txn, group, until=at)
                    ]
            # the dashboard's timeline across the horizon (B-460)
            for group in ("G1", "G2"):
                # its start (its end is the log's last record: sealing appends records, B-401)
                out[f"window {group}"] = (timeline.window(travel, txn, group, None) or [None])[0]
                samples, lines = timeline.timeline_by_queue(
                    travel, txn, group, since=moments[0], until=moments[-1], points=23
                )
                out[f"timeline {group}"] = [x.as_dict() for x in samples + lines]  # type: ignore[operator]
                for limit in (3, 40, 1000):
                    entries, more = timeline.recent_changes(travel, txn, group, limit=limit)
                    out[f"recent {group} {limit}"] = ([e.as_dict() for e in entries], more)
        for group, topic in (("G1", "T1"), ("G2", "T2"), ("%RETRY%G1", "%RETRY%G1")):
            out[f"explain {group} {topic}"] = explain(store, group, topic)
        keys = [f"U{d}-{n}" for d in range(DAYS) for n in range(3)]
        for key in keys + [f"TX{d}" for d in range(DAYS)] + list(ids):
            out[f"trace {key}"] = journey(store, key)
    finally:
        store.close()
    for at in moments:
        out[f"acl@{at}"] = acl_answer(str(data_dir), at, "T1", "G1", 600_000)
    return out


def _without_sources(answer: Any) -> Any:
    if isinstance(answer, dict):
        return {
            k: _without_sources(v) for k, v in answer.items() if k not in ("read_from", "readFrom")
        }
    if isinstance(answer, list):
        return [_without_sources(v) for v in answer]
    return answer


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A broker data directory holding DAYS days of history, never sealed."""
    data_dir = tmp_path_factory.mktemp("history") / "data"
    trio.run(_history, str(data_dir))
    return data_dir


@pytest.fixture(scope="module")
def ids(built: Path) -> list[str]:
    return message_ids(built)


@pytest.fixture(scope="module")
def before_sealing(built: Path, ids: list[str]) -> dict[str, Any]:
    return answers(built, ids)


def _last_day() -> int:
    return START + (DAYS - 1) * 24 * HOUR


def _conf(tmp: Path) -> Path:
    conf = tmp / "broker.conf"
    conf.write_text(f"history_segment_records={SEGMENT}\n")
    return conf


def _hot_first(data_dir: Path) -> tuple[int, int, int]:
    """(first hot seq, last seq, sealed up to) of a data directory."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        first = next(iter(store.log.read()))[0]
        with store.read() as txn:
            return first, store.log.last_seq, store.history.sealed_upto(txn)
    finally:
        store.close()


def _left_before(data_dir: Path, horizon: int | None = None) -> dict[str, int]:
    """Entries of records at or before the horizon left in each database B-460/B-461 prune,
    and how many queues / groups / expired messages there are to keep a floor for."""
    from es_broker.projections.consume_queue import BLOCK_UNITS
    from es_broker.projections.keys import U64, queue_key
    from es_broker.projections.message_trace import delivered_offsets

    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        with store.read() as txn:
            upto = store.history.sealed_upto(txn) if horizon is None else horizon
            mins = {(t, q): lo for t, q, lo, _ in store.cq.queues(txn)}

            def old(db: Any, at: slice = slice(-8, None)) -> list[bytes]:
                return [
                    bytes(k)
                    for k in txn.cursor(db=db).iternext(values=False)
                    if U64.unpack(k[at])[0] <= upto
                ]

            history = old(store.offsets.history)
            # consume-queue blocks wholly below the minimum, but the first (B-37 reads it, B-473)
            expired_units = sum(
                1
                for t, q in mins
                for o in range(BLOCK_UNITS, mins[(t, q)] // BLOCK_UNITS * BLOCK_UNITS)
                if store.cq.unit(txn, t, q, o)
            )
            # deliveries of sealed records whose every offset expired (one entry a record, B-472)
            expired_deliveries = 0
            for t, q in mins:
                queue = queue_key(t, q)
                for key, value in txn.cursor(db=store.trace.pulls):
                    if len(key) != len(queue) + 16 or not bytes(key).startswith(queue):
                        continue
                    first, seq = (
                        U64.unpack_from(key, len(queue)),
                        U64.unpack_from(key, len(queue) + 8),
                    )
                    last = first[0] + delivered_offsets(bytes(value))[-1]
                    if seq[0] <= upto and last < mins[(t, q)]:
                        expired_deliveries += 1
            return {
                "upto": upto,
                "history": len(history),
                "history queues": len({k[:-8] for k in history}),
                "events": len(old(store.timeindex.events_db)),
                "seq": len(old(store.timeindex.seq_db, slice(None))),
                "expired": sum(lo for lo in mins.values()),
                "expired units": expired_units,
                "expired deliveries": expired_deliveries,
                # the store index's entries of sealed records (B-465)
                "stored": sum(
                    1
                    for v in txn.cursor(db=store.trace.stored).iternext(keys=False)
                    if U64.unpack(v)[0] <= upto
                ),
            }
    finally:
        store.close()


def test_b401_sealing_all_but_the_last_day_keeps_every_answer(built, before_sealing, ids, tmp_path):
    """B-401, B-408: after `es-broker archive --before <last day>`, offsets --at, history, explain,
    messageTrace and acl --at answer as before for every moment, and name the archive where they read it."""
    data_dir = tmp_path / "data"
    shutil.copytree(built, data_dir)
    done = cli_checked(
        "archive",
        "--data-dir",
        str(data_dir),
        "--before",
        str(_last_day()),
        "--config",
        str(_conf(tmp_path)),
        "--json",
    )
    sealed = json.loads(done.stdout)["sealed"]
    assert len(sealed) >= 3
    assert [s["first_seq"] for s in sealed] == [1 + SEGMENT * i for i in range(len(sealed))]
    assert all(s["records"] == SEGMENT and s["last_time"] < _last_day() for s in sealed)
    first, last, upto = _hot_first(data_dir)
    assert upto == sealed[-1]["last_seq"] and first == upto + 1  # the sealed records left LMDB
    for s in sealed:
        manifest = json.loads((Path(s["location"]) / "manifest.json").read_text())
        assert manifest["records"] == SEGMENT and manifest["first_seq"] == s["first_seq"]
    assert before_sealing["trace U4-0"]["found"] and before_sealing["trace TX4"]["found"]
    assert all(before_sealing[f"trace {i}"]["found"] for i in ids)
    assert before_sealing["explain G1 T1"]["queues"] and before_sealing["explain G2 T2"]["queues"]
    assert any(before_sealing[f"history G2@{START + 14 * HOUR + 1234}"])
    left = _left_before(data_dir)
    before = _left_before(built, upto)
    after = answers(data_dir, ids)
    assert _without_sources(after) == _without_sources(before_sealing)
    # B-460, B-461: what only history needs before the horizon left LMDB, the answers stayed
    assert left["upto"] == upto and before["history"] > before["history queues"]
    assert before["events"] > 0 and before["expired deliveries"] > 0
    assert left["history"] == left["history queues"]  # one floor entry per queue
    assert left["events"] == 0 and left["seq"] <= 2  # tt_seq: the first entry and the floor
    assert left["expired"] > 0 and left["expired units"] == left["expired deliveries"] == 0
    # B-465: the store index of the sealed records left LMDB; every message's trace (above)
    # found its store record in the archive index
    assert before["stored"] > 0 and left["stored"] == 0
    expired_traced = [
        i for i in ids if any(e["event"] == "delivered" for e in after[f"trace {i}"]["events"])
    ]
    assert expired_traced  # deliveries found in the archive (B-461)
    assert after["explain G1 T1"]["read_from"] == ["archive", "hot"]
    assert after[f"trace {ids[0]}"]["readFrom"][0] == "archive"
    # B-416: where the records the answer is made of are (the load in force, sealed; no refusal near)
    assert after[f"acl@{START + 7 * HOUR + 1234}"]["read_from"] == ["archive"]
    assert after[f"acl@{START + 7 * HOUR + 1234}"]["load"] is not None
    assert verify(data_dir) == []
    assert verify(data_dir, full=True) == []
    # nothing more is old enough: a second run seals nothing and changes nothing
    again = json.loads(
        cli_checked(
            "archive",
            "--data-dir",
            str(data_dir),
            "--before",
            str(_last_day()),
            "--config",
            str(_conf(tmp_path)),
            "--json",
        ).stdout
    )
    assert again["sealed"] == []


def test_b404_nothing_an_export_has_not_exported_is_sealed(built, tmp_path):
    """B-404: a consumer of the log behind the cut-off (an export's checkpoint) holds sealing back."""
    data_dir = tmp_path / "data"
    shutil.copytree(built, data_dir)
    out = tmp_path / "export"
    out.mkdir()
    (out / "_export_checkpoint.json").write_text(json.dumps({"last_seq": SEGMENT + 5}))
    sealed = json.loads(
        cli_checked(
            "archive",
            "--data-dir",
            str(data_dir),
            "--before",
            str(_last_day()),
            "--config",
            str(_conf(tmp_path)),
            "--export-dir",
            str(out),
            "--json",
        ).stdout
    )
    assert [s["last_seq"] for s in sealed["sealed"]] == [SEGMENT]
    assert sealed["limited_by"] == [f"the export to {out}"]


def test_b465_a_directory_sealed_by_older_code_loses_the_store_index_at_its_upgrade(
    built, before_sealing, ids, tmp_path
):
    """B-465: a directory sealed before sealing removed the store index of sealed records
    (format 4) has those entries taken out by the upgrade to format 5, as a replay would;
    every answer stays, verify passes."""
    from es_broker.history.archive import raw_records
    from es_broker.log import records
    from es_broker.projections.keys import I64, U64

    data_dir = tmp_path / "data"
    shutil.copytree(built, data_dir)
    cli_checked(
        "archive",
        "--data-dir",
        str(data_dir),
        "--before",
        str(_last_day()),
        "--config",
        str(_conf(tmp_path)),
    )
    # what the older code left: the store index of every sealed record, in format 4
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)))
    with store.log.env.begin(write=True) as txn:
        for segment in list(store.history.segments(txn)):
            for seq, raw in raw_records(segment["location"]):
                record = records.unpack(raw)
                if record["type"] == "messages_stored":
                    first = record["units"][0][0]
                    txn.put(I64.pack(first), U64.pack(seq), db=store.trace.stored)
        store.format.set_number(txn, 4)
    store.close()
    assert _left_before(data_dir)["stored"] > 0
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)))
    with store.read() as txn:
        assert store.format.number(txn) == CURRENT
    upgraded = [r for _, r in store.log.read() if r["type"] == RecordType.STORE_UPGRADED]
    steps = [(r["from_format"], r["to_format"]) for r in upgraded]
    assert steps == [(n, n + 1) for n in range(4, CURRENT)]  # the later steps find nothing to do
    store.close()
    assert _left_before(data_dir)["stored"] == 0
    assert verify(data_dir) == []
    assert verify(data_dir, full=True) == []
    traces = {k: v for k, v in _without_sources(before_sealing).items() if k.startswith("trace")}
    after = answers(data_dir, ids)
    assert {k: v for k, v in _without_sources(after).items() if k.startswith("trace")} == traces
    # an archive index an older es-broker built (no store index, no format number) is emptied
    # and built again from the archive: the traces stay
    from es_broker.history import horizon

    index = horizon._OPEN[(data_dir / "history" / horizon.INDEX_DIR).resolve()]
    with index.log.env.begin(write=True) as txn:
        txn.drop(index.trace.stored, delete=False)
        txn.delete(b"format", db=index.log.meta)
    index._check_format()  # what opening it does
    index.log.last_seq = index.upto()
    assert index.upto() == 0
    again = answers(data_dir, ids)
    assert {k: v for k, v in _without_sources(again).items() if k.startswith("trace")} == traces
    assert index.upto() == _hot_first(data_dir)[2]


@pytest.mark.parametrize("step", sealing.STEPS)
def test_b406_a_kill_at_any_step_of_sealing_leaves_the_segments_hot_or_archived(
    built, before_sealing, ids, tmp_path, step
):
    """B-406: killed after each step, the data directory holds the segments either hot (nothing
    recorded) or archived and recorded; every answer is the same, verify passes, and a second run finishes."""
    data_dir = tmp_path / "data"
    shutil.copytree(built, data_dir)
    args = ["archive", "--data-dir", str(data_dir), "--before", str(_last_day())]
    args += ["--config", str(_conf(tmp_path)), "--json"]
    from tests.helpers import _env

    killed = cli(*args, env={**_env(), sealing.CRASH_ENV: step})
    assert killed.returncode == 137, killed.stdout + killed.stderr
    first, last, upto = _hot_first(data_dir)
    recorded = sealing.STEPS.index(step) >= sealing.STEPS.index("recorded")
    if recorded:
        assert upto > 0 and first == upto + 1
    else:
        assert (first, upto) == (1, 0)  # every record still hot
    assert _without_sources(answers(data_dir, ids)) == _without_sources(before_sealing)
    assert verify(data_dir) == []
    cli_checked(*args)
    first, _, upto = _hot_first(data_dir)
    assert upto > 0 and first == upto + 1
    assert len(list((data_dir / "history").glob("*snapshot-*"))) == 1
    assert _without_sources(answers(data_dir, ids)) == _without_sources(before_sealing)
    assert verify(data_dir, full=True) == []


def test_b674_the_map_may_grow_while_a_sealing_writes_its_parquet_files(
    built, tmp_path, monkeypatch
):
    """A sealing in a running broker runs in a worker thread: it holds the map while it reads the
    store, not while it writes the segments' Parquet files, so a growth (from another thread, as the
    writer's) is not held up by them."""
    import threading

    from es_broker.history import archive

    data_dir = tmp_path / "data"
    shutil.copytree(built, data_dir)
    config = BrokerConfig(history_segment_records=SEGMENT)
    store = Store.open(data_dir, config)
    write_segment = archive.write_segment
    grown: list[bool] = []

    def writing_while_the_map_grows(*args: Any) -> Any:
        size = store.log.env.info()["map_size"]
        writer = threading.Thread(target=lambda: grown.append(store.log.grow(wait=False)))
        writer.start()
        writer.join(30)
        grown.append(store.log.env.info()["map_size"] == 2 * size)
        return write_segment(*args)

    monkeypatch.setattr(archive, "write_segment", writing_while_the_map_grows)
    try:
        segments = sealing.plan(store, _last_day(), SEGMENT, None)
        assert segments
        prepared = sealing.prepare(
            store, data_dir, sealing.archive_location(str(data_dir)), segments
        )
    finally:
        store.close()
    assert grown == [True, True] * len(segments)
    assert [w.manifest["first_seq"] for w in prepared.written] == [f for f, _ in segments]
