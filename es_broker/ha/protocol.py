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
from es_broker.remoting.es_headers import (
    HaFetchRecordsRequestHeader,
    HaFetchRecordsResponseHeader,
    HaMergeSlaveOffsetsRequestHeader,
)

DEFAULT_MAX_BYTES = 1024 * 1024  # per answer; one record is always shipped, whatever its size


def record_crc(raw: bytes | None) -> int:
    """CRC-32 of a stored record; 0 for "no record" (a slave with an empty log)."""
    return zlib.crc32(raw) if raw else 0


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
        header = HaFetchRecordsRequestHeader(
            slave_id=self.slave_id,
            slave_addr=self.slave_addr,
            from_seq=self.from_seq,
            last_record_crc=self.last_record_crc,
            slave_phy_max=self.slave_phy_max,
            max_wait_millis=self.max_wait_ms,
            max_bytes=self.max_bytes,
            epoch=self.epoch if self.epoch >= 0 else None,
        )
        return request(EsRequestCode.HA_FETCH_RECORDS, header.to_fields())

    @classmethod
    def from_command(cls, cmd: RemotingCommand) -> FetchRequest:
        h = HaFetchRecordsRequestHeader.of(cmd)
        return cls(
            h.slave_id,
            h.slave_addr,
            max(h.from_seq, 1),
            h.last_record_crc,
            h.slave_phy_max,
            max(h.max_wait_millis, 0),
            max(DEFAULT_MAX_BYTES if h.max_bytes is None else h.max_bytes or 1, 1),
            -1 if h.epoch is None else h.epoch,
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
        header = HaFetchRecordsResponseHeader(
            first_seq=self.batch.first_seq,
            count=len(self.batch.records),
            master_last_seq=self.master_last_seq,
            master_phy_max=self.master_phy_max,
            epoch=self.epoch,
        )
        return response_to(req, ResponseCode.SUCCESS, None, header.to_fields(), body)

    @classmethod
    def from_response(cls, resp: RemotingCommand) -> FetchAnswer:
        h = HaFetchRecordsResponseHeader.of(resp)
        records, payloads = msgpack.unpackb(resp.body, raw=False) if resp.body else ([], [])
        if len(records) != h.count:
            raise ValueError(
                f"fetch answer holds {len(records)} records, its header says {h.count}"
            )
        batch = ReplicatedBatch(
            h.first_seq,
            tuple(records),
            tuple((int(phy), data) for phy, data in payloads),
        )
        return cls(batch, h.master_last_seq, h.master_phy_max, -1 if h.epoch is None else h.epoch)


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
        header = HaMergeSlaveOffsetsRequestHeader(
            slave_id=self.slave_id, slave_addr=self.slave_addr, journal_upto=self.journal_upto
        )
        return request(EsRequestCode.HA_MERGE_SLAVE_OFFSETS, header.to_fields(), body)

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
        h = HaMergeSlaveOffsetsRequestHeader.of(cmd)
        return cls(
            h.slave_id,
            h.slave_addr,
            h.journal_upto,
            tuple(SlaveCommit.from_row(list(r)) for r in commits),
            tuple(SlaveDelivery.from_row(list(r)) for r in deliveries),
        )
