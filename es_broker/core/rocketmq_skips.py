"""What `import rocketmq --skip-corrupt` passes over, as `import_skipped` records (B-527).

Without the flag a defect refuses the import (B-526). With it, each becomes a
record naming the file, the byte offset and why, and the import goes on:

- a span of the commit log that holds no message to carry (a bad MAGICCODE, a
  body CRC that is not the body's, a TOTALSIZE past the file's end, bytes a
  short file lacks): the consume-queue units that point into it are kept,
  without a message, so every queue keeps its offsets and every committed
  offset stays valid; a read passes over them as 4.9.8's getMessage passes
  over a unit whose message is gone;
- a unit that names no message of its queue (past the log's end, say): when a
  message of the commit log claims its queue offset, the message is carried and
  its unit rebuilt from it as 4.9.8's recovery dispatches a message
  (CommitLog#checkMessageAndReturnSize: the tags' hash, or in
  SCHEDULE_TOPIC_XXXX the due time); when none does and it ends its queue, it is
  left out (the queue ends before it). One that no message claims in the middle
  of its queue still refuses the import: a unit kept there would need a place
  where a read finds no message, and a pull reads a unit's offset as a
  message's start;
- a message that has no unit of its own: its bytes are not carried.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_broker.commands import delay, names
from es_broker.commands import rocketmq_store as rmq
from es_broker.log.types import ImportSkipped
from es_broker.remoting import message as wire

COMMIT_LOG = "commit_log"
CONSUME_QUEUE = "consume_queue"


@dataclass(slots=True)
class Skips:
    """The skipping of one import: on or off, and what it needs to place what it keeps."""

    on: bool
    source: Path
    requester: str
    levels_ms: list[int]
    log_end: int  # where the source's commit log ends (its last file's end)
    records: int = 0  # the `import_skipped` records written
    units: int = 0  # the units they kept without a message
    last_ts: int = 0  # the store time of the last message walked

    def walked(self, stored: rmq.Stored) -> None:
        self.last_ts = stored.message.store_timestamp

    def span(self, span: rmq.Skipped, queues: rmq.Queues) -> dict[str, Any]:
        """The record of a skipped span of the commit log, with the units pointing into it (each
        queue's next units whose offsets lie in the span)."""
        kept: list[list[Any]] = []
        end = span.phy + span.size
        for (topic, qid), queue in sorted(queues.items()):
            while (unit := queue.unit(queue.cursor)) is not None and span.phy <= unit.phy < end:
                kept.append([topic, qid, queue.cursor, unit.phy, unit.size, unit.tags])
                queue.cursor += 1
        return self._record(span.path, span.at, COMMIT_LOG, span.phy, span.size, span.why, kept)

    def trailing(self, queue: rmq.ConsumeQueue, unit: rmq.Unit, why: str) -> dict[str, Any]:
        """The record of a unit naming no message after its queue's last one: left out."""
        queue.cursor += 1
        why = f"{why}; left out, the queue ends before it"
        return self._record(unit.path, unit.at, CONSUME_QUEUE, unit.phy, unit.size, why, [])

    def rebuilt(self, unit: rmq.Unit, stored: rmq.Stored, why: str) -> dict[str, Any]:
        """The record of a unit replaced by one rebuilt from the message claiming its offset."""
        why = f"{why}; the message at {stored.phy} carried with its unit rebuilt from it"
        return self._record(unit.path, unit.at, CONSUME_QUEUE, unit.phy, unit.size, why, [])

    def message(self, stored: rmq.Stored, why: str) -> dict[str, Any]:
        """The record of a message not carried (it has no unit of its own)."""
        path, at = stored.path or Path("commitlog"), stored.at
        return self._record(path, at, COMMIT_LOG, stored.phy, len(stored.raw), why, [])

    def tags_code(self, msg: wire.StoredMessage) -> int:
        """The tags code 4.9.8's dispatch computes for a message (checkMessageAndReturnSize)."""
        level = msg.properties.get(delay.PROPERTY_DELAY, "")
        if msg.topic == names.SCHEDULE_TOPIC and level.isdigit() and int(level) > 0:
            level_n = min(int(level), len(self.levels_ms))
            return delay.deliver_at(msg.store_timestamp, level_n, self.levels_ms)
        tags = msg.properties.get("TAGS", "")
        return wire.tag_hash(tags) if tags else 0

    def _record(
        self,
        path: Path,
        at: int,
        kind: str,
        phy: int,
        size: int,
        why: str,
        kept: list[list[Any]],
    ) -> dict[str, Any]:
        self.records += 1
        self.units += len(kept)
        where = (
            str(path.relative_to(self.source)) if path.is_relative_to(self.source) else str(path)
        )
        return ImportSkipped(
            source=str(self.source),
            file=where,
            offset=at,
            kind=kind,
            phy=phy,
            size=size,
            why=why,
            units=kept,
            requester=self.requester,
        ).to_record(self.last_ts)
