"""The master's side of replication: serve record fetches, track what slaves hold, SYNC_MASTER waits.

A slave's fetch from sequence N says "I hold everything below N": that is
the acknowledgement SYNC_MASTER waits for (RocketMQ's push2SlaveMaxOffset,
here in records and, for haSlaveFallbehindMax, in commit-log bytes). A slave
counts as connected while its connection is open and it fetched within
haHousekeepingInterval; the fetch is held at most haSendHeartbeatInterval,
so a live slave always fetches well within that.

Catch-up points are records: the first time in a connection that a slave
stands at the master's tail, the master appends `slave_caught_up` (slave id,
address, the sequence it holds, records shipped in that connection). Topic
configs, groups, offsets and delay cursors of the slave equal the master's
at that sequence, since they are projections of the same records, so the
record is where RocketMQ's periodic SlaveSynchronize (B-121..B-125) would
have completed a round.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import lmdb
import trio

from es_broker.commands.errors import IllegalRequest, NoPermission, ServiceNotAvailable
from es_broker.commands.slave_offsets import merge_job
from es_broker.config import BrokerConfig
from es_broker.core.broker import Broker
from es_broker.core.slave_broker import LogDiverged, ReplicatedBatch
from es_broker.ha.protocol import FetchAnswer, FetchRequest, MergeRequest, record_crc
from es_broker.log import AppendContext, Record, records
from es_broker.log.types import (
    HaRecordsSetAside,
    MessagesStoredRecord,
    RecordType,
    SlaveCaughtUp,
)
from es_broker.net.channel import Channel
from es_broker.remoting import fastjson
from es_broker.remoting.codes import EsRequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.es_headers import HaMergeSlaveOffsetsResponseHeader, RecordSeqResponseHeader
from es_broker.store import Store

log = logging.getLogger(__name__)


class EpochMismatch(LogDiverged):
    """A fetch of a slave that follows another fail-over epoch than this master's (B-375)."""


Handler = Callable[[Channel, RemotingCommand], Awaitable[RemotingCommand]]


def wants_slave_ack(properties: dict[str, str]) -> bool:
    """Message#isWaitStoreMsgOK: a send waits for the store (and a SYNC slave) unless WAIT=false."""
    return properties.get("WAIT", "true").strip().lower() != "false"


@dataclass(slots=True)
class SlaveSession:
    """One slave connection, as the master sees it."""

    broker_id: int
    addr: str
    channel: Channel
    acked_seq: int
    phy_max: int
    last_fetch: float  # trio clock
    connected_at_ms: int
    records_shipped: int = 0
    caught_up_seq: int | None = None  # the sequence recorded by this connection's slave_caught_up
    fetching: int = 0  # fetches in progress (held on the tail)

    def describe(self) -> str:
        caught_up = "not yet" if self.caught_up_seq is None else f"at {self.caught_up_seq}"
        return (
            f"{self.broker_id}@{self.addr} acked {self.acked_seq}, phyMax {self.phy_max}, "
            f"shipped {self.records_shipped}, caught up {caught_up}"
        )


