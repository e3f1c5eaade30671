"""Write the record-log fixture: a real broker driven through every kind of decision it records.

Run from the repository root with the code whose log format is to be pinned:

    python -m tests.data.write_record_log tests/data/records-<short sha>.msgpack

The file holds the raw records (exactly the bytes of the log), the commit-log payloads and a
digest of every database the broker built from them (es_broker.core.replay.checksums).
tests/test_typed_records.py loads it into a fresh log and checks that replay still builds the
same databases, byte for byte, and that every record parses into its typed class.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgpack
import trio

from es_broker.acl.plain import combine, parse_file
from es_broker.clock import ManualClock
from es_broker.commands import acl_audit, slave_offsets
from es_broker.commands import transaction as tx
from es_broker.commands.placement import MessageIn
from es_broker.commands.queue_locks import QueueLocks
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.replay import checksums, replay, verify
from es_broker.log import make
from es_broker.log.types import Cause, RecordType
from es_broker.remoting import message as wire
from es_broker.store import Store

START = 1_700_000_000_000
GROUP = "PG"

ACL_YAML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
    groupPerms:
      - groupA=DENY
"""


def half(body: bytes) -> MessageIn:
    props = {"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": "U" + body.decode()}
    return MessageIn(body, props, sys_flag=tx.TRANSACTION_PREPARED_TYPE, born_timestamp=START)


async def drive(broker: Broker, clock: ManualClock) -> None:
    """Every writer of the log, through the broker's own commands."""
    for topic, n in (("T1", 4), ("T2", 2)):
        await broker.update_topic(
            {"topicName": topic, "readQueueNums": n, "writeQueueNums": n, "perm": 6}
        )
    await broker.update_group({"groupName": "G1", "retryQueueNums": 1, "retryMaxTimes": 2})
    for i in range(6):
        clock.advance(7)
        await broker.put_message(
            "T1", i % 4, MessageIn(b"m%d" % i, {"TAGS": "A" if i % 2 else "B", "KEYS": f"k{i}"})
        )
    await broker.put_messages("T2", 1, [MessageIn(b"b%d" % i, {"KEYS": "bk"}) for i in range(3)])
    await broker.put_message("AUTO", -1, MessageIn(b"auto"), default_topic="TBW102")
    # a delayed message, parked then delivered
    await broker.put_message("T2", 0, MessageIn(b"later", {"DELAY": "1"}))
    clock.advance(1500)
    await broker.deliver_delayed()
    # pulls: a delivery with a piggybacked commit, a pull that only moves the offset
    got = await broker.pull("G1", "T1", 0, 0, client="c1@h", commit_offset=0)
    await broker.pull("G1", "T1", 1, 0, client="c1@h")
    await broker.pull("G1", "T1", 0, 99, client="c1@h")
    await broker.commit_offset("G1", "T1", 1, 1, requester="c1@h")
    await broker.commit_offset("G1", "T2", 1, 2, cause=Cause.ADMIN, requester="admin")
    await broker.query_consumer_offset("G2", "T1", 2, requester="c2@h")
    await broker.record_consumer_group(
        "G1", ["c1@h"], "CONSUME_FROM_LAST_OFFSET", "CLUSTERING", {"T1": "*"}
    )
    # send-backs: to the retry topic, then past the limit to the DLQ, then a re-drive
    assert got.messages
    for _ in range(3):
        await broker.send_back("G1", _phy_of(broker, "T1", 0), 0, requester="c1@h")
    await broker.send_back("G1", _phy_of(broker, "T1", 1), 0, max_reconsume_times=0)
    await broker.redrive_dlq("G1", requester="admin")
    # resets by time and by offset, a clone, group offsets removed with the group
    clock.advance(10)
    await broker.plan_reset(
        "G1", "T1", START + 20, True, requester="admin", notified=["c1@h"], scope="read_queues"
    )
    await broker.commit_offset("G1", "T2", 0, 1, requester="c1@h")
    await broker.plan_reset("G1", "T2", 0, False, requester="admin", kind="offset")
    await broker.clone_group_offset("G1", "G3", "T1", online_topics={"T1"}, requester="admin")
    # topic perm change and delete, group delete with its offsets
    await broker.update_topic_perm("T2", 4, requester="admin")
    await broker.update_group({"groupName": "G4"})
    await broker.commit_offset("G4", "T1", 0, 1, requester="c4@h")
    await broker.delete_group("G4", requester="admin", remove_offsets=True)
    await broker.delete_topic("AUTO", requester="admin")
    # transactions: commit, rollback, checked, discarded
    for body, kind in ((b"t1", tx.TRANSACTION_COMMIT_TYPE), (b"t2", tx.TRANSACTION_ROLLBACK_TYPE)):
        r = await broker.put_message("T1", 3, half(body))
        await broker.end_transaction(
            tx.EndRequest(GROUP, r.queue_offset, r.physical_offsets[0], kind, False, "m")
        )
    await broker.put_message("T1", 2, half(b"t3"))
    for _ in range(5):
        clock.advance(70_000)
        await broker.check_transactions({GROUP: ["p1@h"]})
    # queue locks: lock, unlock, expire
    locks = QueueLocks(broker.submit, clock, 60_000)
    await locks.lock_batch("G1", "c1@h", [("T1", "b", 0), ("T1", "b", 1)])
    await locks.unlock_batch("G1", "c1@h", [("T1", "b", 0)])
    clock.advance(61_000)
    await locks.expire()
    # broker settings, ACL loads and refusals
    await broker.update_config(
        {"autoCreateTopicEnable": "false", "shortPollingTimeMills": "500"}, "ad"
    )
    acl = combine([parse_file("/etc/plain_acl.yml", ACL_YAML.encode())])
    now = clock.now_ms()
    fields = acl_audit.load_fields(acl, "startup", None, 1, b"s" * 16)
    denied = acl_audit.denial_record({("RocketMQ", "10.0.0.1", 16): 3}, now - 60_000, now, 60, 1)
    loaded = make(RecordType.ACL_LOADED, now, **fields)
    await broker.submit(lambda ctx: [ctx.append(loaded), ctx.append(denied)])
    # a slave's deliveries and commits merged into the master
    now = clock.now_ms()
    commit = slave_offsets.SlaveCommit(1, now, "T1", "G1", 2, 1, -1, "client_commit", "c@s", 5)
    served = slave_offsets.SlaveDelivery(2, now, "G1", "T1", 2, 0, (0,), 1, "c@s", 5)
    await broker.submit(
        slave_offsets.merge_job(
            broker.store,
            broker_id=1,
            slave_addr="10.0.0.2:10911",
            journal_upto=2,
            commits=[commit],
            deliveries=[served],
            requester="10.0.0.2",
        )
    )
    # a reset by the broker itself fences the commits of older pulls
    await broker.plan_reset(
        "G1",
        "T1",
        0,
        True,
        requester="admin",
        kind="offset",
        mode="server_side",
        scope="read_queues",
    )
    await broker.commit_offset("G1", "T1", 0, 3, requester="c1@h")
    # retention: the commit log's old files expire, a parked message with them
    await broker.put_message("T2", 1, MessageIn(b"removed before due", {"DELAY": "5"}))
    clock.advance(100 * 3600 * 1000)
    await broker.retention_pass(manual=True)
    await broker.deliver_delayed()
    # and the broker goes on
    for i in range(4):
        clock.advance(3)
        await broker.put_message("T1", i, MessageIn(b"after%d" % i, {"KEYS": f"a{i}"}))
        await broker.pull("G1", "T1", i, 0, client="c1@h", commit_offset=0)


