"""The record log: dense sequence numbers, group commit, isolation of refused jobs, growth, tail."""

from __future__ import annotations

import lmdb
import pytest
import trio

from es_broker.log import GroupCommitWriter, RecordLog, make
from es_broker.log.records import pack, register_upcaster, unpack


def append_job(value):
    return lambda ctx: ctx.append(make("probe", 0, value=value))


def test_sequence_numbers_are_dense_and_start_at_one(tmp_path):
    log = RecordLog(tmp_path)
    log.write_batch([append_job(i) for i in range(3)])
    log.write_batch([append_job(3)])
    assert [seq for seq, _ in log.read()] == [1, 2, 3, 4]
    assert [r["value"] for _, r in log.read(from_seq=3)] == [2, 3]


def test_keys_are_eight_byte_big_endian(tmp_path):
    log = RecordLog(tmp_path)
    log.write_batch([append_job(0)])
    with log.read_txn() as txn:
        ((key, _),) = list(txn.cursor(db=log.log_db))
    assert key == (1).to_bytes(8, "big")


def test_a_refused_job_fails_alone_and_the_batch_lands(tmp_path):
    log = RecordLog(tmp_path)

    def refuse(ctx):
        raise ValueError("no")

    outcomes = log.write_batch([append_job(1), refuse, append_job(2)])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert [r["value"] for _, r in log.read()] == [1, 2]


def test_a_job_failing_after_appending_leaves_no_trace(tmp_path):
    log = RecordLog(tmp_path)

    def half(ctx):
        ctx.append(make("probe", 0, value="half"))
        raise RuntimeError("broken after append")

    outcomes = log.write_batch([append_job(1), half, append_job(2)])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert [r["value"] for _, r in log.read()] == [1, 2]
    assert [seq for seq, _ in log.read()] == [1, 2]


class RefusesToApply:
    """A projection that counts what it applies and raises on a record marked `poison`."""

    name = "refuses"
    databases = ("refuses",)

    def bind(self, log):
        self.db = log.db("refuses")

    def apply(self, txn, seq, record):
        txn.put(seq.to_bytes(8, "big"), b"applied", db=self.db)
        if record.get("value") == "poison":
            raise RuntimeError("the projection cannot apply it")


def test_a_record_a_projection_fails_to_apply_spoils_the_batch_and_its_job_fails_alone(tmp_path):
    """The record was put before its projections ran: its job must not fail as if it appended
    nothing (that commit kept a record half applied, under a sequence the next append reused)."""
    log = RecordLog(tmp_path, [RefusesToApply()])
    outcomes = log.write_batch([append_job(1), append_job("poison"), append_job(2)])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert [(seq, r["value"]) for seq, r in log.read()] == [(1, 1), (2, 2)]
    with log.read_txn() as txn:
        applied = [int.from_bytes(k, "big") for k, _ in txn.cursor(db=log.db("refuses"))]
    assert applied == [1, 2]
    log.write_batch([append_job(3)])  # the next batch appends after them
    assert log.last_seq == 3


def test_a_job_failing_after_putting_message_bytes_leaves_none_of_them(tmp_path):
    log = RecordLog(tmp_path)

    def bytes_then_refusal(ctx):
        ctx.put_payload(0, b"m" * 64)
        raise ValueError("refused after its bytes were put")

    outcomes = log.write_batch([append_job(1), bytes_then_refusal, append_job(2)])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert [r["value"] for _, r in log.read()] == [1, 2]
    with log.read_txn() as txn:
        assert list(txn.cursor(db=log.commitlog_db)) == []


def test_the_map_grows_by_itself(tmp_path):
    log = RecordLog(tmp_path, map_size=256 * 1024)
    for _ in range(20):
        log.write_batch([lambda ctx: ctx.append(make("probe", 0, blob=b"x" * 50_000))])
    assert log.last_seq == 20
    assert log.env.info()["map_size"] > 256 * 1024


def test_old_record_versions_are_upcast_on_read(tmp_path):
    register_upcaster("legacy_probe", 1, lambda r: {**r, "v": 2, "renamed": r.pop("old_name")})
    record = unpack(pack({"type": "legacy_probe", "v": 1, "ts": 0, "old_name": 5}))
    assert record["v"] == 2 and record["renamed"] == 5


def test_a_full_disk_refuses_the_write_and_keeps_what_was_acknowledged(tmp_path, monkeypatch):
    from es_broker.log import StoreFullError

    log = RecordLog(tmp_path)
    log.write_batch([append_job(1)])

    class FullTxn:
        def __init__(self, txn):
            self._txn = txn

        def __getattr__(self, name):
            return getattr(self._txn, name)

        def commit(self):
            raise lmdb.Error("mdb_txn_commit: No space left on device")

    real_begin = log.env.begin
    monkeypatch.setattr(
        log,
        "env",
        type(
            "E",
            (),
            {
                "begin": lambda self, **kw: FullTxn(real_begin(**kw)),
                "info": log.env.info,
                "set_mapsize": log.env.set_mapsize,
            },
        )(),
    )
    with pytest.raises(StoreFullError, match="disk full"):
        log.write_batch([append_job(2)])
    monkeypatch.undo()
    assert [r["value"] for _, r in log.read()] == [1]
    assert log.last_seq == 1


