"""The read-model follower: applies the log's records to SQL, exactly once, in order.

Each step reads the next batch of records after the checkpoint, inserts
their rows and moves the checkpoint in ONE SQL transaction. A crash anywhere
leaves either the whole batch with its checkpoint or neither, so a restarted
follower resumes where the database says and ends with exactly the rows of
an uninterrupted run. The checkpoint update is guarded by its old value, so
two followers racing on one database cannot both apply a batch (the loser's
transaction rolls back).

A record whose rows the database refuses (a data error, `quarantine.py`) is
quarantined: kept in `readmodel_failures` with its error and skipped, the
checkpoint moving past it in the same transaction. A batch that fails so is
re-run record by record to find it. Any other error (database down, locked,
full) skips nothing: `follow_log` waits and tries again.

The follower runs in a process of its own (`es-broker readmodel follow`,
started and restarted by `es-broker serve`, `supervisor.py`), so nothing of
it can slow down or stop the broker.
"""

from __future__ import annotations

import gc
import itertools
import logging
import time as _time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lmdb
from sqlalchemy import Engine, delete, func, insert, select, update

from es_broker.log import Record, RecordLog
from es_broker.readmodel import db
from es_broker.readmodel.bulk import BulkInsert
from es_broker.readmodel.models import FAMILY_TABLES as _FAMILY_MODELS
from es_broker.readmodel.models import Base, Checkpoint, FailureRow, RecordRow, ResetQueueRow
from es_broker.readmodel.quarantine import (
    effective_time,
    error_text,
    is_data_error,
    now_ms,
    running_version,
)
from es_broker.readmodel.tuples import COLUMNS as _TUPLE_COLUMNS
from es_broker.readmodel.tuples import tuple_rows
from es_broker.schema.families import (
    DEFAULT_SOURCE,
    Row,
    RunningTime,
    Source,
    to_json,
)
from es_broker.schema.rows import record_rows

logger = logging.getLogger("es_broker.readmodel")

BATCH = 2000
RETRY_FIRST = 1.0  # seconds before a failed step (database down, disk full, ...) is tried again...
RETRY_MAX = 60.0  # ...doubling up to this
QUARANTINE_RECOUNT = 5.0  # seconds between counts of the quarantined records (B-367)
POLL = 0.25  # how often an idle follower looks at the log's last sequence number

# the declared models' Table objects (`model.__table__` is typed as any FromClause)
TABLES = {name: Base.metadata.tables[model.__tablename__] for name, model in _FAMILY_MODELS.items()}


class FollowerConflict(Exception):
    """Another follower moved the checkpoint of the same source meanwhile; nothing was applied."""


class _Refused(Exception):
    """The database refused the rows of one record for their values: it goes to quarantine."""

    def __init__(self, seq: int, record: Record, time: int, error: BaseException) -> None:
        super().__init__(seq)
        self.seq, self.record, self.time, self.error = seq, record, time, error


class LogGap(Exception):
    """The log does not continue where the checkpoint says (a different data directory?)."""


def table_rows(
    source: str, seq: int, record: Record, time: int, src: Source
) -> dict[str, list[Row]]:
    """The SQL rows of one record, by table name (records, the family tables, reset_queues)."""
    # record_rows makes a fresh dict per row: they are completed in place, not copied
    generic, family_rows = record_rows(seq, record, time, src)
    generic["source"] = source
    generic["n"] = 0
    out: dict[str, list[Row]] = {_RECORDS: [generic]}
    counts: dict[str, int] = {}
    for family, row in family_rows:
        table = TABLES.get(family)
        if table is None:
            continue  # `other`: the records table has it already
        n = counts.get(family, 0)
        counts[family] = n + 1
        row["source"] = source
        row["n"] = n
        if family == "resets":
            resets = out.setdefault(_RESET_QUEUES, [])
            for q in row.pop("queues"):
                resets.append({"source": source, "seq": seq, **q})
            row["notified"] = to_json(row["notified"])
        elif family == "deliveries":
            row["offsets"] = to_json(row["offsets"])
        out.setdefault(table.name, []).append(row)
    return out


_RECORDS = RecordRow.__tablename__
_RESET_QUEUES = ResetQueueRow.__tablename__
_ALL_TABLES = {t.name: t for t in Base.metadata.sorted_tables}


@dataclass(slots=True)
class RetryResult:
    """What a retry of quarantined records did: the seqs now stored, and those that failed again."""

    stored: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


