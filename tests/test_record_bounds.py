"""Records are bounded (B-138): `make` refuses what a consumer could not hold, and every record
type the broker writes, at the edges of its ranges, goes through every consumer: the projections
(replay and verify), the SQL read model (SQLite, and PostgreSQL when configured) and the Parquet
export.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import trio
import trio.testing
from sqlalchemy import create_engine, text

from es_broker.acl.access import LoadCause
from es_broker.acl.plain import combine, parse_file
from es_broker.clock import ManualClock
from es_broker.commands.acl_audit import AclAudit
from es_broker.commands.errors import BrokerError, IllegalRequest
from es_broker.commands.placement import MessageIn
from es_broker.commands.queue_locks import QueueLocks
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.log.records import INT64_MAX, INT64_MIN, MAX_TEXT, RecordOutOfRange, make
from es_broker.store import Store
from tests.conftest import START
from tests.helpers import cli_checked
from tests.timetravel_histories import fresh_pg  # noqa: F401  (fixture)

LONG_TEXT = "r" * MAX_TEXT  # the longest text a record may hold


@pytest.mark.parametrize(
    "fields, where",
    [
        ({"offset": INT64_MAX + 1}, "offset"),
        ({"offset": INT64_MIN - 1}, "offset"),
        ({"queues": [[0, 1, 2, 1 << 70]]}, "queues[0][3]"),
        ({"config": {"retryQueueNums": -(1 << 64)}}, "config.retryQueueNums"),
        ({"requester": "x" * (MAX_TEXT + 1)}, "requester"),
        ({"rate": float("inf")}, "rate"),
        ({"queue_id": -1}, "queue_id"),
        ({"queue_id": 1 << 31}, "queue_id"),
        ({"what": object()}, "what"),
    ],
)
def test_make_refuses_a_value_no_consumer_could_hold_and_names_it(fields, where):
    with pytest.raises(RecordOutOfRange, match="record offset_committed: " + re.escape(where)):
        make("offset_committed", START, **fields)


def test_make_accepts_the_edges_of_every_range():
    record = make(
        "offset_committed",
        START,
        offset=INT64_MAX,
        old=INT64_MIN,
        queue_id=(1 << 31) - 1,
        requester=LONG_TEXT,
        extra=[None, True, 1.5, b"raw"],
    )
    assert record["offset"] == INT64_MAX


async def test_a_refused_record_is_a_refusal_and_nothing_is_appended(broker):
    await broker.update_topic(
        {"topicName": "T", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
    )
    before = broker.store.log.last_seq
    with pytest.raises(IllegalRequest, match="does not fit a signed 64-bit integer"):
        await broker.commit_offset("G", "T", 0, INT64_MAX + 1, requester="c")
    assert broker.store.log.last_seq == before


def _edge_history(data_dir: Path) -> None:
    """A log holding every kind of record the core writes, with values at the edges of their ranges."""

    async def scenario() -> None:
        clock = ManualClock(START)
        config = BrokerConfig(
            storePathRootDir=str(data_dir),
            messageDelayLevel="1s 2s",
            total_physical_memory_bytes=1024**3,
        )
        broker = Broker.open(data_dir, config, clock)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            await broker.update_topic(
                {"topicName": "T", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
                requester=LONG_TEXT,
            )
            phys = []
            for i in range(6):
                clock.advance(1000)
                put = await broker.put_message(
                    "T",
                    i % 2,
                    MessageIn(b"m%d" % i, {"KEYS": f"k{i}"}),
                    requester="p1",
                    producer_group="PG",
                )
                phys.extend(put.physical_offsets)
            await broker.put_message("T", 0, MessageIn(b"later", {"DELAY": "1"}), requester="p1")
            await broker.query_consumer_offset("G", "T", 0, requester="c1")  # offset_queried
            await broker.pull("G", "T", 0, 0, client="c1")  # messages_delivered
            await broker.pull("G", "T", 1, INT64_MAX, client="c1")  # pull_offset_moved
            await broker.commit_offset("G", "T", 0, INT64_MAX, requester=LONG_TEXT)
            await broker.commit_offset("G", "T", 1, 0, requester="c1")
            await broker.plan_reset(
                "G", "T", INT64_MAX, True, kind="shift", mode="server_side", requester="ops"
            )
            await broker.plan_reset("G", "T", INT64_MIN, True, kind="time", requester="ops")
            await broker.plan_reset(
                "G", "T", INT64_MAX, True, kind="offset", mode="server_side", requester="ops"
            )
            await broker.send_back("G", phys[0], 1, requester="c1")
            await broker.send_back("G", phys[1], -1, requester="c1")  # straight to the DLQ
            await broker.record_consumer_group(
                "G", ["c1"], "CONSUME_FROM_LAST_OFFSET", "CLUSTERING", {"T": "*"}
            )
            await broker.update_group({"groupName": "G2", "retryQueueNums": 1}, requester="ops")
            await broker.clone_group_offset("G", "G3", "T", online_topics=None, requester="ops")
            await broker.update_topic_perm("T", 4, requester="ops")
            await broker.delete_group("G2", requester="ops", remove_offsets=True)
            # queue_locks_changed (B-142..B-147): taken, taken after expiry, released
            locks = QueueLocks(broker.submit, clock, INT64_MAX - START)
            queue = ("T", LONG_TEXT[:255], (1 << 31) - 1)
            await locks.lock_batch("G", LONG_TEXT, [queue])
            locks.max_live_ms = 1
            clock.advance(2)
            await locks.lock_batch("G", "c1", [queue])
            await locks.unlock_batch("G", "c1", [queue])
            with pytest.raises(BrokerError):
                await broker.commit_offset("G", "T", 0, INT64_MAX + 1, requester="c1")
            # acl_loaded and access_denied (B-190..B-194): a startup load queued before the broker ran,
            # an admin load with a long requester, a summary at the edges, one more written at close
            audit = AclAudit(b"s" * 32, interval_s=INT64_MAX)
            audit.on_change(_edge_acl(data_dir), LoadCause.STARTUP, None)
            denials = _Denials()
            await nursery.start(audit.run, broker.submit, clock, denials)
            audit.on_change(_edge_acl(data_dir), LoadCause.ADMIN, LONG_TEXT)
            await trio.testing.wait_all_tasks_blocked()
            assert audit.recorded_loads == 2
            denials.counts[(LONG_TEXT, LONG_TEXT, (1 << 31) - 1)] = INT64_MAX
            assert await audit.flush() > 0
            denials.counts[("anonymous", "127.0.0.1", 10)] = 1
            nursery.cancel_scope.cancel()
        audit.close(broker.store.log)
        broker.close()

    trio.run(scenario)


class _Denials:
    def __init__(self) -> None:
        from collections import Counter

        self.counts: Counter = Counter()

    def take_denials(self):
        taken, self.counts = self.counts, type(self.counts)()
        return taken

    def take_reasons(self):
        return type(self.counts)()


def _edge_acl(data_dir: Path):
    """Two files: an account with every perm field and a long key; an empty one."""
    key = "k" * 4096
    text = (
        f"globalWhiteRemoteAddresses:\n  - 10.10.*.*\naccounts:\n  - accessKey: {key}\n"
        f"    secretKey: TheEdgeSecret\n    whiteRemoteAddress: 192.168.1.1,192.168.1.2\n    admin: true\n"
        f"    defaultTopicPerm: PUB\n    defaultGroupPerm: SUB|PUB\n    topicPerms:\n      - {'t' * 255}=DENY\n"
        f"    groupPerms:\n      - G=SUB\ndataVersion:\n  - timestamp: {INT64_MAX}\n    counter: {INT64_MIN}\n"
    )
    return combine(
        [
            parse_file(data_dir / ("x" * 200 + ".yml"), text.encode()),
            parse_file(data_dir / "e.yml", b""),
        ]
    )


def _log_types(data_dir: Path) -> dict[int, str]:
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=str(data_dir)), readonly=True)
    try:
        return {seq: record["type"] for seq, record in store.log.read()}
    finally:
        store.close()


def test_every_record_type_at_its_edges_goes_through_every_consumer(tmp_path, request):
    data_dir = tmp_path / "data"
    _edge_history(data_dir)
    types = _log_types(data_dir)
    assert {
        "topic_updated",
        "messages_stored",
        "messages_delivered",
        "pull_offset_moved",
        "offset_committed",
        "offset_queried",
        "reset_requested",
        "message_sent_back",
        "consumer_group_changed",
        "subgroup_updated",
        "topic_perm_changed",
        "subgroup_deleted",
        "queue_locks_changed",
        "acl_loaded",
        "access_denied",
    } <= set(types.values())
    # the flushed summary, and the one written at close
    assert list(types.values()).count("access_denied") == 2

    cli_checked(
        "verify", "--data-dir", str(data_dir)
    )  # projections: a replay rebuilds them byte for byte

    urls = [f"sqlite:///{tmp_path / 'readmodel.sqlite'}"]
    if os.environ.get("ES_BROKER_TEST_PG_URL"):
        urls.append(request.getfixturevalue("fresh_pg"))  # every read-model table dropped first
    for url in urls:
        cli_checked("readmodel", "sync", "--data-dir", str(data_dir), "--readmodel-url", url)
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                stored = dict(conn.execute(text("SELECT seq, type FROM records")).all())
        finally:
            engine.dispose()
        assert stored == types, f"records missing from the read model on {url.split(':')[0]}"

    out = tmp_path / "export"
    cli_checked("export", "--data-dir", str(data_dir), "--out", str(out))
    exported: set[int] = set()
    for family in out.iterdir():
        if family.is_dir():
            exported |= set(
                ds.dataset(family, format="parquet", partitioning="hive")
                .to_table(columns=["seq"])
                .column("seq")
                .to_pylist()
            )
    assert exported == set(types), "records missing from the Parquet export"
