"""A node that rejoins its group under a newer epoch: records the new history lacks are set aside (B-380..B-383).

An ASYNC_MASTER answers SEND_OK after its own write, so a master that died
(or was cut off) can hold records no follower fetched. The new leader's log
stops at `start_seq` of its epoch (its last record when it took the key)
and goes on with records of its own, so the returning node's records after
the common point are not the group's any more. The common point is the
lowest `start_seq` of the epochs after the last epoch the node's own log
knows (its last `ha_promoted` record).

The records after it are written, one JSON line each, to
`<data dir>/ha_set_aside/<name>.jsonl` (the export quarantine's form: seq,
type, the reason, the record, and each message with its msgId, topic, queue,
queue offset and body in base64); the whole LMDB environment is kept under
`<data dir>/ha_set_aside/<name>/lmdb`; the data directory is rebuilt from it
up to the common point (replay: byte-identical projections), and the node
follows. A report of what was set aside waits in `pending.json` until the new
leader recorded it (`ha_records_set_aside`).
"""

from __future__ import annotations

import base64
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from es_broker.commands.store import LMDB_DIR, Store
from es_broker.config import BrokerConfig
from es_broker.core.replay import _chunks, _payload_job, _records_job
from es_broker.log import records
from es_broker.log.types import RecordType
from es_broker.remoting import message as wire

log = logging.getLogger(__name__)

SET_ASIDE_DIR = "ha_set_aside"
PENDING = "pending.json"


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
        msg_ids, excluded = _export(store, common + 1, out / f"{name}.jsonl", reason)
    finally:
        store.close()
    kept = out / name
    kept.mkdir()
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
        str(out / f"{name}.jsonl"),
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


def _export(store: Store, first: int, path: Path, reason: str) -> tuple[list[str], set[int]]:
    """The records from `first` on, one JSON line each; (their messages' ids, their physical offsets)."""
    msg_ids: list[str] = []
    phys: set[int] = set()
    with path.open("w") as out, store.read() as txn:
        for seq, record in store.log.read(first):
            line: dict[str, Any] = {
                "seq": seq,
                "type": record["type"],
                "reason": reason,
                "record": _plain(record),
            }
            if record["type"] == RecordType.MESSAGES_STORED:
                line["messages"] = []
                for phy, _, _ in record["units"]:
                    phys.add(phy)
                    data = store.log.payload(txn, phy)
                    if data is None:
                        continue
                    msg = wire.decode_all(bytes(data))[0]
                    msg_id = msg.properties.get("UNIQ_KEY") or msg.msg_id
                    msg_ids.append(msg_id)
                    line["messages"].append(
                        {
                            "msgId": msg_id,
                            "topic": msg.topic,
                            "queueId": msg.queue_id,
                            "queueOffset": msg.queue_offset,
                            "body": base64.b64encode(msg.body).decode("ascii"),
                        }
                    )
            out.write(json.dumps(line, sort_keys=True) + "\n")
        out.flush()
        os.fsync(out.fileno())
    return msg_ids, phys


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


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