class Follower:
    """Applies one log to one SQL database under a source name."""

    def __init__(
        self, engine: Engine, log: RecordLog, source: Source = DEFAULT_SOURCE, *, batch: int = BATCH
    ) -> None:
        self.engine = engine
        self.log = log
        self.source = source
        self.batch = batch
        self.bulk = BulkInsert(engine.dialect)
        # rows made as tuples (readmodel/tuples.py) where they are the INSERTs' columns, on SQLite
        self.tuples = self.bulk.direct and all(
            self.bulk.columns(_ALL_TABLES[name]) == columns
            for name, columns in _TUPLE_COLUMNS.items()
        )
        self.version = running_version()
        self.position = self.checkpoint()[0]

    def checkpoint(self) -> tuple[int, int, int | None]:
        """(last applied seq, running effective time, start time) stored in the database."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(Checkpoint.last_seq, Checkpoint.max_ts, Checkpoint.start_time).where(
                    Checkpoint.source == self.source.broker
                )
            ).first()
        return (row[0], row[1], row[2]) if row else (0, 0, None)

    def step(self) -> int:
        """Apply the next batch with its checkpoint in one transaction; the number of records applied.

        A batch the database refuses for a record's values is applied again
        record by record, and the records that fail alone are quarantined.
        """
        collecting = gc.isenabled()
        # a step's objects (records, rows) hold no cycles and go when it ends: the cyclic
        # collector, run every 700 allocations, would only walk them again and again while they
        # pile up (~5.6k instructions a message); what does make cycles (an error's traceback) is
        # collected after the step
        gc.disable()
        try:
            return self._step()
        finally:
            if collecting:
                gc.enable()

    def _step(self) -> int:
        try:
            return self._apply(self.batch)
        except Exception as exc:
            if not is_data_error(exc):
                raise
            logger.warning(
                "read model: a batch after record %d failed (%s); applying it record by record",
                self.position,
                error_text(exc),
            )
        applied = 0
        for _ in range(self.batch):
            done = self._apply(1, isolated=True)
            if done == 0:
                break
            applied += done
        return applied

    def catch_up(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Apply every record the log holds now; the number applied (`progress` told the position)."""
        total = 0
        while applied := self.step():
            total += applied
            if progress is not None:
                progress(self.position, max(self.position, self.log.last_seq))
        return total

    def _read(self, first: int, count: int) -> list[tuple[int, Record]]:
        try:
            reader = self.log.read(first)
            try:
                return list(itertools.islice(reader, count))
            finally:
                reader.close()  # ends the LMDB read transaction now, not at garbage collection
        except lmdb.MapResizedError:
            # the broker grew the map since this (read-only) process opened it: adopt the new size
            self.log.env.set_mapsize(0)
            return self._read(first, count)

    def _apply(self, count: int, *, isolated: bool = False) -> int:
        """One transaction: up to `count` records after the checkpoint, their rows, the checkpoint.

        With `isolated` (one record), a data error on insert quarantines the
        record in a transaction of its own instead of raising.
        """
        try:
            return self._apply_once(count, isolated)
        except _Refused as refused:
            with self.engine.begin() as conn:
                row = conn.execute(
                    select(Checkpoint.start_time).where(Checkpoint.source == self.source.broker)
                ).first()
                self._quarantine(conn, refused.seq, refused.record, refused.time, refused.error)
                start = refused.time if refused.seq == 1 else (row[0] if row else None)
                self._move_checkpoint(
                    conn, row is not None, refused.seq - 1, refused.seq, refused.time, start
                )
            self.position = refused.seq
            return 1

    def _apply_once(self, count: int, isolated: bool) -> int:
        with self.engine.begin() as conn:
            row = conn.execute(
                select(Checkpoint.last_seq, Checkpoint.max_ts, Checkpoint.start_time).where(
                    Checkpoint.source == self.source.broker
                )
            ).first()
            last, running, start = (row[0], row[1], row[2]) if row else (0, 0, None)
            batch = self._read(last + 1, count)
            if not batch:
                self.position = last
                return 0
            clock = RunningTime(running)
            # by table: rows (dicts), or on SQLite the tuples of their INSERT's columns
            tables: dict[str, list[Any]] = defaultdict(list)
            direct, tuples, broker = self.bulk.direct, self.tuples, self.source.broker
            failed: list[tuple[int, Record, int, BaseException]] = []
            position = last
            for seq, record in batch:
                if seq != position + 1:
                    raise LogGap(f"expected record {position + 1} of {self.log.path}, found {seq}")
                position = seq
                try:
                    time = effective_time(clock, record)  # on a bad ts the clock stays where it was
                    made = tuple_rows(seq, record, time, broker, self.source) if tuples else None
                    if made is None:
                        rows = table_rows(broker, seq, record, time, self.source)
                except Exception as exc:
                    if not is_data_error(exc):
                        raise
                    failed.append((seq, record, clock.value, exc))
                    continue
                if seq == 1:
                    start = time
                if made is not None:
                    tables[_RECORDS].append(made[0])
                    tables[made[1]].append(made[2])
                elif direct:
                    for name, named_rows in rows.items():
                        tables[name].extend(self.bulk.values(_ALL_TABLES[name], named_rows))
                else:
                    for name, named_rows in rows.items():
                        tables[name].extend(named_rows)
            try:
                # parents first is not needed (no foreign keys) but keeps it stable
                for name, table in _ALL_TABLES.items():
                    if not tables.get(name):
                        continue
                    if direct:
                        self.bulk.insert_values(conn, table, tables[name])
                    else:
                        self.bulk.insert(conn, table, tables[name])
            except Exception as exc:
                if isolated and is_data_error(exc):
                    raise _Refused(batch[0][0], batch[0][1], clock.value, exc) from exc
                raise
            for seq, record, time, error in failed:
                self._quarantine(conn, seq, record, time, error)
                if seq == 1:
                    start = time
            self._move_checkpoint(conn, row is not None, last, position, clock.value, start)
        self.position = position
        return len(batch)

    def _move_checkpoint(
        self, conn: Any, exists: bool, last: int, position: int, max_ts: int, start: int | None
    ) -> None:
        values = {"last_seq": position, "max_ts": max_ts, "start_time": start}
        if not exists:
            conn.execute(insert(Checkpoint).values(source=self.source.broker, **values))
            return
        moved = conn.execute(
            update(Checkpoint)
            .where(Checkpoint.source == self.source.broker, Checkpoint.last_seq == last)
            .values(**values)
        )
        if moved.rowcount != 1:
            raise FollowerConflict(
                f"checkpoint of {self.source.broker} moved past {last} meanwhile"
            )

    def _quarantine(
        self, conn: Any, seq: int, record: Record, time: int, exc: BaseException
    ) -> None:
        text = error_text(exc)
        logger.warning("read model: record %d (%s) quarantined: %s", seq, record.get("type"), text)
        now = now_ms()
        key = (FailureRow.source == self.source.broker, FailureRow.seq == seq)
        again = conn.execute(
            update(FailureRow)
            .where(*key)
            .values(
                error=text,
                version=self.version,
                last_failed_at=now,
                attempts=FailureRow.attempts + 1,
            )
        )
        if again.rowcount == 0:
            conn.execute(
                insert(FailureRow).values(
                    source=self.source.broker,
                    seq=seq,
                    type=str(record.get("type"))[:100],
                    time=time,
                    error=text,
                    version=self.version,
                    first_failed_at=now,
                    last_failed_at=now,
                    attempts=1,
                )
            )

    def quarantine_count(self) -> int:
        """How many records of this source are quarantined now (the broker exports it, B-367)."""
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(FailureRow)
                    .where(FailureRow.source == self.source.broker)
                ).scalar()
                or 0
            )

    def quarantined(self) -> list[FailureRow]:
        """The quarantined records of this source, by seq."""
        from sqlalchemy.orm import Session

        with Session(self.engine) as session:
            rows = list(
                session.scalars(
                    select(FailureRow)
                    .where(FailureRow.source == self.source.broker)
                    .order_by(FailureRow.seq)
                )
            )
            session.expunge_all()
        return rows

    def retry_quarantined(self, *, other_versions_only: bool = False) -> RetryResult:
        """Try the quarantined records again; a record that stores now leaves the quarantine.

        With `other_versions_only`, only the records a different es-broker
        version failed on (after an upgrade, the code that failed may be fixed).
        """
        result = RetryResult()
        for failure in self.quarantined():
            if other_versions_only and failure.version == self.version:
                continue
            found = self._read(failure.seq, 1)
            if not found or found[0][0] != failure.seq:
                continue  # the log does not hold it (another data directory?): leave it as it is
            seq, record = found[0]
            try:
                with self.engine.begin() as conn:
                    taken = conn.execute(
                        delete(FailureRow).where(
                            FailureRow.source == self.source.broker, FailureRow.seq == seq
                        )
                    )
                    if taken.rowcount != 1:
                        continue  # another follower retried it meanwhile
                    rows = table_rows(self.source.broker, seq, record, failure.time, self.source)
                    for name in _ALL_TABLES:
                        if rows.get(name):
                            self.bulk.insert(conn, _ALL_TABLES[name], rows[name])
            except Exception as exc:
                if not is_data_error(exc):
                    raise
                with self.engine.begin() as conn:
                    self._quarantine(conn, seq, record, failure.time, exc)
                result.failed.append(seq)
                continue
            logger.warning(
                "read model: quarantined record %d (%s) is stored now", seq, failure.type
            )
            result.stored.append(seq)
        return result


