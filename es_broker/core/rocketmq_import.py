"""`es-broker import rocketmq`: a RocketMQ 4.9.8 store into a new data directory (B-520..B-526).

The store is read (es_broker/commands/rocketmq_store.py), checked whole, and
every item becomes a record of a directory built beside the target and renamed
into place at the end, so a refused or failed import leaves nothing behind:

- each message: a `messages_stored` record (cause `import`) placing its bytes, as
  stored, at their original commit-log offset, topic, queue id and queue offset,
  with its store time as the record's time and its consume-queue unit's tags code
  (the due time in SCHEDULE_TOPIC_XXXX); consecutive messages of one queue stored
  at the same time (a batch) share a record. A half message still open carries a
  `transaction` map (state prepared, its TRANSACTION_CHECK_TIMES), a committed
  copy one that ends its half message's transaction;
- each topic and subscription group: `topic_updated` / `subgroup_updated`, and each
  committed offset `offset_committed`, through the broker's own commands, cause
  `import`;
- with `--skip-corrupt`, an `import_skipped` record for each defect passed over
  (es_broker/core/rocketmq_skips.py, B-527), in its place among the messages;
- last, an `imported` record: the source, every file's size and SHA-256, the
  counts, and delayOffset.json's cursors (which its applying sets).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from es_broker.commands import names, offsets, topics
from es_broker.commands import rocketmq_store as rmq
from es_broker.commands.errors import BrokerError
from es_broker.commands.transaction import (
    HALF_TOPIC,
    PROPERTY_CHECK_TIMES,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    immunity_seconds,
)
from es_broker.config import BrokerConfig, BrokerRole
from es_broker.core.rocketmq_skips import Skips
from es_broker.log import AppendContext
from es_broker.log.dirlock import LOCK_FILE, holding
from es_broker.log.types import Cause, CommitlogExpired, Imported, MessagesStored, TransactionState
from es_broker.store import Store

OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_GROUP = "CID_RMQ_SYS_TRANS"  # TransactionalMessageUtil.buildConsumerGroup
BATCH_MESSAGES = 2000  # messages per write transaction
KIND = "rocketmq-4.x"

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class Summary:
    """What an import carried, for its closing note."""

    target: Path
    requester: str  # what the records name as their requester: the import and its source
    messages: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)
    topics: int = 0
    groups: int = 0
    offsets: int = 0
    open_transactions: int = 0
    seconds: float = 0.0
    file_size: int = 0  # the store's commit-log file size (its mappedFileSizeCommitLog)
    not_carried: dict[str, int] = field(default_factory=dict)
    skipped: int = 0  # `import_skipped` records (--skip-corrupt, B-527)
    skipped_units: int = 0  # the units they kept without a message


def check_target(target: Path) -> None:
    """The target must be new, or an empty directory (B-520); its lock file (B-490) aside."""
    if target.exists() and (
        not target.is_dir() or any(p.name != LOCK_FILE for p in target.iterdir())
    ):
        raise FileExistsError(
            f"{target} is not empty: an import builds a new data directory, give a new path "
            "or an empty directory"
        )


def import_store(
    source: Path,
    target: Path,
    config: BrokerConfig,
    progress: Progress | None = None,
    *,
    skip_corrupt: bool = False,
) -> Summary:
    """Import the store at `source` into the new data directory `target` (B-520); with
    `skip_corrupt`, a defect is recorded and passed over instead of refusing it (B-527)."""
    started = time.monotonic()
    source, target = source.resolve(), target.resolve()
    if config.brokerRole == BrokerRole.SLAVE:  # a slave's log is its master's, never its own
        raise ValueError(
            "import into a master's data directory: the --config given says brokerRole=SLAVE"
        )
    rmq.check_layout(source)
    check_target(target)
    files = rmq.manifest(source)
    configs = rmq.read_configs(source)
    checkpoint = rmq.read_checkpoint(source)
    queues = rmq.consume_queues(source, skip=skip_corrupt)
    plan = _TransactionPlan.of(source, configs, queues, skip_corrupt)
    building = target.parent / f".{target.name}.importing-{os.getpid()}"
    created = not target.exists()
    held = False
    try:
        with holding(target):  # one writer per data directory (B-490), until the move below
            held = True
            check_target(target)  # nothing else appeared before the lock was taken
            skips = Skips(
                skip_corrupt,
                source,
                f"import rocketmq {source}",
                config.delay_levels_ms(),
                _log_end(source, skip_corrupt),
            )
            read = _Read(files, configs, checkpoint, queues, plan, progress, skips)
            summary = _build(building, source, target, config, read)
            for entry in building.iterdir():
                entry.rename(target / entry.name)
            building.rmdir()
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        if created and held:  # the directory this import made, never another writer's
            shutil.rmtree(target, ignore_errors=True)
        raise
    summary.seconds = time.monotonic() - started
    files_found = rmq.commit_log_files(source, skip=skip_corrupt)
    summary.file_size = files_found[0][1].stat().st_size if files_found else 0
    return summary


def _log_end(source: Path, skip: bool) -> int:
    """Where the source's commit log ends: its last file's end, each file as long as the first."""
    files = rmq.commit_log_files(source, skip=skip)
    return files[-1][0] + files[0][1].stat().st_size if files else 0


@dataclass(frozen=True, slots=True)
class _Read:
    """What was read of the source before anything is written."""

    files: list[rmq.SourceFile]
    configs: rmq.Configs
    checkpoint: list[int]
    queues: rmq.Queues
    plan: _TransactionPlan
    progress: Progress | None
    skips: Skips


def _build(
    building: Path, source: Path, target: Path, config: BrokerConfig, read: _Read
) -> Summary:
    """Write the whole import into `building`, a directory beside the target, moved in after."""
    store = Store.open(building, config.replace(storePathRootDir=str(target)))
    try:
        summary = _write(store, source, read)
        summary.target = target
        summary.not_carried = _not_carried(read.configs)
        _finish(store, source, read.files, read.configs, read.checkpoint, summary)
        store.log.flush()
    finally:
        store.close()
    return summary


@dataclass(frozen=True, slots=True)
class _TransactionPlan:
    """Which half messages are still open (TransactionalMessageServiceImpl#check's view)."""

    open_offsets: frozenset[int]  # half-queue offsets of the open ones

    @classmethod
    def of(
        cls, source: Path, configs: rmq.Configs, queues: rmq.Queues, skip: bool
    ) -> _TransactionPlan:
        """Open: at or past CID_RMQ_SYS_TRANS's offset on the half queue and named by no op
        message (an op's body lists the half-queue offsets it ended). With `skip`, an op
        message that cannot be read ends nothing (the walk records it, B-527): its half
        message is checked again, and its producer answers once more."""
        half = queues.get((HALF_TOPIC, 0))
        ops = queues.get((OP_TOPIC, 0))
        done: set[int] = set()
        for _, unit in ops.units() if ops is not None else ():
            try:
                op = rmq.read_message(source, unit, skip=skip)
            except rmq.StoreCorrupt:
                if not skip:
                    raise
                continue
            for part in op.message.body.decode("ascii", "replace").split(","):
                if part.strip().isdigit():
                    done.add(int(part))
        checked = configs.offsets.get(CHECK_GROUP, {}).get(HALF_TOPIC, {}).get(0, 0)
        offsets = range(half.lo, half.hi) if half is not None else range(0)
        return cls(frozenset(o for o in offsets if o >= checked and o not in done))


def _write(store: Store, source: Path, read: _Read) -> Summary:
    """The messages, then topics, groups and offsets: every one a record."""
    queues, progress, skips = read.queues, read.progress, read.skips
    summary = Summary(source, skips.requester)
    total = sum(len(queue) for queue in queues.values())
    starts = _starts(queues)
    pending: list[rmq.Stored | rmq.Skipped] = []
    first_phy: int | None = None
    for item in rmq.messages(source, skip=skips.on):
        first_phy = item.phy if first_phy is None else first_phy
        pending.append(item)
        if len(pending) >= BATCH_MESSAGES:
            _write_messages(store, pending, read, summary)
            pending = []
            if progress is not None:
                progress(summary.messages, total)
    _write_messages(store, pending, read, summary)
    if progress is not None:
        progress(summary.messages, total)
    left = list(_units_left(queues, skips))
    if left:
        _run(store, lambda ctx: [ctx.append(record) for record in left])
    summary.skipped, summary.skipped_units = skips.records, skips.units
    _expire_below(store, starts, first_phy)
    _write_configs(store, source, read.configs, summary)
    return summary


def _write_messages(
    store: Store, batch: list[rmq.Stored | rmq.Skipped], read: _Read, summary: Summary
) -> None:
    if not batch:
        return
    groups = list(_records_of(batch, read.queues, read.plan, summary, read.skips))

    def job(ctx: AppendContext) -> None:
        for messages, record in groups:
            if messages:
                ctx.put_payloads([(s.phy, s.raw) for s in messages])
            ctx.append(record)

    _run(store, job)
    for messages, _ in groups:
        for stored in messages:
            topic = stored.message.topic
            summary.per_topic[topic] = summary.per_topic.get(topic, 0) + 1
        summary.messages += len(messages)


Records = Iterator[tuple[list[rmq.Stored], dict[str, Any]]]


def _records_of(
    batch: list[rmq.Stored | rmq.Skipped],
    queues: rmq.Queues,
    plan: _TransactionPlan,
    summary: Summary,
    skips: Skips,
) -> Records:
    """(messages, their `messages_stored` record): a run of one queue's consecutive offsets,
    stored at the same time, back to back, shares one; a transactional message has its own.
    An `import_skipped` record (B-527) comes with no message, in its place among them."""
    run: list[rmq.Stored] = []
    units: list[list[int]] = []
    for item in batch:
        notes: list[dict[str, Any]] = []
        if isinstance(item, rmq.Skipped):
            notes.append(skips.span(item, queues))
            entry = None
        else:
            skips.walked(item)
            entry = _unit_of(item, queues, skips, notes)
        if notes or entry is None:
            if run:
                yield run, _record(run, units, plan, summary)
            run, units = [], []
            yield from (([], note) for note in notes)
        if entry is None or not isinstance(item, rmq.Stored):
            continue
        if run and _continues(run[-1], item) and _plain(run[-1]) and _plain(item):
            run.append(item)
            units.append(entry)
            continue
        if run:
            yield run, _record(run, units, plan, summary)
        run, units = [item], [entry]
    if run:
        yield run, _record(run, units, plan, summary)


def _continues(last: rmq.Stored, nxt: rmq.Stored) -> bool:
    a, b = last.message, nxt.message
    return (
        a.topic == b.topic
        and a.queue_id == b.queue_id
        and a.queue_offset + 1 == b.queue_offset
        and a.store_timestamp == b.store_timestamp
        and last.phy + len(last.raw) == nxt.phy
    )


def _plain(stored: rmq.Stored) -> bool:
    msg = stored.message
    return msg.topic != HALF_TOPIC and not _committed(msg.sys_flag)


def _committed(sys_flag: int) -> bool:
    return sys_flag & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_COMMIT_TYPE


def _record(
    run: list[rmq.Stored], units: list[list[int]], plan: _TransactionPlan, summary: Summary
) -> dict[str, Any]:
    first = run[0].message
    props = first.properties
    delay = None
    if first.topic == names.SCHEDULE_TOPIC:
        real_qid = props.get("REAL_QID", "")
        delay = {
            "level": first.queue_id + 1,
            "deliver_at": units[0][2],
            "real_topic": props.get("REAL_TOPIC", ""),
            "real_queue_id": int(real_qid) if real_qid.isdigit() else 0,
        }
    transaction = None
    if first.topic == HALF_TOPIC and first.queue_offset in plan.open_offsets:
        summary.open_transactions += 1
        real_qid = props.get("REAL_QID", "")
        transaction = {
            "state": TransactionState.PREPARED,
            "producer_group": props.get(PROPERTY_PRODUCER_GROUP, ""),
            "real_topic": props.get("REAL_TOPIC", ""),
            "real_queue_id": int(real_qid) if real_qid.isdigit() else 0,
            "transaction_id": props.get(PROPERTY_UNIQ_KEY, ""),
            "born_ts": first.born_timestamp,
            "immunity_s": immunity_seconds(props),
            "checks": int(props.get(PROPERTY_CHECK_TIMES, "0") or 0),
        }
    elif _committed(first.sys_flag) and first.prepared_transaction_offset > 0:
        transaction = {
            "state": TransactionState.COMMITTED,
            "prepared_phy": first.prepared_transaction_offset,
            "producer_group": props.get(PROPERTY_PRODUCER_GROUP, ""),
            "transaction_id": props.get(PROPERTY_UNIQ_KEY, ""),
        }
    return MessagesStored(
        topic=first.topic,
        queue_id=first.queue_id,
        queue_offset=first.queue_offset,
        units=units,
        producer_group=props.get(PROPERTY_PRODUCER_GROUP, ""),
        requester=summary.requester,
        delay=delay,
        cause=Cause.IMPORT,
        transaction=transaction,
    ).to_record(first.store_timestamp)


def _unit_of(
    stored: rmq.Stored, queues: rmq.Queues, skips: Skips, notes: list[dict[str, Any]]
) -> list[int] | None:
    """The consume-queue unit naming this message: its queue's next (a queue's offsets rise
    with the commit log, CommitLog#doAppend); it must name the message. Skipping (B-527), the
    defects found are appended to `notes` as records; None: the message is not carried."""
    msg = stored.message
    queue = queues.get((msg.topic, msg.queue_id))
    if queue is None or not queue.cursor <= msg.queue_offset < queue.hi:
        why = (
            f"the message of {msg.topic} queue {msg.queue_id} offset {msg.queue_offset} has no "
            "consume-queue unit of its own (was its broker stopped cleanly?)"
        )
        if not skips.on:
            raise rmq.StoreCorrupt(stored.where(), None, why)
        notes.append(skips.message(stored, why))
        return None
    if queue.cursor < msg.queue_offset:  # a unit before it names no message of its queue
        unit = queue.unit(queue.cursor)
        assert unit is not None
        if skips.on:  # B-527: no place to keep it where a read finds no message
            raise rmq.StoreCorrupt(
                unit.path,
                unit.at,
                f"{_left_over_why(queue, unit)}, and no message of the commit log claims its "
                "offset: within its queue it cannot be left out, even with --skip-corrupt",
            )
        _left_over(queue)
    unit = queue.unit(msg.queue_offset)
    assert unit is not None
    entry = [unit.phy, unit.size, unit.tags]
    if unit.phy != stored.phy or unit.size != len(stored.raw):
        past = unit.phy + unit.size > skips.log_end
        why = (
            f"the unit of queue offset {msg.queue_offset} names commit-log offset {unit.phy} "
            f"({unit.size} bytes)"
            + (f", past the commit log's end ({skips.log_end})" if past else "")
            + f"; the message is at {stored.phy} ({len(stored.raw)} bytes)"
        )
        if not skips.on:
            raise rmq.StoreCorrupt(unit.path, unit.at, why)
        notes.append(skips.rebuilt(unit, stored, why))
        entry = [stored.phy, len(stored.raw), skips.tags_code(msg)]
    queue.cursor = msg.queue_offset + 1
    return entry


def _units_left(queues: rmq.Queues, skips: Skips) -> Iterator[dict[str, Any]]:
    """A unit left over points where no message of its queue is (B-526); skipping, each is
    left out, its queue ending before it (B-527)."""
    for queue in queues.values():
        while queue.cursor < queue.hi:
            unit = queue.unit(queue.cursor)
            assert unit is not None
            if not skips.on:
                _left_over(queue)
            yield skips.trailing(queue, unit, _left_over_why(queue, unit))


def _left_over_why(queue: rmq.ConsumeQueue, unit: rmq.Unit) -> str:
    return (
        f"the unit of {queue.topic} queue {queue.queue_id} offset {queue.cursor} points at "
        f"commit-log offset {unit.phy} ({unit.size} bytes), where no message of that queue is"
    )


def _left_over(queue: rmq.ConsumeQueue) -> NoReturn:
    unit = queue.unit(queue.cursor)
    assert unit is not None
    raise rmq.StoreCorrupt(unit.path, unit.at, _left_over_why(queue, unit))


def _starts(queues: rmq.Queues) -> list[list[Any]]:
    """[topic, queue id, 0, first offset] of the queues whose first units the source's broker
    had deleted (its retention): they start past 0."""
    return [
        [topic, qid, 0, queue.lo] for (topic, qid), queue in sorted(queues.items()) if queue.lo > 0
    ]


def _expire_below(store: Store, starts: list[list[Any]], first_phy: int | None) -> None:
    """A store whose oldest files its broker had deleted: the commit log and the queues start
    past 0, recorded as es-broker's own retention records it (B-521)."""
    if not starts and not first_phy:
        return
    record = CommitlogExpired(
        reason="import",
        files=[],
        phy_min=first_phy or 0,
        file_reserved_hours=0,
        queues=starts,
        lost=[],
    )
    _run(store, lambda ctx: ctx.append(record.to_record(store.clock.now_ms())))


def _run(store: Store, job: Callable[[AppendContext], Any]) -> None:
    """Run one job in its own write transaction; its failure is raised."""
    for ok, result in store.log.write_batch([job]):
        if not ok:
            raise result


def _write_configs(store: Store, source: Path, configs: rmq.Configs, summary: Summary) -> None:
    """Topics, groups and offsets through the broker's own commands, cause `import` (B-522)."""
    config_dir = source / "config"
    for name, topic_config in sorted(configs.topics.items()):
        with _refused_as(config_dir / "topics.json", f"topic {name}"):
            config = {**topic_config, "topicName": topic_config.get("topicName", name)}
            _run(
                store,
                topics.update_topic_job(
                    store, config, summary.requester, system=True, cause=Cause.IMPORT
                ),
            )
    for name, group_config in sorted(configs.groups.items()):
        with _refused_as(config_dir / "subscriptionGroup.json", f"group {name}"):
            config = {**group_config, "groupName": group_config.get("groupName", name)}
            job = topics.update_group_job(store, config, summary.requester, cause=Cause.IMPORT)
            _run(store, job)
    for group, by_topic in sorted(configs.offsets.items()):
        for topic, table in sorted(by_topic.items()):
            with _refused_as(config_dir / "consumerOffset.json", f"{topic}@{group}"):
                for qid, offset in sorted(table.items()):
                    job = offsets.commit_job(
                        store,
                        group,
                        topic,
                        qid,
                        offset,
                        cause=Cause.IMPORT,
                        requester=summary.requester,
                    )
                    _run(store, job)
                    summary.offsets += 1
    summary.topics, summary.groups = len(configs.topics), len(configs.groups)


@contextmanager
def _refused_as(path: Path, what: str) -> Iterator[None]:
    """A config entry the broker's command refuses: a store defect naming the file and entry."""
    try:
        yield
    except BrokerError as exc:
        raise rmq.StoreCorrupt(path, None, f"{what}: {exc}") from None


def _not_carried(configs: rmq.Configs) -> dict[str, int]:
    return {"consumer_filters": configs.filters} if configs.filters else {}


def _finish(
    store: Store,
    source: Path,
    files: list[rmq.SourceFile],
    configs: rmq.Configs,
    checkpoint: list[int],
    summary: Summary,
) -> None:
    with store.read() as txn:
        phy_min, phy_max = store.commitlog.phy_min(txn), store.commitlog.phy_max(txn)
    record = Imported(
        source=str(source),
        kind=KIND,
        files=[[f.path, f.size, f.sha256] for f in files],
        messages=summary.messages,
        messages_per_topic=dict(sorted(summary.per_topic.items())),
        commit_log=[phy_min, phy_max],
        topics=summary.topics,
        groups=summary.groups,
        offsets=summary.offsets,
        delay_offsets=[[level, cursor] for level, cursor in sorted(configs.delay_offsets.items())],
        open_transactions=summary.open_transactions,
        not_carried=summary.not_carried,
        checkpoint=checkpoint,
        requester=summary.requester,
        skipped=summary.skipped if summary.skipped else None,
    )

    _run(store, lambda ctx: ctx.append(record.to_record(store.clock.now_ms())))
