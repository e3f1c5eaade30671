"""The audit's explain entry of a queue (B-504), written by a commit from the bytes it wrote last
(`AuditProjection._offset_moved`), holds the bytes the reference writes: the stored entry
unpacked, the change noted (`note_change`), packed whole. Held through commits in one group
commit and in several, a query's start written between them, a transaction aborted after a
commit, and an entry rewritten by something else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack

from es_broker.config import BrokerConfig
from es_broker.log import AppendContext, records
from es_broker.log.types import Cause, OffsetCommitted, OffsetQueried
from es_broker.projections.audit import empty_entry, explain_key, note_change
from es_broker.projections.offset_rule import change_view, offset_changes
from es_broker.store import Store

GROUP, TOPIC = "G", "T"


def _commit(seq_ts: int, queue: int, old: int, new: int) -> dict[str, Any]:
    return OffsetCommitted(
        group=GROUP,
        topic=TOPIC,
        queue_id=queue,
        offset=new,
        old=old,
        cause=Cause.PULL_COMMIT,
        requester="127.0.0.1@c" + "x" * (queue * 20),  # texts of several msgpack lengths
    ).to_record(seq_ts)


def _query(ts: int, queue: int) -> dict[str, Any]:
    return OffsetQueried(
        group=GROUP,
        topic=TOPIC,
        queue_id=queue,
        row=2,
        offset=0,
        code=0,
        min_offset=0,
        head_in_memory=True,
        phy_max=0,
        requester="127.0.0.1@c",
    ).to_record(ts)


def _entry(store: Store, queue: int) -> bytes | None:
    with store.read() as txn:
        raw = txn.get(explain_key(GROUP, TOPIC, queue), db=store.audit.explain_db)
    return None if raw is None else bytes(raw)


def _reference(before: bytes | None, seq: int, record: dict[str, Any]) -> bytes:
    """What the entry's bytes become by the reference: unpacked, the change noted, packed."""
    entry = empty_entry() if before is None else msgpack.unpackb(before)
    (change,) = offset_changes(record)
    note_change(entry, change_view(seq, record["ts"], change))
    return records.packb(entry)


def test_b504_a_commit_writes_the_explain_entry_the_reference_writes(tmp_path: Path) -> None:
    store = Store.open(tmp_path, BrokerConfig(storePathRootDir=str(tmp_path)))
    try:
        ts, offset = 1_700_000_000_000, [0, 0, 0]

        def batch(*records_: dict[str, Any], abort: bool = False) -> None:
            """Append records in one write transaction (a job that raises once they are
            appended, with `abort`); check each entry written against the reference."""
            seen: list[tuple[bytes | None, int, dict[str, Any], bytes]] = []

            def job(ctx: AppendContext) -> None:
                db = store.audit.explain_db
                for record in records_:
                    key = explain_key(GROUP, TOPIC, record["queue_id"])
                    raw = ctx.txn.get(key, db=db)
                    seq = ctx.append(record)
                    seen.append((raw and bytes(raw), seq, record, bytes(ctx.txn.get(key, db=db))))
                if abort:
                    raise RuntimeError("the batch fails after its appends")

            ((ok, outcome),) = store.log.write_batch([job])
            assert ok is not abort, outcome
            for before, seq, record, after in seen:
                if record["type"] == "offset_committed":
                    assert after == _reference(before, seq, record)

        def commit(queue: int) -> dict[str, Any]:
            nonlocal ts
            ts += 7
            old, offset[queue] = offset[queue], offset[queue] + 3
            return _commit(ts, queue, old, offset[queue])

        batch(commit(0))  # the first change: written by the reference, then kept
        batch(commit(0), commit(1), commit(0), commit(2), commit(0))  # several in one commit
        for _ in range(5):
            batch(commit(0), commit(1))  # one a group commit, as a pull's commit each
        batch(_query(ts, 2), commit(2), commit(2))  # a query's start between changes
        kept = _entry(store, 0)
        batch(commit(0), commit(0), abort=True)  # the kept bytes were never committed
        assert _entry(store, 0) == kept
        batch(commit(0), commit(1))
        with store.log.env.begin(write=True) as txn:  # something else rewrites the entry
            key = explain_key(GROUP, TOPIC, 1)
            entry = msgpack.unpackb(txn.get(key, db=store.audit.explain_db))
            entry["changes"] = 2**40
            txn.put(key, records.packb(entry), db=store.audit.explain_db)
        batch(commit(1), commit(1))
        for _ in range(200):  # counts across msgpack's int widths
            batch(commit(0))
        assert msgpack.unpackb(_entry(store, 0))["changes"] == 1 + 3 + 5 + 1 + 200
    finally:
        store.close()
