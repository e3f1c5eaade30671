"""The commit log's bytes in page-filling chunks (store format 7, B-475)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_broker.commands.placement import MessageIn
from es_broker.core.broker import Broker
from es_broker.log import chunks
from es_broker.stored_layout import MAGIC_CODE
from tests.conftest import make_topic
from tests.helpers import local_ms


def message(size: int, seed: int) -> bytes:
    """Bytes shaped as a stored message: TOTALSIZE, MAGICCODE, then filler (zeros at its end)."""
    rng = random.Random(seed)
    body = bytes(rng.randrange(256) for _ in range(size - 12)) + bytes(4)
    return struct.pack(">ii", size, MAGIC_CODE) + body


def laid_out(
    sizes: list[int], start: int = 0, gaps: dict[int, int] | None = None
) -> list[tuple[int, bytes]]:
    """Messages back to back from `start`, with `gaps[i]` zero bytes before the i-th."""
    out, phy = [], start
    for i, size in enumerate(sizes):
        phy += (gaps or {}).get(i, 0)
        out.append((phy, message(size, i)))
        phy += size
    return out


@pytest.fixture
def env(tmp_path: Path):
    env = lmdb.open(str(tmp_path / "a"), max_dbs=4, map_size=256 << 20)
    yield env
    env.close()


def write_in_batches(env, db, payloads, rng: random.Random | None = None) -> None:
    i = 0
    while i < len(payloads):
        n = rng.randrange(1, 40) if rng else len(payloads)
        with env.begin(write=True) as txn:
            chunks.write(txn, db, payloads[i : i + n])
        i += n


def entries(env, db) -> list[tuple[bytes, bytes]]:
    with env.begin() as txn:
        return list(txn.cursor(db=db))


def test_b475_two_chunks_fill_a_leaf_page_and_nothing_overflows(env):
    db = env.open_db(b"c")
    rng = random.Random(7)
    payloads = laid_out([rng.randrange(60, 1500) for _ in range(3000)])
    write_in_batches(env, db, payloads, rng)
    stored = entries(env, db)
    assert [int.from_bytes(k, "big") for k, _ in stored] == [
        i * chunks.CHUNK for i in range(len(stored))
    ]
    assert all(len(v) == chunks.CHUNK for _, v in stored[:-1])
    with env.begin() as txn:
        stat = txn.stat(db)
    assert stat["overflow_pages"] == 0
    assert stat["leaf_pages"] == (len(stored) + 1) // 2  # two chunks to each 4 KiB page


def test_b475_messages_straddling_chunks_read_back_and_batches_do_not_matter(env, tmp_path):
    db = env.open_db(b"c")
    rng = random.Random(3)
    # small ones, and some longer than a chunk (they straddle three)
    sizes = [rng.choice([20, 300, 900, 2021, 2022, 2023, 5000]) for _ in range(400)]
    payloads = laid_out(sizes)
    write_in_batches(env, db, payloads, rng)
    with env.begin() as txn:
        read = chunks.reader(txn, db)
        assert all(read(phy) == data for phy, data in payloads)
        assert all(chunks.read(txn, db, phy) == data for phy, data in reversed(payloads))
        assert list(chunks.messages(txn, db)) == payloads
        assert read(payloads[-1][0] + sizes[-1]) is None  # past the end
    other = lmdb.open(str(tmp_path / "b"), max_dbs=4, map_size=256 << 20)
    try:
        db2 = other.open_db(b"c")
        write_in_batches(other, db2, payloads)  # one batch
        assert entries(other, db2) == entries(env, db)
        for phy, data in payloads:  # one message a transaction, as a replay of old did
            with other.begin(write=True) as txn:
                chunks.write(txn, db2, [(phy, data)])  # the same bytes again: unchanged
        assert entries(other, db2) == entries(env, db)
    finally:
        other.close()


def test_b475_gaps_are_zeros_that_a_walk_skips(env):
    db = env.open_db(b"c")
    payloads = laid_out([100, 200, 3000, 50, 700], start=5000, gaps={2: 333, 3: 4500, 4: 1})
    write_in_batches(env, db, payloads, random.Random(1))
    stored = entries(env, db)
    assert int.from_bytes(stored[0][0], "big") == 5000 - 5000 % chunks.CHUNK
    assert stored[0][1][: 5000 % chunks.CHUNK] == bytes(5000 % chunks.CHUNK)
    with env.begin() as txn:
        assert list(chunks.messages(txn, db)) == payloads
        assert list(chunks.messages(txn, db, payloads[2][0])) == payloads[2:]
        assert chunks.read(txn, db, payloads[2][0] - 100) is None  # in the gap
        assert chunks.read(txn, db, 0) is None  # before the first chunk


def test_b475_retention_zeros_below_phy_min_and_a_copy_of_the_survivors_is_identical(env, tmp_path):
    db = env.open_db(b"c")
    payloads = laid_out([random.Random(i).randrange(80, 2500) for i in range(200)])
    write_in_batches(env, db, payloads, random.Random(5))
    for cut in (37, 120):
        phy_min = payloads[cut][0]
        with env.begin(write=True) as txn:
            chunks.expire(txn, db, phy_min)
        stored = entries(env, db)
        first = int.from_bytes(stored[0][0], "big")
        assert first == phy_min - phy_min % chunks.CHUNK
        assert stored[0][1][: phy_min - first] == bytes(phy_min - first)
        with env.begin() as txn:
            assert list(chunks.messages(txn, db)) == payloads[cut:]
            assert chunks.read(txn, db, payloads[cut - 1][0]) is None
        # a replay or a slave: the surviving messages into an empty database
        copy = lmdb.open(str(tmp_path / f"copy{cut}"), max_dbs=4, map_size=256 << 20)
        try:
            db2 = copy.open_db(b"c")
            write_in_batches(copy, db2, payloads[cut:], random.Random(cut))
            assert entries(copy, db2) == stored
        finally:
            copy.close()


async def test_b475_a_broker_reads_every_message_after_retention_and_verify_passes(
    config, clock, nursery
):
    # files of 1000 bytes: blanks at their ends, phyMin not on a chunk's boundary
    clock.set(local_ms(1, 10))
    b = Broker.open(config.storePathRootDir, config.replace(mappedFileSizeCommitLog=1000), clock)
    await nursery.start(b.run)
    await make_topic(b, queues=1)
    for i in range(60):
        await b.put_message("T", 0, MessageIn(b"m%03d" % i * (1 + i % 5)))
    clock.set(local_ms(5, 4, 30))
    done = await b.retention_pass()
    assert done.phy_min % chunks.CHUNK and done.deleted_files
    with b.store.read() as txn:
        lo, hi = b.store.cq.bounds(txn, "T", 0)
        units = list(b.store.cq.units(txn, "T", 0, 0, hi))
        walked = list(b.store.log.payloads_in(txn))
    kept = [u.physical_offset for u in units if u.physical_offset >= done.phy_min]
    assert [phy for phy, _ in walked] == kept
    assert all(b.message_at(u.physical_offset) is None for u in units[:lo])
    assert all(len(b.message_at(phy) or b"") > 0 for phy in kept)
    from tests.helpers import cli

    finished = cli("verify", "--data-dir", config.storePathRootDir)
    assert finished.returncode == 0, finished.stdout


async def test_b478_an_offset_from_a_request_finds_only_a_message_placed_there(broker):
    """VIEW_MESSAGE_BY_ID and CONSUMER_SEND_MSG_BACK name a physical offset. Inside a message, or
    at bytes a producer's body lays out as a message (its own offset written in, claiming
    another topic's unit), there is none: as with an entry per message, not bytes read there."""
    from es_broker.remoting import message as wire

    await make_topic(broker, "T", queues=1)
    await make_topic(broker, "Secret", queues=1)
    secret = await broker.put_messages("Secret", 0, [MessageIn(b"s" * 40)])
    plain = await broker.put_messages("T", 0, [MessageIn(b"p" * 300)])
    with broker.store.read() as txn:
        secret_raw = broker.store.log.payload(txn, secret.physical_offsets[0])
        plain_raw = broker.store.log.payload(txn, plain.physical_offsets[0])
    assert secret_raw is not None and plain_raw is not None
    # the next message's body starts BODY_LENGTH_AT + 4 bytes in (IPv4 hosts): a copy of the
    # secret message, stamped with the offset it will have there, as its body
    forged_at = plain.physical_offsets[0] + len(plain_raw) + wire.BODY_LENGTH_AT + 4
    forged = wire.stamp(secret_raw, 0, 0, forged_at, secret.store_timestamp)
    carrier = await broker.put_messages("T", 0, [MessageIn(forged)])
    assert carrier.physical_offsets[0] + wire.BODY_LENGTH_AT + 4 == forged_at

    assert broker.message_at(plain.physical_offsets[0]) == plain_raw  # a message placed there
    for phy in (
        plain.physical_offsets[0] + 1,  # inside a message
        plain.physical_offsets[0] + 100,
        forged_at,  # the forged one: its topic's unit 0 is the real secret message's
        10**9,  # past the end
    ):
        assert broker.message_at(phy) is None
        with pytest.raises(Exception, match="look message by offset failed"):
            await broker.send_back("G", phy, requester="t")


