"""The broker core, in process: what the wire server and the CLI call.

Reads answer from a read transaction on the caller's thread; every change is
a job handed to the group-commit writer, which decides, records and applies
it in one LMDB write transaction. While the disk is full (commands/disk_full.py)
every change is refused with SERVICE_NOT_AVAILABLE and reads go on: what a
read would have recorded is kept aside (deliveries) or left unrecorded.

Each operation that records has one implementation, its start (`start_put`,
`start_pull`, `start_commit_offset`: checks, then the job queued, core/pending.py);
its async form is that start in the caller's arrival turn and its outcome
awaited (`in_turn`). A slave is this class given the slave's role (core/roles.py,
core/slave_broker.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final

import trio

from es_broker.commands import (
    disk_full,
    messages,
    offsets,
    pull,
    resets,
    retention,
    topics,
    trace,
)
from es_broker.commands.errors import GroupNotExist, NoPermission
from es_broker.commands.messages import GetResult, PutRequest
from es_broker.commands.names import retry_topic
from es_broker.commands.offsets import OffsetAnswer, OffsetCommit
from es_broker.commands.placement import MessageIn, PutResult
from es_broker.commands.pull import PullRequest
from es_broker.commands.runtime_stats import dir_capacity, store_size
from es_broker.config import BrokerRole
from es_broker.core.base import ReadOnly
from es_broker.core.pending import Pending, Unrecorded
from es_broker.core.retries import RetryOperations
from es_broker.core.roles import Role
from es_broker.history.status import HistoryStatus, history_status
from es_broker.log import AppendContext
from es_broker.log.types import ConsumerGroupChanged
from es_broker.remoting.bodies import SubscriptionGroupConfig, TopicConfig
from es_broker.remoting.codes import ResponseCode
from es_broker.store import Store

# read as each pull's record completes: an enum member read off its class costs a look-up
_DISK_FULL: Final = Unrecorded.DISK_FULL

log = logging.getLogger(__name__)

# the clean passes one DELETE_EXPIRED_COMMITLOG arms (DefaultMessageStore's
# MAX_MANUAL_DELETE_FILE_TIMES), each of at most FILES_PER_PASS files
MANUAL_PASSES = 20


class _ManualPasses:
    """The manual retention passes one DELETE_EXPIRED_COMMITLOG asked for (B-677): what they
    expired so far, and whether they have ended."""

    __slots__ = ("ended", "error", "files", "phy_min", "reason", "seq")

    def __init__(self) -> None:
        self.ended = trio.Event()
        self.error: Exception | None = None
        self.files: list[int] = []
        self.reason: str | None = None
        self.phy_min = 0
        self.seq: int | None = None

    def add(self, done: retention.RetentionPass) -> None:
        self.files.extend(done.deleted_files)
        self.reason, self.phy_min = done.reason, done.phy_min
        if done.seq is not None:
            self.seq = done.seq

    def so_far(self, phy_min: int) -> retention.RetentionPass:
        return retention.RetentionPass(self.reason, tuple(self.files), phy_min, self.seq)


class Broker(RetryOperations):
    """One broker's state and the operations on it (writer and lifecycle: `base.BrokerBase`)."""

    def __init__(self, store: Store, role: Role | None = None) -> None:
        super().__init__(store, role)
        # retention passes run one at a time: the timer's and the manual ones (B-677)
        self._retention_lock = trio.Lock()
        self._manual_passes: _ManualPasses | None = None

    # ------------------------------------------------------------------ messages
    async def put_message(
        self, topic: str, queue_id: int, message: MessageIn, **fields: Any
    ) -> PutResult:
        """Store one message (SEND_MESSAGE); queue_id < 0 lets the broker pick a write queue."""
        return await self.put(PutRequest(topic, queue_id, [message], **fields))

    async def put_messages(
        self, topic: str, queue_id: int, batch: list[MessageIn], **fields: Any
    ) -> PutResult:
        """`put` of a batch in one queue, for callers in process (the CLI, tests, benches); `fields`
        are PutRequest's."""
        return await self.put(PutRequest(topic, queue_id, batch, **fields))

    async def put(self, request: PutRequest) -> PutResult:
        """`start_put`, then its outcome (`in_turn`)."""
        return await self.in_turn(self.start_put, request)

    def start_put(
        self, request: PutRequest, then: Callable[[Pending[PutResult]], None] | None = None
    ) -> Pending[PutResult]:
        """Store a send's messages in one queue, one record (SEND_MESSAGE, SEND_BATCH_MESSAGE): its
        checks raise here, and its job is queued when this returns (core/pending.py).

        A message with DELAY > 0 is parked in SCHEDULE_TOPIC_XXXX (B-96); a send to
        `%RETRY%G` past max_reconsume_times goes to `%DLQ%G` (B-95).
        """
        # no role to ask: a slave refuses a send in its checks (the broker is a slave)
        job = self._put_job(request)
        return self.writer.push(Pending(job, then, self._put_stored, self._refuse))

    def _put_job(self, request: PutRequest) -> Callable[[AppendContext], PutResult]:
        """The checks of a put (raised here, before anything is queued) and its writer job."""
        return messages.put_job(self.store, messages.prepare_put(self.store, request))

    def _put_stored(self, result: PutResult) -> PutResult:
        if result.real_topic is not None:
            self.on_delayed_stored()
        return result

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        tags_codes: frozenset[int] | None = None,
        message_filter: Callable[[bytes], bool] | None = None,
    ) -> GetResult:
        """Read messages with the topic checks but without recording a delivery."""
        with self.store.read() as txn:
            messages.check_readable(self.store, txn, topic, queue_id)
            return messages.get_message(
                self.store, txn, topic, queue_id, offset, max_msg_nums, tags_codes, message_filter
            )

    async def pull(self, *fields: Any, **named: Any) -> GetResult:
        """`serve_pull` for callers in process (the CLI, tests, benches): PullRequest's fields."""
        return await self.serve_pull(PullRequest(*fields, **named))

    async def serve_pull(self, request: PullRequest) -> GetResult:
        """PULL_MESSAGE: read, then record the delivery and any piggybacked commit (B-31).

        `read_pull`, the group created if it is not yet (B-03), then `start_pull` and its outcome
        (`in_turn`). The answer is the read with the commit's record and the group's config.
        """
        result, group_config = self.read_pull(request)
        if group_config is None:
            group_config = await self.ensure_group(request.group, requester=request.client)
        commit_seq = await self.in_turn(self.start_pull, request, result, group_config)
        # one copy, with what the answer needs: the commit's record and the group's config
        return result._replace(commit_seq=commit_seq, group_config=group_config)

    def read_pull(self, request: PullRequest) -> tuple[GetResult, SubscriptionGroupConfig | None]:
        """A pull's checks and read (commands/pull.py), and the group's config (None: not created
        yet). The checks, the config and the messages come from one read transaction."""
        return pull.read(self.store, request)

    def start_pull(
        self,
        request: PullRequest,
        result: GetResult,
        group_config: SubscriptionGroupConfig,
        then: Callable[[Pending[int]], None] | None = None,
    ) -> Pending[int]:
        """What a pull read (`read_pull`, its group found) recorded: the group's check raises here,
        and the record of its delivery, moved offset or commit is queued when this returns (done at
        once when there is nothing to record, or when the role keeps it, a slave's journal). Its
        outcome is the commit's record (0: none; `serve_pull`'s `commit_seq`). A delivery the full
        disk kept from the log is kept aside (B-151, B-152)."""
        if not group_config.consume_enable:
            raise NoPermission(f"subscription group no permission, {request.group}")
        self.messages_served += len(result.offsets)
        if self.role.follows_master:  # a slave journals its delivery (B-31, B-118)
            self.role.keep_pull(self.store, request, result)
            return Pending.at_once(0, then)
        if not pull.recorded(result, request.offset, request.commit_offset is not None):
            return Pending.at_once(0, then)

        def recorded(outcome: int | Unrecorded) -> int:
            if outcome is _DISK_FULL and result.status is pull.FOUND:
                # answered all the same (B-151); summed up and recorded once space returns (B-152)
                self.unrecorded.add(
                    request.group,
                    request.topic,
                    request.queue_id,
                    result.offsets,
                    result.next_begin_offset,
                    request.client,
                    self.store.clock.now_ms(),
                )
            return outcome if isinstance(outcome, int) else 0

        job = pull.record_job(self.store, request, result)
        return self.writer.push(Pending(job, then, recorded, self._refuse, unrecorded=True))

    # ------------------------------------------------------------------ offsets
    def min_offset(self, topic: str, queue_id: int) -> int:
        with self.store.read() as txn:
            return self.store.cq.bounds(txn, topic, queue_id)[0]

    def max_offset(self, topic: str, queue_id: int) -> int:
        with self.store.read() as txn:
            return self.store.cq.bounds(txn, topic, queue_id)[1]

    def earliest_msg_store_time(self, topic: str, queue_id: int) -> int:
        """Store time of the unit at min, or -1 (GET_EARLIEST_MSG_STORETIME, B-71)."""
        with self.store.read() as txn:
            lo, hi = self.store.cq.bounds(txn, topic, queue_id)
            unit = self.store.cq.unit(txn, topic, queue_id, lo) if hi > lo else None
            return unit.store_time if unit else -1

    def search_offset(
        self, topic: str, queue_id: int, timestamp: int, mode: str | None = None
    ) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP (B-68); mode overrides the time_lookup switch (S-7)."""
        with self.store.read() as txn:
            return offsets.search_offset(self.store, txn, topic, queue_id, timestamp, mode)

    async def commit_offset(self, *fields: Any, **named: Any) -> int:
        """`start_commit_offset`, then its outcome (`in_turn`), for callers in process: OffsetCommit's
        fields."""
        return await self.in_turn(self.start_commit_offset, OffsetCommit(*fields, **named))

    def start_commit_offset(
        self, commit: OffsetCommit, then: Callable[[Pending[int]], None] | None = None
    ) -> Pending[int]:
        """UPDATE_CONSUMER_OFFSET: its checks raise here, and its record is queued when this returns
        (B-312); its outcome is the record's sequence. A slave keeps it in its journal instead
        (B-30): done at once, its outcome the journal position."""
        if self.role.follows_master:  # a slave journals it (B-30)
            return Pending.at_once(self.role.keep_commit(self.store, commit), then)
        job = offsets.commit_job(
            self.store,
            commit.group,
            commit.topic,
            commit.queue_id,
            commit.offset,
            cause=commit.cause,
            requester=commit.requester,
        )
        return self.start(job, then)

    def stored_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The offset table's value, or -1 (B-29); a slave's own commit over it (B-120)."""
        with self.store.read() as txn:
            own = self.role.own_offset(self.store, txn, topic, group, queue_id)
            return self.store.offsets.query(txn, topic, group, queue_id) if own is None else own

    async def query_consumer_offset(
        self, group: str, topic: str, queue_id: int, *, requester: str = ""
    ) -> OffsetAnswer:
        """QUERY_CONSUMER_OFFSET with the B-37 decision table, after the writes queued before it (B-312).

        A slave answers its own commit of the queue when it holds one (B-120); a "nothing stored"
        answer it does not record.
        """
        await self.writer.settled()
        with self.store.read() as txn:
            answer = offsets.decide_query(self.store, txn, group, topic, queue_id)
            own = self.role.own_offset(self.store, txn, topic, group, queue_id)
        if own is not None:
            return dataclasses.replace(
                answer, code=ResponseCode.SUCCESS, offset=own, row=1, stored=own
            )
        if answer.row == 1:
            return answer  # a stored offset: nothing new to record
        answer_recorded = await self._record_unless_full(
            offsets.query_job(self.store, group, topic, queue_id, requester)
        )
        if not isinstance(answer_recorded, Unrecorded):
            return answer_recorded
        with self.store.read() as txn:  # unrecorded (a full disk, B-153; a slave): the same answer
            return offsets.decide_query(self.store, txn, group, topic, queue_id)

    def message_at(self, physical_offset: int) -> bytes | None:
        """The stored message at a commit-log offset (VIEW_MESSAGE_BY_ID)."""
        with self.store.read() as txn:
            return self.store.message_at(txn, physical_offset)

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        with self.store.read() as txn:
            unit = self.store.cq.unit(txn, topic, queue_id, offset)
            return unit.store_time if unit else 0

    def query_messages_by_key(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> list[bytes]:
        """Messages of topic whose KEYS or UNIQ_KEY hold key, stored in [begin, end] (QUERY_MESSAGE).

        The newest min(max_num, maxMsgsNumBatch) matches, in commit-log order (B-200, B-202).
        """
        limit = min(max_num, self.store.config.maxMsgsNumBatch)
        with self.store.read() as txn:
            phys = sorted(self.store.keyindex.newest(txn, topic, key, begin, end, limit))
            read = self.store.log.payload_reader(txn)
            found = [read(phy) for phy in phys]
        return [raw for raw in found if raw is not None]

    def topic_table(self) -> tuple[dict[str, TopicConfig], int]:
        """Every topic config, and the data version (the last sequence that changed one)."""
        with self.store.read() as txn:
            stored = list(self.store.topics.all(txn))
        table = {s.config.topic_name: s.config for s in stored}
        return table, max((s.data_version for s in stored), default=0)

    def topic_configs(self, topics: Iterable[str]) -> tuple[dict[str, TopicConfig], int]:
        """The configs of those of `topics` that exist, and the newest data version among them."""
        table: dict[str, TopicConfig] = {}
        version = 0
        with self.store.read() as txn:
            for name in topics:
                stored = self.store.topics.versioned(txn, name)
                if stored is not None:
                    table[name] = stored.config
                    version = max(version, stored.data_version)
        return table, version

    def group_table(self) -> tuple[dict[str, SubscriptionGroupConfig], int]:
        """Every subscription group config, and the data version (the last sequence that changed one)."""
        with self.store.read() as txn:
            stored = list(self.store.groups.all(txn))
        table = {s.config.group_name: s.config for s in stored}
        return table, max((s.data_version for s in stored), default=0)

    def offset_table(self) -> list[tuple[str, str, int, int]]:
        """The whole offset table: (topic, group, queue id, offset); a slave's own commits over it
        (B-120: its own table)."""
        mine = self.role.own_offsets()
        with self.store.read() as txn:
            if not mine:
                return list(self.store.offsets.table(txn))
            table = {(t, g, q): o for t, g, q, o in self.store.offsets.table(txn)}
            for topic, group, queue_id in mine:
                own = self.role.own_offset(self.store, txn, topic, group, queue_id)
                if own is not None:
                    table[(topic, group, queue_id)] = own
        return [(t, g, q, o) for (t, g, q), o in sorted(table.items())]

    def group_offsets(self, group: str) -> list[tuple[str, int, int]]:
        return [(t, q, o) for t, g, q, o in self.offset_table() if g == group]

    def runtime_info(self) -> dict[str, Any]:
        with self.store.read() as txn:
            phy_max = self.store.commitlog.phy_max(txn)
            phy_min = self.store.commitlog.phy_min(txn)
        return {
            "brokerVersion": 409,
            "brokerVersionDesc": "V4_9_8 (es-broker)",
            "commitLogMaxOffset": phy_max,
            "commitLogMinOffset": phy_min,
            "recordLogLastSeq": self.store.log.last_seq,
            "groupCommitBatches": self.writer.batches,
            "groupCommitJobs": self.writer.jobs,
            "pullMessagesServed": self.messages_served,
            "diskFull": self.writer.disk_full,
            "diskFullSince": self.writer.disk_full_since
            if self.writer.disk_full_since is not None
            else -1,
            "diskFullReason": self.writer.disk_full_error.reason
            if self.writer.disk_full_error
            else "",
            "refusedWritesWhileFull": self.writer.refused_while_full,
            "unrecordedDeliveries": self.unrecorded.count,
            "commitLogDiskRatio": f"{disk_full.disk_usage(self.store.log.path):.2f}",
            "commitLogDirCapacity": dir_capacity(self.store.log.path),
            "storeSizeBytes": store_size(self.store.log.path),
            **self.rates.rates(self.store.clock.now_ms()),
            **self.history_status().runtime_fields(),
            **self.role.runtime_fields(),
        }

    def history_status(self) -> HistoryStatus:
        """The hot log, the horizon and the archive (B-466)."""
        return history_status(self.store, self.config.storePathRootDir, self.config.history_archive)

    async def ensure_group(self, group: str, *, requester: str = "") -> SubscriptionGroupConfig:
        """The group's config, created with RocketMQ's defaults when absent (B-03).

        While the disk is full the defaults are answered without recording
        them, as a slave does, so that reads of a new group go on (B-153).
        """
        config = self.group_config(group)
        if config is not None:
            return config
        created = await self._record_unless_full(
            lambda ctx: topics.find_or_create_group(self.store, ctx, group, requester)
        )
        if not isinstance(created, Unrecorded):
            return created
        if not (self.config.autoCreateSubscriptionGroup or group.startswith("CID_RMQ_SYS_")):
            raise GroupNotExist(f"subscription group [{group}] does not exist, apply first please!")
        return SubscriptionGroupConfig(group)  # the defaults of B-03

    async def ensure_retry_topic(self, group: str, queue_nums: int, *, requester: str = "") -> bool:
        """Create %RETRY%group with retryQueueNums queues, perm 6, if absent (B-25); True if created."""
        topic = retry_topic(group)
        if self.topic_config(topic) is not None or self.config.brokerRole == BrokerRole.SLAVE:
            return False
        config = TopicConfig(topic, queue_nums, queue_nums, 6)

        def job(ctx: AppendContext) -> bool:
            if self.store.topics.get(ctx.txn, topic) is not None:
                return False
            topics.auto_create_topic(self.store, ctx, config, requester)
            return True

        return await self.submit(job)

    async def plan_reset(
        self,
        group: str,
        topic: str,
        value: int,
        force: bool,
        *,
        requester: str = "",
        notified: list[str] | None = None,
        kind: str = "time",
        mode: str | None = None,
        scope: str | None = None,
        dry_run: bool = False,
    ) -> resets.ResetPlan:
        """Compute a reset table and record it (B-74, B-75, S-2, S-12, S-13); a dry run records nothing.

        A slave computes it from its own store and tells its clients (B-120) but records nothing:
        the clients' commits that follow land in its journal; a server-side reset, which writes
        offsets itself, is refused there (it needs the master).
        """
        mode, dry_run = self.role.reset_as(mode, self.config.reset_mode, dry_run)
        job = resets.reset_job(
            self.store,
            group,
            topic,
            value,
            force,
            requester=requester,
            notified=notified or [],
            kind=kind,
            mode=mode,
            scope=scope,
            dry_run=dry_run,
        )
        if dry_run:
            with self.store.log.env.begin(write=False) as txn:
                return job(ReadOnly(txn, self.store.log, self.store.log.last_seq + 1))
        return await self.submit(job)

    async def record_consumer_group(
        self,
        group: str,
        clients: list[str],
        consume_from_where: str,
        message_model: str,
        subscriptions: dict[str, str],
    ) -> int:
        """Record a change of a group's members or subscriptions, as the broker saw it (S-16)."""

        def job(ctx: AppendContext) -> int:
            return ctx.append(
                ConsumerGroupChanged(
                    group=group,
                    clients=sorted(clients),
                    consume_from_where=consume_from_where,
                    message_model=message_model,
                    subscriptions=subscriptions,
                ).to_record(self.store.clock.now_ms())
            )

        # a heartbeat is never refused for a full disk (B-153)
        seq = await self._record_unless_full(job)
        return 0 if isinstance(seq, Unrecorded) else seq or 0

    async def retention_pass(self, *, manual: bool = False) -> retention.RetentionPass:
        """One clean pass: expired commit-log files go, queue minimums are corrected (B-14..B-18).

        In steps (B-676), each a record and a group commit of its own, so that the writer is never
        held for a whole file, and after each step a pause as long as the step took, so that the
        pass takes at most about half of the broker's time: the pass ends with its tenth file, at
        the first file not expired, or at a step refused. Its outcome sums the steps': every file
        expired, the last step's phyMin and record (None: none). While the disk is full a step is
        a probe of its own; refused, it did nothing.
        """
        async with self._retention_lock:
            return await self._retention_steps(manual)

    async def _retention_steps(self, manual: bool) -> retention.RetentionPass:
        files: list[int] = []
        reason: str | None = None
        seq: int | None = None
        heads = retention.QueueHeads()  # read by the first step that expires (B-678)
        took = 0.0  # s the last step took
        while len(files) < retention.FILES_PER_PASS:
            if seq is not None:  # the pause after the last step: the other work runs meanwhile
                await trio.sleep(took)
            started = trio.current_time()
            job = retention.retention_job(self.store, manual=manual, reason=reason, heads=heads)
            done = await self._record_unless_full(job)
            took = trio.current_time() - started
            if isinstance(done, Unrecorded):
                break
            if done.heads is not None:
                heads.settle(done.heads)
            reason = done.reason
            if done.seq is None:
                break
            seq = done.seq
            files.extend(done.deleted_files)
        with self.store.read() as txn:
            phy_min = self.store.commitlog.phy_min(txn)
        return retention.RetentionPass(reason, tuple(files), phy_min, seq)

    async def manual_retention_pass(
        self, answer_within: float
    ) -> tuple[retention.RetentionPass, bool]:
        """DELETE_EXPIRED_COMMITLOG (B-264), as a side task of the broker (B-677): up to
        MANUAL_PASSES passes, `cleanResourceInterval` apart, for as long as a pass expires its
        whole FILES_PER_PASS (4.9.8 arms its next 20 clean passes); started, or joined while the
        ones asked for earlier have not ended. Returns what they expired within `answer_within`
        seconds, and whether they go on after it (their end is logged). Passes that failed raise
        their error to those still waiting."""
        asked = self._manual_passes
        if asked is None:
            asked = self._manual_passes = _ManualPasses()
            self.tasks.start_soon(self._run_manual_passes, asked)
        with trio.move_on_after(answer_within):
            await asked.ended.wait()
        if asked.error is not None:
            raise asked.error
        if asked.ended.is_set():
            return asked.so_far(asked.phy_min), False
        with self.store.read() as txn:  # what the steps stored so far, not the last ended pass's
            return asked.so_far(self.store.commitlog.phy_min(txn)), True

    async def _run_manual_passes(self, asked: _ManualPasses) -> None:
        try:
            for n in range(MANUAL_PASSES):
                if n:
                    await trio.sleep(self.config.cleanResourceInterval / 1000)
                done = await self.retention_pass(manual=True)
                asked.add(done)
                if len(done.deleted_files) < retention.FILES_PER_PASS:
                    break  # what was expired is gone
        # a side task: its failure is told to whoever waits and logged, never the broker's end
        except Exception as exc:
            asked.error = exc
            log.warning("manual retention pass failed: %s", exc)
        else:
            log.info(
                "manual retention (%s) removed commit-log files %s, phyMin %d",
                asked.reason,
                asked.files,
                asked.phy_min,
            )
        finally:
            self._manual_passes = None
            asked.ended.set()

    def message_journey(self, msg_id: str) -> dict[str, Any]:
        """Every step of a message's life from the records: send, deliveries, retries, DLQ, re-drive, commits."""
        return trace.journey(self.store, msg_id)

    # ------------------------------------------------------------------ topics and groups
    def topic_config(self, topic: str) -> TopicConfig | None:
        with self.store.read() as txn:
            return self.store.topics.get(txn, topic)

    def group_config(self, group: str) -> SubscriptionGroupConfig | None:
        with self.store.read() as txn:
            return self.store.groups.get(txn, group)

    async def update_topic(self, config: dict[str, Any], *, requester: str = "") -> int:
        return await self.submit(topics.update_topic_job(self.store, config, requester))

    async def update_topic_perm(self, topic: str, perm: int, *, requester: str = "") -> int:
        return await self.submit(topics.update_topic_perm_job(self.store, topic, perm, requester))

    async def delete_topic(self, topic: str, *, requester: str = "") -> int | None:
        return await self.submit(topics.delete_topic_job(self.store, topic, requester))

    async def update_group(self, config: dict[str, Any], *, requester: str = "") -> int:
        return await self.submit(topics.update_group_job(self.store, config, requester))

    async def delete_group(
        self, group: str, *, requester: str = "", remove_offsets: bool = False
    ) -> int | None:
        """DELETE_SUBSCRIPTIONGROUP; with remove_offsets every `*@group` offset goes too (B-34),
        in the same record (B-431)."""
        return await self.submit(
            topics.delete_group_job(self.store, group, requester, remove_offsets=remove_offsets)
        )

    async def clone_group_offset(
        self,
        src: str,
        dest: str,
        topic: str | None,
        *,
        online_topics: set[str] | None = None,
        requester: str = "",
    ) -> list[str]:
        """CLONE_GROUP_OFFSET (B-35); returns the topics cloned."""
        return await self.submit(
            offsets.clone_job(
                self.store, src, dest, topic, online_topics=online_topics, requester=requester
            )
        )
