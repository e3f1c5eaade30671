"""`es-broker import rocketmq` on the store of a real RocketMQ 4.9.8 broker (B-520..B-526).

tests/data/rocketmq-4.9.8-store.tar.gz is that broker's data directory (its
README.md says how it was made; EXPECTED.json lists what was measured from
its files). Every test extracts it into its own temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from es_broker.client import PushConsumer
from es_broker.clock import ManualClock
from es_broker.commands import rocketmq_store as rmq
from es_broker.commands import schedule, transaction
from es_broker.config import BrokerConfig
from es_broker.core.rocketmq_import import import_store
from es_broker.log.types import RecordType
from es_broker.remoting import message as wire
from es_broker.store import Store
from tests.helpers import FAST, Collector, admin_json, topic_ready
from tests.process_fixtures import ROOT, _env, serve

ARCHIVE = Path(__file__).parent / "data" / "rocketmq-4.9.8-store.tar.gz"
LEVEL_18_MS = 6 * 3_600_000  # messageDelayLevel's 18th: 6h


def extract(into: Path, *, read_only: bool = True) -> Path:
    """The fixture store in `into`; without any write permission unless told otherwise."""
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(into, filter="data")
    if read_only:
        for path in [into, *into.rglob("*")]:
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return into


def writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """(size, mtime, sha256) of every file below root."""
    return {
        str(p.relative_to(root)): (
            p.stat().st_size,
            p.stat().st_mtime_ns,
            hashlib.sha256(p.read_bytes()).hexdigest(),
        )
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "es_broker.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The fixture store (read-only) imported by the command, as a user runs it."""
    base = tmp_path_factory.mktemp("import")
    source = extract(base / "store")
    before = snapshot(source)
    done = cli("import", "rocketmq", "--store", str(source), "--data-dir", str(base / "data"))
    assert done.returncode == 0, done.stderr
    expected = json.loads((source / "EXPECTED.json").read_text())
    return {
        "source": source,
        "data": base / "data",
        "before": before,
        "out": done.stdout,
        "expected": expected,
    }


@pytest.fixture
def store(imported: dict[str, Any]):
    opened = Store.open(imported["data"], readonly=True)
    try:
        yield opened
    finally:
        opened.close()


def test_b520_queues_offsets_topics_groups_and_delay_cursors_are_those_of_the_store(
    imported, store
):
    expected = imported["expected"]
    with store.read() as txn:
        for topic, about in expected["topics"].items():
            config = store.topics.get(txn, topic)
            want = about.get("config")  # 4.9.8 writes op messages without a topic config
            assert (config is None) == (want is None), topic
            if want is None:
                continue
            assert (
                config.read_queue_nums,
                config.write_queue_nums,
                config.perm,
                config.topic_filter_type,
                config.topic_sys_flag,
                config.order,
            ) == (
                want["readQueueNums"],
                want["writeQueueNums"],
                want["perm"],
                want["topicFilterType"],
                want["topicSysFlag"],
                want["order"],
            ), topic

        for topic, about in expected["topics"].items():
            for qid, queue in about["queues"].items():
                bounds = store.cq.bounds(txn, topic, int(qid))
                assert bounds == (queue["minOffset"], queue["maxOffset"]), (topic, qid)
        counts = Counter()
        for topic, _, lo, hi in store.cq.queues(txn):
            counts[topic] += hi - lo
        assert dict(counts) == expected["counts"]["perTopic"]
        for group, by_topic in expected["consumerOffsets"].items():
            for topic, table in by_topic.items():
                for qid, offset in table.items():
                    assert store.offsets.query(txn, topic, group, int(qid)) == offset
        assert {str(k): v for k, v in store.schedule.cursors(txn)} == expected["delayOffset"]
        for group, want in expected["subscriptionGroups"].items():
            got = store.groups.get(txn, group)
            assert got is not None, group
            assert (
                got.consume_broadcast_enable,
                got.retry_max_times,
                got.retry_queue_nums,
                got.consume_enable,
                got.consume_from_min_enable,
                got.broker_id,
                got.which_broker_when_consume_slowly,
            ) == (
                want["consumeBroadcastEnable"],
                want["retryMaxTimes"],
                want["retryQueueNums"],
                want["consumeEnable"],
                want["consumeFromMinEnable"],
                want["brokerId"],
                want["whichBrokerWhenConsumeSlowly"],
            ), group
        assert store.commitlog.phy_max(txn) == expected["commitLog"]["maxOffset"]


