"""`es-broker import rocketmq --skip-corrupt` (B-527): each defect of a copy of the 4.9.8 store
(tests/data/rocketmq-4.9.8-store.tar.gz, corrupted at a known offset) becomes an `import_skipped`
record naming its file, byte offset and why, and the import goes on; without the flag the same
copies are refused (tests/test_import_rocketmq.py, B-526)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from es_broker.commands import messages
from es_broker.commands import rocketmq_store as rmq
from es_broker.commands.messages import GetStatus
from es_broker.config import BrokerConfig
from es_broker.core.rocketmq_import import import_store
from es_broker.log.types import RecordType
from es_broker.store import Store
from tests.test_import_rocketmq import FIRST_FILE, _poke, cli, extract

LAST_FILE = "commitlog/00000000000002097152"
# the fixture's broker.conf (its README.md): the target's should be the old broker's (B-523)
DELAY_LEVELS = "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 20m 30m 1h 2h 3h 4h 5h 6h"


def _import(source: Path, target: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Import with skipping; (the import_skipped records, the imported record)."""
    config = BrokerConfig(storePathRootDir=str(target), messageDelayLevel=DELAY_LEVELS)
    import_store(source, target, config, skip_corrupt=True)
    store = Store.open(target, readonly=True)
    try:
        records = [r for _, r in store.log.read()]
    finally:
        store.close()
    skipped = [r for r in records if r["type"] == RecordType.IMPORT_SKIPPED]
    assert records[-1]["type"] == RecordType.IMPORTED
    return skipped, records[-1]


def _bounds_and_messages(target: Path) -> tuple[dict[tuple[str, int], tuple[int, int]], int]:
    store = Store.open(target, readonly=True)
    try:
        with store.read() as txn:
            bounds = {(t, q): (lo, hi) for t, q, lo, hi in store.cq.queues(txn)}
            found = sum(
                1
                for (t, q), (lo, hi) in bounds.items()
                for unit in store.cq.units(txn, t, q, lo, hi)
                if store.message_at(txn, unit.physical_offset) is not None
            )
    finally:
        store.close()
    return bounds, found


def _expected_bounds(source: Path) -> dict[tuple[str, int], tuple[int, int]]:
    expected = json.loads((source / "EXPECTED.json").read_text())
    return {
        (topic, int(qid)): (queue["minOffset"], queue["maxOffset"])
        for topic, about in expected["topics"].items()
        for qid, queue in about["queues"].items()
        if queue["maxOffset"] > queue["minOffset"]
    }


def _verified(target: Path) -> None:
    done = cli("verify", "--data-dir", str(target))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK")