def open_follower(url: str, log: RecordLog, source: Source, *, batch: int = BATCH) -> Follower:
    """Open the database, bring its schema to head, and return a follower on it."""
    engine = db.open_engine(url)
    db.upgrade(engine)
    return Follower(engine, log, source, batch=batch)


def log_last_seq(log: RecordLog) -> int:
    """The log's last sequence number now (a read-only view does not see it move by itself)."""
    try:
        return log._read_last_seq()
    except lmdb.MapResizedError:
        log.env.set_mapsize(0)
        return log._read_last_seq()


def follow_log(
    url: str,
    log: RecordLog,
    source: Source,
    *,
    stop: Callable[[], bool],
    poll: float = POLL,
    batch: int = BATCH,
    on_position: Callable[[int, bool], None] | None = None,
    on_quarantine: Callable[[int], None] | None = None,
) -> None:
    """Catch up, then apply new records as they land, until `stop()` is true.

    Once at the log's end, the follower looks again every `poll` seconds and
    applies what landed meanwhile in one step (one transaction), so under a
    steady flow of records it commits a few times a second, not once per record.

    `on_position` is told the checkpoint after each step, and whether the step
    reached the log's end (True), so the broker can report how far the read model is.
    `on_quarantine` is told the number of quarantined records at the start and then at most
    every QUARANTINE_RECOUNT seconds (a retry from another process lowers it meanwhile).

    Quarantined records are retried first when a different es-broker
    version failed on them. A failing database (down, locked, full,
    migrations refused) is logged and retried with back-off; nothing is
    skipped for it.
    """
    follower: Follower | None = None
    delay = RETRY_FIRST
    counted = [-QUARANTINE_RECOUNT]  # monotonic time of the last count

    def recount(now: bool = False) -> None:
        if on_quarantine is None or follower is None:
            return
        if now or _time.monotonic() - counted[0] >= QUARANTINE_RECOUNT:
            counted[0] = _time.monotonic()
            on_quarantine(follower.quarantine_count())

    try:
        while not stop():
            try:
                if follower is None:
                    follower = open_follower(url, log, source, batch=batch)
                    retried = follower.retry_quarantined(other_versions_only=True)
                    if retried.stored or retried.failed:
                        logger.warning(
                            "read model: retried quarantined records of an earlier version: "
                            "%d stored, %d failed again",
                            len(retried.stored),
                            len(retried.failed),
                        )
                applied = follower.step()
                if on_position is not None:
                    on_position(follower.position, applied < follower.batch)
                recount()
            except Exception as exc:  # the database's trouble: wait, then try again
                logger.warning(
                    "read model (%s) step failed, retrying in %.0f s: %s",
                    _safe(url),
                    delay,
                    error_text(exc),
                )
                pause(delay, stop)
                delay = min(delay * 2, RETRY_MAX)
                continue
            delay = RETRY_FIRST
            if applied < follower.batch:
                # at the log's end: wait a poll at least before the next step, so that it takes
                # what landed meanwhile in one transaction (a transaction costs about as much
                # as 40 records' rows) instead of a transaction for each few records
                while not stop():
                    _time.sleep(poll)
                    try:
                        recount()
                    except Exception as exc:  # a report only: the next step retries the database
                        logger.warning("read model: quarantine not counted: %s", error_text(exc))
                    if log_last_seq(log) > follower.position:
                        break
    finally:
        if follower is not None:
            follower.engine.dispose()


def pause(seconds: float, stop: Callable[[], bool]) -> None:
    deadline = _time.monotonic() + seconds
    while not stop() and _time.monotonic() < deadline:
        _time.sleep(min(POLL, max(0.0, deadline - _time.monotonic())))


def _safe(url: str) -> str:
    """A URL without its password, for logs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(unparsable url)"