class ReplicationMaster:
    """Serves HA_FETCH_RECORDS and HA_MERGE_SLAVE_OFFSETS; answers SYNC_MASTER's "does a slave have it"."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.sessions: dict[Channel, SlaveSession] = {}
        self.acked_seq = (
            0  # highest sequence any slave acknowledged; never decreases (push2SlaveMaxOffset)
        )
        self.slave_phy_max = 0  # highest commit-log end any slave reported
        # each slave's acknowledged sequence by broker id, kept after it disconnects: sealing
        # never removes from the hot log what a slave has not fetched (B-412); it starts from
        # what the log recorded (B-462), so a restart does not forget a slave that is away
        with broker.store.read() as txn:
            held = broker.store.history.slaves_held(txn)
        # a node promoted from slave is not its own slave
        self.slaves_acked = {b: s for b, s in held.items() if b != broker.config.brokerId}
        self._acked = trio.Event()
        # automatic fail-over (B-370..B-389): the epoch this master leads (-1: no coordinator), what a
        # SYNC_MASTER answer also waits for (the acknowledged sequence published in etcd), and who to
        # tell when a follower of a newer epoch shows this master is not the leader any more
        self.epoch = -1
        self.publish_acked: Callable[[int, float], Awaitable[bool]] | None = None
        self.on_superseded: Callable[[int], None] = lambda epoch: None
        # the group's own nodes, who alone may send the codes that write records (B-501): the
        # hosts of the slaves that fetched from this master, and, under a coordinator, those of
        # the members it knows (their addresses as published in etcd)
        self.node_hosts: set[str] = set()
        self.member_addrs: Callable[[], Awaitable[list[str]]] | None = None

    @property
    def config(self) -> BrokerConfig:
        return self.broker.config

    def handlers(self) -> dict[int, Handler]:
        return {
            EsRequestCode.HA_FETCH_RECORDS: self.fetch,
            EsRequestCode.HA_MERGE_SLAVE_OFFSETS: self.merge,
            EsRequestCode.HA_REPORT_SET_ASIDE: self.record_set_aside,
        }

    def channel_closed(self, channel: Channel) -> None:
        session = self.sessions.pop(channel, None)
        if session is not None:
            log.info(
                "slave %d at %s disconnected at seq %d",
                session.broker_id,
                session.addr,
                session.acked_seq,
            )

    # ------------------------------------------------------------------ SYNC_MASTER
    def live_sessions(self) -> list[SlaveSession]:
        horizon = trio.current_time() - self.config.haHousekeepingInterval / 1000
        return [
            s
            for s in self.sessions.values()
            if not s.channel.closed and (s.fetching or s.last_fetch >= horizon)
        ]

    def slave_ok(self, master_put_where: int) -> bool:
        """HAService#isSlaveOK: a slave is connected and lags less than haSlaveFallbehindMax bytes."""
        return (
            bool(self.live_sessions())
            and master_put_where - self.slave_phy_max < self.config.haSlaveFallbehindMax
        )

    async def wait_replicated(self, seq: int) -> ResponseCode:
        """After a SYNC_MASTER store: SUCCESS once a slave holds seq, else RocketMQ's statuses (B-111, 7.8).

        SLAVE_NOT_AVAILABLE when no slave is connected (or it lags too far);
        FLUSH_SLAVE_TIMEOUT when none acknowledged within slaveTimeout. Both
        mean "stored on the master" to a client.
        """
        store = self.broker.store
        with store.read() as txn:
            put_where = store.commitlog.phy_max(txn)
        if not self.slave_ok(put_where):
            return ResponseCode.SLAVE_NOT_AVAILABLE
        timeout = self.config.slaveTimeout / 1000
        with trio.move_on_after(timeout):
            while self.acked_seq < seq:
                await self._acked.wait()
            if self.publish_acked is not None and not await self.publish_acked(seq, timeout):
                # a slave holds it, but candidates could not know (etcd unreachable): not SEND_OK
                return ResponseCode.FLUSH_SLAVE_TIMEOUT
            return ResponseCode.SUCCESS
        return ResponseCode.FLUSH_SLAVE_TIMEOUT

    def _acknowledge(self, session: SlaveSession, acked: int, phy_max: int) -> None:
        session.acked_seq = max(session.acked_seq, acked)
        self.slaves_acked[session.broker_id] = max(
            self.slaves_acked.get(session.broker_id, 0), acked
        )
        session.phy_max = max(session.phy_max, phy_max)
        self.slave_phy_max = max(self.slave_phy_max, phy_max)
        if acked > self.acked_seq:
            self.acked_seq = acked
            self._acked.set()
            self._acked = trio.Event()

    def sealing_bound(self) -> tuple[int | None, list[str]]:
        """The lowest sequence a slave acknowledged (None: no slave seen yet), and which slaves hold it."""
        if not self.slaves_acked:
            return None, []
        low = min(self.slaves_acked.values())
        return low, [f"slave {bid}" for bid, seq in sorted(self.slaves_acked.items()) if seq == low]

    # ------------------------------------------------------------------ fetch
    async def fetch(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        fr = FetchRequest.from_command(req)
        store = self.broker.store
        self._check_epoch(fr)
        self._check_history(fr)
        session = self.sessions.get(channel)
        if session is None or session.broker_id != fr.slave_id:
            session = self.sessions[channel] = SlaveSession(
                fr.slave_id,
                fr.slave_addr,
                channel,
                fr.from_seq - 1,
                fr.slave_phy_max,
                trio.current_time(),
                store.clock.now_ms(),
            )
            log.info(
                "slave %d at %s connected, holding seq %d",
                fr.slave_id,
                fr.slave_addr,
                fr.from_seq - 1,
            )
        session.last_fetch = trio.current_time()
        self.node_hosts.add(channel.remote[0])
        self._acknowledge(session, fr.from_seq - 1, fr.slave_phy_max)
        session.fetching += 1
        try:
            if fr.from_seq > store.log.last_seq:
                if session.caught_up_seq is None:
                    await self._record_caught_up(session, fr.from_seq - 1)
                else:
                    with trio.move_on_after(fr.max_wait_ms / 1000):
                        await self.broker.writer.wait_past(fr.from_seq)
        finally:
            session.fetching -= 1
            session.last_fetch = trio.current_time()
        answer = self._read(fr.from_seq, fr.max_bytes)
        session.records_shipped += len(answer.batch.records)
        return answer.to_response(req)

    def _check_epoch(self, fr: FetchRequest) -> None:
        """Under a coordinator a slave follows this master's epoch only (B-375)."""
        if self.epoch < 0 or fr.epoch == self.epoch:
            return
        if fr.epoch > self.epoch:
            self.on_superseded(fr.epoch)
        raise EpochMismatch(
            f"the slave follows epoch {fr.epoch}, this master leads epoch {self.epoch}: refused"
        )

    def _check_history(self, fr: FetchRequest) -> None:
        """The slave must stand on the master's history: no records beyond it, the same record below."""
        log_ = self.broker.store.log
        if fr.from_seq > log_.last_seq + 1:
            raise LogDiverged(
                f"the slave holds records up to {fr.from_seq - 1}, the master only up to "
                f"{log_.last_seq}: the slave is ahead of this master's log"
            )
        if fr.from_seq > 1:
            with log_.read_txn() as txn:
                mine = txn.get(records.seq_key(fr.from_seq - 1), db=log_.log_db)
                segment = (
                    self.broker.store.history.segment_of(txn, fr.from_seq - 1)
                    if mine is None
                    else None
                )
            if segment is not None:  # sealed since the slave fetched it: the archive has it
                from es_broker.history.archive import (
                    raw_at,  # the archive loads once something is sealed
                )

                mine = raw_at(segment["location"], fr.from_seq - 1)
            if record_crc(mine) != fr.last_record_crc:
                raise LogDiverged(
                    f"the slave's record {fr.from_seq - 1} differs from the master's: "
                    "the logs diverged"
                )

    async def _record_caught_up(self, session: SlaveSession, held: int) -> None:
        def job(ctx: AppendContext) -> int:
            return ctx.append(
                SlaveCaughtUp(
                    broker_id=session.broker_id,
                    slave_addr=session.addr,
                    seq=held,
                    connected_at=session.connected_at_ms,
                    records_shipped=session.records_shipped,
                ).to_record(self.broker.store.clock.now_ms())
            )

        try:
            await self.broker.submit(job)
        except ServiceNotAvailable:
            if not self.broker.disk_full:
                raise
            return  # the disk is full: the slave is served all the same, the record waits for space
        session.caught_up_seq = held
        log.info("slave %d at %s caught up at seq %d", session.broker_id, session.addr, held)

    def _read(self, from_seq: int, max_bytes: int) -> FetchAnswer:
        """Records from from_seq (at least one if there is one) and the message bytes they place."""
        store = self.broker.store
        log_ = store.log
        raws: list[bytes] = []
        payloads: list[tuple[int, bytes]] = []
        size = 0
        with log_.read_txn() as txn:  # one snapshot: a record and the payloads it places agree
            cur = txn.cursor(db=log_.log_db)
            if cur.set_range(records.seq_key(from_seq)):
                for key, raw in cur:
                    if raws and size + len(raw) > max_bytes:
                        break
                    if records.key_seq(key) != from_seq + len(raws):
                        raise LogDiverged(f"the master's log has a gap at {from_seq + len(raws)}")
                    raws.append(raw)
                    size += len(raw)
                    size += _add_payloads(store, txn, records.unpack(raw), payloads)
            phy_max = store.commitlog.phy_max(txn)
            last = log_.last_seq
        return FetchAnswer(
            ReplicatedBatch(from_seq, tuple(raws), tuple(payloads)),
            max(last, from_seq - 1),
            phy_max,
            self.epoch,
        )

    # ------------------------------------------------------------------ merge
    async def _check_node(self, channel: Channel, what: str) -> None:
        """Refuse `what` unless the peer is a node of this broker group (B-501)."""
        host = channel.remote[0]
        if host in self.node_hosts:
            return
        if self.member_addrs is not None:
            try:
                members = await self.member_addrs()
            except Exception:  # etcd unreachable: the peer cannot be told from an outsider
                log.info("ha: members of the group unknown (etcd unreachable)", exc_info=True)
                members = []
            if host in await _hosts_of(members):
                return
        raise NoPermission(
            f"{what} is accepted only from a node of broker group {self.config.brokerName} "
            f"(a slave fetching from this master, or a member of the group in etcd); "
            f"{channel.remote_addr} is none"
        )

    async def merge(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        await self._check_node(channel, "HA_MERGE_SLAVE_OFFSETS")
        try:
            mr = MergeRequest.from_command(req)
        except (TypeError, ValueError) as exc:
            raise IllegalRequest(f"merge request is malformed: {exc}") from None
        outcome = await self.broker.submit(
            merge_job(
                self.broker.store,
                broker_id=mr.slave_id,
                slave_addr=mr.slave_addr,
                journal_upto=mr.journal_upto,
                commits=list(mr.commits),
                deliveries=list(mr.deliveries),
                requester=mr.slave_addr,
            )
        )
        log.info(
            "merged %d offset commits and %d deliveries of slave %d (%s): seq %d",
            len(mr.commits),
            outcome.deliveries,
            mr.slave_id,
            outcome.policy,
            outcome.seq,
        )
        return response_to(
            req,
            ResponseCode.SUCCESS,
            None,
            HaMergeSlaveOffsetsResponseHeader(
                seq=outcome.seq, policy=outcome.policy, deliveries=outcome.deliveries
            ).to_fields(),
        )

    async def record_set_aside(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """A rejoining node's report of the records it set aside becomes `ha_records_set_aside` (B-381)."""
        await self._check_node(channel, "HA_REPORT_SET_ASIDE")
        try:
            report = fastjson.loads(req.body or b"{}")  # depth-bounded (B-501)
            if not isinstance(report, dict):
                raise TypeError("the report is not a JSON object")
            record = HaRecordsSetAside(
                node=_field(report, "node", str),
                epoch=_field(report, "epoch", int),
                common_seq=_field(report, "common_seq", int),
                first_seq=_field(report, "first_seq", int),
                last_seq=_field(report, "last_seq", int),
                messages=_field(report, "messages", int),
                msg_ids=[_text(m, "msg_ids") for m in _field(report, "msg_ids", list)],
                export=_field(report, "export", str),
                reason=_field(report, "reason", str),
            )
        except (KeyError, TypeError, ValueError) as exc:  # BodyDecodeError is a ValueError
            raise IllegalRequest(f"set-aside report is malformed: {exc}") from None
        seq = await self.broker.submit(
            lambda ctx: ctx.append(record.to_record(self.broker.store.clock.now_ms()))
        )
        log.warning(
            "node %s set aside records %d..%d (%d messages) of epoch %d: record %d",
            record.node,
            record.first_seq,
            record.last_seq,
            record.messages,
            record.epoch,
            seq,
        )
        answer = RecordSeqResponseHeader(seq=seq)
        return response_to(req, ResponseCode.SUCCESS, None, answer.to_fields())

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        live = self.live_sessions()
        return {
            "haSlaveCount": len(live),
            "haSlaveAckedSeq": self.acked_seq,
            "haSlaves": "; ".join(s.describe() for s in live),
        }


def _field(report: dict[Any, Any], name: str, kind: type[Any]) -> Any:
    """report[name], which must be a `kind` (an int is no bool, and fits a record's int64)."""
    value = report[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{name!r} must be a {kind.__name__}")
    if kind is int and not -(2**63) <= value < 2**63:
        raise ValueError(f"{name!r} is out of range: {str(value)[:40]}")
    return value


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name!r} must hold text")
    return value


async def _hosts_of(addrs: list[str]) -> set[str]:
    """The IP addresses `host:port` addresses name (a host name resolved)."""
    hosts: set[str] = set()
    for addr in addrs:
        host = addr.rsplit(":", 1)[0].strip("[]")
        try:
            hosts.add(str(ipaddress.ip_address(host)))
        except ValueError:
            try:
                infos = await trio.socket.getaddrinfo(host, None)
            except OSError:
                continue
            hosts.update(str(info[4][0]) for info in infos)
    return hosts


def _add_payloads(
    store: Store, txn: lmdb.Transaction[bytes], record: Record, out: list[tuple[int, bytes]]
) -> int:
    """Append the commit-log entries a `messages_stored` record places; returns their size.

    Bytes that retention already removed are not shipped: the record that
    removed them follows and removes nothing more on the slave.
    """
    if record["type"] != RecordType.MESSAGES_STORED:
        return 0
    stored: MessagesStoredRecord = record  # type: ignore[assignment]
    size = 0
    read = store.log.payload_reader(txn)
    for phy, _, _ in stored["units"]:
        data = read(phy)
        if data is not None:
            out.append((phy, bytes(data)))
            size += len(data)
    return size
