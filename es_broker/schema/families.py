"""The read model's schema: the row families shared by the SQL read model, the Parquet export and Spark.

A *family* is a set of rows with one schema (offset changes, resets, topic
changes, ...); `FAMILIES` names them and their columns, and this module gives
their Arrow and Spark schemas and spark/SCHEMA.md. Which rows a record makes is
`es_broker.schema.rows`; a record no family claims becomes a row of
`other`, so record types added later are kept too (their fields as JSON),
and every row keeps the fields its columns do not name in `extra`.

Common columns of every family: `seq`, `ts` (the record's broker time),
`time` (its effective time, see `RunningTime`), `type`, `broker`, `role`.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from es_broker.config import BrokerRole

COMMON = (
    ("seq", "long"),
    ("ts", "long"),
    ("time", "long"),
    ("type", "string"),
    ("broker", "string"),
    ("role", "string"),
)


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
    role: str = BrokerRole.ASYNC_MASTER
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

#: a read-model row: column name -> value
Row = dict[str, Any]

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


_CONTAINERS = (dict, list, tuple)
_SEQUENCES = (list, tuple)


def _str_keys_only(value: Any) -> bool:
    """True when every map key in `value`, at any depth of its dicts, lists and tuples, is text."""
    if isinstance(value, dict):
        try:
            "".join(value)  # in C: a TypeError at the first key that is not a str
        except TypeError:
            return False
        items: Any = value.values()
    elif isinstance(value, _SEQUENCES):
        items = value
    else:
        return True
    for item in items:  # noqa: SIM110 (a loop, not all(): no generator on the follower's hot path)
        if isinstance(item, _CONTAINERS) and not _str_keys_only(item):
            return False
    return True


# one encoder for every call: json.dumps would build one per call for these options
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_b64)
_PLAIN_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))

# orjson writes what json writes for these options except: text outside ASCII (json escapes it,
# orjson writes UTF-8), DEL (json escapes it) and floats below 1e-4 (json "1e-05", orjson
# "0.00001"; json "1.5e-07", orjson "1.5e-7"). Its text is taken only when none of those can be
# in it; a string that merely looks so costs json's encoder, never other text. (A search of
# text for a fixed string is ~10x cheaper than a regular expression of alternatives. The text is
# searched, not orjson's bytes: CPython's `bytes in bytes` first tries its operand as an int and
# raises and clears a TypeError each time, ~2k instructions a search.)
_ORJSON_OPTIONS = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)
_SHORT_EXPONENT = re.compile(r"e-[0-9](?![0-9])")


def _as_json_writes(text: str) -> bool:
    """True if json's encoder would have written `text`, orjson's output, too."""
    if not text.isascii() or "\x7f" in text or "0.0000" in text:
        return False
    # a text without "-" has no "e-": one character is searched with memchr, ~5x faster than two
    # (a record's text has an "e" every few characters; "-" is rare: a negative number, a name)
    return "-" not in text or "e-" not in text or _SHORT_EXPONENT.search(text) is None


def to_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces, non-ASCII escaped); bytes become {"$b64": ...}.

    orjson writes a record (every map key text, no float below 1e-4, printable ASCII text) as
    json's encoder does, at a fraction of its cost; whatever it refuses (a key that is not
    text, an int beyond 64 bits) or may write differently goes to json's encoder, and a value
    with keys that are not text is rebuilt by `_jsonable` first (keys made text, then sorted
    as text). Every path gives the same text for the same value (tests/test_json_text.py),
    but for a float that is not finite, which no record holds (`records.check`): orjson
    writes null, valid JSON, where json's encoder writes NaN or Infinity.
    """
    try:
        raw = orjson.dumps(value, default=_b64, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        pass
    else:
        text = raw.decode()  # orjson writes UTF-8; ASCII (the kept case) decodes in one copy
        if _as_json_writes(text):
            return text
    if _str_keys_only(value):
        try:
            return _ENCODER.encode(value)
        except (TypeError, ValueError):
            pass
    return _PLAIN_ENCODER.encode(_jsonable(value))


def from_json(text: str) -> Any:
    def hook(obj: dict[str, Any]) -> Any:
        return base64.b64decode(obj["$b64"]) if obj.keys() == {"$b64"} else obj

    return json.loads(text, object_hook=hook)


# every record, whatever its type: the generic table of the SQL read model, and the
# default view of the Spark data source
RECORDS = Family("records", (("v", "int"), ("body", "json")), "every record, as JSON")

# ---------------------------------------------------------------------- schemas


def arrow_schema(family: Family) -> Any:
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
        "Generated from `es_broker/schema/families.py` (a test checks that this file is current).",
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
