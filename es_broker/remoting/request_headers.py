"""Typed request headers (Java's CommandCustomHeader classes), written and read in one place.

`SendMessageRequestHeader` is the header of SEND_MESSAGE, SEND_MESSAGE_V2 and
SEND_BATCH_MESSAGE: V2 gives every field a one-letter name
(SendMessageRequestHeaderV2, docs/protocol.md §7.2.1), V1 the Java field name.
The producer and the admin write it with `v2_fields()`; the broker reads
either form with `read()`, field by field with the typed accessors' errors
(a missing or malformed field names its V1 name), with no copy of the
command: this is on the send path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Self

from .codes import RequestCode
from .command import RemotingCommand, ext_value_to_str, parse_integer
from .errors import MissingField

_Get = Callable[[str], str | None]
_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)

#: SEND_MESSAGE_V2 renames every header field to one letter (docs/protocol.md §7.2.1).
SEND_V2_FIELDS: Mapping[str, str] = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}
SEND_V1_FIELDS: Mapping[str, str] = {v1: v2 for v2, v1 in SEND_V2_FIELDS.items()}


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader:
    """The send header; None is a field left out of the frame.

    Fields are in the order the header is written (`maxReconsumeTimes`, only
    on a consumer's re-send to `%RETRY%`, goes last, as it always has).
    """

    producer_group: str | None = None
    topic: str = ""
    default_topic: str | None = None
    default_topic_queue_nums: int | None = None
    queue_id: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int | None = None  # required for a single message; a batch carries one per entry
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool | None = None
    batch: bool | None = None
    max_reconsume_times: int | None = None

    def v2_fields(self) -> dict[str, str]:
        """The SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE extFields: one-letter names, Java's text."""
        return self._fields(_V2_NAMES)

    def v1_fields(self) -> dict[str, str]:
        """The SEND_MESSAGE extFields: Java's field names."""
        return self._fields(_V1_NAMES)

    def _fields(self, names: tuple[str, ...]) -> dict[str, str]:
        out = {}
        for name, attr in zip(names, _ATTRS, strict=True):
            text = ext_value_to_str(getattr(self, attr))
            if text is not None:
                out[name] = text
        return out

    @classmethod
    def read(cls, cmd: RemotingCommand) -> Self:
        """The header of a SEND_MESSAGE (V1 names) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
        (one-letter names, a V1 name standing in for a missing letter).

        Raises `MissingField` / `BadField` naming the V1 field, as the typed accessors do.
        """
        fields = cmd.ext_fields
        names = _V1_NAMES
        if cmd.code != RequestCode.SEND_MESSAGE:
            if fields.keys() <= _V2_SET:
                names = _V2_NAMES  # the usual V2 header: read the letters where they are
            else:
                fields = {SEND_V2_FIELDS.get(k, k): v for k, v in fields.items()}
        get = fields.get
        (group, topic, default_topic, queue_nums, queue_id, sys_flag, born, flag, properties,
         reconsume, unit_mode, batch, max_reconsume) = names  # fmt: skip
        return cls(
            producer_group=get(group),
            topic=_required(get, topic, "topic"),
            default_topic=get(default_topic),
            default_topic_queue_nums=_int(get, queue_nums, "defaultTopicQueueNums", _I32),
            queue_id=parse_integer("queueId", _required(get, queue_id, "queueId"), _I32, "int"),
            sys_flag=parse_integer("sysFlag", _required(get, sys_flag, "sysFlag"), _I32, "int"),
            born_timestamp=parse_integer(
                "bornTimestamp", _required(get, born, "bornTimestamp"), _I64, "long"
            ),
            flag=_int(get, flag, "flag", _I32),
            properties=get(properties),
            reconsume_times=_int(get, reconsume, "reconsumeTimes", _I32),
            unit_mode=_bool(get, unit_mode),
            batch=_bool(get, batch),
            max_reconsume_times=_int(get, max_reconsume, "maxReconsumeTimes", _I32),
        )


_ATTRS = tuple(SendMessageRequestHeader.__dataclass_fields__)
_V1_NAMES = tuple(
    name.split("_")[0] + "".join(p.title() for p in name.split("_")[1:]) for name in _ATTRS
)
_V2_NAMES = tuple(SEND_V1_FIELDS[name] for name in _V1_NAMES)
_V2_SET = frozenset(_V2_NAMES)


def _required(get: _Get, wire_name: str, name: str) -> str:
    raw = get(wire_name)
    if raw is None:
        raise MissingField(name)
    return raw


def _int(get: _Get, wire_name: str, name: str, bounds: tuple[int, int]) -> int | None:
    raw = get(wire_name)
    if raw is None:
        return None
    return parse_integer(name, raw, bounds, "int" if bounds is _I32 else "long")


def _bool(get: _Get, name: str) -> bool | None:
    raw = get(name)
    return None if raw is None else raw.lower() == "true"
