"""Write a data directory in an older store format, with the answers the broker gave from it.

Run from the repository root with the code whose store format is to be pinned:

    python -m tests.data.write_old_store tests/data/store-format-<n>-<short sha>

It writes `<name>.tar.gz` (the `lmdb` directory of a broker driven through every writer of
the log by tests/data/write_record_log.py, then through keyed sends pulled by two groups) and
`<name>.json` (`answers()` of that directory: messages, key lookups, journeys, explanations,
offsets). tests/test_store_format.py opens a copy with the current code, which upgrades it,
and checks that `verify` passes and that every answer is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import trio

from es_broker.clock import ManualClock
from es_broker.commands import explain, trace
from es_broker.commands.placement import MessageIn
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.remoting import message as wire
from tests.data import write_record_log

LATER = write_record_log.START + 200 * 3600 * 1000
GROUPS = ("G1", "G2")


async def keyed_sends(data_dir: str) -> None:
    """Messages with two keys each, in batches and alone, pulled by two groups."""
    clock = ManualClock(LATER)
    broker = Broker.open(data_dir, BrokerConfig(storePathRootDir=data_dir), clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await broker.update_topic(
            {"topicName": "K", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
        )
        for i in range(6):
            clock.advance(5)
            batch = [
                MessageIn(
                    b"k%d-%d" % (i, j),
                    {
                        "KEYS": f"order-{i} cust-{j % 3}",
                        "TAGS": "AB"[j % 2],
                        "UNIQ_KEY": f"U{i}{j}",
                    },
                )
                for j in range(4)
            ]
            await broker.put_messages("K", i % 2, batch)
        await broker.put_message("K", 0, MessageIn(b"alone", {"KEYS": "order-9 cust-0"}))
        for group in GROUPS:
            for qid in (0, 1):
                clock.advance(1)
                # G2 takes tag A only (hashCode 65): its deliveries skip offsets
                tags = frozenset({65}) if group == "G2" else None
                got = await broker.pull(group, "K", qid, 0, 3, tags_codes=tags, client=f"{group}@h")
                await broker.pull(
                    group, "K", qid, got.next_begin_offset, client=f"{group}@h", commit_offset=1
                )
        nursery.cancel_scope.cancel()
    broker.close()


def answers(data_dir: str | Path) -> dict[str, Any]:
    """What the broker answers from a data directory: JSON-able, for before/after comparisons."""
    broker = Broker.open(
        str(data_dir), BrokerConfig(storePathRootDir=str(data_dir)), ManualClock(LATER)
    )
    store = broker.store
    try:
        with store.read() as txn:
            queues = sorted(store.cq.queues(txn))
            units = {
                f"{topic}:{qid}:{u.offset}": [u.physical_offset, u.size, u.tags_code, u.store_time]
                for topic, qid, lo, hi in queues
                for u in store.cq.units(txn, topic, qid, lo, hi)
            }
            payloads = {  # by message, whatever the layout keeping the bytes
                str(phy): hashlib.sha256(raw).hexdigest() for phy, raw in store.log.payloads_in(txn)
            }
        keys: dict[str, list[int]] = {}
        ids: list[str] = []
        for phy in sorted(int(p) for p in payloads):
            with store.read() as txn:
                raw = store.log.payload(txn, phy)
            assert raw is not None
            message = wire.decode_one(raw)[0]
            ids.append(wire.offset_msg_id(message.store_host, phy))
            uniq = message.properties.get("UNIQ_KEY")
            for key in [*message.keys, *([uniq] if uniq else [])]:
                found = broker.query_messages_by_key(message.topic, key, 64, 0, 2**62)
                keys[f"{message.topic} {key}"] = [
                    wire.decode_one(m)[0].physical_offset for m in found
                ]
            if uniq:
                ids.append(uniq)
        return {
            "queues": [list(q) for q in queues],
            "units": units,
            "payloads": payloads,
            "keys": keys,
            "journeys": {msg_id: trace.journey(store, msg_id) for msg_id in ids},
            "explain": {
                f"{group} {topic}": explain.explain(store, group, topic)
                for group in ("G1", "G2", "G3")
                for topic in ("T1", "T2", "K")
            },
            "offsets": sorted(list(row) for row in broker.offset_table()),
        }
    finally:
        broker.close()


def main() -> None:
    out = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(write_record_log.run, tmp)
        trio.run(keyed_sends, tmp)
        with tarfile.open(out.with_suffix(".tar.gz"), "w:gz") as tar:
            tar.add(Path(tmp) / "lmdb", arcname="lmdb")
        with tempfile.TemporaryDirectory() as copy:
            with tarfile.open(out.with_suffix(".tar.gz")) as tar:
                tar.extractall(copy, filter="data")
            found = answers(copy)
    out.with_suffix(".json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"{len(found['payloads'])} messages, {len(found['keys'])} keys -> {out}.*")


if __name__ == "__main__":
    main()