def test_b527_a_bad_magic_code_is_recorded_and_passed_over(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    originals = {s.phy: s for s in rmq.messages(source) if isinstance(s, rmq.Stored)}
    unit = rmq.consume_queues(source)[("MIG_ORDERS", 0)].unit(0)
    assert unit is not None and (unit.phy, unit.size) == (1054, 399)
    _poke(source / FIRST_FILE, 1054 + 4, b"\x00\x00\x00\x01")
    target = tmp_path / "data"
    done = cli(
        "import", "rocketmq", "--store", str(source), "--data-dir", str(target), "--skip-corrupt"
    )
    assert done.returncode == 0, done.stderr
    assert "imported 4129 messages" in done.stdout
    assert "skipped 1 corrupt items (1 consume-queue units kept without their message)" in (
        done.stdout
    )
    store = Store.open(target, readonly=True)
    try:
        records = [r for _, r in store.log.read()]
        (skipped,) = [r for r in records if r["type"] == RecordType.IMPORT_SKIPPED]
        assert {k: skipped[k] for k in ("file", "offset", "kind", "phy", "size", "why")} == {
            "file": FIRST_FILE,
            "offset": 1054,
            "kind": "commit_log",
            "phy": 1054,
            "size": 399,  # to the next offset that starts a message
            "why": "bad MAGICCODE 0x00000001",
        }
        assert skipped["source"] == str(source.resolve())
        assert skipped["units"] == [["MIG_ORDERS", 0, 0, 1054, 399, unit.tags]]
        assert records[-1]["skipped"] == 1 and records[-1]["messages"] == 4129
        with store.read() as txn:
            for phy, stored in originals.items():  # the rest carried byte for byte
                assert store.message_at(txn, phy) == (None if phy == 1054 else stored.raw)
            assert (
                store.cq.bounds(txn, "MIG_ORDERS", 0) == _expected_bounds(source)[("MIG_ORDERS", 0)]
            )
            # a read passes over the unit without a message, as getMessage over a removed one
            got = messages.get_message(store, txn, "MIG_ORDERS", 0, 0, 4)
            assert (got.status, got.offsets, got.next_begin_offset) == (
                GetStatus.FOUND,
                (1, 2, 3, 4),
                5,
            )
    finally:
        store.close()
    _verified(target)  # a replay rebuilds the same databases

    # the export Spark reads holds it (a type no family claims is a row of `other`)
    import pyarrow.dataset as ds

    done = cli("export", "--data-dir", str(target), "--out", str(tmp_path / "x"))
    assert done.returncode == 0, done.stderr
    rows = ds.dataset(tmp_path / "x" / "other", format="parquet", partitioning="hive")
    bodies = [json.loads(r["body"]) for r in rows.to_table().to_pylist()]
    assert [
        (b["file"], b["offset"], b["why"]) for b in bodies if b["type"] == "import_skipped"
    ] == [(FIRST_FILE, 1054, "bad MAGICCODE 0x00000001")]


def test_b527_a_body_crc_mismatch_is_passed_over_by_its_totalsize(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    target = tmp_path / "data"
    stored = next(s for s in rmq.messages(source) if s.phy == 1054)
    assert isinstance(stored, rmq.Stored)
    body_at = 1054 + stored.raw.index(stored.message.body)
    _poke(source / FIRST_FILE, body_at, b"X")
    skipped, imported = _import(source, target)
    (record,) = skipped
    assert (record["file"], record["offset"], record["phy"], record["size"]) == (
        FIRST_FILE,
        1054,
        1054,
        399,
    )
    assert record["why"].startswith("body CRC 1322519286 stored, ")
    assert [u[:3] for u in record["units"]] == [["MIG_ORDERS", 0, 0]]
    assert imported["messages"] == 4129
    bounds, found = _bounds_and_messages(target)
    assert bounds == _expected_bounds(source) and found == 4129
    _verified(target)


def test_b527_a_truncated_commit_log_keeps_every_queue_offset(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    target = tmp_path / "data"
    cut = 200_000
    every = [s for s in rmq.messages(source) if isinstance(s, rmq.Stored)]
    lost = [s for s in every if s.phy + len(s.raw) > 2_097_152 + cut]
    straddling = next(s for s in lost if s.phy < 2_097_152 + cut)
    with (source / LAST_FILE).open("r+b") as f:
        f.truncate(cut)
    skipped, imported = _import(source, target)
    assert [(r["file"], r["offset"], r["kind"], r["phy"], r["size"]) for r in skipped] == [
        (
            LAST_FILE,
            straddling.at,
            "commit_log",
            straddling.phy,
            2_097_152 + cut - straddling.phy,
        ),
        (LAST_FILE, cut, "commit_log", 2_097_152 + cut, 1_048_576 - cut),
    ]
    assert skipped[0]["why"].startswith(f"truncated message: TOTALSIZE {len(straddling.raw)}")
    assert skipped[1]["why"] == (
        f"truncated: {1_048_576 - cut} bytes missing (the file ends at {cut}; its files are "
        "1048576 bytes)"
    )
    kept = [u for r in skipped for u in r["units"]]
    assert sorted(u[3] for u in kept) == [s.phy for s in lost]  # each lost message's unit
    assert imported["messages"] == len(every) - len(lost) and imported["skipped"] == 2
    bounds, found = _bounds_and_messages(target)
    assert bounds == _expected_bounds(source)  # every queue keeps its offsets
    assert found == len(every) - len(lost)
    store = Store.open(target, readonly=True)
    try:
        with store.read() as txn:  # no later message goes where a kept unit points
            assert store.commitlog.phy_max(txn) == 3_145_728
    finally:
        store.close()
    _verified(target)


def test_b527_a_unit_past_the_log_is_rebuilt_from_the_message_claiming_its_offset(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    target = tmp_path / "data"
    queues = rmq.consume_queues(source)
    orders, delayed = (
        queues[("MIG_ORDERS", 0)].unit(601),
        queues[("SCHEDULE_TOPIC_XXXX", 17)].unit(0),
    )
    assert orders is not None and delayed is not None
    _poke(orders.path, orders.at, rmq.CQ_UNIT.pack(5_000_000, 400, 0))
    _poke(delayed.path, delayed.at, rmq.CQ_UNIT.pack(6_000_000, 10, 0))
    skipped, imported = _import(source, target)
    assert [
        (r["file"], r["offset"], r["kind"], r["phy"], r["size"], r["units"]) for r in skipped
    ] == [
        ("consumequeue/MIG_ORDERS/0/00000000000000012000", 20, "consume_queue", 5_000_000, 400, []),
        (
            "consumequeue/SCHEDULE_TOPIC_XXXX/17/00000000000000000000",
            0,
            "consume_queue",
            6_000_000,
            10,
            [],
        ),
    ]
    assert "past the commit log's end (3145728)" in skipped[0]["why"]
    assert skipped[0]["why"].endswith(
        f"the message at {orders.phy} carried with its unit rebuilt from it"
    )
    assert imported["messages"] == 4130
    store = Store.open(target, readonly=True)
    try:
        with store.read() as txn:
            # rebuilt as 4.9.8's dispatch builds it: the tags' hash, and the schedule's due time
            for topic, qid, offset, unit in (
                ("MIG_ORDERS", 0, 601, orders),
                ("SCHEDULE_TOPIC_XXXX", 17, 0, delayed),
            ):
                got = store.cq.unit_at(txn, topic, qid, offset)
                assert (got.physical_offset, got.size, got.tags_code) == (
                    unit.phy,
                    unit.size,
                    unit.tags,
                )
    finally:
        store.close()
    _verified(target)


def test_b527_a_unit_no_message_claims_is_left_out_at_its_queues_end(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    target = tmp_path / "data"
    queue = rmq.consume_queues(source)[("MIG_EVENTS", 1)]
    first, path = queue.files[-1]
    at = (queue.hi - first) * rmq.CQ_UNIT.size  # one unit more, past the log
    _poke(path, at, rmq.CQ_UNIT.pack(9_000_000, 300, 5))
    skipped, imported = _import(source, target)
    (record,) = skipped
    assert (record["file"], record["offset"], record["kind"], record["phy"], record["units"]) == (
        "consumequeue/MIG_EVENTS/1/00000000000000006000",
        at,
        "consume_queue",
        9_000_000,
        [],
    )
    assert record["why"].endswith("left out, the queue ends before it")
    assert imported["messages"] == 4130
    bounds, found = _bounds_and_messages(target)
    assert bounds == _expected_bounds(source) and found == 4130
    _verified(target)


def test_b527_a_unit_no_message_claims_within_its_queue_still_refuses(tmp_path):
    """A pull reads a unit's offset as a message's start: a unit in the middle of its queue that
    names no message, whose own message is gone too, has no place to be kept."""
    source = extract(tmp_path / "store", read_only=False)
    unit = rmq.consume_queues(source)[("MIG_ORDERS", 0)].unit(0)
    assert unit is not None
    _poke(source / FIRST_FILE, 1054 + 4, b"\x00\x00\x00\x01")  # its message unreadable
    _poke(unit.path, unit.at, rmq.CQ_UNIT.pack(9_000_000, 399, unit.tags))  # its unit astray
    target = tmp_path / "data"
    with pytest.raises(rmq.StoreCorrupt, match="cannot be left out, even with --skip-corrupt"):
        _import(source, target)
    assert not target.exists()