async def test_concurrent_appends_are_group_committed(tmp_path):
    log = RecordLog(tmp_path)
    writer = GroupCommitWriter(log)
    results = []
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)

        async def send(i):
            results.append(await writer.submit(append_job(i)))

        async with trio.open_nursery() as senders:
            for i in range(200):
                senders.start_soon(send, i)
        nursery.cancel_scope.cancel()
    assert sorted(results) == list(range(1, 201))
    assert writer.jobs == 200 and writer.batches < 200


async def test_submit_raises_the_jobs_own_error(tmp_path):
    log = RecordLog(tmp_path)
    writer = GroupCommitWriter(log)

    def refuse(ctx):
        raise KeyError("nope")

    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        with pytest.raises(KeyError):
            await writer.submit(refuse)
        nursery.cancel_scope.cancel()


async def test_tail_wakes_a_follower_when_a_record_lands(tmp_path):
    log = RecordLog(tmp_path)
    writer = GroupCommitWriter(log)
    seen = []
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)

        async def follower(task_status=trio.TASK_STATUS_IGNORED):
            task_status.started()
            seen.append(await writer.wait_past(1))

        await nursery.start(follower)
        await writer.submit(append_job("x"))
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert seen == [1]


def test_enospc_eio_and_edquot_are_a_full_disk_whatever_lmdb_calls_them():
    import errno

    from es_broker.log import disk_full_reason

    assert disk_full_reason(lmdb.DiskError("mdb_put: No space left on device")) == "ENOSPC"
    assert disk_full_reason(lmdb.Error("mdb_txn_commit: Input/output error")) == "EIO"
    assert disk_full_reason(lmdb.Error("mdb_txn_commit: No space left on device")) == "ENOSPC"
    assert disk_full_reason(lmdb.Error("mdb_txn_commit: Disk quota exceeded")) == "EDQUOT"
    assert disk_full_reason(OSError(errno.EIO, "Input/output error")) == "EIO"
    assert disk_full_reason(lmdb.MapFullError("mdb_put: MDB_MAP_FULL")) is None
    assert disk_full_reason(lmdb.Error("mdb_get: MDB_NOTFOUND")) is None
    assert disk_full_reason(ValueError("No space left on device")) is None


def test_a_job_whose_put_meets_a_full_disk_refuses_the_whole_batch(tmp_path):
    from es_broker.log import StoreFullError

    log = RecordLog(tmp_path)
    log.write_batch([append_job(1)])

    def spilled(ctx):  # what a put that spills pages to a full disk raises
        ctx.append(make("probe", 0, value="spilled"))
        raise lmdb.Error("mdb_put: Input/output error")

    with pytest.raises(StoreFullError, match="EIO") as refused:
        log.write_batch([append_job(2), spilled])
    assert refused.value.reason == "EIO"
    assert [r["value"] for _, r in log.read()] == [1] and log.last_seq == 1


def fill_until_refused(log, blob: int = 256 * 1024, limit: int = 400) -> int:
    """Append large records until the disk refuses one; returns how many landed."""
    from es_broker.log import StoreFullError

    for n in range(limit):
        try:
            log.write_batch(
                [lambda ctx, n=n: ctx.append(make("probe", 0, value=n, blob=b"x" * blob))]
            )
        except StoreFullError:
            return n
    raise AssertionError(f"{limit} records of {blob} bytes fit: the disk never filled")


def test_a_full_tmpfs_refuses_the_commit_keeps_every_acknowledged_record_and_takes_writes_again(
    tmp_path,
):
    from tests.disk_fixtures import small_tmpfs

    with small_tmpfs(tmp_path / "disk", 8) as disk:
        filler = disk / "filler"
        filler.write_bytes(b"\xa5" * (4 << 20))
        log = RecordLog(disk / "lmdb")
        landed = fill_until_refused(log)
        assert landed > 0
        assert [r["value"] for _, r in log.read()] == list(range(landed)) and log.last_seq == landed
        filler.unlink()
        log.write_batch([append_job("after")])
        log.close()
        # everything acknowledged is on the disk, not only in this process
        log = RecordLog(disk / "lmdb")
        assert [r["value"] for _, r in log.read()] == [*range(landed), "after"]
        log.close()


async def test_the_writer_refuses_without_writing_while_the_disk_is_full_until_a_probe_lands(
    tmp_path,
):
    from es_broker.log import StoreFullError
    from tests.disk_fixtures import fill, small_tmpfs

    with small_tmpfs(tmp_path / "disk", 8) as disk:
        log = RecordLog(disk / "lmdb")
        log.write_batch([append_job("before")])
        filler = fill(disk)
        writer = GroupCommitWriter(log, probe_interval=3600)
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            with pytest.raises(StoreFullError):
                for n in range(400):
                    await writer.submit(
                        lambda ctx, n=n: ctx.append(make("probe", 0, value=n, blob=b"x" * 262144))
                    )
            assert writer.disk_full and writer.disk_full_since is not None
            landed = log.last_seq
            filler.unlink()
            # space is back, but no write is tried before the next probe: refused at once
            with pytest.raises(StoreFullError):
                await writer.submit(append_job("refused fast"))
            assert log.last_seq == landed and writer.refused_while_full >= 2
            writer.probe_soon()
            seq = await writer.submit(append_job("after"))
            assert seq == landed + 1 and not writer.disk_full
            nursery.cancel_scope.cancel()
        log.close()
