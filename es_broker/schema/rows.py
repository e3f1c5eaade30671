"""Records as rows: which rows of which families (`families.FAMILIES`) a record makes.

`rows_of(seq, record, ...)` turns one record into the rows of every family
that claims it; a record no family claims becomes a row of `other`, and every
row keeps the fields its columns do not name in `extra`.

The `offsets` family is the offset table's changes as the LMDB projection
applies them: both learn them from `es_broker.projections.offset_rule`, so a
record type that moves offsets is taught there once, for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from es_broker.log import Record
from es_broker.log.types import Cause, RecordType, SendBackDecision, as_view
from es_broker.projections.offset_rule import offset_changes
from es_broker.schema.families import DEFAULT_SOURCE, Source, to_json

_COMMON_FIELDS = frozenset({"type", "v", "ts"})
DLQ_PREFIX = "%DLQ%"

# ---------------------------------------------------------------------- extractors


def _known(*names: str) -> frozenset[str]:
    """The fields a row names and the common ones: what `_extra` leaves out."""
    return _COMMON_FIELDS.union(names)


def _extra(record: Record, known: frozenset[str]) -> str | None:
    """The record's fields beyond `known` (`_known`) as JSON; None when it has none."""
    # in C, most records carrying nothing more: a frozenset's issuperset walks the dict's keys
    # (~90 ns faster than `record.keys() <= known`, which goes through the keys view)
    if known.issuperset(record):
        return None
    return to_json({k: v for k, v in record.items() if k not in known})


def _first(record: Record, *names: str, default: Any = None) -> Any:
    for name in names:
        if record.get(name) is not None:
            return record[name]
    return default


_OFFSETS_KNOWN = _known("group", "topic", "queue_id", "offset", "old", "cause", "requester")
_MESSAGES_KNOWN = _known(
    "topic", "queue_id", "queue_offset", "units", "producer_group", "requester"
)
_DELIVERIES_KNOWN = _known(
    "group", "topic", "queue_id", "offset", "next_offset", "client", "offsets"
)


# what `readmodel/tuples.py` shares with the extractors below (it makes the same rows as tuples)
OFFSETS_KNOWN = _OFFSETS_KNOWN
MESSAGES_KNOWN = _MESSAGES_KNOWN
DELIVERIES_KNOWN = _DELIVERIES_KNOWN
extra_json = _extra


def _offsets(record: Record) -> list[dict[str, Any]]:
    extra = (
        _extra(record, _OFFSETS_KNOWN) if record["type"] == RecordType.OFFSET_COMMITTED else None
    )
    return [
        {
            "group": c.group,
            "topic": c.topic,
            "queue_id": c.queue_id,
            "old": c.old,
            "new": c.new,
            "removed": c.removed,
            "cause": c.cause,
            "requester": c.requester,
            "extra": extra,
        }
        for c in offset_changes(record)
    ]


def _resets(record: Record) -> list[dict[str, Any]]:
    names = (
        "group",
        "topic",
        "kind",
        "value",
        "timestamp",
        "force",
        "mode",
        "scope",
        "requester",
        "outcome",
        "notified",
        "queues",
    )
    row = {n: record.get(n) for n in names}
    row["kind"] = row["kind"] or "time"
    if row["value"] is None:
        row["value"] = record.get("timestamp")
    row["notified"] = [str(c) for c in record.get("notified") or ()]
    row["queues"] = [
        {"queue_id": q[0], "current": q[1], "target": q[2], "final": q[3], "outcome": q[4]}
        for q in record.get("queues") or ()
    ]
    row["extra"] = _extra(record, _known(*names))
    return [row]


def _topics(record: Record) -> list[dict[str, Any]]:
    config = record.get("config") or {}
    return [
        {
            "topic": record.get("topic"),
            "old_perm": record.get("old_perm"),
            "perm": record.get("perm", config.get("perm")),
            "read_queue_nums": config.get("readQueueNums"),
            "write_queue_nums": config.get("writeQueueNums"),
            "cause": record.get("cause"),
            "requester": record.get("requester"),
            "config": to_json(config) if config else None,
            "extra": _extra(
                record, _known("topic", "old_perm", "perm", "cause", "requester", "config")
            ),
        }
    ]


def _groups(record: Record) -> list[dict[str, Any]]:
    config = record.get("config")
    return [
        {
            "group": record.get("group"),
            "cause": record.get("cause"),
            "requester": record.get("requester"),
            "config": to_json(config) if config is not None else None,
            "extra": _extra(record, _known("group", "cause", "requester", "config")),
        }
    ]