def _phy_of(broker: Broker, topic: str, queue_id: int) -> int:
    (raw,) = broker.get_message(topic, queue_id, 0, 1).messages
    return wire.decode_one(raw)[0].physical_offset


async def run(data_dir: str) -> None:
    clock = ManualClock(START)
    config = BrokerConfig(
        storePathRootDir=data_dir,
        total_physical_memory_bytes=1024**3,
        mappedFileSizeCommitLog=1024,
        fileReservedTime=1,
        reset_fence=True,
        transactionCheckMax=2,
    )
    broker = Broker.open(data_dir, config, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await drive(broker, clock)
        nursery.cancel_scope.cancel()
    broker.close()


def dump(data_dir: str, out: Path) -> dict[str, Any]:
    store = Store.open(data_dir, BrokerConfig(storePathRootDir=data_dir), readonly=True)
    try:
        records = [raw for _, raw in store.log.read_raw()]
        payloads = [[phy, data] for phy, data in store.log.payloads()]
    finally:
        store.close()
    with tempfile.TemporaryDirectory() as tmp:
        replay(data_dir, tmp)
        sums = checksums(tmp)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    fixture = {"commit": commit, "records": records, "payloads": payloads, "checksums": sums}
    out.write_bytes(msgpack.packb(fixture, use_bin_type=True))
    return fixture


def main() -> None:
    out = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(run, tmp)
        differences = verify(tmp)
        if differences:
            raise SystemExit("\n".join(d.describe() for d in differences))
        fixture = dump(tmp, out)
    print(f"{len(fixture['records'])} records, {len(fixture['payloads'])} payloads -> {out}")


if __name__ == "__main__":
    main()
