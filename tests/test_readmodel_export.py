"""`es-broker export`: Parquet by family and day, incremental, documented."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import trio

from es_broker.clock import ManualClock
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.readmodel.export import CHECKPOINT, export
from es_broker.schema.families import FAMILIES, RunningTime, schema_markdown
from es_broker.schema.rows import rows_of
from es_broker.store import Store
from es_broker.timetravel.timeparse import utc_day
from tests.conftest import START
from tests.helpers import cli
from tests.process_fixtures import ROOT
from tests.timetravel_histories import reset_by_time

DAY = 86_400_000


async def write(data_dir: Path, clock: ManualClock, days: int) -> None:
    """Messages, commits and a reset spread over `days` UTC days."""
    broker = Broker.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await broker.update_topic(
            {"topicName": "T", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
        )
        for _ in range(days):
            for q in (0, 1):
                await broker.put_messages("T", q, [MessageIn(b"m")] * 3)
                await broker.commit_offset("G", "T", q, broker.max_offset("T", q), requester="c1")
            clock.advance(DAY // 2)
            await reset_by_time(
                broker, "G", "T", clock.now_ms() - DAY // 4, True, mode="server_side"
            )
            clock.advance(DAY // 2)
        nursery.cancel_scope.cancel()
    broker.close()


def expected_rows(data_dir: Path) -> dict[str, list[tuple]]:
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    clock, out = RunningTime(), {}
    for seq, record in store.log.read():
        time = clock.advance(record["ts"])
        for family, row in rows_of(seq, record, time):
            out.setdefault(family, []).append((row["seq"], row["time"], utc_day(time)))
    store.close()
    return {k: sorted(v) for k, v in out.items()}


def exported_rows(out: Path) -> dict[str, list[tuple]]:
    found = {}
    for family in FAMILIES:
        if (out / family).exists():
            table = ds.dataset(out / family, format="parquet", partitioning="hive").to_table()
            found[family] = sorted(
                zip(
                    table["seq"].to_pylist(),
                    table["time"].to_pylist(),
                    [str(d) for d in table["day"].to_pylist()],
                    strict=True,
                )
            )
    return found


def test_export_writes_one_dataset_per_family_partitioned_by_utc_day(tmp_path):
    data_dir, out = tmp_path / "data", tmp_path / "export"
    trio.run(write, data_dir, ManualClock(START), 3)
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    result = export(store.log, out)
    store.close()
    expected = expected_rows(data_dir)
    assert exported_rows(out) == expected
    days = {p.name for p in (out / "offsets").iterdir()}
    assert days == {f"day={day}" for _, _, day in expected["offsets"]} and len(days) >= 3
    assert set(result.rows) >= {"offsets", "resets", "messages", "topics"}
    assert json.loads((out / CHECKPOINT).read_text())["last_seq"] == result.last_seq


def test_export_is_incremental_and_a_redone_chunk_replaces_its_files(tmp_path):
    data_dir, out = tmp_path / "data", tmp_path / "export"
    clock = ManualClock(START)
    trio.run(write, data_dir, clock, 1)
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    first = export(store.log, out, chunk=7)
    store.close()
    trio.run(write, data_dir, clock, 2)  # the broker goes on
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    checkpoint = (out / CHECKPOINT).read_text()
    second = export(store.log, out, chunk=7)
    assert second.first_seq == first.last_seq + 1
    assert export(store.log, out, chunk=7).first_seq is None  # nothing new
    # as if the second run died before its checkpoint moved
    (out / CHECKPOINT).write_text(checkpoint)
    export(store.log, out, chunk=7)
    store.close()
    assert exported_rows(out) == expected_rows(data_dir)  # no row twice


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("first", "then", "held", "flag"),
    [
        ((), ("--cluster",), "a broker's export alone (_export_checkpoint.json)", "without"),
        (("--cluster",), (), "a cluster export (_export_checkpoint.<broker>.<id>.json)", "with"),
    ],
    ids=["alone-then-cluster", "cluster-then-alone"],
)
def test_an_export_into_a_root_of_the_other_layout_is_refused_and_writes_nothing(
    tmp_path, first, then, held, flag
):
    data_dir, root = tmp_path / "data", tmp_path / "export"
    trio.run(write, data_dir, ManualClock(START), 1)
    exported = "export", "--data-dir", str(data_dir), "--out", str(root)
    assert cli(*exported, *first).returncode == 0
    before = _files(root)
    done = cli(*exported, *then)
    assert done.returncode == 2
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"es-broker export: {root} holds {held}: export into it {flag} --cluster, "
        "or into another --out"
    ]
    assert _files(root) == before
    # the root's own layout still exports into it incrementally: nothing new since
    again = cli(*exported, *first)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"nothing new: {root} already holds records 1..")


def test_the_schema_document_is_current():
    assert (ROOT / "spark" / "SCHEMA.md").read_text() == schema_markdown()


def test_a_delivery_a_slave_served_is_a_deliveries_row_with_served_by_in_extra():
    from es_broker.log import make

    served_by = {"broker_id": 1, "addr": "10.0.0.2:10921", "ts": START - 5, "local_seq": 3}
    record = make(
        "messages_delivered",
        START,
        group="G",
        topic="T",
        queue_id=0,
        offset=0,
        offsets=[0, 1],
        next_offset=2,
        client="c",
        served_by=served_by,
    )
    ((family, row),) = rows_of(9, record, START)
    assert (family, row["ts"], row["count"], row["client"]) == ("deliveries", START, 2, "c")
    assert json.loads(row["extra"]) == {"served_by": served_by}
    merged = make(
        "slave_offsets_merged",
        START,
        broker_id=1,
        slave_addr="s",
        policy="latest_wins",
        journal_upto=3,
        commits=[],
        queues=[],
        deliveries=1,
        requester="s",
    )
    assert [f for f, _ in rows_of(10, merged, START)] == ["other"]  # no offset moved: kept as JSON