def _messages(record: Record) -> list[dict[str, Any]]:
    stored = as_view(record, RecordType.MESSAGES_STORED)
    units = stored["units"]
    return [
        {
            "topic": stored["topic"],
            "queue_id": stored["queue_id"],
            "queue_offset": stored["queue_offset"],
            "count": len(units),
            "size": sum(u[1] for u in units),
            "first_physical_offset": units[0][0] if units else None,
            "producer_group": stored.get("producer_group"),
            "requester": stored.get("requester"),
            "extra": _extra(record, _MESSAGES_KNOWN),
        }
    ]


def _deliveries(record: Record) -> list[dict[str, Any]]:
    view = as_view(record, RecordType.MESSAGES_DELIVERED)
    delivered = list(view.get("offsets") or ())
    return [
        {
            "group": view.get("group"),
            "topic": view.get("topic"),
            "queue_id": view.get("queue_id"),
            "offset": view.get("offset"),
            "next_offset": view.get("next_offset"),
            "count": len(delivered),
            "client": view.get("client"),
            "offsets": delivered,
            "extra": _extra(record, _DELIVERIES_KNOWN),
        }
    ]


def _queries(record: Record) -> list[dict[str, Any]]:
    names = (
        "group",
        "topic",
        "queue_id",
        "row",
        "offset",
        "code",
        "min_offset",
        "head_in_memory",
        "phy_max",
        "requester",
    )
    return [{**{n: record.get(n) for n in names}, "extra": _extra(record, _known(*names))}]


def _correction(**fields: Any) -> dict[str, Any]:
    names = (
        "kind",
        "group",
        "topic",
        "queue_id",
        "status",
        "offset",
        "next_offset",
        "min_offset",
        "max_offset",
        "lost",
        "reason",
        "requester",
        "extra",
    )
    return {n: fields.get(n) for n in names}


def _corrections(record: Record) -> list[dict[str, Any]]:
    kind = record["type"]
    if kind == RecordType.PULL_OFFSET_MOVED:
        status, offset, nxt = record.get("status"), record.get("offset"), record.get("next_offset")
        # OFFSET_TOO_SMALL: the consumer is moved past messages retention removed (B-58, S-11)
        lost = (
            nxt - offset
            if status == "OFFSET_TOO_SMALL" and offset is not None and nxt is not None
            else 0
        )
        return [
            _correction(
                kind=kind,
                group=record.get("group"),
                topic=record.get("topic"),
                queue_id=record.get("queue_id"),
                status=status,
                offset=offset,
                next_offset=nxt,
                min_offset=record.get("min_offset"),
                max_offset=record.get("max_offset"),
                lost=lost,
                requester=record.get("client"),
                extra=_extra(
                    record,
                    _known(
                        "group",
                        "topic",
                        "queue_id",
                        "status",
                        "offset",
                        "next_offset",
                        "min_offset",
                        "max_offset",
                        "client",
                    ),
                ),
            )
        ]
    if kind == RecordType.OFFSET_COMMIT_IGNORED:
        return [
            _correction(
                kind=kind,
                group=record.get("group"),
                topic=record.get("topic"),
                queue_id=record.get("queue_id"),
                offset=record.get("current"),
                next_offset=record.get("offset"),
                reason=record.get("reason"),
                requester=record.get("requester"),
                extra=_extra(
                    record,
                    _known(
                        "group", "topic", "queue_id", "current", "offset", "reason", "requester"
                    ),
                ),
            )
        ]
    # commitlog_expired: each corrected queue minimum, and what each group lost (B-18, S-11)
    extra = _extra(record, _known("queues", "lost", "reason"))
    rows = [
        _correction(
            kind="min_offset_corrected",
            topic=q[0],
            queue_id=q[1],
            offset=q[2],
            next_offset=q[3],
            min_offset=q[3],
            reason=record.get("reason"),
            extra=extra,
        )
        for q in record.get("queues") or ()
    ]
    rows += [
        _correction(
            kind="retention_loss",
            group=g,
            topic=t,
            queue_id=q,
            offset=o,
            next_offset=o + n,
            lost=n,
            reason=record.get("reason"),
            extra=extra,
        )
        for g, t, q, o, n in record.get("lost") or ()
    ]
    return rows


def _send_backs(record: Record) -> list[dict[str, Any]]:
    """message_sent_back (B-90): `topic` is the original topic (RETRY_TOPIC), `decision` retry, dlq or dropped."""
    target = _first(record, "target_topic", "to_topic")
    decision = record.get("decision")
    names = (
        "group",
        "retry_topic",
        "topic",
        "queue_id",
        "decision",
        "target_topic",
        "reconsume_times",
        "delay_level",
        "msg_id",
        "requester",
        "client",
    )
    return [
        {
            "group": _first(record, "group", "consumer_group"),
            "topic": _first(record, "retry_topic", "client_origin_topic", "topic"),
            "queue_id": record.get("queue_id"),
            "decision": decision,
            "target_topic": target,
            "dead_letter": decision == SendBackDecision.DLQ
            or bool(target and str(target).startswith(DLQ_PREFIX)),
            "reconsume_times": record.get("reconsume_times"),
            "delay_level": record.get("delay_level"),
            "msg_id": _first(record, "msg_id", "origin_msg_id"),
            "requester": _first(record, "requester", "client"),
            "extra": _extra(record, _known(*names)),
        }
    ]


