"""The replication protocol between a slave and its master, over remoting frames (sans-IO).

RocketMQ ships raw commit-log bytes over a port of its own (docs/protocol.md
§7.8) and syncs metadata with four remoting calls every 10 s. es-broker ships
the record log instead, so one stream carries messages, consume-queue
positions, offsets, topic and group configs and delay cursors alike; it
rides on the broker's remoting port with private request codes:

HA_FETCH_RECORDS (9280), slave -> master. Header: `slaveId`, `slaveAddr`,
`fromSeq` (the first sequence the slave lacks: it acknowledges every record
below), `lastRecordCrc` (CRC-32 of the slave's record fromSeq - 1, so the
master can tell a slave that is not on its history), `slavePhyMax` (the
slave's commit-log end, for haSlaveFallbehindMax), `maxWaitMillis` (the
master holds the request that long when it has nothing new: long polling on
its tail, which doubles as the slave's heartbeat), `maxBytes`. Answer:
SUCCESS with `firstSeq`, `count`, `masterLastSeq`, `masterPhyMax` and a
msgpack body `[[record, ...], [[physical offset, message bytes], ...]]`: the
records as stored, and the commit-log entries that the `messages_stored`
among them place. SYSTEM_ERROR when the slave is not on the master's history.

HA_MERGE_SLAVE_OFFSETS (9281), slave -> master. Header: `slaveId`,
`slaveAddr`, `journalUpto` (the last journal position the request covers);
body: a msgpack map `{"commits": [SlaveCommit.row, ...], "deliveries":
[SlaveDelivery.row, ...]}`, both lists oldest first. The first form, a plain
msgpack list of commit rows, is still accepted (no deliveries), and a slave
sends it when it has no deliveries to ship, so that a master without
delivery support still merges its commits; upgrade the master first. Answer:
SUCCESS with `seq` (the merge record), `policy` and `deliveries` (how many
`messages_delivered` records the master appended for the slave).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import msgpack

from es_broker.commands.slave_journal import SlaveCommit, SlaveDelivery
from es_broker.core.slave_broker import ReplicatedBatch
from es_broker.remoting.codes import EsRequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request, response_to

DEFAULT_MAX_BYTES = 1024 * 1024  # per answer; one record is always shipped, whatever its size


def record_crc(raw: bytes | None) -> int:
    """CRC-32 of a stored record; 0 for "no record" (a slave with an empty log)."""
    return zlib.crc32(raw) if raw else 0


def _epoch(cmd: RemotingCommand) -> int:
    epoch = cmd.get_int("epoch")
    return -1 if epoch is None else epoch


@dataclass(frozen=True, slots=True)
class FetchRequest:
    slave_id: int
    slave_addr: str
    from_seq: int
    last_record_crc: int
    slave_phy_max: int
    max_wait_ms: int
    max_bytes: int = DEFAULT_MAX_BYTES
    epoch: int = -1  # the fail-over epoch the slave follows (B-375); -1: no coordinator

    def to_command(self) -> RemotingCommand:
        fields: dict[str, object] = {
            "slaveId": self.slave_id,
            "slaveAddr": self.slave_addr,
            "fromSeq": self.from_seq,
            "lastRecordCrc": self.last_record_crc,
            "slavePhyMax": self.slave_phy_max,
            "maxWaitMillis": self.max_wait_ms,
            "maxBytes": self.max_bytes,
        }
        if self.epoch >= 0:
            fields["epoch"] = self.epoch
        return request(EsRequestCode.HA_FETCH_RECORDS, fields)

    @classmethod
    def from_command(cls, cmd: RemotingCommand) -> FetchRequest:
        return cls(
            cmd.require_int("slaveId"),
            cmd.require_str("slaveAddr"),
            max(cmd.require_long("fromSeq"), 1),
            cmd.require_long("lastRecordCrc"),
            cmd.require_long("slavePhyMax"),
            max(cmd.require_int("maxWaitMillis"), 0),
            max(cmd.get_int("maxBytes", DEFAULT_MAX_BYTES) or 1, 1),
            _epoch(cmd),
        )


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    batch: ReplicatedBatch
    master_last_seq: int
    master_phy_max: int
    epoch: int = -1  # the master's fail-over epoch; -1: no coordinator

    def to_response(self, req: RemotingCommand) -> RemotingCommand:
        body = msgpack.packb(
            [list(self.batch.records), [list(p) for p in self.batch.payloads]], use_bin_type=True
        )
        return response_to(
            req,
            ResponseCode.SUCCESS,
            None,
            {
                "firstSeq": self.batch.first_seq,
                "count": len(self.batch.records),
                "masterLastSeq": self.master_last_seq,
                "masterPhyMax": self.master_phy_max,
                "epoch": self.epoch,
            },
            body,
        )

    @classmethod
    def from_response(cls, resp: RemotingCommand) -> FetchAnswer:
        records, payloads = msgpack.unpackb(resp.body, raw=False) if resp.body else ([], [])
        if len(records) != resp.require_int("count"):
            raise ValueError(
                f"fetch answer holds {len(records)} records, its header says {resp.require_int('count')}"
            )
        batch = ReplicatedBatch(
            resp.require_long("firstSeq"),
            tuple(records),
            tuple((int(phy), data) for phy, data in payloads),
        )
        return cls(
            batch,
            resp.require_long("masterLastSeq"),
            resp.require_long("masterPhyMax"),
            _epoch(resp),
        )


@dataclass(frozen=True, slots=True)
class MergeRequest:
    slave_id: int
    slave_addr: str
    journal_upto: int
    commits: tuple[SlaveCommit, ...]
    deliveries: tuple[SlaveDelivery, ...] = ()

    def to_command(self) -> RemotingCommand:
        commits = [c.row() for c in self.commits]
        payload: list[Any] | dict[str, Any] = commits
        if self.deliveries:
            payload = {"commits": commits, "deliveries": [d.row() for d in self.deliveries]}
        body = msgpack.packb(payload, use_bin_type=True)
        return request(
            EsRequestCode.HA_MERGE_SLAVE_OFFSETS,
            {
                "slaveId": self.slave_id,
                "slaveAddr": self.slave_addr,
                "journalUpto": self.journal_upto,
            },
            body,
        )

    @classmethod
    def from_command(cls, cmd: RemotingCommand) -> MergeRequest:
        body = msgpack.unpackb(cmd.body, raw=False) if cmd.body else []
        if isinstance(body, list):  # the first form: commits only
            commits, deliveries = body, []
        elif isinstance(body, dict):
            commits, deliveries = body.get("commits", []), body.get("deliveries", [])
        else:
            raise ValueError(
                "merge body is neither a map of commits and deliveries nor a list of commits"
            )
        if not isinstance(commits, list) or not isinstance(deliveries, list):
            raise ValueError("merge body's commits and deliveries must be lists")
        return cls(
            cmd.require_int("slaveId"),
            cmd.require_str("slaveAddr"),
            cmd.require_long("journalUpto"),
            tuple(SlaveCommit.from_row(list(r)) for r in commits),
            tuple(SlaveDelivery.from_row(list(r)) for r in deliveries),
        )
