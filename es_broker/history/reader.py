"""Reading records whether hot or sealed (B-408): the verbs that read records see one log.

The hot log holds the records after the last sealed one; the archive holds
the rest, segment by segment (`HistoryProjection`). A verb asks for the
records it needs with the conditions it can name (group, topic, types), the
archive's Parquet reader leaves out what they rule out, and the answer says
where it read from: `["hot"]`, or `["archive", "hot"]`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import lmdb

from es_broker.log import LogCorruptError, Record, RecordLog, records
from es_broker.projections.history import HistoryProjection
from es_broker.projections.time_index import TimeIndexProjection

HOT = "hot"
ARCHIVE = "archive"


class StoreView(Protocol):
    """What the history reads and seals of a broker's store: its log, the history and time
    projections, a read transaction. `es_broker.store.Store` is one; it reads the history when it
    opens a directory, so the history does not import it."""

    @property
    def log(self) -> RecordLog: ...
    @property
    def history(self) -> HistoryProjection: ...
    @property
    def timeindex(self) -> TimeIndexProjection: ...
    def read(self) -> lmdb.Transaction[bytes]: ...


class Reading:
    """The records a verb reads, oldest first; `sources` names where they came from."""

    def __init__(
        self,
        store: StoreView,
        *,
        group: str | None = None,
        topic: str | None = None,
        types: Iterable[str] | None = None,
    ) -> None:
        self.store = store
        self.group, self.topic = group, topic
        self.types = set(types) if types is not None else None
        with store.read() as txn:
            self.segments = list(store.history.segments(txn))
        self.sealed_upto = self.segments[-1]["last_seq"] if self.segments else 0
        # the effective time at the end of the archive: where the hot log's running time starts
        self.start_time = self.segments[-1]["last_time"] if self.segments else 0
        self.sources = ([ARCHIVE] if self.segments else []) + [HOT]

    def __iter__(self) -> Iterator[tuple[int, Record]]:
        if self.segments:
            from es_broker.history.archive import scan  # the archive loads once something is sealed

            yield from scan(self.segments, group=self.group, topic=self.topic, types=self.types)
        reader = self.store.log.read(self.sealed_upto + 1)
        try:
            yield from reader
        finally:
            reader.close()

    def timed(self) -> Iterator[tuple[int, Record, int]]:
        """(seq, record, effective time): the archive's from its `time` column, the hot log's running on."""
        if self.segments:
            from es_broker.history.archive import scan  # the archive loads once something is sealed

            yield from scan(
                self.segments,
                group=self.group,
                topic=self.topic,
                types=self.types,
                with_time=True,
            )
        running = self.start_time
        reader = self.store.log.read(self.sealed_upto + 1)
        try:
            for seq, record in reader:
                running = max(running, int(record.get("ts") or 0), 0)
                yield seq, record, running
        finally:
            reader.close()


def record_at(store: StoreView, txn: lmdb.Transaction[bytes], seq: int) -> Record:
    """The record with sequence number seq, from the hot log or else from its sealed segment."""
    raw = txn.get(records.seq_key(seq), db=store.log.log_db)
    if raw is not None:
        return records.unpack(raw)
    segment = store.history.segment_of(txn, seq)
    if segment is not None:
        from es_broker.history.archive import scan  # the archive loads once something is sealed

        for _, record in scan([segment], seqs=[seq]):
            return record
    raise LogCorruptError(f"the log has no record {seq}")


def records_at(store: StoreView, seqs: Iterable[int]) -> dict[int, Record]:
    """The records of these seqs: from the hot log, the sealed ones from their segments (one read
    of each segment holding some, pushed down on `seq`)."""
    out: dict[int, Record] = {}
    sealed: list[int] = []
    with store.read() as txn:
        for seq in sorted(set(seqs)):
            raw = txn.get(records.seq_key(seq), db=store.log.log_db)
            if raw is not None:
                out[seq] = records.unpack(raw)
            else:
                sealed.append(seq)
        segments = list(store.history.segments(txn)) if sealed else []
    if sealed:
        from es_broker.history.archive import scan  # the archive loads once something is sealed

        out.update(scan(segments, seqs=sealed))
    missing = [s for s in sealed if s not in out]
    if missing:
        raise LogCorruptError(f"the log has no record {missing[0]}")
    return out


def sources_of(store: StoreView, seqs: Iterable[int]) -> list[str]:
    """Where records of these seqs are read from."""
    with store.read() as txn:
        upto = store.history.sealed_upto(txn)
    seen = {ARCHIVE if s <= upto else HOT for s in seqs}
    return [s for s in (ARCHIVE, HOT) if s in seen]


def describe(sources: list[str]) -> str:
    return " and ".join(sources) or HOT


__all__: list[Any] = ["Reading", "record_at", "records_at", "sources_of"]
