"""The read-model follower: applies the log's records to SQL, exactly once, in order.

Each step reads the next batch of records after the checkpoint, inserts
their rows and moves the checkpoint in ONE SQL transaction. A crash anywhere
leaves either the whole batch with its checkpoint or neither, so a restarted
follower resumes where the database says and ends with exactly the rows of
an uninterrupted run. The checkpoint update is guarded by its old value, so
two followers racing on one database cannot both apply a batch (the loser's
transaction rolls back).

Inside `es-broker serve` the follower is a task of the broker's nursery
(`follow`): its SQL work runs in a worker thread, one batch at a time, and
it waits for new commits between batches, off the request path.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from typing import Any

import trio
from sqlalchemy import Engine, insert, select, update

from es_broker.log import Record, RecordLog
from es_broker.readmodel import db
from es_broker.readmodel.families import (
    DEFAULT_SOURCE,
    RunningTime,
    Source,
    record_row,
    rows_of,
    to_json,
)
from es_broker.readmodel.models import FAMILY_TABLES as _FAMILY_MODELS
from es_broker.readmodel.models import Base, Checkpoint, RecordRow, ResetQueueRow

log = logging.getLogger("es_broker.readmodel")

BATCH = 2000
RETRY_AFTER = 5.0  # seconds before a failed step (database down, ...) is tried again
IDLE = 0.2  # after new commits, wait this long so that the next step takes a batch, not a record
POLL = 2.0  # look at the log at least this often

TABLES = {name: model.__table__ for name, model in _FAMILY_MODELS.items()}


class FollowerConflict(Exception):
    """Another follower moved the checkpoint of the same source meanwhile; nothing was applied."""


class LogGap(Exception):
    """The log does not continue where the checkpoint says (a different data directory?)."""


def table_rows(source: str, seq: int, record: Record, time: int, src: Source) -> dict[str, list[dict]]:
    """The SQL rows of one record, by table name (records, the family tables, reset_queues)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    out[RecordRow.__tablename__].append({"source": source, "n": 0, **record_row(seq, record, time, src)})
    counts: dict[str, int] = defaultdict(int)
    for family, row in rows_of(seq, record, time, src):
        table = TABLES.get(family)
        if table is None:
            continue  # `other`: the records table has it already
        row = dict(row, source=source, n=counts[family])
        counts[family] += 1
        if family == "resets":
            for q in row.pop("queues"):
                out[ResetQueueRow.__tablename__].append({"source": source, "seq": seq, **q})
            row["notified"] = to_json(row["notified"])
        elif family == "deliveries":
            row["offsets"] = to_json(row["offsets"])
        out[table.name].append(row)
    return out


_ALL_TABLES = {t.name: t for t in Base.metadata.sorted_tables}


class Follower:
    """Applies one log to one SQL database under a source name."""

    def __init__(self, engine: Engine, log: RecordLog, source: Source = DEFAULT_SOURCE, *, batch: int = BATCH) -> None:
        self.engine = engine
        self.log = log
        self.source = source
        self.batch = batch
        self.position = self.checkpoint()[0]

    def checkpoint(self) -> tuple[int, int, int | None]:
        """(last applied seq, running effective time, start time) stored in the database."""
        with self.engine.connect() as conn:
            row = conn.execute(select(Checkpoint.last_seq, Checkpoint.max_ts, Checkpoint.start_time)
                               .where(Checkpoint.source == self.source.broker)).first()
        return (row[0], row[1], row[2]) if row else (0, 0, None)

    def step(self) -> int:
        """Apply the next batch with its checkpoint in one transaction; the number of records applied."""
        with self.engine.begin() as conn:
            row = conn.execute(select(Checkpoint.last_seq, Checkpoint.max_ts, Checkpoint.start_time)
                               .where(Checkpoint.source == self.source.broker)).first()
            last, running, start = (row[0], row[1], row[2]) if row else (0, 0, None)
            reader = self.log.read(last + 1)
            try:
                batch = list(itertools.islice(reader, self.batch))
            finally:
                reader.close()  # ends the LMDB read transaction now, not at garbage collection
            if not batch:
                self.position = last
                return 0
            clock = RunningTime(running)
            tables: dict[str, list[dict]] = defaultdict(list)
            position = last
            for seq, record in batch:
                if seq != position + 1:
                    raise LogGap(f"expected record {position + 1} of {self.log.path}, found {seq}")
                time = clock.advance(record.get("ts"))
                if seq == 1:
                    start = time
                for name, rows in table_rows(self.source.broker, seq, record, time, self.source).items():
                    tables[name].extend(rows)
                position = seq
            for name in _ALL_TABLES:  # parents first is not needed (no foreign keys) but keeps it stable
                if tables.get(name):
                    conn.execute(_ALL_TABLES[name].insert(), tables[name])
            values = {"last_seq": position, "max_ts": clock.value, "start_time": start}
            if row is None:
                conn.execute(insert(Checkpoint).values(source=self.source.broker, **values))
            else:
                moved = conn.execute(update(Checkpoint).where(Checkpoint.source == self.source.broker,
                                                              Checkpoint.last_seq == last).values(**values))
                if moved.rowcount != 1:
                    raise FollowerConflict(f"checkpoint of {self.source.broker} moved past {last} meanwhile")
        self.position = position
        return len(batch)

    def catch_up(self) -> int:
        """Apply every record the log holds now; the number applied."""
        total = 0
        while applied := self.step():
            total += applied
        return total


def open_follower(url: str, log: RecordLog, source: Source, *, batch: int = BATCH) -> Follower:
    """Open the database, bring its schema to head, and return a follower on it."""
    engine = db.open_engine(url)
    db.upgrade(engine)
    return Follower(engine, log, source, batch=batch)


async def follow(url: str, log: RecordLog, writer: Any, source: Source, *,
                 task_status: trio.TaskStatus[Follower | None] = trio.TASK_STATUS_IGNORED) -> None:
    """The follower as a broker task: catch up, then apply new commits as they land.

    A failing database (down, full, migrations refused) is logged and retried;
    it never takes the broker down with it.
    """
    follower: Follower | None = None
    started = False
    try:
        while True:
            try:
                if follower is None:
                    follower = await trio.to_thread.run_sync(open_follower, url, log, source)
                if not started:
                    task_status.started(follower)
                    started = True
                applied = await trio.to_thread.run_sync(follower.step)
            except Exception as exc:  # the read model is best effort; the broker goes on
                log.warning("read model (%s) step failed, retrying in %.0f s: %s", _safe(url), RETRY_AFTER, exc)
                if not started:
                    task_status.started(None)
                    started = True
                await trio.sleep(RETRY_AFTER)
                continue
            if applied == 0:
                # woken by the writer's next commit; polled too, for records that land by another path
                # (a slave applying shipped records)
                with trio.move_on_after(POLL):
                    await writer.wait_past(follower.position + 1)
                await trio.sleep(IDLE)
    finally:
        if follower is not None:
            follower.engine.dispose()


def _safe(url: str) -> str:
    """A URL without its password, for logs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(unparsable url)"


def source_of(config: Any) -> Source:
    """The source a broker's rows are stamped with: its brokerName and brokerRole."""
    return Source(config.brokerName, config.brokerRole)
