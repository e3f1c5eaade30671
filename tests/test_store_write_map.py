"""B-673: on ext4 and xfs the store's LMDB map is allocated on disk beforehand and LMDB writes its
pages straight into it; the map grows only as far as the disk has room, so a full disk is a refused
write (StoreFullError), never a fault; elsewhere LMDB writes every page itself, as before.

The disk-full cases run on a small tmpfs (which can really be filled), admitted for the test as a
filesystem that allocates a file's blocks once: tmpfs does (its pages are taken by fallocate), and
is left out in the product only because there the map's room is memory.
"""

from __future__ import annotations

import os
import threading

import pytest

from es_broker.config import BrokerConfig
from es_broker.log import StoreFullError, make, records
from es_broker.log import store as store_module
from es_broker.log.store import RecordLog, mount_type
from es_broker.store import Store
from tests.disk_fixtures import fill, small_tmpfs

MiB = 1024 * 1024


@pytest.fixture
def tmpfs_admitted(monkeypatch):
    monkeypatch.setattr(
        store_module,
        "PREALLOCATING_FILESYSTEMS",
        store_module.PREALLOCATING_FILESYSTEMS | {"tmpfs"},
    )


def allocated(log: RecordLog) -> int:
    return os.stat(log.path / "data.mdb").st_blocks * 512


def append(log: RecordLog, value: int, blob: int = 64 * 1024) -> int:
    [(ok, seq)] = log.write_batch(
        [lambda ctx: ctx.append(make("probe", 0, value=value, blob=b"x" * blob))]
    )
    assert ok
    return seq


def values(log: RecordLog) -> list[int]:
    return [record["value"] for _, record in log.read()]


def test_b673_the_mount_holding_a_path_is_the_longest_mount_point_before_it():
    mounts = (
        "/dev/vda / ext4 rw 0 0\n"
        "/dev/vdb /data xfs rw 0 0\n"
        "/dev/vdc /data/cow btrfs rw 0 0\n"
        "tmpfs /mnt/a\\040b tmpfs rw 0 0\n"
    )
    assert mount_type("/data/broker/lmdb", mounts) == "xfs"
    assert mount_type("/data/cow/lmdb", mounts) == "btrfs"
    assert mount_type("/datacow/lmdb", mounts) == "ext4"  # a prefix of the name is not the mount
    assert mount_type("/mnt/a b/lmdb", mounts) == "tmpfs"  # octal escapes in mount points
    assert mount_type("/", mounts) == "ext4"
    assert mount_type("/x", "") is None


def test_b673_a_map_written_in_place_has_every_block_allocated_as_it_grows(
    tmp_path, tmpfs_admitted
):
    with small_tmpfs(tmp_path / "disk", 32) as disk:
        log = RecordLog(disk / "lmdb", map_size=MiB)
        assert log.write_map and log.env.flags()["writemap"]
        assert allocated(log) >= log.env.info()["map_size"] == MiB
        for n in range(64):  # 4 MiB of records: the map grows several times
            append(log, n)
            assert allocated(log) >= log.env.info()["map_size"]
        assert log.env.info()["map_size"] > 4 * MiB
        log.close()
        log = RecordLog(disk / "lmdb", map_size=MiB)
        assert log.write_map and values(log) == list(range(64))
        log.close()


def test_b673_on_a_full_disk_the_map_does_not_grow_the_write_is_refused_and_space_back_resumes(
    tmp_path, tmpfs_admitted
):
    with small_tmpfs(tmp_path / "disk", 8) as disk:
        log = RecordLog(disk / "lmdb", map_size=MiB)
        assert log.write_map
        append(log, 0)
        filler = fill(disk)
        landed = 1
        with pytest.raises(StoreFullError) as refused:
            for n in range(1, 200):  # what the map already had room for lands, then no more
                append(log, n)
                landed += 1
        assert refused.value.reason == "ENOSPC" and "growing the map" in str(refused.value)
        # the map never runs past what the disk gave it: no write into it can fault
        assert allocated(log) >= log.env.info()["map_size"]
        assert values(log) == list(range(landed)) and log.last_seq == landed
        filler.unlink()
        append(log, landed)
        log.close()
        log = RecordLog(disk / "lmdb", map_size=MiB)
        assert values(log) == list(range(landed + 1))
        log.close()


