"""es-broker's answers in Python's own JSON: the time-travel queries (9203..9207) and MESSAGE_TRACE.

These answers were always written by Python's json module, not fastjson:
fields in declared order, ", " and ": " separators, nulls written as null,
and the row fields under their Python names (`queue_id`, `max_offset`),
because the rows are what `es-broker offsets --at --json`, `history --json`
and `explain --json` print. The classes here keep those bytes exactly; a
field marked `_OMIT_NONE` is left out when None (a key the answer only had
sometimes). `decode` reads them back like any other body.

Also the ACL version header fields of GET_BROKER_CLUSTER_ACL_INFO, compact
JSON of each ACL file's dataVersion in the broker's file order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from .bean import Bean, field_specs
from .bodies import DataVersion
from .errors import BodyDecodeError
from .fastjson import loads

_OMIT_NONE: dict[str, Any] = {"omit_none": True}


class PythonJsonBean(Bean):
    """A body written by Python's json module: declared field order, nulls as null."""

    __slots__ = ()

    def __pyjson__(self) -> dict[str, Any]:
        """JSON name -> value in declared order; `_OMIT_NONE` fields only when set."""
        omit = _omitted(type(self))
        return {
            name: value
            for name, value in self.__fastjson__().items()
            if not (value is None and name in omit)
        }

    def encode(self, *, standard_json: bool = False) -> bytes:
        """Python's JSON (`standard_json` changes nothing: it always is)."""
        return json.dumps(self, default=_python_default).encode("utf-8")

    @classmethod
    def decode(cls, body: bytes | str) -> Self:
        """Parse with Python's json, which keeps the nulls of the open maps (a trace event's)."""
        return cls.from_json(_python_loads(body))