def _imported_messages(store: Store) -> list[wire.StoredMessage]:
    out = []
    with store.read() as txn:
        for topic, qid, lo, hi in store.cq.queues(txn):
            for offset in range(lo, hi):
                unit = store.cq.unit_at(txn, topic, qid, offset)
                raw = store.message_at(txn, unit.physical_offset)
                assert raw is not None, (topic, qid, offset)
                out.append(wire.decode_one(raw)[0])
    return out


def test_b520_every_message_keeps_its_bytes_offsets_and_fields(imported, store):
    expected = imported["expected"]
    source = {s.phy: s.raw for s in rmq.messages(imported["source"])}
    with store.read() as txn:
        for phy, raw in source.items():  # bodies, compressed ones as they are: the bytes whole
            assert store.message_at(txn, phy) == raw, phy
    messages = _imported_messages(store)
    assert len(messages) == expected["commitLog"]["messageCount"] == len(source)
    by_topic: dict[str, list[wire.StoredMessage]] = {}
    for msg in messages:
        by_topic.setdefault(msg.topic, []).append(msg)
    for topic, stats in expected["messageStats"].items():
        got = by_topic[topic]
        assert len(got) == stats["commitLogMessages"]
        assert Counter(str(m.sys_flag) for m in got) == Counter(stats["sysFlags"])
        assert Counter(str(m.reconsume_times) for m in got) == Counter(stats["reconsumeTimes"])
        assert sum(len(m.body) for m in got) == stats["bodyBytes"]
        if "tags" in stats:
            assert Counter(m.properties.get("TAGS") for m in got) == Counter(stats["tags"])
        if "compressedKeys" in stats:
            keys = {m.properties["KEYS"] for m in got if m.sys_flag & wire.FLAG_COMPRESSED}
            assert keys == set(stats["compressedKeys"])
        if "keys" in stats:  # the dead letters
            assert sorted(m.properties["KEYS"] for m in got) == sorted(stats["keys"])
        for batch in stats.get("batches", []):
            placed = {m.properties["KEYS"]: m for m in got if m.queue_id == batch["queueId"]}
            assert [placed[k].queue_offset for k in batch["keys"]] == batch["queueOffsets"]
            assert [placed[k].physical_offset for k in batch["keys"]] == batch["physicalOffsets"]
    delayed = Counter(m.queue_id + 1 for m in by_topic["SCHEDULE_TOPIC_XXXX"])
    assert {str(k): v for k, v in delayed.items()} == expected["messageStats"][
        "SCHEDULE_TOPIC_XXXX"
    ]["byDelayLevel"]


