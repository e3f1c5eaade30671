"""The key index: QUERY_MESSAGE and journeys by UNIQ_KEY without reading every message (B-200..B-206)."""

from __future__ import annotations

import contextlib
import tempfile

import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from es_broker.clock import ManualClock
from es_broker.commands import trace
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import verify
from es_broker.projections.store_format import CURRENT
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.message import decode_all, decode_one
from es_broker.store import Store
from tests.conftest import make_topic
from tests.helpers import cli, local_ms

FOREVER = (0, 2**62)


async def send(broker: Broker, topic: str, body: bytes, **props: str):
    return await broker.put_message(topic, 0, MessageIn(body, props))


def bodies(found: list[bytes]) -> list[bytes]:
    return [decode_one(raw)[0].body for raw in found]


def query(
    broker: Broker, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = 2**62
) -> list[bytes]:
    return bodies(broker.query_messages_by_key(topic, key, max_num, begin, end))


async def test_b201_each_keys_part_and_the_uniq_key_find_the_message(broker):
    await make_topic(broker, "T", queues=2)
    await send(broker, "T", b"a", KEYS="order-1  customer-7", UNIQ_KEY="U-A")
    await send(broker, "T", b"b", KEYS="order-2", UNIQ_KEY="U-B")
    assert query(broker, "T", "order-1") == [b"a"]
    assert query(broker, "T", "customer-7") == [b"a"]
    assert query(broker, "T", "U-B") == [b"b"]
    assert query(broker, "T", "order-1  customer-7") == []  # the parts are the keys, not the whole
    assert query(broker, "T", "order") == []  # a key is matched whole, never as a prefix


async def test_b201_keys_are_split_on_spaces_only(broker):
    await make_topic(broker, "T", queues=1)
    await send(broker, "T", b"tab", KEYS="x\ty")
    assert query(broker, "T", "x\ty") == [b"tab"]
    assert query(broker, "T", "x") == []


async def test_b201_a_key_is_looked_up_in_its_topic_only(broker):
    await make_topic(broker, "T1", queues=1)
    await make_topic(broker, "T2", queues=1)
    await send(broker, "T1", b"one", KEYS="shared")
    await send(broker, "T2", b"two", KEYS="shared")
    assert query(broker, "T1", "shared") == [b"one"]
    assert query(broker, "T2", "shared") == [b"two"]
    assert query(broker, "T3", "shared") == []


async def test_b201_a_rolled_back_transaction_message_is_not_indexed(broker):
    await make_topic(broker, "T", queues=1)
    await broker.put_message("T", 0, MessageIn(b"rolled back", {"KEYS": "k"}, sys_flag=0xC))
    await broker.put_message("T", 0, MessageIn(b"committed", {"KEYS": "k"}, sys_flag=0x8))
    assert query(broker, "T", "k") == [b"committed"]


async def test_b200_only_messages_stored_within_begin_and_end_inclusive(broker, clock):
    await make_topic(broker, "T", queues=1)
    times = []
    for i in range(5):
        times.append(clock.advance(1000))
        await send(broker, "T", b"m%d" % i, KEYS="k")
    assert query(broker, "T", "k", begin=times[1], end=times[3]) == [b"m1", b"m2", b"m3"]
    assert query(broker, "T", "k", begin=times[4] + 1, end=2**62) == []
    assert query(broker, "T", "k", begin=times[3], end=times[1]) == []


async def test_b200_the_newest_max_num_are_answered_in_commit_log_order(broker, clock):
    await make_topic(broker, "T", queues=4)
    for i in range(6):
        clock.advance(10)
        await broker.put_message("T", i % 4, MessageIn(b"m%d" % i, {"KEYS": "k"}))
    assert query(broker, "T", "k", max_num=3) == [b"m3", b"m4", b"m5"]
    assert query(broker, "T", "k", max_num=0) == []


