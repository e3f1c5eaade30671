"""A node that rejoins its group under a newer epoch: records the new history lacks are set aside (B-380..B-383).

An ASYNC_MASTER answers SEND_OK after its own write, so a master that died
(or was cut off) can hold records no follower fetched. The new leader's log
stops at `start_seq` of its epoch (its last record when it took the key)
and goes on with records of its own, so the returning node's records after
the common point are not the group's any more. The common point is the
lowest `start_seq` of the epochs after the last epoch the node's own log
knows (its last `ha_promoted` record).

The records after it are exported to `<data dir>/ha_set_aside/<name>/export/`
as `es-broker export` writes them (Parquet, one dataset per record family,
partitioned by day), every row with a `reason` column, and their messages'
ids, topics, queues, queue offsets and bodies in `export/message_bodies/`;
the whole LMDB environment is kept under `<data dir>/ha_set_aside/<name>/lmdb`;
the data directory is rebuilt from it
up to the common point (replay: byte-identical projections), and the node
follows. A report of what was set aside waits in `pending.json` until the new
leader recorded it (`ha_records_set_aside`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from es_broker.config import BrokerConfig
from es_broker.core.replay import _chunks, _payload_job, _records_job
from es_broker.log import records
from es_broker.log.types import RecordType
from es_broker.readmodel.export import export_records
from es_broker.remoting import message as wire
from es_broker.schema.families import Source
from es_broker.store import LMDB_DIR, Store

log = logging.getLogger(__name__)

SET_ASIDE_DIR = "ha_set_aside"
PENDING = "pending.json"
EXPORT = "export"  # the set-aside records as `es-broker export` writes them, with `reason`
MESSAGE_BODIES = "message_bodies"  # under EXPORT: each set-aside message's id, place and body


@dataclass(frozen=True, slots=True)
class SetAside:
    """What a rejoining node set aside: the report its new leader records."""

    node: str
    epoch: int
    common_seq: int
    first_seq: int
    last_seq: int
    messages: int
    msg_ids: list[str]
    export: str
    reason: str


def known_epoch(store: Store) -> int:
    """The epoch of the last `ha_promoted` record of the log (0: none), read from the end."""
    log_ = store.log
    with log_.read_txn() as txn:
        cur = txn.cursor(db=log_.log_db)
        if not cur.last():
            return 0
        for _, raw in cur.iterprev():
            record = records.unpack(raw)
            if record["type"] == RecordType.HA_PROMOTED:
                return int(record["epoch"])
    return 0


def common_point(epochs: dict[int, dict[str, Any]], mine: int) -> int | None:
    """The last record this node shares with the group's history (None: nothing to cut)."""
    later = [int(e.get("start_seq", 0)) for n, e in epochs.items() if n > mine]
    return min(later) if later else None


def set_aside(
    config: BrokerConfig, node: str, epochs: dict[int, dict[str, Any]]
) -> SetAside | None:
    """Cut the data directory back to the common point if it holds more; what was set aside, or None."""
    data_dir = Path(config.storePathRootDir)
    if not (data_dir / LMDB_DIR / "data.mdb").exists():
        return None
    store = Store.open(data_dir, config)
    try:
        mine = known_epoch(store)
        common = common_point(epochs, mine)
        last = store.log.last_seq
        if common is None or last <= common:
            return None
        name = f"epoch{mine}-{common + 1}-{last}"
        out = data_dir / SET_ASIDE_DIR
        out.mkdir(exist_ok=True)
        reason = (
            f"node {node} of epoch {mine} held records {common + 1}..{last}; the group's history "
            f"went on from record {common} in epoch {mine + 1}"
        )
        kept = out / name
        source = Source(config.brokerName, config.brokerRole, config.brokerId)
        msg_ids, excluded = _export(store, common + 1, kept / EXPORT, reason, source)
    finally:
        store.close()
    os.replace(data_dir / LMDB_DIR, kept / LMDB_DIR)
    _rebuild(kept, data_dir, common, excluded)
    report = SetAside(
        node,
        mine,
        common,
        common + 1,
        last,
        len(msg_ids),
        msg_ids,
        str(kept / EXPORT),
        reason,
    )
    (out / PENDING).write_text(json.dumps(asdict(report)))
    log.warning(
        "ha: %s; %d records (%d messages) set aside in %s, the data directory cut back to record %d",
        reason,
        last - common,
        len(msg_ids),
        report.export,
        common,
    )
    return report


def pending_report(data_dir: str | Path) -> SetAside | None:
    path = Path(data_dir) / SET_ASIDE_DIR / PENDING
    if not path.exists():
        return None
    return SetAside(**json.loads(path.read_text()))


def report_done(data_dir: str | Path) -> None:
    path = Path(data_dir) / SET_ASIDE_DIR / PENDING
    path.unlink(missing_ok=True)


def _export(
    store: Store, first: int, out: Path, reason: str, source: Source
) -> tuple[list[str], set[int]]:
    """The records from `first` on, as `es-broker export` writes them, each row with the reason, and
    their messages' bodies beside them; (their messages' ids, their physical offsets)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    msg_ids: list[str] = []
    phys: set[int] = set()
    bodies: list[dict[str, Any]] = []
    with store.read() as txn:
        batch = list(store.log.read(first))
        for seq, record in batch:
            if record["type"] != RecordType.MESSAGES_STORED:
                continue
            for phy, _, _ in record["units"]:
                phys.add(phy)
                data = store.log.payload(txn, phy)
                if data is None:
                    continue
                msg = wire.decode_all(bytes(data))[0]
                msg_id = msg.properties.get("UNIQ_KEY") or msg.msg_id
                msg_ids.append(msg_id)
                bodies.append(
                    {
                        "seq": seq,
                        "msg_id": msg_id,
                        "topic": msg.topic,
                        "queue_id": msg.queue_id,
                        "queue_offset": msg.queue_offset,
                        "body": msg.body,
                        "reason": reason,
                    }
                )
    export_records(batch, out, source, columns={"reason": reason})
    folder = out / MESSAGE_BODIES
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"part-{first:012d}.parquet"
    tmp = folder / f".{target.name}.tmp"
    pq.write_table(pa.Table.from_pylist(bodies, schema=_bodies_schema()), tmp)
    os.replace(tmp, target)
    return msg_ids, phys


def _bodies_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("seq", pa.int64()),
            ("msg_id", pa.string()),
            ("topic", pa.string()),
            ("queue_id", pa.int32()),
            ("queue_offset", pa.int64()),
            ("body", pa.binary()),
            ("reason", pa.string()),
        ]
    )


def _rebuild(src_dir: Path, dst_dir: Path, upto: int, excluded: set[int]) -> None:
    """Replay src's log into dst up to `upto`, with the message bytes of those records only."""
    src = Store.open(src_dir, BrokerConfig(storePathRootDir=str(src_dir)), readonly=True)
    dst = Store.open(dst_dir, BrokerConfig(storePathRootDir=str(dst_dir)))
    try:
        payloads = ((phy, data) for phy, data in src.log.payloads() if phy not in excluded)
        for chunk in _chunks(payloads):
            dst.log.write_batch([_payload_job(chunk)])
        raws = ((seq, raw) for seq, raw in src.log.read_raw() if seq <= upto)
        for records_chunk in _chunks(raws):
            dst.log.write_batch([_records_job(records_chunk)])
        dst.log.flush()
    finally:
        src.close()
        dst.close()
