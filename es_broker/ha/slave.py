"""The slave's side of replication: tail the master's log, apply it, ship offsets taken here back.

One task, one connection (the broker's RemotingClient): fetch from the
sequence after the last one applied, apply the answer in one transaction of
the slave's own writer, fetch again. The fetch is held on the master's tail,
so a new record reaches the slave one round trip after its commit, and the
next fetch acknowledges it (what SYNC_MASTER waits for). Any failure (master
gone, connection reset, refusal) ends the round; the loop reconnects with a
short back-off and resumes from whatever the slave's log holds, which is
exact because the log and the projections commit together.

Once caught up with a live master, offsets clients committed to the slave
and the deliveries it served (the slave journal) are sent to it
(HA_MERGE_SLAVE_OFFSETS), whenever the journal grows; the master records the
deliveries and the merge, the merge record comes back through the log and
clears the entries it covers. Shipping waits until the slave holds the
master's tail as of its last fetch: a merge record the master appended for
an earlier request (whose answer was lost with the connection, or before a
restart of the slave) has then come back and cleared its entries, so they
are not shipped, and recorded, twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from es_broker.commands.slave_journal import SlaveCommit, SlaveDelivery
from es_broker.core.slave_broker import LogDiverged, SlaveBroker
from es_broker.ha.protocol import FetchAnswer, FetchRequest, MergeRequest, record_crc
from es_broker.log import records
from es_broker.log.types import RecordType
from es_broker.net.remoting_client import RemotingClient, RemotingError
from es_broker.remoting.es_headers import HaMergeSlaveOffsetsResponseHeader
from es_broker.remoting.peer_outcomes import PeerRequests

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.05  # s before reconnecting after a failure, doubling up to BACKOFF_MAX
BACKOFF_MAX = 1.0
ANSWER_GRACE = 10.0  # s on top of the held time before a fetch counts as lost
SHIP_BATCH = 1000  # journal entries (commits and deliveries) per merge request


class ReplicationRefused(Exception):
    """The master answered a fetch or a merge with an error."""


class SlaveReplicator:
    """Follows a master's record log into a SlaveBroker."""

    def __init__(
        self,
        broker: SlaveBroker,
        client: RemotingClient,
        *,
        master_addr: str | None,
        own_addr: Callable[[], str],
        on_stored: Callable[[str, int], None] = lambda t, q: None,
    ) -> None:
        self.broker = broker
        self.client = client
        self.fixed_master = master_addr  # --master: never replaced by what the name server says
        self.epoch = -1  # the fail-over epoch followed (B-375); -1: no coordinator
        self.master_addr = master_addr
        self.own_addr = own_addr
        self.on_stored = on_stored
        self._master_known = trio.Event()
        if master_addr:
            self._master_known.set()
        self.connected = False
        self.master_last_seq = 0
        self.applied_records = 0
        self.merge_seqs: list[int] = []  # merge records covering this slave's journal, as applied
        self._shipped_upto = 0  # journal position the master already acknowledged a merge for
        self._journal_grew = trio.Event()
        self._fetched = trio.Event()  # set (and replaced) after each fetch answer is applied
        # a commit or delivery taken here is shipped as soon as a master listens
        broker.role.on_commit = self._wake_shipper
        self._failing_since: float | None = None
        # how the master answered the fetches and the merges (B-318): logged, shown in brokerStatus
        self.fetches = PeerRequests("replication fetch from master", log)
        self.merges = PeerRequests("offset merge to master", log)

    # ------------------------------------------------------------------ master address
    def set_master(self, addr: str | None) -> None:
        """The masterAddr of a REGISTER_BROKER answer (B-121); --master, when given, stays."""
        if self.fixed_master:
            return
        self.master_addr = addr or None
        if self.master_addr:
            self._master_known.set()
        else:
            self._master_known = trio.Event()

    def follow(self, addr: str, epoch: int) -> None:
        """The coordinator names the master and its epoch (B-370): the next round fetches from it."""
        self.fixed_master = self.master_addr = addr
        self.epoch = epoch
        self._master_known.set()

    # ------------------------------------------------------------------ the loop
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        backoff = BACKOFF_MIN
        while True:
            addr = self.master_addr
            if not addr:
                await self._master_known.wait()
                continue
            try:
                await self._follow(addr)
            except (RemotingError, ReplicationRefused):
                pass  # logged and shown by self.fetches / self.merges
            except LogDiverged as exc:
                self._note_failure(addr, exc)
            except (
                Exception
            ) as exc:  # a bad answer or a refused apply: retried, never fatal to the broker
                self._note_failure(addr, exc)
                log.debug("replication round failed", exc_info=True)
            # a connection that worked starts the next one quickly; refusals and dead masters back off
            backoff = BACKOFF_MIN if self.connected else min(backoff * 2, BACKOFF_MAX)
            self.connected = False
            await trio.sleep(backoff)  # pacing the retries; nothing waits on it

    def _note_failure(self, addr: str, exc: Exception) -> None:
        # the first failure of an outage is worth a warning; the retries that follow are not
        if self._failing_since is None:
            self._failing_since = trio.current_time()
            log.warning("replication from master %s stopped: %s; retrying", addr, exc)
        else:
            log.info("replication from master %s: %s", addr, exc)

    async def _follow(self, addr: str) -> None:
        """Fetch and apply, and ship the journal, until one of them fails (they only end so); raise that."""
        failure: Exception | None = None
        async with trio.open_nursery() as nursery:

            async def until_failure(loop: Callable[[str], Awaitable[None]]) -> None:
                nonlocal failure
                try:
                    await loop(addr)
                except Exception as exc:  # the connection's end: the other loop stops too
                    failure = failure or exc
                    nursery.cancel_scope.cancel()

            nursery.start_soon(until_failure, self._fetch_loop)
            nursery.start_soon(until_failure, self._ship_loop)
        if failure is not None:
            raise failure

    async def _fetch_loop(self, addr: str) -> None:
        hold_ms = self.broker.config.haSendHeartbeatInterval
        while True:
            request = self._fetch_request(hold_ms)
            try:
                response = await self.client.invoke(
                    addr, request.to_command(), timeout=hold_ms / 1000 + ANSWER_GRACE
                )
            except RemotingError as exc:
                self.fetches.no_answer(addr, exc)
                raise
            if not self.fetches.answered(addr, response):
                raise ReplicationRefused(
                    f"master {addr} refused the fetch from {request.from_seq}: {response.remark}"
                )
            answer = FetchAnswer.from_response(response)
            if self.epoch >= 0 and answer.epoch != self.epoch:
                raise ReplicationRefused(
                    f"master {addr} answered for epoch {answer.epoch}, this slave follows epoch "
                    f"{self.epoch}: its records are refused"
                )
            if not self.connected:
                log.info("replicating from master %s from seq %d", addr, request.from_seq)
                self.connected, self._failing_since = True, None
                self._wake_shipper()  # a master is back: offsets taken meanwhile can go to it
            self.master_last_seq = answer.master_last_seq
            if answer.batch.records:
                await self._apply(answer)
            self._fetched.set()
            self._fetched = trio.Event()

    async def _ship_loop(self, addr: str) -> None:
        """Whenever the journal grows, send what the master has not acknowledged once caught up with it."""
        while True:
            await self._journal_grew.wait()
            self._journal_grew = trio.Event()
            while not self.caught_up:  # merge records of earlier requests come back first
                await self._fetched.wait()
            await self._ship_offsets(addr)

    @property
    def caught_up(self) -> bool:
        """Connected, and holding every record the master had at its last answer."""
        return self.connected and self.broker.store.log.last_seq >= self.master_last_seq

    def _wake_shipper(self) -> None:
        self._journal_grew.set()

    def _fetch_request(self, hold_ms: int) -> FetchRequest:
        store = self.broker.store
        with store.read() as txn:
            last = store.log.last_seq
            raw = txn.get(records.seq_key(last), db=store.log.log_db) if last else None
            phy_max = store.commitlog.phy_max(txn)
        return FetchRequest(
            self.broker.config.brokerId,
            self.own_addr(),
            last + 1,
            record_crc(raw),
            phy_max,
            hold_ms,
            epoch=self.epoch,
        )

    async def _apply(self, answer: FetchAnswer) -> None:
        batch = answer.batch
        await self.broker.apply_replicated(batch)
        self.applied_records += len(batch.records)
        applied = [
            (batch.first_seq + i, records.unpack(raw)) for i, raw in enumerate(batch.records)
        ]
        stored = {
            (r["topic"], r["queue_id"])
            for _, r in applied
            if r["type"] == RecordType.MESSAGES_STORED
        }
        for topic, queue_id in stored:  # long-polled pulls on this slave wake up (B-63)
            self.on_stored(topic, queue_id)
        self.merge_seqs.extend(self.broker.forget_merged(applied))

    async def _ship_offsets(self, addr: str) -> None:
        """Send the journal entries (commits, deliveries) the master has not acknowledged yet (S-5).

        At most SHIP_BATCH entries a request (and a merge record), so a
        journal that grew through a long outage neither exceeds a frame nor
        makes one huge transaction on the master.
        """
        journal = self.broker.journal
        while journal.last_local_seq > self._shipped_upto:
            commits, deliveries, upto = journal.next_batch(self._shipped_upto, SHIP_BATCH)
            if not commits and not deliveries:
                self._shipped_upto = journal.last_local_seq
                return
            await self._ship_batch(addr, commits, deliveries, upto)

    async def _ship_batch(
        self, addr: str, commits: list[SlaveCommit], deliveries: list[SlaveDelivery], upto: int
    ) -> None:
        request = MergeRequest(
            self.broker.config.brokerId, self.own_addr(), upto, tuple(commits), tuple(deliveries)
        )
        try:
            response = await self.client.invoke(addr, request.to_command(), timeout=ANSWER_GRACE)
        except RemotingError as exc:
            self.merges.no_answer(addr, exc)
            raise
        if not self.merges.answered(addr, response):
            raise ReplicationRefused(f"master {addr} refused the offset merge: {response.remark}")
        self._shipped_upto = upto
        answer = HaMergeSlaveOffsetsResponseHeader.of(response)
        log.info(
            "%d offset commits and %d deliveries up to journal position %d merged on master %s (%s), "
            "record %s",
            len(commits),
            len(deliveries),
            upto,
            addr,
            answer.policy,
            answer.seq,
        )

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        return {
            "haMasterAddr": self.master_addr or "",
            "haConnected": self.connected,
            "haAppliedSeq": self.broker.store.log.last_seq,
            "haMasterLastSeq": self.master_last_seq,
            "haCaughtUp": self.caught_up,
            "haReplicatedRecords": self.applied_records,
            "haLastMergeSeq": self.merge_seqs[-1] if self.merge_seqs else 0,
            "slaveFetch": self.fetches.state(),
            "slaveOffsetMerge": self.merges.state(),
        }