async def test_b200_a_clock_stepping_back_orders_by_store_time(broker, clock):
    await make_topic(broker, "T", queues=1)
    await send(broker, "T", b"late", KEYS="k")  # stored at START
    clock.advance(-5000)
    await send(broker, "T", b"early", KEYS="k")  # stored later, with an older store time
    assert query(broker, "T", "k", max_num=1) == [b"late"]
    assert query(broker, "T", "k") == [b"late", b"early"]  # commit-log order


async def test_b202_max_num_is_capped_by_max_msgs_num_batch(config, clock, nursery):
    broker = Broker.open(config.storePathRootDir, config.replace(maxMsgsNumBatch=4), clock)
    await nursery.start(broker.run)
    await make_topic(broker, "T", queues=1)
    await broker.put_messages("T", 0, [MessageIn(b"m%d" % i, {"KEYS": "k"}) for i in range(10)])
    assert query(broker, "T", "k", max_num=64) == [b"m6", b"m7", b"m8", b"m9"]


async def test_b202_a_uniq_key_query_answers_default_query_max_num(running):
    await running.create_topic("T", queues=1)
    broker = running.server.broker
    await broker.put_messages("T", 0, [MessageIn(b"m%d" % i, {"UNIQ_KEY": "U"}) for i in range(40)])
    fields = {"topic": "T", "key": "U", "maxNum": 64, "beginTimestamp": 0, "endTimestamp": 2**62}
    plain = await running.call(RequestCode.QUERY_MESSAGE, fields)
    assert len(decode_all(plain.body)) == 40
    flagged = await running.call(RequestCode.QUERY_MESSAGE, dict(fields, _UNIQUE_KEY_QUERY="true"))
    assert [m.body for m in decode_all(flagged.body)] == [b"m%d" % i for i in range(8, 40)]
    missing = await running.call(RequestCode.QUERY_MESSAGE, dict(fields, key="nope"))
    assert missing.code == ResponseCode.QUERY_NOT_FOUND


async def test_b203_a_key_too_long_for_an_lmdb_key_is_found_by_its_digest(broker):
    await make_topic(broker, "T", queues=1)
    long_a, long_b = "a" * 600, "a" * 599 + "b"
    await send(broker, "T", b"A", KEYS=long_a)
    await send(broker, "T", b"B", KEYS=long_b, UNIQ_KEY="u" * 700)
    assert query(broker, "T", long_a) == [b"A"]
    assert query(broker, "T", long_b) == [b"B"]
    assert query(broker, "T", "u" * 700) == [b"B"]
    assert query(broker, "T", "a" * 601) == []


async def test_b203_a_key_holding_nul_does_not_answer_for_a_shorter_key(broker):
    await make_topic(broker, "T", queues=1)
    await send(broker, "T", b"nul", KEYS="a\x00bcdefghijklmnopqrstuvwxyz")
    await send(broker, "T", b"plain", KEYS="a")
    assert query(broker, "T", "a") == [b"plain"]
    assert query(broker, "T", "a\x00bcdefghijklmnopqrstuvwxyz") == [b"nul"]


@pytest.fixture
async def small(config, clock, nursery):
    """A broker whose commit-log files hold 1000 bytes (a few messages each)."""
    clock.set(local_ms(1, 10))
    b = Broker.open(config.storePathRootDir, config.replace(mappedFileSizeCommitLog=1000), clock)
    await nursery.start(b.run)
    await make_topic(b, queues=1)
    return b