@pytest.mark.parametrize("before_boundary", [1, 2, 3])
def test_b475_a_message_whose_leading_zeros_end_a_chunk_of_zeros_is_found(env, before_boundary):
    """A gap of whole chunks, then a message starting 1-3 bytes before a chunk's end: its
    TOTALSIZE's high bytes (zeros) close the chunk of zeros, its first non-zero byte opens the next
    chunk. A walk from before the gap, and one after retention zeroed everything below it, find it."""
    db = env.open_db(b"c")
    at = 3 * chunks.CHUNK - before_boundary
    payloads = laid_out([100, 200, 300], gaps={1: at - 100})
    assert payloads[1][0] == at
    write_in_batches(env, db, payloads)
    with env.begin() as txn:
        assert list(chunks.messages(txn, db)) == payloads
    with env.begin(write=True) as txn:
        chunks.expire(txn, db, at)
    with env.begin() as txn:
        assert list(chunks.messages(txn, db)) == payloads[1:]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    layout=st.lists(
        st.tuples(
            st.integers(min_value=16, max_value=5000),  # a message's size
            st.one_of(  # the zeros before it: none, a blank of 1-3 bytes, or up to 3 chunks
                st.just(0), st.integers(1, 3), st.integers(4, 3 * 2022 + 7)
            ),
            # or: zeros up to 0-3 bytes before the end of this or a later chunk
            st.none() | st.tuples(st.integers(0, 3), st.integers(0, 2)),
        ),
        min_size=1,
        max_size=30,
    ),
    cut=st.integers(min_value=0, max_value=29),
    start=st.integers(min_value=0, max_value=5000),
)
def test_b477_a_walk_finds_every_message_whatever_the_gaps_and_the_chunks(env, layout, cut, start):
    """Any layout of messages and gaps (blanks, a slave's first bytes, whole chunks of zeros,
    messages starting just before a chunk's end): a walk finds exactly the messages, from the
    start and from any message after retention."""
    db = env.open_db(b"c")
    with env.begin(write=True) as txn:
        txn.drop(db, delete=False)
    payloads, phy = [], start
    for i, (size, gap, to_chunk_end) in enumerate(layout):
        if to_chunk_end is None:
            phy += gap
        else:
            before_end, later = to_chunk_end
            end = (phy // chunks.CHUNK + 1 + later) * chunks.CHUNK
            phy = max(phy, end - before_end)
        payloads.append((phy, message(size, i)))
        phy += size
    write_in_batches(env, db, payloads)
    with env.begin() as txn:
        assert list(chunks.messages(txn, db)) == payloads
    cut = min(cut, len(payloads) - 1)
    with env.begin(write=True) as txn:
        chunks.expire(txn, db, payloads[cut][0])
    with env.begin() as txn:
        assert list(chunks.messages(txn, db)) == payloads[cut:]


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=60),
    file_size=st.integers(min_value=4000, max_value=20000),
    expire=st.integers(min_value=0, max_value=3),
    probes=st.lists(st.integers(min_value=0, max_value=200_000), min_size=1, max_size=8),
)
def test_b477_the_last_message_before_an_offset_is_the_one_a_scan_finds(
    tmp_path_factory, sizes, file_size, expire, probes
):
    """Messages of any size stored by the broker into small files (blanks at their ends, marks
    where bytes cross 64 KiB), some files expired: the last message in [start, end) found by a
    walk from the marks is the last of the stored messages there."""
    import trio

    from es_broker.config import BrokerConfig

    path = str(tmp_path_factory.mktemp("last"))

    async def check() -> None:
        config = BrokerConfig(storePathRootDir=path, mappedFileSizeCommitLog=file_size)
        b = Broker.open(path, config)
        async with trio.open_nursery() as nursery:
            await nursery.start(b.run)
            await make_topic(b, queues=1)
            placed = [
                (await b.put_message("T", 0, MessageIn(b"b" * size))).physical_offsets[0]
                for size in sizes
            ]
            store = b.store
            with store.read() as txn:
                phy_max = store.commitlog.phy_max(txn)
            cut = min(expire, (phy_max - 1) // file_size) * file_size  # never the newest file
            if cut:
                await b.submit(lambda ctx: expire_below(ctx, cut))
            kept = [p for p in placed if p >= cut]
            ends = {
                *(min(p, phy_max + 10) for p in probes),
                *range(0, phy_max + file_size, file_size),
            }
            with store.read() as txn:
                for end in sorted(ends):
                    for start in (0, max(0, end - file_size), cut):
                        found = store.commitlog.last_before(txn, start, end)
                        expected = [p for p in kept if start <= p < end]
                        assert (found[0] if found else None) == (expected[-1] if expected else None)
            nursery.cancel_scope.cancel()

    def expire_below(ctx, phy_min: int) -> None:
        from es_broker.log.types import CommitlogExpired

        ctx.append(
            CommitlogExpired(
                reason="manual",
                files=[],
                phy_min=phy_min,
                file_reserved_hours=0,
                queues=[],
                lost=[],
            ).to_record(0)
        )

    trio.run(check)