def test_b673_a_map_the_disk_has_no_room_for_is_written_by_lmdb_itself(tmp_path, tmpfs_admitted):
    with small_tmpfs(tmp_path / "disk", 8) as disk:
        log = RecordLog(disk / "lmdb", map_size=64 * MiB)
        assert not log.write_map and not log.env.flags()["writemap"]
        append(log, 0)
        log.close()


def test_b673_copy_on_write_and_unknown_filesystems_and_the_setting_keep_lmdb_own_writes(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(store_module, "filesystem_type", lambda path: "btrfs")
    log = RecordLog(tmp_path / "cow")
    assert not log.write_map and not log.env.flags()["writemap"]
    append(log, 0)
    log.close()
    monkeypatch.setattr(store_module, "filesystem_type", lambda path: "ext4")
    off = BrokerConfig(storePathRootDir=str(tmp_path / "off"), write_map=False)
    store = Store.open(tmp_path / "off", off)
    assert not store.log.write_map
    store.close()
    store = Store.open(tmp_path / "on", BrokerConfig(storePathRootDir=str(tmp_path / "on")))
    assert store.log.write_map  # the default, on a filesystem taken for ext4
    store.close()


def test_b673_a_store_synced_on_every_commit_has_lmdb_write_its_pages(tmp_path, monkeypatch):
    """SYNC_FLUSH: each commit's sync write-protects the pages it flushed, so writing them in
    place would fault on every page the next commit touches; LMDB writes them itself, and what
    is stored is the same."""
    monkeypatch.setattr(store_module, "filesystem_type", lambda path: "ext4")
    log = RecordLog(tmp_path / "sync", sync=True)
    assert not log.write_map and not log.env.flags()["writemap"]
    for n in range(4):
        append(log, n)
    log.close()
    log = RecordLog(tmp_path / "sync", sync=True)
    assert values(log) == list(range(4))
    log.close()
    synced = BrokerConfig(storePathRootDir=str(tmp_path / "store"), flushDiskType="SYNC_FLUSH")
    store = Store.open(tmp_path / "store", synced)
    assert not store.log.write_map  # write_map=true (the default) is for ASYNC_FLUSH
    store.close()


def test_b673_flushes_in_another_thread_while_the_map_grows_never_fail(tmp_path, tmpfs_admitted):
    with small_tmpfs(tmp_path / "disk", 32) as disk:
        log = RecordLog(disk / "lmdb", map_size=MiB)
        assert log.write_map
        errors: list[BaseException] = []
        done = threading.Event()

        def flushing() -> None:
            try:
                while not done.is_set():
                    log.flush()
            except BaseException as exc:  # noqa: BLE001 - the test's finding
                errors.append(exc)

        flusher = threading.Thread(target=flushing)
        flusher.start()
        try:
            for n in range(96):  # 6 MiB: the map grows 1 -> 2 -> 4 -> 8 MiB under the flushes
                append(log, n)
        finally:
            done.set()
            flusher.join()
        assert errors == [] and log.env.info()["map_size"] >= 8 * MiB
        assert values(log) == list(range(96))
        log.close()


async def test_b673_a_commit_in_a_worker_thread_grows_the_map_on_the_trio_thread(tmp_path):
    """SYNC_FLUSH commits in a worker thread while pulls read on the trio thread: the map is
    remapped where no read transaction is open, never under one."""
    import trio

    from es_broker.log import GroupCommitWriter

    log = RecordLog(tmp_path / "lmdb", sync=True, map_size=MiB)
    grown_on: list[int] = []
    grow = log.grow

    def noted_grow(*, wait: bool = True) -> bool:
        grown_on.append(threading.get_ident())
        return grow(wait=wait)

    log.grow = noted_grow  # type: ignore[method-assign]
    writer = GroupCommitWriter(log)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for n in range(48):  # 3 MiB of records: the map grows from 1 MiB at least twice
            await writer.submit(
                lambda ctx, n=n: ctx.append(make("probe", 0, value=n, blob=b"x" * 65536))
            )
        nursery.cancel_scope.cancel()
    assert len(grown_on) >= 2 and set(grown_on) == {threading.get_ident()}
    assert values(log) == list(range(48))
    log.close()


def test_b674_a_read_in_another_thread_is_never_cut_by_a_growing_map(tmp_path):
    """Growing the map remaps it, which invalidates every transaction open in the process: a
    reader in another thread (explain, a metrics scrape, a sealing) holds the map where it is
    (MapGate), and the growth waits for it."""
    log = RecordLog(tmp_path / "lmdb", map_size=MiB)
    for n in range(8):
        append(log, n)
    size = log.env.info()["map_size"]
    halfway, go = threading.Event(), threading.Event()

    def read_in_two_halves() -> list[int]:
        seen = []
        with log.env.begin() as txn:
            cur = txn.cursor(db=log.log_db)
            cur.first()
            for _ in range(4):
                seen.append(cur.key())
                cur.next()
            halfway.set()
            assert go.wait(30)
            seen.extend(key for key, _ in cur)
        return [records.key_seq(k) for k in seen]

    result: list[list[int]] = []
    reader = threading.Thread(target=lambda: result.append(log.off_the_loop(read_in_two_halves)()))
    reader.start()
    assert halfway.wait(30)
    grower = threading.Thread(target=log.grow)
    grower.start()
    assert log.map_gate.wait_for_remap_pending(30)  # the growth waits for the reader
    assert log.env.info()["map_size"] == size
    go.set()
    reader.join(30)
    grower.join(30)
    assert result == [list(range(1, 9))]
    assert log.env.info()["map_size"] == 2 * size
    assert values(log) == list(range(8))
    log.close()


def test_b674_a_thread_that_reads_the_map_may_read_again_but_never_remap_it(tmp_path):
    log = RecordLog(tmp_path / "lmdb", map_size=MiB)
    append(log, 1)
    nested = log.off_the_loop(lambda: log.off_the_loop(lambda: values(log))())
    assert nested() == [1]
    with log.map_gate.reading(), pytest.raises(RuntimeError, match="thread that reads it"):
        log.grow()
    log.grow()  # once out of the read, as usual
    log.close()


def test_b674_the_map_grows_ahead_of_need_when_no_other_thread_reads_it(tmp_path):
    """At three quarters full the writer grows the map after a commit, so that a commit seldom finds
    it full (and waits for the reads of other threads); while such a read runs it does not."""
    log = RecordLog(tmp_path / "lmdb", map_size=4 * MiB)
    size = log.env.info()["map_size"]
    assert not log.grow_ahead()  # nearly empty
    n = 0
    while (log.env.info()["last_pgno"] + 1) * log.page_size * 4 < size * 3:
        append(log, n)
        n += 1
    assert log.env.info()["map_size"] == size
    reading, done = threading.Event(), threading.Event()

    def read_meanwhile() -> None:
        with log.map_gate.reading():
            reading.set()
            assert done.wait(30)

    reader = threading.Thread(target=read_meanwhile)
    reader.start()
    assert reading.wait(30)
    try:
        assert not log.grow_ahead()  # at once, without waiting for the reader
    finally:
        done.set()
        reader.join(30)
    assert log.env.info()["map_size"] == size
    assert log.grow_ahead()
    assert log.env.info()["map_size"] == 2 * size
    assert not log.grow_ahead()  # three eighths full now
    assert values(log) == list(range(n))
    log.close()


async def test_b674_the_writer_grows_the_map_ahead_so_commits_seldom_find_it_full(tmp_path):
    import trio

    from es_broker.log import GroupCommitWriter

    log = RecordLog(tmp_path / "lmdb", map_size=MiB)
    full: list[int] = []
    write_once = log._write_batch_once  # noqa: SLF001

    def noted(jobs):  # type: ignore[no-untyped-def]
        try:
            return write_once(jobs)
        except Exception as exc:
            full.append(type(exc).__name__ == "MapFullError")
            raise

    log._write_batch_once = noted  # type: ignore[method-assign]  # noqa: SLF001
    writer = GroupCommitWriter(log)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for n in range(96):  # 6 MiB of records, one at a time: the map grows to 8 MiB at least
            await writer.submit(
                lambda ctx, n=n: ctx.append(make("probe", 0, value=n, blob=b"x" * 65536))
            )
        nursery.cancel_scope.cancel()
    assert log.env.info()["map_size"] >= 8 * MiB
    assert full == []  # every growth came ahead of need
    assert values(log) == list(range(96))
    log.close()
