"""The key index after a sealing (B-401, B-407, B-670): keyed messages that retention expires after
the sealing's snapshot leave the key index of a replay from that snapshot as they left the live one."""

from __future__ import annotations

from pathlib import Path

import trio

from es_broker.clock import ManualClock
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.store import Store
from tests.conftest import make_topic
from tests.helpers import cli_checked, local_ms

TOPIC = "KT"
EARLY = 12  # keyed messages of day 1, in the commit log's first files
SEGMENT = 4


def _config(data_dir: str) -> BrokerConfig:
    return BrokerConfig(storePathRootDir=data_dir, mappedFileSizeCommitLog=2000)


async def _day_one(data_dir: str) -> list[int]:
    """Keyed messages of day 1; their physical offsets."""
    clock = ManualClock(local_ms(1, 10))
    broker = Broker.open(data_dir, _config(data_dir), clock)
    phys: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await make_topic(broker, TOPIC, queues=1)
        for i in range(EARLY):
            message = MessageIn(b"x" * 200, {"KEYS": f"M{i} day-one", "UNIQ_KEY": f"U{i:04d}"})
            put = await broker.put_messages(TOPIC, 0, [message])
            phys.extend(put.physical_offsets)
            clock.advance(60_000)
        nursery.cancel_scope.cancel()
    broker.close()
    return phys


async def _day_twenty(data_dir: str) -> None:
    """After the sealing and a restart: newer keyed messages, then retention expires day 1's."""
    clock = ManualClock(local_ms(20, 3))
    broker = Broker.open(data_dir, _config(data_dir), clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        for i in range(20):
            message = MessageIn(b"y" * 200, {"KEYS": f"N{i}", "UNIQ_KEY": f"V{i:04d}"})
            await broker.put_messages(TOPIC, 0, [message])
        clock.set(local_ms(20, 4, 30))
        await broker.retention_pass(manual=True)
        nursery.cancel_scope.cancel()
    broker.close()


def _offset(entry: bytes) -> int:
    """The physical offset a key_hash entry points at: its last 48 bits (B-471)."""
    return int.from_bytes(entry[-6:], "big")


def _indexed(data_dir: Path) -> tuple[int, set[int]]:
    """(phyMin, the physical offsets the key index has entries of)."""
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        with store.read() as txn:
            offsets = {_offset(e) for _, e in store.keyindex.entries(txn)}
            return store.commitlog.phy_min(txn), offsets
    finally:
        store.close()


def test_b670_defect_verify_from_a_snapshot_kept_key_index_entries_of_messages_expired_since(
    tmp_path,
):
    """Retention after a sealing deletes the expired messages' key index entries (it reads their
    bytes as they go); a replay from the sealing's snapshot, which has the surviving bytes only,
    must not keep the snapshot's entries of them: plain verify and verify --full both pass."""
    data_dir = tmp_path / "data"
    phys = trio.run(_day_one, str(data_dir))
    conf = tmp_path / "broker.conf"
    conf.write_text(f"history_segment_records={SEGMENT}\n")
    before = str(local_ms(2, 0))
    cli_checked("archive", "--data-dir", str(data_dir), "--before", before, "--config", str(conf))
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    with store.read() as txn:
        assert store.history.latest(txn) is not None  # sealed, with a snapshot
        snapshot_offsets = {_offset(e) for _, e in store.keyindex.entries(txn)}
    store.close()
    assert snapshot_offsets == set(phys)  # every day-1 message is in the snapshot's index
    trio.run(_day_twenty, str(data_dir))
    phy_min, live = _indexed(data_dir)
    expired = [p for p in phys if p < phy_min]
    assert expired  # retention expired day-1 messages the snapshot indexed
    assert not live & set(expired)  # the live index lost their entries
    assert verify(data_dir, full=True) == []
    assert [d.describe() for d in verify(data_dir)] == []