async def test_b204_retention_takes_the_expired_messages_out_of_the_index(small, clock, config):
    for i in range(20):
        await small.put_messages(
            "T", 0, [MessageIn(b"m%02d" % i, {"KEYS": "k", "UNIQ_KEY": f"U{i}"})]
        )
    clock.set(local_ms(5, 4, 30))
    done = await small.retention_pass()
    with small.store.read() as txn:
        left = [
            u for u in small.store.cq.units(txn, "T", 0, 0, 20) if u.physical_offset >= done.phy_min
        ]
        entries = list(small.store.keyindex.entries(txn))
    assert 0 < len(left) < 20
    assert query(small, "T", "k") == [b"m%02d" % i for i in range(20 - len(left), 20)]
    assert query(small, "T", "U0") == []
    assert len(entries) == 2 * len(left)  # the expired messages' entries are gone, not skipped
    # another process, as an operator
    assert cli("verify", "--data-dir", config.storePathRootDir).returncode == 0


async def test_b204_a_batch_cut_by_phy_min_keeps_its_surviving_entries(small, clock, config):
    # a batch of 20 crosses commit-log files (B-08); retention removes its first files only
    await small.put_messages(
        "T", 0, [MessageIn(b"m%02d" % i, {"KEYS": f"k{i}"}) for i in range(20)]
    )
    clock.set(local_ms(5, 4, 30))
    done = await small.retention_pass()
    with small.store.read() as txn:
        left = [
            u for u in small.store.cq.units(txn, "T", 0, 0, 20) if u.physical_offset >= done.phy_min
        ]
        entries = list(small.store.keyindex.entries(txn))
    assert 0 < len(left) < 20
    assert len(entries) == len(left)
    assert query(small, "T", "k19") == [b"m19"]
    assert query(small, "T", "k0") == []
    # another process, as an operator
    assert cli("verify", "--data-dir", config.storePathRootDir).returncode == 0
    await small.put_message("T", 0, MessageIn(b"later", {"KEYS": "k19"}))
    assert query(small, "T", "k19") == [b"m19", b"later"]


async def history(data_dir: str, clock: ManualClock) -> None:
    config = BrokerConfig(storePathRootDir=data_dir)
    broker = Broker.open(data_dir, config, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await make_topic(broker, "T", queues=2)
        await send(broker, "T", b"a", KEYS="k1 k2", UNIQ_KEY="U1")
        await broker.put_messages(
            "T", 1, [MessageIn(b"b", {"KEYS": "k2"}), MessageIn(b"c", {"UNIQ_KEY": "U3"})]
        )
        nursery.cancel_scope.cancel()
    broker.close()


def test_b205_the_index_is_built_once_for_a_data_directory_written_before_it(tmp_path):
    data_dir = str(tmp_path)
    trio.run(history, data_dir, ManualClock())
    store = Store.open(data_dir)
    with store.read() as txn:
        before = list(store.keyindex.entries(txn))
    with store.log.env.begin(write=True) as txn:  # what an older es-broker left: no key index
        for name in store.keyindex.databases:
            txn.drop(store.log.db(name), delete=False)
        txn.drop(store.format.db, delete=False)  # ... and no store format number (B-470)
    store.close()
    store = Store.open(data_dir)  # what a broker start does
    with store.read() as txn:
        assert list(store.keyindex.entries(txn)) == before
        assert store.format.number(txn) == CURRENT
    last = store.log.last_seq
    store.close()
    store = Store.open(data_dir)
    assert store.log.last_seq == last  # the next start only reads the number
    store.close()
    assert verify(data_dir) == []
    broker = Broker.open(data_dir)
    assert bodies(broker.query_messages_by_key("T", "k2", 64, *FOREVER)) == [b"a", b"b"]
    broker.close()


async def test_b206_a_journey_by_uniq_key_starts_at_the_first_message_carrying_it(broker):
    await make_topic(broker, "T", queues=1)
    await make_topic(broker, "A", queues=1)
    first = await send(broker, "T", b"job", UNIQ_KEY="U-1")
    await send(broker, "A", b"other", KEYS="U-1")  # a key, not a UNIQ_KEY: not this journey
    resent = await send(broker, "A", b"again", UNIQ_KEY="U-1")  # a producer re-sent it elsewhere
    back = await broker.send_back("G", first.physical_offsets[0], 0)
    with broker.store.read() as txn:
        assert trace.resolve(broker.store, txn, "U-1") == first.physical_offsets[0]
        assert trace.resolve(broker.store, txn, "U-2") is None
    journey = trace.journey(broker.store, "U-1")
    hops = [h["physicalOffset"] for h in journey["hops"]]
    assert hops[0] == first.physical_offsets[0]
    assert back.stored.physical_offsets[0] in hops
    assert resent.physical_offsets[0] not in hops


# ---------------------------------------------------------------------- generated histories

KEY_TEXT = st.sampled_from(["k1", "k2", "k3", "a" * 520, "k1\x00x", ""])
TOPIC = st.sampled_from(["T1", "T2"])
MESSAGE = st.tuples(st.lists(KEY_TEXT, max_size=3), st.sampled_from([None, "U1", "U2"]))
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), TOPIC, st.lists(MESSAGE, min_size=1, max_size=8)),
        st.tuples(st.just("tick"), st.integers(-3000, 30 * 3_600_000)),
        st.tuples(st.just("expire")),
    ),
    min_size=4,
    max_size=30,
)
BUSY = [("send", "T1", [(["k1", "k2"], "U1")] * 8)] * 4 + [
    ("tick", -3000),
    ("send", "T2", [(["k1"], "U2")] * 5),
    ("expire",),
    ("send", "T1", [(["k3"], None)] * 3),
]