def _host(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


def test_b520_the_ten_samples_field_by_field(imported, store):
    for sample in imported["expected"]["samples"]:
        with store.read() as txn:
            unit = store.cq.unit_at(txn, sample["topic"], sample["queueId"], sample["queueOffset"])
            raw = store.message_at(txn, unit.physical_offset)
        assert raw is not None
        msg = wire.decode_one(raw)[0]
        body = zlib.decompress(msg.body) if msg.sys_flag & wire.FLAG_COMPRESSED else msg.body
        got = {
            "topic": msg.topic,
            "queueId": msg.queue_id,
            "queueOffset": msg.queue_offset,
            "physicalOffset": unit.physical_offset,
            "totalSize": len(raw),
            "sysFlag": msg.sys_flag,
            "flag": msg.flag,
            "keys": msg.properties.get("KEYS"),
            "tags": msg.properties.get("TAGS"),
            "msgId": msg.properties.get("UNIQ_KEY"),
            "offsetMsgId": wire.offset_msg_id(msg.store_host, msg.physical_offset),
            "bornTimestamp": msg.born_timestamp,
            "storeTimestamp": msg.store_timestamp,
            "bornHost": _host(msg.born_host),
            "storeHost": _host(msg.store_host),
            "reconsumeTimes": msg.reconsume_times,
            "preparedTransactionOffset": msg.prepared_transaction_offset,
            "bodyCrc": msg.body_crc,
            "storedBodyLength": len(msg.body),
            "storedBodySha256": hashlib.sha256(msg.body).hexdigest(),
            "bodyLength": len(body),
            "bodySha256": hashlib.sha256(body).hexdigest(),
            "properties": msg.properties,
        }
        want = {k: v for k, v in sample.items() if k in got}
        assert got == want, sample["why"]
        assert unit.store_time == sample["storeTimestamp"]


def test_b520_every_item_is_a_record_that_names_the_import(imported, store):
    records = [r for _, r in store.log.read()]
    kinds = Counter((r["type"], r.get("cause")) for r in records)
    configured = [t for t, about in imported["expected"]["topics"].items() if "config" in about]
    assert kinds[(RecordType.TOPIC_UPDATED, "import")] == len(configured) == 15
    assert kinds[(RecordType.SUBGROUP_UPDATED, "import")] == 10
    assert kinds[(RecordType.OFFSET_COMMITTED, "import")] == 14
    stored = [r for r in records if r["type"] == RecordType.MESSAGES_STORED]
    assert {r["cause"] for r in stored} == {"import"}
    assert sum(len(r["units"]) for r in stored) == 4130
    last = records[-1]
    assert last["type"] == RecordType.IMPORTED
    assert last["source"] == str(imported["source"])
    source = imported["source"]
    files = {path: (size, sha) for path, size, sha in last["files"]}
    for path in [
        "checkpoint",
        "commitlog/00000000000001048576",
        "config/consumerOffset.json",
        "config/topics.json.bak",  # the .bak copies are checksummed too, not read (B-520)
    ]:
        data = (source / path).read_bytes()
        assert files[path] == (len(data), hashlib.sha256(data).hexdigest())
    assert len([p for p in files if p.startswith("consumequeue/")]) == 23
    assert last["messages"] == 4130
    assert last["messages_per_topic"] == imported["expected"]["counts"]["perTopic"]
    assert last["delay_offsets"] == [[3, 80], [4, 40]]
    assert last["open_transactions"] == 5
    assert "4130 messages" in imported["out"] and "messages a second" in imported["out"]
    assert "commit-log files are 1048576 bytes" in imported["out"]  # the default is 1 GiB
    explained = cli(
        "explain", "--data-dir", str(imported["data"]), "-g", "GID_MIG_HALF", "-t", "MIG_ORDERS"
    )
    assert explained.returncode == 0, explained.stderr
    assert f"-1 -> 281 by import rocketmq {source} (import)" in explained.stdout
    # no consumer has asked yet: the offset was stored before, and the line says so
    assert "an offset was stored here before any consumer asked for one (first -1 -> 281" in (
        explained.stdout
    )
    assert "consumers (none now)" in explained.stdout


def test_b520_the_source_is_read_without_a_write(imported):
    assert snapshot(imported["source"]) == imported["before"]
    assert not os.access(imported["source"] / "commitlog", os.W_OK) or os.geteuid() == 0


def test_b520_verify_passes_on_the_imported_directory(imported, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(imported["data"], copy)
    done = cli("verify", "--data-dir", str(copy))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK")


def _copy(imported: dict[str, Any], tmp_path: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(imported["data"], copy)
    return copy


def test_b523_a_delayed_message_becomes_due_when_it_would_have(imported, tmp_path):
    clock = ManualClock()
    store = Store.open(_copy(imported, tmp_path), clock=clock)
    try:
        with store.read() as txn:
            first = store.cq.unit_at(txn, "SCHEDULE_TOPIC_XXXX", 17, 0)
        due = first.tags_code
        assert due == first.store_time + LEVEL_18_MS
        clock.set(due - 1)
        (done,) = store.log.write_batch([schedule.deliver_due_job(store)])
        assert done[0] and done[1].delivered == ()
        clock.set(due)
        (done,) = store.log.write_batch([schedule.deliver_due_job(store)])
        assert done[0]
        (delivered,) = done[1].delivered  # the next waits for its own due time
        assert (delivered.level, delivered.schedule_offset, delivered.topic) == (
            18,
            0,
            "MIG_EVENTS",
        )
        with store.read() as txn:
            assert store.cq.bounds(txn, "MIG_EVENTS", delivered.queue_id)[1] == (
                delivered.queue_offset + 1
            )
            raw = store.message_at(txn, delivered.physical_offset)
        assert wire.decode_one(raw)[0].properties["KEYS"] == "evt-delayed-0"
    finally:
        store.close()


def test_b524_the_open_transactions_are_checked_with_their_producer_group(imported, tmp_path):
    store = Store.open(_copy(imported, tmp_path))
    try:
        job = transaction.check_pass_job(store, {"PID_MIG_TX": ["127.0.0.1@tx"]})
        ((ok, checked),) = store.log.write_batch([job])
        assert ok
        assert sorted(c.header.tran_state_table_offset for c in checked.checks) == [
            10,
            11,
            12,
            13,
            14,
        ]
        assert {c.producer_group for c in checked.checks} == {"PID_MIG_TX"}
        assert {c.client for c in checked.checks} == {"127.0.0.1@tx"}
        assert {c.attempt for c in checked.checks} == {2}  # TRANSACTION_CHECK_TIMES 1, then this
        keys = sorted(wire.decode_one(c.body)[0].properties["KEYS"] for c in checked.checks)
        assert keys == [f"order-tx-{n}" for n in (1, 3, 5, 7, 9)]
        assert {wire.decode_one(c.body)[0].topic for c in checked.checks} == {"MIG_ORDERS"}
    finally:
        store.close()


async def test_b521_a_push_consumer_resumes_at_its_committed_offsets(imported, tmp_path, nursery):
    expected = imported["expected"]
    committed = {
        int(q): o for q, o in expected["consumerOffsets"]["GID_MIG_HALF"]["MIG_ORDERS"].items()
    }
    ends = {int(q): v["maxOffset"] for q, v in expected["topics"]["MIG_ORDERS"]["queues"].items()}
    rest = sum(ends[q] - committed[q] for q in ends)
    with serve(_copy(imported, tmp_path)) as broker:
        await topic_ready(broker, "MIG_ORDERS", 4)
        collector = Collector()
        consumer = PushConsumer(
            broker.namesrv,
            "GID_MIG_HALF",
            collector,
            subscriptions={"MIG_ORDERS": "*"},
            client_ip="127.0.0.1",
            config=FAST,
        )
        await consumer.start(nursery)
        try:
            await collector.wait_count(rest, timeout=60)
        finally:
            await consumer.shutdown()
        got = Counter((m.queue.queue_id, m.queue_offset) for m in collector.received)
        assert set(got) == {(q, o) for q in ends for o in range(committed[q], ends[q])}
        assert max(got.values()) == 1
        zipped = set(expected["messageStats"]["MIG_ORDERS"]["compressedKeys"])
        compressed = [m for m in collector.received if m.properties["KEYS"] in zipped]
        assert compressed and {len(m.body) for m in compressed} == {6000}  # inflated by the client

        # the keys and unique keys of the store, looked up on the broker (B-522)
        sample = expected["samples"][1]
        (by_key,) = await admin_json(broker, "queryMsgByKey", "-t", "MIG_ORDERS", "-k", "order-37")
        assert (by_key["queueId"], by_key["queueOffset"]) == (0, 9)
        (by_uniq,) = await admin_json(
            broker, "queryMsgByUniqueKey", "-i", sample["msgId"], "-t", "MIG_ORDERS"
        )
        assert by_uniq["offsetMsgId"] == sample["offsetMsgId"]
        # the offsetMsgId's offset names the same message; its host is the old broker's, so ask
        # this one at that offset (a broker taking over the old address is asked directly)
        _, phy = wire.parse_offset_msg_id(sample["offsetMsgId"])
        host, port = broker.addr.rsplit(":", 1)
        here = wire.offset_msg_id((host, int(port)), phy)
        by_id = await admin_json(broker, "queryMsgById", "-i", here)
        assert by_id["properties"]["UNIQ_KEY"] == sample["msgId"]


# ---------------------------------------------------------------------- refusals (B-526)


def _refused(tmp_path: Path, source: Path, match: str) -> None:
    target = tmp_path / "target"
    with pytest.raises(rmq.StoreCorrupt, match=match):
        import_store(source, target, BrokerConfig(storePathRootDir=str(target)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # nothing half-built


def _poke(path: Path, at: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(at)
        f.write(data)


FIRST_FILE = "commitlog/00000000000000000000"


def test_b526_a_bad_magic_code_is_refused_naming_file_and_offset(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    _poke(source / FIRST_FILE, 1054 + 4, b"\x00\x00\x00\x01")
    _refused(tmp_path, source, rf"{FIRST_FILE} at byte 1054: bad MAGICCODE 0x00000001")


def test_b526_a_body_crc_mismatch_is_refused(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    raw = (source / FIRST_FILE).read_bytes()
    msg = wire.decode_one(raw, 1054)[0]
    body_at = 1054 + len(raw[1054 : 1054 + 399]) - 2 - len(wire.encode_properties(msg.properties))
    body_at -= 1 + len(msg.topic.encode()) + len(msg.body)
    assert raw[body_at : body_at + len(msg.body)] == msg.body
    _poke(source / FIRST_FILE, body_at, b"X")
    _refused(
        tmp_path, source, rf"{FIRST_FILE} at byte 1054: body CRC 1322519286 stored, \d+ computed"
    )


def test_b526_a_truncated_commit_log_is_refused(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    last = source / "commitlog" / "00000000000002097152"
    with last.open("r+b") as f:
        f.truncate(200_000)
    _refused(
        tmp_path,
        source,
        r"commitlog/00000000000002097152 at byte 200000: truncated: 200000 bytes, not 1048576",
    )


def test_b526_a_truncated_single_file_is_refused_at_the_cut_message(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    for name in ("00000000000001048576", "00000000000002097152"):
        (source / "commitlog" / name).unlink()
    # the op queue is read first (which transactions ended); its units named the files removed
    shutil.rmtree(source / "consumequeue" / "RMQ_SYS_TRANS_OP_HALF_TOPIC")
    with (source / FIRST_FILE).open("r+b") as f:
        f.truncate(1054 + 100)
    _refused(tmp_path, source, rf"{FIRST_FILE} at byte 1054: truncated message: TOTALSIZE 399")


def test_b526_a_consume_queue_unit_pointing_past_the_log_is_refused(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    queue = source / "consumequeue" / "MIG_ORDERS" / "0" / "00000000000000012000"
    _poke(queue, 20, rmq.CQ_UNIT.pack(5_000_000, 400, 0))
    _refused(
        tmp_path,
        source,
        r"MIG_ORDERS/0/00000000000000012000 at byte 20: the unit of queue offset 601 names "
        r"commit-log offset 5000000 \(400 bytes\), past the commit log's end \(3145728\)",
    )


def test_b526_malformed_json_is_refused(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    path = source / "config" / "subscriptionGroup.json"
    path.write_text(path.read_text()[:300])
    _refused(tmp_path, source, r"config/subscriptionGroup.json at byte \d+: malformed JSON")


def test_b520_a_target_that_is_not_empty_is_refused(tmp_path):
    source = extract(tmp_path / "store")
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    done = cli("import", "rocketmq", "--store", str(source), "--data-dir", str(target))
    assert done.returncode == 2
    assert f"{target} is not empty" in done.stderr
    assert [p.name for p in target.iterdir()] == ["keep"]
    writable(source)


def test_b526_the_command_refuses_with_the_message_and_builds_nothing(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    _poke(source / FIRST_FILE, 1054 + 4, b"\x00\x00\x00\x01")
    done = cli("import", "rocketmq", "--store", str(source), "--data-dir", str(tmp_path / "t"))
    assert done.returncode == 2
    assert "import refused, nothing was written" in done.stderr
    assert "at byte 1054: bad MAGICCODE" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_b521_a_store_whose_oldest_file_was_deleted_starts_where_it_starts(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    (source / FIRST_FILE).unlink()  # as the broker's retention deletes a file
    target = tmp_path / "data"
    import_store(source, target, BrokerConfig(storePathRootDir=str(target)))
    queues = rmq.consume_queues(source)
    store = Store.open(target, readonly=True)
    try:
        with store.read() as txn:
            assert store.commitlog.phy_min(txn) == 1_048_576
            for (topic, qid), queue in queues.items():
                assert store.cq.bounds(txn, topic, qid) == (queue.lo, queue.hi)
            assert store.cq.bounds(txn, "MIG_ORDERS", 0)[0] > 0
            unit = store.cq.unit_at(txn, "MIG_ORDERS", 0, queues[("MIG_ORDERS", 0)].lo)
            assert store.message_at(txn, unit.physical_offset) is not None
    finally:
        store.close()
    done = cli("verify", "--data-dir", str(target))
    assert done.returncode == 0, done.stdout + done.stderr


def test_b526_a_store_whose_broker_runs_or_crashed_is_refused(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    (source / "abort").write_bytes(b"")
    _refused(tmp_path, source, r"abort: its broker is running or did not stop cleanly")


def test_b526_a_message_without_its_consume_queue_unit_is_refused(tmp_path):
    source = extract(tmp_path / "store", read_only=False)
    queue = source / "consumequeue" / "MIG_EVENTS" / "1" / "00000000000000006000"
    with queue.open("r+b") as f:
        f.truncate((410 - 300) * rmq.CQ_UNIT.size)  # the queue's last unit, offset 410, gone
    _refused(
        tmp_path,
        source,
        r"commitlog/00000000000002097152 at byte 78935: the message of MIG_EVENTS queue 1 "
        r"offset 410 has no consume-queue unit",
    )


def test_b520_the_export_spark_reads_says_where_an_offset_came_from(imported, tmp_path):
    import pyarrow.dataset as ds

    done = cli("export", "--data-dir", str(_copy(imported, tmp_path)), "--out", str(tmp_path / "x"))
    assert done.returncode == 0, done.stderr
    rows = ds.dataset(tmp_path / "x" / "offsets", format="parquet", partitioning="hive")
    half = [r for r in rows.to_table().to_pylist() if r["group"] == "GID_MIG_HALF"]
    assert sorted((r["queue_id"], r["old"], r["new"]) for r in half) == [
        (0, -1, 281),
        (1, -1, 361),
        (2, -1, 390),
        (3, -1, 468),
    ]
    assert {(r["cause"], r["requester"]) for r in half} == {
        ("import", f"import rocketmq {imported['source']}")
    }


def test_b520_an_import_into_a_slave_is_refused(tmp_path):
    source = extract(tmp_path / "store")
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerRole=SLAVE\nbrokerId=1\n")
    done = cli(
        "import",
        "rocketmq",
        "--store",
        str(source),
        "--data-dir",
        str(tmp_path / "d"),
        "--config",
        str(conf),
    )
    assert done.returncode == 2
    assert "brokerRole=SLAVE" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broker.conf", "store"]
    writable(source)


def test_b490_an_import_into_a_directory_another_process_writes_is_refused(tmp_path):
    """The import takes the target's lock (B-490): an empty directory another process holds is
    refused with its holder's PID, and left as it was."""
    source = extract(tmp_path / "store")
    target = tmp_path / "target"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from es_broker.log.dirlock import DataDirLock; "
            f"DataDirLock.acquire({str(target)!r}); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        done = cli("import", "rocketmq", "--store", str(source), "--data-dir", str(target))
        assert done.returncode != 0
        assert f"{target} is in use by process {holder.pid}" in done.stderr + done.stdout
        assert [p.name for p in target.iterdir()] == ["lock"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["store", "target"]
    finally:
        holder.communicate("")
    writable(source)
