"""Sealing in a running master (B-411..B-414): over the wire and by itself, bound by what each slave
has fetched; the slave follows across a sealing, and `verify` passes on both directories."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from es_broker.core.replay import compare
from es_broker.core.slave_broker import LogDiverged
from es_broker.ha.protocol import FetchRequest, record_crc
from es_broker.history import horizon
from es_broker.history import seal as sealing
from es_broker.history.archive import raw_at
from es_broker.log import records
from es_broker.remoting.codes import EsRequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.server.namesrv import NameServerRole
from tests.helpers import cli_ok, wait_until
from tests.test_ha_replication import TOPIC, Brokers, Node

SEGMENT = 8
FAR = "4102444800000"  # 2100-01-01: every record is before it
SETTINGS = {"history_segment_records": SEGMENT}


@pytest.fixture
async def brokers(tmp_path, nursery) -> AsyncIterator[Brokers]:
    port = await nursery.start(NameServerRole().run, "127.0.0.1", 0)
    yield Brokers(nursery, tmp_path, f"127.0.0.1:{port}")
    nursery.cancel_scope.cancel()


async def _send(b: Brokers, node: Node, n: int) -> None:
    for i in range(n):
        await b.w.send(node.addr, TOPIC, i % 2, b"m%d" % i)


async def _archive(node: Node) -> dict:
    done = await cli_ok("archive", "-b", node.addr, "--before", FAR, "--json")
    answer: dict = json.loads(done.stdout)
    return answer


def _hot(node: Node, seq: int) -> bool:
    log = node.server.broker.store.log
    with log.read_txn() as txn:
        return txn.get(records.seq_key(seq), db=log.log_db) is not None


def _sealed_upto(node: Node) -> int:
    store = node.server.broker.store
    with store.read() as txn:
        return store.history.sealed_upto(txn)


async def _verify(data_dir: Path) -> None:
    await cli_ok("verify", "--data-dir", str(data_dir))


async def test_b412_records_a_slave_has_not_fetched_are_not_sealed_until_it_has(brokers, tmp_path):
    m = await brokers.master("ASYNC_MASTER", **SETTINGS)
    s = await brokers.slave(m, **SETTINGS)
    await brokers.w.create_topic(m.addr, TOPIC, 2)
    await _send(brokers, m, 20)
    await brokers.caught_up(m, s)
    await s.stop()
    held = s.server.broker.store.log.last_seq
    acked = m.server.replication.slaves_acked[1]
    assert acked <= held
    await _send(brokers, m, 40)  # the slave is away: none of these may be sealed
    first = await _archive(m)
    assert first["sealed"], first
    assert max(x["last_seq"] for x in first["sealed"]) <= acked
    assert first["limited_by"] == ["slave 1"] and first["consumers_position"] == acked
    upto = _sealed_upto(m)
    assert upto == first["sealed"][-1]["last_seq"] and not _hot(m, upto) and _hot(m, acked + 1)
    # B-460: the master brought its archive index up to the new horizon after sealing, in the
    # sealing's process (B-675): the index on disk is there before this process opens it
    path = (tmp_path / "master" / "history" / horizon.INDEX_DIR).resolve()
    assert path not in horizon._OPEN
    index = horizon.ArchiveIndex(path, m.server.broker.config)
    try:
        assert index.upto() == upto
    finally:
        index.log.env.close()
    assert (tmp_path / "master" / "archive" / "snapshots").is_dir()

    # a slave standing right after a sealed record is checked against the archive's copy of it
    store = m.server.broker.store
    with store.read() as txn:
        location = store.history.segment_of(txn, upto)["location"]
    raw = raw_at(location, upto)
    assert raw is not None
    check = m.server.replication._check_history
    check(FetchRequest(1, "x", upto + 1, record_crc(raw), 0, 0))
    with pytest.raises(LogDiverged):
        check(FetchRequest(1, "x", upto + 1, record_crc(raw + b"!"), 0, 0))

    # the slave comes back, fetches the rest (the sealing's records among them) and follows on
    s = await brokers.slave(m, **SETTINGS)
    await brokers.caught_up(m, s)
    assert not _hot(s, upto) and _hot(s, upto + 1)  # the slave applied the sealing too
    second = await _archive(m)
    assert second["sealed"] and second["sealed"][0]["first_seq"] == upto + 1
    assert second["sealed"][-1]["last_seq"] > held
    await _send(brokers, m, 5)
    await brokers.caught_up(m, s)
    assert not _hot(s, second["sealed"][-1]["last_seq"])
    await s.stop()
    await m.stop()
    assert compare(tmp_path / "master", tmp_path / "slave") == []
    await _verify(tmp_path / "master")
    await _verify(tmp_path / "slave")  # from the master's snapshot, read from the archive


async def test_b411_a_slave_and_a_bad_request_are_refused(brokers):
    m = await brokers.master("ASYNC_MASTER", **SETTINGS)
    s = await brokers.slave(m, **SETTINGS)
    w = brokers.w
    answer = await w.client.invoke(s.addr, request(EsRequestCode.HISTORY_ARCHIVE, {"before": 1}), 5)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "master" in (answer.remark or "")
    answer = await w.client.invoke(m.addr, request(EsRequestCode.HISTORY_ARCHIVE, {}), 5)
    assert answer.code != ResponseCode.SUCCESS
    assert _sealed_upto(m) == 0


async def test_b411_history_hot_days_seals_by_itself_and_a_failure_does_not_stop_the_broker(
    brokers, tmp_path, monkeypatch, caplog
):
    # the archive cannot be made at first: its parent is a file (B-675: the sealing's process fails)
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder")
    archive = blocked / "archive"
    # every record is older than the cut-off a day's hot history gives at this "now"
    monkeypatch.setattr(sealing, "default_before", lambda now, days: int(FAR))
    m = await brokers.master(
        "ASYNC_MASTER",
        history_hot_days=1,
        history_seal_interval=20,
        history_archive=str(archive),
        **SETTINGS,
    )
    await brokers.w.create_topic(m.addr, TOPIC, 2)
    await _send(brokers, m, 30)

    def failed() -> bool:
        return any("sealing before" in r.getMessage() for r in caplog.records)

    await wait_until("a failed sealing logged", failed)
    errors = [str(r.exc_info[1]) for r in caplog.records if r.exc_info]
    assert any("sealing's process exited" in e and "NotADirectoryError" in e for e in errors)
    assert _sealed_upto(m) == 0
    await _send(brokers, m, 3)  # still serving
    blocked.unlink()  # the archive is reachable again: the next interval seals
    await wait_until("a sealing by itself", lambda: _sealed_upto(m) > 0)
    await _send(brokers, m, 3)
    store = m.server.broker.store
    with store.read() as txn:
        segments = list(store.history.segments(txn))
    assert {x["requester"] for x in segments} == {"history_hot_days"}
    assert all(Path(x["location"]).parent == archive for x in segments)
    await m.stop()
    await _verify(tmp_path / "master")


async def test_b412_the_read_model_checkpoint_bounds_a_running_sealing(brokers, tmp_path):
    m = await brokers.master("ASYNC_MASTER", **SETTINGS)
    await brokers.w.create_topic(m.addr, TOPIC, 2)
    await _send(brokers, m, 40)
    m.server.sealing.follower = True  # as with --readmodel-url: the follower's checkpoint counts
    assert (await _archive(m))["sealed"] == []  # no checkpoint reported yet: it holds nothing
    (tmp_path / "master" / sealing.READMODEL_POSITION).write_text("21\n")
    answer = await _archive(m)
    assert [(x["first_seq"], x["last_seq"]) for x in answer["sealed"]] == [(1, 8), (9, 16)]
    assert answer["limited_by"] == ["the SQL read model"] and answer["consumers_position"] == 21
    await m.stop()
    await _verify(tmp_path / "master")


async def test_b414_broker_processes_a_master_seals_over_the_wire_and_its_slave_follows(
    tmp_path, nursery
):
    """`es-broker serve` processes: a master and its slave (--role slave --master)."""
    from es_broker.client.admin import Admin
    from es_broker.net.remoting_client import RemotingClient
    from es_broker.readmodel.process import read_position
    from tests.ha_fixtures import Wire
    from tests.process_fixtures import serve

    conf = [f"history_segment_records={SEGMENT}", "brokerRole=ASYNC_MASTER"]
    client = RemotingClient(nursery)
    admin, w = Admin(client, ""), Wire(client)

    async def last_seq(addr: str) -> int:
        return int((await admin.broker_runtime(addr))["recordLogLastSeq"])

    with (
        serve(tmp_path / "master", conf=conf) as m,
        serve(tmp_path / "slave", "--role", "slave", "--master", m.addr, conf=conf[:1]) as s,
    ):
        await w.create_topic(m.addr, TOPIC, 2)
        for i in range(30):
            await w.send(m.addr, TOPIC, i % 2, b"p%d" % i)

        async def same() -> bool:
            return await last_seq(s.addr) == await last_seq(m.addr)

        await wait_until("the slave holds the master's log", same)
        # the SQL read model `serve` runs is a consumer of the log too: until its follower has
        # reported a checkpoint, sealing holds everything (B-412)
        head = await last_seq(m.addr)

        def read_model_caught_up() -> bool:
            return (read_position(tmp_path / "master") or 0) >= head

        await wait_until("the read model's checkpoint reaches the head", read_model_caught_up)
        done = await cli_ok("archive", "-b", m.addr, "--before", FAR, "--json")
        answer = json.loads(done.stdout)
        # `serve` runs the SQL read model too: its checkpoint bounds sealing as the slave does
        assert answer["sealed"] and answer["limited_by"]
        assert set(answer["limited_by"]) <= {"slave 1", "the SQL read model"}
        assert answer["consumers_position"] <= await last_seq(s.addr)
        assert answer["sealed"][-1]["last_seq"] <= answer["consumers_position"]
        for i in range(5):  # the slave keeps following across the sealing
            await w.send(m.addr, TOPIC, 0, b"q%d" % i)
        await wait_until("the slave follows on", same)
    await _verify(tmp_path / "master")
    await _verify(tmp_path / "slave")
    assert compare(tmp_path / "master", tmp_path / "slave") == []


async def test_b462_a_restarted_master_still_does_not_seal_what_an_absent_slave_has_not_fetched(
    brokers, tmp_path
):
    """B-462: what each slave holds is recorded (its catch-up, and every sealing's `slaves`), so a
    master restarted while its slave is away seals no further than that slave has fetched, over
    the wire and on the stopped directory alike; the slave then comes back and follows on."""
    m = await brokers.master("ASYNC_MASTER", **SETTINGS)
    s = await brokers.slave(m, **SETTINGS)
    await brokers.w.create_topic(m.addr, TOPIC, 2)
    await _send(brokers, m, 20)
    await brokers.caught_up(m, s)
    first = await _archive(m)  # records what slave 1 acknowledged then
    assert first["sealed"]
    await _send(brokers, m, 6)
    await brokers.caught_up(m, s)
    await s.stop()
    held = s.server.broker.store.log.last_seq
    await _send(brokers, m, 40)  # the slave is away: none of these may be sealed
    await m.stop()

    # on the stopped directory: the recorded position bounds `es-broker archive --data-dir`
    conf = tmp_path / "broker.conf"
    conf.write_text(f"history_segment_records={SEGMENT}\n")
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "master", copy)
    stopped = json.loads(
        (
            await cli_ok(
                "archive", "--data-dir", str(copy), "--before", FAR, "--config", str(conf), "--json"
            )
        ).stdout
    )
    assert stopped["limited_by"] == ["slave 1"] and stopped["consumers_position"] <= held
    assert all(x["last_seq"] <= held for x in stopped["sealed"])

    # restarted, before the slave reconnects: the same bound, from the log
    m = await brokers.master("ASYNC_MASTER", **SETTINGS)
    recorded = m.server.replication.slaves_acked
    assert set(recorded) == {1} and first["sealed"][-1]["last_seq"] <= recorded[1] <= held
    answer = await _archive(m)
    assert answer["limited_by"] == ["slave 1"] and answer["consumers_position"] == recorded[1]
    assert all(x["last_seq"] <= held for x in answer["sealed"])
    assert _sealed_upto(m) <= held and _hot(m, held + 1)

    # the slave comes back from where it stood and follows across the sealings
    s = await brokers.slave(m, **SETTINGS)
    await brokers.caught_up(m, s)
    await _send(brokers, m, 3)
    await brokers.caught_up(m, s)
    await s.stop()
    await m.stop()
    assert compare(tmp_path / "master", tmp_path / "slave") == []
    await _verify(tmp_path / "master")
    await _verify(tmp_path / "slave")


def test_b462_a_directory_written_before_the_slaves_index_is_indexed_once(tmp_path):
    """B-462: opened writable, a directory whose `history_slaves` has no marker is indexed from its
    records, and then equals what a replay builds."""
    from es_broker.config import BrokerConfig
    from es_broker.core.replay import verify
    from es_broker.log.types import SlaveCaughtUp
    from es_broker.store import Store

    data_dir = tmp_path / "data"
    config = BrokerConfig(storePathRootDir=str(data_dir))
    store = Store.open(data_dir, config)
    for broker_id, seq in ((1, 0), (2, 1), (1, 2)):
        record = SlaveCaughtUp(
            broker_id=broker_id, slave_addr="x", seq=seq, connected_at=0, records_shipped=0
        ).to_record(1)
        store.log.write_batch([lambda ctx, r=record: ctx.append(r)])
    with store.read() as txn:
        assert store.history.slaves_held(txn) == {1: 2, 2: 1}
    with store.log.env.begin(write=True) as txn:  # as an older es-broker left it
        txn.drop(store.history.slaves_db, delete=False)
    store.close()
    store = Store.open(data_dir, config)
    with store.read() as txn:
        assert store.history.slaves_held(txn) == {1: 2, 2: 1}
    store.close()
    assert verify(data_dir) == []


async def test_b466_broker_status_and_metrics_show_the_hot_log_the_horizon_and_the_archive(
    brokers, tmp_path
):
    import trio
    from prometheus_client.core import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    from es_broker.remoting.bodies import KVTable
    from es_broker.remoting.codes import RequestCode
    from es_broker.server.metrics import BrokerCollector

    m = await brokers.master("ASYNC_MASTER", **SETTINGS)
    await brokers.w.create_topic(m.addr, TOPIC, 2)
    await _send(brokers, m, 40)

    async def status() -> dict[str, str]:
        answer = await brokers.w.client.invoke(
            m.addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), 5
        )
        return KVTable.decode(answer.body).table

    before = await status()
    assert before["historySealedUpto"] == "0" and before["historyHorizonTime"] == "-1"
    assert int(before["historyHotRecords"]) == int(before["recordLogLastSeq"])
    assert before["historyArchiveBytes"] == "0"

    sealed = (await _archive(m))["sealed"]
    last = sealed[-1]["last_seq"]
    after = await status()
    store = m.server.broker.store
    with store.read() as txn:
        horizon = store.history.latest(txn)["last_time"]
    assert int(after["historySealedUpto"]) == last
    assert int(after["historyHorizonTime"]) == horizon
    assert int(after["historyHotRecords"]) == int(after["recordLogLastSeq"]) - last
    assert 0 < int(after["historyHotLogBytes"]) < int(before["historyHotLogBytes"]) + 4096
    on_disk = sum(
        f.stat().st_size for f in (tmp_path / "master" / "archive").rglob("*") if f.is_file()
    )
    assert int(after["historyArchiveBytes"]) == on_disk > 0

    registry = CollectorRegistry()
    registry.register(BrokerCollector(m.server, trio.lowlevel.current_trio_token()))
    text = (await trio.to_thread.run_sync(generate_latest, registry)).decode()
    assert "esbroker_history_sealed_sequence{" in text
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("esbroker_history_")
    }
    assert values["esbroker_history_sealed_sequence"] == last
    assert values["esbroker_history_hot_records"] == int(after["historyHotRecords"])
    assert values["esbroker_history_archive_bytes"] == on_disk
    assert values["esbroker_history_horizon_timestamp_seconds"] == horizon / 1000
    await m.stop()
