"""Records as rows: the one mapping shared by the SQL read model, the Parquet export and Spark.

A *family* is a set of rows with one schema (offset changes, resets, topic
changes, ...). `rows_of(seq, record, ...)` turns one record into the rows of
every family that claims it; a record no family claims becomes a row of
`other`, so record types added later are kept too (their fields as JSON),
and every row keeps the fields its columns do not name in `extra`.

Common columns of every family: `seq`, `ts` (the record's broker time),
`time` (its effective time, see `RunningTime`), `type`, `broker`, `role`.

The offset changes are derived the way the offset-table projection applies
them (`offset_changes`): client and pull commits, and server-side resets,
which move offsets in the reset record itself (S-2). Any new record type that
changes the offset table must be added there too; the acceptance test that
compares the broker's answer with the read models' catches a miss.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from es_broker.log import Record
from es_broker.log.types import (
    MessagesDeliveredRecord,
    MessagesStoredRecord,
    OffsetCommittedRecord,
    RecordType,
)

if TYPE_CHECKING:
    import pyarrow as pa

# one SQL row (or Parquet row) of a family table: column name -> value
Row = dict[str, Any]

COMMON = (
    ("seq", "long"),
    ("ts", "long"),
    ("time", "long"),
    ("type", "string"),
    ("broker", "string"),
    ("role", "string"),
)
_COMMON_FIELDS = frozenset({"type", "v", "ts"})


class RunningTime:
    """Effective time: the largest `ts` of a record and every record before it.

    It never decreases along the log, so "every record with time <= t" is a
    prefix of the log even if the broker clock stepped back (B-132). The
    broker's time index uses the same rule.
    """

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def advance(self, ts: Any) -> int:
        self.value = max(self.value, int(ts or 0), 0)
        return self.value


@dataclass(frozen=True, slots=True)
class Source:
    """Where records come from: the broker name and role stamped on rows that do not carry their own."""

    broker: str = "broker-a"
    role: str = "ASYNC_MASTER"
    node: int = 0  # brokerId: 0 the master, 1.. its slaves (a cluster export's `node` partition)


DEFAULT_SOURCE = Source()  # RocketMQ's default brokerName, as an ASYNC_MASTER


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, kind); kinds in KINDS
    doc: str

    @property
    def all_columns(self) -> tuple[tuple[str, str], ...]:
        return (*COMMON, *self.columns, ("extra", "json"))


# column kinds, and what they are in Arrow and Spark (see arrow_schema / spark_ddl)
KINDS = ("long", "int", "string", "bool", "json", "longs", "strings", "reset_queues")

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "offsets",
            (
                ("group", "string"),
                ("topic", "string"),
                ("queue_id", "int"),
                ("old", "long"),
                ("new", "long"),
                ("removed", "bool"),
                ("cause", "string"),
                ("requester", "string"),
            ),
            "every change of the offset table (B-131): client and pull commits, clones, server-side resets, "
            "slave merges, and removals (`removed`: the entry left the table, `new` is -1)",
        ),
        Family(
            "resets",
            (
                ("group", "string"),
                ("topic", "string"),
                ("kind", "string"),
                ("value", "long"),
                ("timestamp", "long"),
                ("force", "bool"),
                ("mode", "string"),
                ("scope", "string"),
                ("requester", "string"),
                ("outcome", "string"),
                ("notified", "strings"),
                ("queues", "reset_queues"),
            ),
            "reset requests with the computed table and each queue's outcome (B-74, S-2, S-12)",
        ),
        Family(
            "topics",
            (
                ("topic", "string"),
                ("old_perm", "int"),
                ("perm", "int"),
                ("read_queue_nums", "int"),
                ("write_queue_nums", "int"),
                ("cause", "string"),
                ("requester", "string"),
                ("config", "json"),
            ),
            "topic created, updated, perm changed, deleted",
        ),
        Family(
            "groups",
            (("group", "string"), ("cause", "string"), ("requester", "string"), ("config", "json")),
            "subscription group configs and consumer membership changes",
        ),
        Family(
            "messages",
            (
                ("topic", "string"),
                ("queue_id", "int"),
                ("queue_offset", "long"),
                ("count", "int"),
                ("size", "long"),
                ("first_physical_offset", "long"),
                ("producer_group", "string"),
                ("requester", "string"),
            ),
            "messages stored: one row per append; queue max after it = queue_offset + count",
        ),
        Family(
            "deliveries",
            (
                ("group", "string"),
                ("topic", "string"),
                ("queue_id", "int"),
                ("offset", "long"),
                ("next_offset", "long"),
                ("count", "int"),
                ("client", "string"),
                ("offsets", "longs"),
            ),
            "pulls that delivered messages; one a slave served (recorded by the master at the merge of the "
            "slave's journal) has `served_by` in `extra`: the slave's brokerId, address, time of the delivery "
            "(`ts`; the row's `ts` is the master's time of the merge) and journal position",
        ),
        Family(
            "queries",
            (
                ("group", "string"),
                ("topic", "string"),
                ("queue_id", "int"),
                ("row", "int"),
                ("offset", "long"),
                ("code", "int"),
                ("min_offset", "long"),
                ("head_in_memory", "bool"),
                ("phy_max", "long"),
                ("requester", "string"),
            ),
            "QUERY_CONSUMER_OFFSET answered without a stored offset, with its B-37 verdict",
        ),
        Family(
            "corrections",
            (
                ("kind", "string"),
                ("group", "string"),
                ("topic", "string"),
                ("queue_id", "int"),
                ("status", "string"),
                ("offset", "long"),
                ("next_offset", "long"),
                ("min_offset", "long"),
                ("max_offset", "long"),
                ("lost", "long"),
                ("reason", "string"),
                ("requester", "string"),
            ),
            "offsets moved or held by the broker: PULL_OFFSET_MOVED (B-58), commits ignored by a reset "
            "fence (S-3), queue minimums corrected and messages lost to retention (B-18, S-11)",
        ),
        Family(
            "send_backs",
            (
                ("group", "string"),
                ("topic", "string"),
                ("queue_id", "int"),
                ("decision", "string"),
                ("target_topic", "string"),
                ("dead_letter", "bool"),
                ("reconsume_times", "int"),
                ("delay_level", "int"),
                ("msg_id", "string"),
                ("requester", "string"),
            ),
            "consumer send-backs (B-90): to the retry topic, or straight to the DLQ",
        ),
        Family(
            "dead_letters",
            (
                ("group", "string"),
                ("topic", "string"),
                ("queue_id", "int"),
                ("queue_offset", "long"),
                ("count", "int"),
                ("origin_topic", "string"),
                ("requester", "string"),
            ),
            "messages that arrived in a %DLQ% topic (B-91, B-105)",
        ),
        Family(
            "queue_locks",
            (
                ("group", "string"),
                ("topic", "string"),
                ("broker_name", "string"),
                ("queue_id", "int"),
                ("owner", "string"),
                ("previous_owner", "string"),
                ("previous_renewed_at", "long"),
                ("cause", "string"),
                ("client", "string"),
                ("max_live_ms", "long"),
            ),
            "changes of owner of orderly consumers' queue locks (B-142..B-147), one row per queue: `owner` "
            "holds the lock from `time` until the queue's next row (empty: released); `cause` is lock, unlock, "
            "channel_closed, unregistered or expired; `previous_renewed_at` is the previous owner's last take or "
            "renewal (-1 when the queue was free), so a lapsed lock ended at previous_renewed_at + max_live_ms. "
            "Renewals are not recorded, and locks are in memory: a broker restart ends them unrecorded",
        ),
        Family(
            "acl_changes",
            (
                ("listener", "string"),
                ("version", "long"),
                ("cause", "string"),
                ("requester", "string"),
                ("files", "json"),
                ("data_version_timestamp", "long"),
                ("data_version_counter", "long"),
                ("global_white", "json"),
                ("accounts", "int"),
                ("access_key", "string"),
                ("secret_fp", "string"),
                ("salt_id", "string"),
                ("admin", "bool"),
                ("white_remote_address", "string"),
                ("default_topic_perm", "string"),
                ("default_group_perm", "string"),
                ("topic_perms", "json"),
                ("group_perms", "json"),
            ),
            "loads of the broker's ACL rules (acl_loaded, B-190), one row per account per load (one row with a "
            "null `access_key` for a load without accounts): the rules in force from `time` until the next "
            "load; `cause` is startup, file change or admin request; `files` is [[path, sha256]]; `secret_fp` "
            "is a salted fingerprint of the secret (never the secret), comparable between rows of one `salt_id`; "
            "perms are DENY, PUB, SUB or PUB|SUB, `topic_perms`/`group_perms` as [[name, perm]]",
        ),
        Family(
            "access_denials",
            (
                ("listener", "string"),
                ("window_from", "long"),
                ("window_to", "long"),
                ("interval_s", "long"),
                ("acl_version", "long"),
                ("who", "string"),
                ("host", "string"),
                ("code", "int"),
                ("count", "long"),
            ),
            "requests the ACL refused (access_denied, B-191), summed per (who, host, request code) over a window "
            "of broker time [window_from, window_to]: `who` is the accessKey, anonymous (no key) or "
            "unknown:<key> (no such account); past 4096 keys counts go under <overflow>. The "
            "record's `reasons` ([who, host, code, reason, count] for the refusals of es-broker's "
            "signature checks: stale, replayed, nonces-full, scheme, malformed; B-347) is kept in "
            "each row's `extra` JSON",
        ),
        Family(
            "other", (("body", "json"),), "records no family claims (types added later), as JSON"
        ),
    )
}

DLQ_PREFIX = "%DLQ%"


# ---------------------------------------------------------------------- JSON


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$b64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _b64(value: Any) -> dict[str, str]:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$b64": base64.b64encode(bytes(value)).decode()}
    raise TypeError(f"{type(value).__name__} is not JSON")


def _str_keys_only(value: Any) -> bool:
    """True when every map key in `value` is text (msgpack checks it in C)."""
    try:
        msgpack.unpackb(msgpack.packb(value, use_bin_type=True), strict_map_key=True)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def to_json(value: Any) -> str:
    """Deterministic JSON (sorted keys); bytes become {"$b64": ...}.

    A value whose map keys are all text (every record the broker writes) goes
    straight to the C encoder; anything else is rebuilt by `_jsonable` first
    (keys made text, then sorted as text). Both give the same text.
    """
    if _str_keys_only(value):
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_b64)
        except (TypeError, ValueError):
            pass
    return json.dumps(_jsonable(value), sort_keys=True, separators=(",", ":"))


def from_json(text: str) -> Any:
    def hook(obj: dict[str, Any]) -> Any:
        return base64.b64decode(obj["$b64"]) if obj.keys() == {"$b64"} else obj

    return json.loads(text, object_hook=hook)


# ---------------------------------------------------------------------- offset changes


@dataclass(frozen=True, slots=True)
class OffsetChange:
    group: str
    topic: str
    queue_id: int
    old: int
    new: int
    cause: str
    requester: str
    removed: bool = False  # the entry left the table (B-34); `new` is -1 then


def offset_changes(record: Record) -> list[OffsetChange]:
    """The offset-table changes a record makes, as OffsetTableProjection applies them."""
    kind = record["type"]
    if kind == RecordType.OFFSET_COMMITTED:
        committed: OffsetCommittedRecord = record  # type: ignore[assignment]
        return [
            OffsetChange(
                committed["group"],
                committed["topic"],
                committed["queue_id"],
                committed["old"],
                committed["offset"],
                committed["cause"],
                committed.get("requester", ""),
            )
        ]
    if kind == RecordType.RESET_REQUESTED and record.get("mode") == "server_side":
        return [
            OffsetChange(
                record["group"],
                record["topic"],
                q[0],
                q[1],
                q[3],
                "reset",
                record.get("requester", ""),
            )
            for q in record["queues"]
        ]
    # group deleted, or a clone replacing a whole queue map (B-34, B-35)
    if kind == RecordType.OFFSETS_REMOVED:
        return [
            OffsetChange(
                record["group"],
                topic,
                qid,
                old,
                -1,
                record.get("cause", ""),
                record.get("requester", ""),
                removed=True,
            )
            for topic, qid, old in record["entries"]
        ]
    if (
        kind == RecordType.SLAVE_OFFSETS_MERGED
    ):  # commits a slave took while the master was away (S-5)
        return [
            OffsetChange(group, topic, qid, old, new, "slave_merge", requester or "")
            for topic, group, qid, old, new, outcome, requester in record["queues"]
            if outcome == "applied"
        ]
    return []


# ---------------------------------------------------------------------- extractors


def _extra(record: Record, used: set[str]) -> str | None:
    rest = {k: v for k, v in record.items() if k not in used and k not in _COMMON_FIELDS}
    return to_json(rest) if rest else None


def _first(record: Record, *names: str, default: Any = None) -> Any:
    for name in names:
        if record.get(name) is not None:
            return record[name]
    return default


def _offsets(record: Record) -> list[Row]:
    used = {"group", "topic", "queue_id", "offset", "old", "cause", "requester"}
    extra = _extra(record, used) if record["type"] == RecordType.OFFSET_COMMITTED else None
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


def _resets(record: Record) -> list[Row]:
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
    row["extra"] = _extra(record, set(names))
    return [row]


def _topics(record: Record) -> list[Row]:
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
            "extra": _extra(record, {"topic", "old_perm", "perm", "cause", "requester", "config"}),
        }
    ]


def _groups(record: Record) -> list[Row]:
    config = record.get("config")
    return [
        {
            "group": record.get("group"),
            "cause": record.get("cause"),
            "requester": record.get("requester"),
            "config": to_json(config) if config is not None else None,
            "extra": _extra(record, {"group", "cause", "requester", "config"}),
        }
    ]


def _messages(record: Record) -> list[Row]:
    stored: MessagesStoredRecord = record  # type: ignore[assignment]
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
            "extra": _extra(
                record,
                {"topic", "queue_id", "queue_offset", "units", "producer_group", "requester"},
            ),
        }
    ]


def _deliveries(record: Record) -> list[Row]:
    view: MessagesDeliveredRecord = record  # type: ignore[assignment]
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
            "extra": _extra(
                record, {"group", "topic", "queue_id", "offset", "next_offset", "client", "offsets"}
            ),
        }
    ]


def _queries(record: Record) -> list[Row]:
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
    return [{**{n: record.get(n) for n in names}, "extra": _extra(record, set(names))}]


def _correction(**fields: Any) -> Row:
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


def _corrections(record: Record) -> list[Row]:
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
                    {
                        "group",
                        "topic",
                        "queue_id",
                        "status",
                        "offset",
                        "next_offset",
                        "min_offset",
                        "max_offset",
                        "client",
                    },
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
                    {"group", "topic", "queue_id", "current", "offset", "reason", "requester"},
                ),
            )
        ]
    # commitlog_expired: each corrected queue minimum, and what each group lost (B-18, S-11)
    extra = _extra(record, {"queues", "lost", "reason"})
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


def _send_backs(record: Record) -> list[Row]:
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
            "dead_letter": decision == "dlq" or bool(target and str(target).startswith(DLQ_PREFIX)),
            "reconsume_times": record.get("reconsume_times"),
            "delay_level": record.get("delay_level"),
            "msg_id": _first(record, "msg_id", "origin_msg_id"),
            "requester": _first(record, "requester", "client"),
            "extra": _extra(record, set(names)),
        }
    ]


def _dead_letters(record: Record) -> list[Row]:
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


def _queue_locks(record: Record) -> list[Row]:
    """queue_locks_changed: one row per queue whose owner changed."""
    extra = _extra(record, {"group", "client", "cause", "max_live_ms", "changes"})
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


def _acl_changes(record: Record) -> list[Row]:
    """acl_loaded: one row per account of the load (one row without an account when it has none)."""
    extra = _extra(
        record,
        {
            "listener",
            "version",
            "cause",
            "requester",
            "files",
            "data_version",
            "global_white",
            "salt_id",
            "accounts",
        },
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


def _access_denials(record: Record) -> list[Row]:
    """access_denied: one row per (who, host, code) of the summary."""
    extra = _extra(
        record, {"listener", "window_from", "window_to", "interval_s", "acl_version", "rows"}
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
    rows: list[Row], group: str, topic: str, queue_id: int, at: int, broker_name: str | None = None
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
                and row["cause"] in ("expired", "lock")
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


_BY_TYPE: dict[str, list[tuple[str, Callable[[Record], list[Row]]]]] = {
    RecordType.OFFSET_COMMITTED: [("offsets", _offsets)],
    RecordType.RESET_REQUESTED: [("resets", _resets), ("offsets", _offsets)],
    RecordType.TOPIC_UPDATED: [("topics", _topics)],
    RecordType.TOPIC_PERM_CHANGED: [("topics", _topics)],
    RecordType.TOPIC_DELETED: [("topics", _topics)],
    RecordType.SUBGROUP_UPDATED: [("groups", _groups)],
    RecordType.SUBGROUP_DELETED: [("groups", _groups)],
    RecordType.CONSUMER_GROUP_CHANGED: [("groups", _groups)],
    RecordType.MESSAGES_STORED: [("messages", _messages)],
    RecordType.MESSAGES_DELIVERED: [("deliveries", _deliveries)],
    RecordType.OFFSET_QUERIED: [("queries", _queries)],
    RecordType.PULL_OFFSET_MOVED: [("corrections", _corrections)],
    RecordType.OFFSET_COMMIT_IGNORED: [("corrections", _corrections)],
    RecordType.OFFSETS_REMOVED: [("offsets", _offsets)],
    RecordType.SLAVE_OFFSETS_MERGED: [("offsets", _offsets)],
    RecordType.COMMITLOG_EXPIRED: [("corrections", _corrections)],
    RecordType.QUEUE_LOCKS_CHANGED: [("queue_locks", _queue_locks)],
    RecordType.ACL_LOADED: [("acl_changes", _acl_changes)],
    RecordType.ACCESS_DENIED: [("access_denials", _access_denials)],
}


def rows_of(
    seq: int, record: Record, time: int, source: Source = DEFAULT_SOURCE
) -> Iterator[tuple[str, Row]]:
    """(family, row) for every row a record makes; each row has the common columns filled."""
    kind = record["type"]
    common = {
        "seq": seq,
        "ts": record.get("ts"),
        "time": time,
        "type": kind,
        "broker": str(record.get("broker") or source.broker),
        "role": str(record.get("role") or source.role),
    }
    claimed = False
    for family, extract in _BY_TYPE.get(kind, ()):
        for row in extract(record):
            claimed = True
            yield family, {**common, **row}
    if _is_send_back(kind):
        claimed = True
        for row in _send_backs(record):
            yield "send_backs", {**common, **row}
    if _is_dead_letter(kind, record):
        claimed = True
        for row in _dead_letters(record):
            yield "dead_letters", {**common, **row}
    if not claimed:
        yield "other", {**common, "body": to_json(record), "extra": None}


# every record, whatever its type: the generic table of the SQL read model, and the
# default view of the Spark data source
RECORDS = Family("records", (("v", "int"), ("body", "json")), "every record, as JSON")


def record_row(seq: int, record: Record, time: int, source: Source = DEFAULT_SOURCE) -> Row:
    """The generic row of a record."""
    return {
        "seq": seq,
        "ts": record.get("ts"),
        "time": time,
        "type": record["type"],
        "broker": str(record.get("broker") or source.broker),
        "role": str(record.get("role") or source.role),
        "v": record.get("v", 1),
        "body": to_json(record),
        "extra": None,
    }


# ---------------------------------------------------------------------- schemas


def arrow_schema(family: Family) -> pa.Schema:
    """The Parquet schema of a family (pyarrow is imported only here)."""
    import pyarrow as pa

    reset_queue = pa.struct(
        [
            ("queue_id", pa.int32()),
            ("current", pa.int64()),
            ("target", pa.int64()),
            ("final", pa.int64()),
            ("outcome", pa.string()),
        ]
    )
    types = {
        "long": pa.int64(),
        "int": pa.int32(),
        "string": pa.string(),
        "bool": pa.bool_(),
        "json": pa.string(),
        "longs": pa.list_(pa.int64()),
        "strings": pa.list_(pa.string()),
        "reset_queues": pa.list_(reset_queue),
    }
    return pa.schema([(name, types[kind]) for name, kind in family.all_columns])


SPARK_TYPES = {
    "long": "bigint",
    "int": "int",
    "string": "string",
    "bool": "boolean",
    "json": "string",
    "longs": "array<bigint>",
    "strings": "array<string>",
    "reset_queues": "array<struct<queue_id:int,current:bigint,target:bigint,final:bigint,"
    "outcome:string>>",
}


def spark_ddl(family: Family, *, with_day: bool = True) -> str:
    """The Spark schema of a family as a DDL string (plus the `day` partition column)."""
    cols = [f"`{name}` {SPARK_TYPES[kind]}" for name, kind in family.all_columns]
    if with_day:
        cols.append("`day` string")
    return ", ".join(cols)


# ---------------------------------------------------------------------- documentation

_KIND_DOC = {
    "long": "int64",
    "int": "int32",
    "string": "string",
    "bool": "boolean",
    "json": "string (JSON)",
    "longs": "list<int64>",
    "strings": "list<string>",
    "reset_queues": "list<struct<queue_id int32, current int64, target int64, final int64, "
    "outcome string>>",
}
_COLUMN_DOC = {
    "seq": "the record's sequence number in the log",
    "ts": "the record's broker time (ms since the epoch)",
    "time": "effective time (ms): the largest ts of this record and every record before it; equals ts while "
    "the broker clock never steps back",
    "type": "the record type",
    "broker": "broker name (the record's own, else the exporting broker's)",
    "role": "broker role (ASYNC_MASTER, SYNC_MASTER, SLAVE)",
    "extra": "the record's fields no column names, as JSON (null when none)",
}


def schema_markdown() -> str:
    """spark/SCHEMA.md: the Parquet export's datasets and columns (tests keep the file in sync)."""
    lines = [
        "# es-broker export: datasets and columns",
        "",
        "Generated from `es_broker/readmodel/families.py` (a test checks that this file is current).",
        "`es-broker export --data-dir D --out DIR` writes `DIR/<dataset>/day=YYYY-MM-DD/part-<seq>.parquet`;",
        '`day` is the UTC day of `time`. The Spark data source (`spark.read.format("es_broker")`) gives',
        'the same columns for `.option("family", <dataset>)`, plus `day`; its default family `records` has',
        "every record (`v`, `body` as JSON).",
        "",
        "A cluster's export root (`es-broker export --cluster`, every master and slave into one `--out`)",
        "adds two partitions above the day: `DIR/<dataset>/broker=<name>/node=<brokerId>/day=.../`; the",
        "Spark jobs read either layout and keep one node's rows of each (broker, seq), since a slave's log",
        "is its master's record for record (B-207).",
        "",
        "Every dataset starts with these columns and ends with `extra`:",
        "",
        "| column | type | meaning |",
        "|---|---|---|",
    ]
    for name, kind in (*COMMON, ("extra", "json")):
        lines.append(f"| `{name}` | {_KIND_DOC[kind]} | {_COLUMN_DOC[name]} |")
    for family in FAMILIES.values():
        lines += [
            "",
            f"## `{family.name}`",
            "",
            family.doc[0].upper() + family.doc[1:] + ".",
            "",
            "| column | type |",
            "|---|---|",
        ]
        lines += [f"| `{name}` | {_KIND_DOC[kind]} |" for name, kind in family.columns]
    return "\n".join(lines) + "\n"