def _python_loads(body: bytes | str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BodyDecodeError(f"not JSON: {exc}") from None


def _python_default(value: Any) -> Any:
    if isinstance(value, PythonJsonBean):
        return value.__pyjson__()
    if isinstance(value, Bean):
        return value.__fastjson__()
    return str(value)  # what these answers always did with a value JSON cannot carry


_OMITTED: dict[type, frozenset[str]] = {}


def _omitted(cls: type) -> frozenset[str]:
    names = _OMITTED.get(cls)
    if names is None:
        from dataclasses import fields

        marked = {f.name for f in fields(cls) if f.metadata.get("omit_none")}
        names = frozenset(s.json_name for s in field_specs(cls) if s.name in marked)
        _OMITTED[cls] = names
    return names


# -- OFFSETS_AT (9203) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetAtRow(PythonJsonBean):
    """One row of the offset table at a moment, with the change that set it (B-133)."""

    __json_names__: ClassVar[str] = "python"

    group: str = ""
    topic: str = ""
    queue_id: int = 0
    offset: int = 0
    max_offset: int = 0
    lag: int | None = None
    seq: int = 0
    time: int = 0
    cause: str = ""
    requester: str = ""
    durable: int | None = None
    durable_lag: int | None = None


@dataclass(frozen=True, slots=True)
class OffsetsAtBody(PythonJsonBean):
    """OFFSETS_AT answer; `persist_tick` only when durable offsets were asked (None: no tick yet)."""

    at: int = 0
    group: str = ""
    topic: str | None = None
    source: str = ""
    queues: tuple[OffsetAtRow, ...] = ()
    position: int = 0
    durable: bool = False  # not on the wire: tells whether `persist_tick` is
    persist_tick: int | None = field(default=None, metadata={"json": "persist_tick"})

    def __pyjson__(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "at": self.at,
            "group": self.group,
            "topic": self.topic,
            "source": self.source,
            "queues": self.queues,
            "position": self.position,
        }
        if self.durable:
            out["persist_tick"] = self.persist_tick
        return out

    @classmethod
    def decode(cls, body: bytes | str) -> OffsetsAtBody:
        raw = _python_loads(body)
        if not isinstance(raw, dict):
            raise BodyDecodeError("OffsetsAtBody: expected an object")
        return cls.from_json(dict(raw, durable="persist_tick" in raw))


# -- OFFSET_HISTORY (9204) --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HistoryRow(PythonJsonBean):
    """An offset change, or a record about the group that explains changes (B-294)."""

    __json_names__: ClassVar[str] = "python"

    seq: int = 0
    time: int = 0
    ts: int = 0
    group: str = ""
    topic: str = ""
    kind: str = ""
    queue_id: int | None = None
    old: int | None = None
    new: int | None = None
    cause: str = ""
    requester: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OffsetHistoryBody(PythonJsonBean):
    """OFFSET_HISTORY answer: the newest entries of the window, oldest first; `more`: older ones exist."""

    group: str = ""
    topic: str | None = None
    since: int | None = None
    until: int | None = None
    more: bool = False
    entries: tuple[HistoryRow, ...] = ()


# -- OFFSET_TIMELINE (9205) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimelineSample(PythonJsonBean):
    """The group's offset table at one moment, summed over its queues."""

    __json_names__: ClassVar[str] = "python"

    at: int = 0
    position: int = 0
    offset: int = 0
    max_offset: int = 0
    lag: int = 0
    queues: int = 0


@dataclass(frozen=True, slots=True)
class TimelineQueue(PythonJsonBean):
    """One queue's offsets, max offsets and lags at the sample moments (None: no offset then, B-292)."""

    __json_names__: ClassVar[str] = "python"

    topic: str = ""
    queue_id: int = 0
    offsets: tuple[int | None, ...] = ()
    max_offsets: tuple[int, ...] = ()
    lags: tuple[int | None, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetTimelineBody(PythonJsonBean):
    """OFFSET_TIMELINE answer."""

    group: str = ""
    topic: str | None = None
    since: int | None = None
    until: int | None = None
    samples: tuple[TimelineSample, ...] = ()
    queues: tuple[TimelineQueue, ...] = ()
    events: tuple[HistoryRow, ...] = ()
    more_events: bool = False


# -- EXPLAIN_GROUP (9206) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueExplanationRow(PythonJsonBean):
    """How one queue's offset came to be: the start the broker answered and the commits since."""

    __json_names__: ClassVar[str] = "python"

    queue_id: int = 0
    current_offset: int = 0
    start: dict[str, Any] | None = None
    first_change: dict[str, Any] | None = None
    latest_change: dict[str, Any] | None = None
    changes: int = 0


@dataclass(frozen=True, slots=True)
class ExplainBody(PythonJsonBean):
    """EXPLAIN_GROUP answer, as `es-broker explain --json` prints it."""

    __json_names__: ClassVar[str] = "python"

    group: str = ""
    topic: str = ""
    consume_from_where: str | None = None
    clients: tuple[str, ...] = ()
    queues: tuple[QueueExplanationRow, ...] = ()


# -- ACCOUNT_SCOPE (9207) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceScope(PythonJsonBean):
    """What the calling account may do with one topic or group (B-290)."""

    perm: str = ""
    visible: bool = False


@dataclass(frozen=True, slots=True)
class AccountScopeBody(PythonJsonBean):
    """ACCOUNT_SCOPE answer; `topics`/`groups` keep the broker's (sorted) order."""

    acl_enabled: bool = False
    access_key: str | None = None
    admin: bool = False
    everything: bool = False
    reason: str = ""
    topics: dict[str, ResourceScope] = field(default_factory=dict)
    groups: dict[str, ResourceScope] = field(default_factory=dict)


# -- MESSAGE_TRACE (9202) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceHop(PythonJsonBean):
    """One stored copy of the message; the fields read from its body only while it is kept."""

    msg_id: str | None = None
    physical_offset: int = 0
    topic: str = ""
    queue_id: int = 0
    queue_offset: int = 0
    store_timestamp: int = 0
    seq: int = 0
    body_available: bool = False
    reconsume_times: int = 0
    uniq_key: str | None = None
    tags: str | None = None
    keys: str = ""
    born_timestamp: int = 0
    born_host: str = ""
    store_host: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    _FROM_BODY: ClassVar[tuple[str, ...]] = (
        "reconsumeTimes",
        "uniqKey",
        "tags",
        "keys",
        "bornTimestamp",
        "bornHost",
        "storeHost",
        "properties",
    )

    def __pyjson__(self) -> dict[str, Any]:
        out = self.__fastjson__()
        if not self.body_available:
            for name in self._FROM_BODY:
                del out[name]
        return out


@dataclass(frozen=True, slots=True)
class MessageTraceBody(PythonJsonBean):
    """MESSAGE_TRACE answer: the hops and every event of the journey, in log order.

    The events keep the journey's own shape (`es_broker.commands.trace`): each
    kind of event has its own fields, in the order the journey wrote them.
    """

    msg_id: str = ""
    found: bool = False
    hops: tuple[TraceHop, ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    # the clients' own trace contexts of the message, from the trace topic (B-483); None (left out
    # of the body) when no client with message trace on wrote any
    client_trace: tuple[dict[str, Any], ...] | None = field(default=None, metadata=_OMIT_NONE)

    @classmethod
    def from_journey(cls, journey: dict[str, Any]) -> MessageTraceBody:
        """The answer for `es_broker.commands.trace.journey`'s result."""
        return cls(
            msg_id=journey["msgId"],
            found=journey["found"],
            hops=tuple(TraceHop.from_json(hop) for hop in journey["hops"]),
            events=tuple(journey["events"]),
            client_trace=tuple(journey.get("clientTrace", ())) or None,
        )


# -- GET_BROKER_CLUSTER_ACL_INFO header fields ------------------------------------------------


@dataclass(frozen=True, slots=True)
class AclFileVersions:
    """`allAclFileVersion`: each ACL file's dataVersion, in the broker's file order, compact JSON."""

    versions: dict[str, DataVersion] = field(default_factory=dict)

    def encode(self) -> str:
        """The header text."""
        return json.dumps(
            {path: _version_json(v) for path, v in self.versions.items()}, separators=(",", ":")
        )

    @classmethod
    def decode(cls, text: str | None) -> AclFileVersions:
        """Read the header text (absent: no files)."""
        raw = loads(text or "{}")
        if not isinstance(raw, dict):
            raise BodyDecodeError("allAclFileVersion: expected an object")
        return cls({str(path): DataVersion.from_json(v, path) for path, v in raw.items()})


def _version_json(version: DataVersion) -> dict[str, int]:
    return {"counter": version.counter, "timestamp": version.timestamp}


def acl_version_text(version: DataVersion) -> str:
    """The `version` header: the default ACL file's dataVersion, compact JSON."""
    return json.dumps(_version_json(version), separators=(",", ":"))


def read_acl_version(text: str | None) -> DataVersion:
    """Read the `version` header (absent: the zero version)."""
    return DataVersion.decode(text or "{}")