def _dead_letters(record: Record) -> list[dict[str, Any]]:
    topic = record.get("topic") or ""
    group = _first(record, "group", "consumer_group")
    if group is None and topic.startswith(DLQ_PREFIX):
        group = topic[len(DLQ_PREFIX) :]
    units = record.get("units")
    return [
        {
            "group": group,
            "topic": topic,
            "queue_id": record.get("queue_id"),
            "queue_offset": record.get("queue_offset"),
            "count": len(units) if units else 1,
            "origin_topic": _first(record, "origin_topic", "retry_topic"),
            "requester": _first(record, "requester", "client"),
            "extra": None,
        }
    ]


def _queue_locks(record: Record) -> list[dict[str, Any]]:
    """queue_locks_changed: one row per queue whose owner changed."""
    extra = _extra(record, _known("group", "client", "cause", "max_live_ms", "changes"))
    return [
        {
            "group": record.get("group"),
            "topic": topic,
            "broker_name": broker_name,
            "queue_id": queue_id,
            "owner": owner,
            "previous_owner": previous,
            "previous_renewed_at": renewed,
            "cause": record.get("cause"),
            "client": record.get("client"),
            "max_live_ms": record.get("max_live_ms"),
            "extra": extra,
        }
        for topic, broker_name, queue_id, owner, previous, renewed in record.get("changes") or ()
    ]


def _acl_changes(record: Record) -> list[dict[str, Any]]:
    """acl_loaded: one row per account of the load (one row without an account when it has none)."""
    extra = _extra(
        record,
        _known(
            "listener",
            "version",
            "cause",
            "requester",
            "files",
            "data_version",
            "global_white",
            "salt_id",
            "accounts",
        ),
    )
    dv = list(record.get("data_version") or (None, None))
    accounts = record.get("accounts") or []
    load = {
        "listener": record.get("listener"),
        "version": record.get("version"),
        "cause": record.get("cause"),
        "requester": record.get("requester"),
        "files": to_json(record.get("files") or []),
        "data_version_timestamp": dv[0],
        "data_version_counter": dv[1],
        "global_white": to_json(record.get("global_white") or []),
        "accounts": len(accounts),
        "salt_id": record.get("salt_id"),
        "extra": extra,
    }
    if not accounts:
        return [
            {
                **load,
                "access_key": None,
                "secret_fp": None,
                "admin": None,
                "white_remote_address": None,
                "default_topic_perm": None,
                "default_group_perm": None,
                "topic_perms": None,
                "group_perms": None,
            }
        ]
    return [
        {
            **load,
            "access_key": a.get("access_key"),
            "secret_fp": a.get("secret_fp"),
            "admin": a.get("admin"),
            "white_remote_address": a.get("white_remote_address"),
            "default_topic_perm": a.get("default_topic_perm"),
            "default_group_perm": a.get("default_group_perm"),
            "topic_perms": to_json(a.get("topic_perms") or []),
            "group_perms": to_json(a.get("group_perms") or []),
        }
        for a in accounts
    ]


def _access_denials(record: Record) -> list[dict[str, Any]]:
    """access_denied: one row per (who, host, code) of the summary."""
    extra = _extra(
        record, _known("listener", "window_from", "window_to", "interval_s", "acl_version", "rows")
    )
    common = {
        "listener": record.get("listener"),
        "window_from": record.get("window_from"),
        "window_to": record.get("window_to"),
        "interval_s": record.get("interval_s"),
        "acl_version": record.get("acl_version"),
        "extra": extra,
    }
    return [
        {**common, "who": who, "host": host, "code": code, "count": count}
        for who, host, code, count in record.get("rows") or ()
    ]


def lock_holder_at(
    rows: list[dict[str, Any]],
    group: str,
    topic: str,
    queue_id: int,
    at: int,
    broker_name: str | None = None,
) -> str | None:
    """Who held a queue of a group at time `at`, from `queue_locks` rows (None: nobody, as far as recorded).

    The last change at or before `at` names the owner; a lock whose owner stopped
    renewing it ends max_live_ms after its last renewal, which only a later row tells.
    """
    mine = sorted(
        (
            r
            for r in rows
            if r["group"] == group
            and r["topic"] == topic
            and r["queue_id"] == queue_id
            and (broker_name is None or r["broker_name"] == broker_name)
        ),
        key=lambda r: r["seq"],
    )
    holder = None
    for row in mine:
        if row["time"] > at:
            # a later change whose previous owner lapsed before `at` ends the holder earlier
            lapsed = (
                row["previous_renewed_at"] >= 0
                and row["cause"] in (Cause.EXPIRED, Cause.LOCK)
                and row["previous_owner"] == holder
                and row["previous_renewed_at"] + row["max_live_ms"] < at
            )
            return None if lapsed else holder
        holder = row["owner"] or None
    return holder