def scan(broker: Broker, topic: str, key: str, max_num: int, begin: int, end: int) -> list[bytes]:
    """The lookup without an index, as RocketMQ answers it: every message of the topic, decoded."""
    hits = []
    for raw in broker.store.log.payloads():
        msg = decode_one(raw[1])[0]
        if (
            msg.topic == topic
            and begin <= msg.store_timestamp <= end
            and (
                key in msg.properties.get("KEYS", "").split(" ")
                or msg.properties.get("UNIQ_KEY") == key
            )
        ):
            hits.append((msg.store_timestamp, msg.physical_offset, raw[1]))
    newest = sorted(hits, reverse=True)[:max_num]
    return [raw for _, _, raw in sorted(newest, key=lambda h: h[1])]


async def generated(data_dir: str, ops: list[tuple]) -> None:
    clock = ManualClock(local_ms(1, 10))
    broker = Broker.open(
        data_dir, BrokerConfig(storePathRootDir=data_dir, mappedFileSizeCommitLog=2000), clock
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        for topic in ("T1", "T2"):
            await make_topic(broker, topic, queues=2)
        for op in ops:
            if op[0] == "send":
                batch = [
                    MessageIn(
                        b"x" * 200,
                        {k: v for k, v in (("KEYS", " ".join(keys)), ("UNIQ_KEY", uniq)) if v},
                    )
                    for keys, uniq in op[2]
                ]
                await broker.put_messages(op[1], 0, batch)
            elif op[0] == "tick":
                clock.advance(op[1])
            else:
                clock.set(max(clock.now_ms(), local_ms(20, 4, 30)))
                with contextlib.suppress(Exception):
                    await broker.retention_pass(manual=True)
        for topic in ("T1", "T2", "T3"):
            for key in ("k1", "k2", "k3", "a" * 520, "k1\x00x", "U1", "U2", "x"):
                for max_num, begin, end in (
                    (64, *FOREVER),
                    (2, *FOREVER),
                    (3, local_ms(1, 10), local_ms(2, 10)),
                ):
                    assert broker.query_messages_by_key(topic, key, max_num, begin, end) == scan(
                        broker, topic, key, max_num, begin, end
                    ), (topic, key, max_num)
        nursery.cancel_scope.cancel()
    broker.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
@example(BUSY)
def test_b200_lookups_equal_a_scan_and_replay_rebuilds_the_index(ops):
    with tempfile.TemporaryDirectory() as data_dir:
        trio.run(generated, data_dir, ops)
        assert verify(data_dir) == []
