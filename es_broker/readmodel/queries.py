"""Questions answered from the SQL read model: the offset table at a moment, a group's history.

Same definitions as the broker's own answers (es_broker.timetravel.query):
the table at t is the state after every record whose effective time is <= t;
each queue's offset is the `new` of its latest change by seq, its max the
`queue_offset + count` of its latest append by seq.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, func, select

from es_broker.readmodel.models import Checkpoint, OffsetChangeRow, QueueAppendRow
from es_broker.timetravel.query import QueueOffsetAt, persist_tick

if TYPE_CHECKING:
    from sqlalchemy import Row

    # an offset_changes row as selected below (group, topic, queue_id, new, seq, time, ...)
    ChangeRow = Row[*tuple[Any, ...]]


def _latest_offsets(
    conn: Connection, source: str, at: int, group: str | None, topic: str | None
) -> dict[tuple[str, str, int], ChangeRow]:
    oc = OffsetChangeRow.__table__
    where = [oc.c.source == source, oc.c.time <= at]
    if group is not None:
        where.append(oc.c.group == group)
    if topic is not None:
        where.append(oc.c.topic == topic)
    last = (
        select(oc.c.group, oc.c.topic, oc.c.queue_id, func.max(oc.c.seq).label("seq"))
        .where(*where)
        .group_by(oc.c.group, oc.c.topic, oc.c.queue_id)
        .subquery()
    )
    query = select(
        oc.c.group,
        oc.c.topic,
        oc.c.queue_id,
        oc.c.new,
        oc.c.seq,
        oc.c.time,
        oc.c.cause,
        oc.c.requester,
        oc.c.removed,
    ).join(
        last,
        and_(
            oc.c.source == source,
            oc.c.seq == last.c.seq,
            oc.c.group == last.c.group,
            oc.c.topic == last.c.topic,
            oc.c.queue_id == last.c.queue_id,
        ),
    )
    # a queue whose latest change removed it is not in the table (B-34)
    return {(r.group, r.topic, r.queue_id): r for r in conn.execute(query) if not r.removed}


def _queue_max(
    conn: Connection, source: str, at: int, topic: str | None
) -> dict[tuple[str, int], int]:
    qa = QueueAppendRow.__table__
    where = [qa.c.source == source, qa.c.time <= at]
    if topic is not None:
        where.append(qa.c.topic == topic)
    last = (
        select(qa.c.topic, qa.c.queue_id, func.max(qa.c.seq).label("seq"))
        .where(*where)
        .group_by(qa.c.topic, qa.c.queue_id)
        .subquery()
    )
    query = select(
        qa.c.topic, qa.c.queue_id, (qa.c.queue_offset + qa.c["count"]).label("top")
    ).join(
        last,
        and_(
            qa.c.source == source,
            qa.c.seq == last.c.seq,
            qa.c.topic == last.c.topic,
            qa.c.queue_id == last.c.queue_id,
        ),
    )
    return {(r.topic, r.queue_id): r.top for r in conn.execute(query)}


def offsets_at(
    conn: Connection,
    source: str,
    at: int,
    *,
    group: str | None = None,
    topic: str | None = None,
    durable: bool = False,
    persist_interval: int = 5000,
) -> list[QueueOffsetAt]:
    """The offset table at `at`, with each queue's max and lag then; durable values on request (B-133)."""
    current = _latest_offsets(conn, source, at, group, topic)
    tops = _queue_max(conn, source, at, topic)
    kept: dict[tuple[str, str, int], ChangeRow] = {}
    if durable:
        start = conn.execute(
            select(Checkpoint.start_time).where(Checkpoint.source == source)
        ).scalar()
        tick = persist_tick(start, at, persist_interval)
        kept = _latest_offsets(conn, source, tick, group, topic) if tick is not None else {}
    rows = []
    for (g, t, q), r in sorted(
        current.items(), key=lambda item: (item[0][1], item[0][0], item[0][2])
    ):
        top = tops.get((t, q), 0)
        extra = {}
        if durable:
            value = kept[(g, t, q)].new if (g, t, q) in kept else -1
            extra = {"durable": value, "durable_lag": top - value if value >= 0 else None}
        rows.append(
            QueueOffsetAt(
                g,
                t,
                q,
                r.new,
                top,
                top - r.new if r.new >= 0 else None,
                r.seq,
                r.time,
                r.cause or "",
                r.requester or "",
                **extra,
            )
        )
    return rows