def _is_send_back(kind: str) -> bool:
    return "send_back" in kind or "sent_back" in kind


def _is_dead_letter(kind: str, record: Record) -> bool:
    """Every arrival in a %DLQ% topic is a dead letter, whatever path stored it (B-91, B-95)."""
    return kind == RecordType.MESSAGES_STORED and str(record.get("topic", "")).startswith(
        DLQ_PREFIX
    )


_BY_TYPE: dict[str, list[tuple[str, Callable[[Record], list[dict[str, Any]]]]]] = {
    RecordType.OFFSET_COMMITTED: [("offsets", _offsets)],
    RecordType.RESET_REQUESTED: [("resets", _resets), ("offsets", _offsets)],
    RecordType.TOPIC_UPDATED: [("topics", _topics)],
    RecordType.TOPIC_PERM_CHANGED: [("topics", _topics)],
    RecordType.TOPIC_DELETED: [("topics", _topics)],
    RecordType.SUBGROUP_UPDATED: [("groups", _groups)],
    # a group and its offsets are deleted by one record (B-431)
    RecordType.SUBGROUP_DELETED: [("groups", _groups), ("offsets", _offsets)],
    RecordType.CONSUMER_GROUP_CHANGED: [("groups", _groups)],
    RecordType.MESSAGES_STORED: [("messages", _messages)],
    RecordType.MESSAGES_DELIVERED: [("deliveries", _deliveries)],
    RecordType.OFFSET_QUERIED: [("queries", _queries)],
    RecordType.PULL_OFFSET_MOVED: [("corrections", _corrections)],
    RecordType.OFFSET_COMMIT_IGNORED: [("corrections", _corrections)],
    RecordType.OFFSETS_REMOVED: [("offsets", _offsets)],
    RecordType.SLAVE_OFFSETS_MERGED: [("offsets", _offsets)],
    # a pop group's offset, moved by its pops, acks and dead letters (B-585)
    RecordType.MESSAGES_POPPED: [("offsets", _offsets)],
    RecordType.POP_ACKED: [("offsets", _offsets)],
    RecordType.POP_EXPIRED: [("offsets", _offsets)],
    RecordType.COMMITLOG_EXPIRED: [("corrections", _corrections)],
    RecordType.QUEUE_LOCKS_CHANGED: [("queue_locks", _queue_locks)],
    RecordType.ACL_LOADED: [("acl_changes", _acl_changes)],
    RecordType.ACCESS_DENIED: [("access_denials", _access_denials)],
}


def rows_of(
    seq: int, record: Record, time: int, source: Source = DEFAULT_SOURCE
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(family, row) for every row a record makes; each row has the common columns filled."""
    yield from _family_rows(record, _common(seq, record, time, source), None)


def record_row(
    seq: int, record: Record, time: int, source: Source = DEFAULT_SOURCE
) -> dict[str, Any]:
    """The generic row of a record."""
    return _generic_row(record, _common(seq, record, time, source))


def record_rows(
    seq: int, record: Record, time: int, source: Source = DEFAULT_SOURCE
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """`record_row` and the rows of `rows_of` at once: the common columns and the JSON body
    are made once (the read model's follower and the archive store both)."""
    common = _common(seq, record, time, source)
    generic = _generic_row(record, common)
    return generic, _family_rows(record, common, generic["body"])


def _common(seq: int, record: Record, time: int, source: Source) -> dict[str, Any]:
    return {
        "seq": seq,
        "ts": record.get("ts"),
        "time": time,
        "type": record["type"],
        "broker": str(record.get("broker") or source.broker),
        "role": str(record.get("role") or source.role),
    }


def _generic_row(record: Record, common: dict[str, Any]) -> dict[str, Any]:
    return {**common, "v": record.get("v", 1), "body": to_json(record), "extra": None}


def _family_rows(
    record: Record, common: dict[str, Any], body: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """The family rows of a record; `body` is its JSON when already made."""
    kind = common["type"]
    rows = [
        (family, {**common, **row})
        for family, extract in _BY_TYPE.get(kind, ())
        for row in extract(record)
    ]
    claimed = bool(rows)
    if _is_send_back(kind):
        claimed = True
        rows += [("send_backs", {**common, **row}) for row in _send_backs(record)]
    if _is_dead_letter(kind, record):
        claimed = True
        rows += [("dead_letters", {**common, **row}) for row in _dead_letters(record)]
    if not claimed:
        rows.append(
            ("other", {**common, "body": to_json(record) if body is None else body, "extra": None})
        )
    return rows
