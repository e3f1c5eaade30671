"""How a request header class declares its fields, and the one reader that decodes them.

A request or response header is a frozen dataclass (headers.py, es_headers.py,
response_headers.py), one per CommandCustomHeader shape of RocketMQ 4.9.8. Each field says its rule once, next to itself, through
the constructors here (`text`, `i32`, `i64`, `boolean`, ...): the Java type, whether
the frame must carry it, its range, length, choices or form, and its Java name
when that is not the attribute's camelCase (`clientID`) or the one-letter name
SEND_MESSAGE_V2 gives it on the wire (`v2="b"`).

Reading a header (`read_fields`) is its shape check: a field that breaks its rule
raises the `CommandError` whose text is the remark RocketMQ's refusal carries
(B-135..B-139); requests.py prefixes the request's name and answers SYSTEM_ERROR.
Writing one (`CustomHeader.to_fields`) gives Java's text of every field set.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Self

from .command import ext_value_to_str
from .errors import BadField, CommandError, MissingField

if TYPE_CHECKING:
    from .command import RemotingCommand

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
# The longest text a name field may hold: RocketMQ's CHARACTER_MAX_LENGTH (Validators) is 255;
# other text fields (properties, subscription expressions) are bounded by the frame.
NAME_MAX = 255
TEXT_MAX = 1 << 20

#: An offset message id: the store host (IPv4 and port) and the physical offset, in hex
#: (MessageDecoder#createMessageId); decodeMessageId throws on anything else, answered SYSTEM_ERROR.
#: es-broker's brokers store IPv4 hosts, so their ids are 32 digits.
OFFSET_MSG_ID = re.compile(r"[0-9A-Fa-f]{32}")


class Kind(Enum):
    """The Java type of a header field."""

    STR = "String"
    INT = "int"
    LONG = "long"
    BOOL = "boolean"


class FieldRefused(CommandError):
    """A header field is present and of its type but breaks its declared rule (blank, too long,
    out of range, not one of its choices, not of its form)."""


@dataclass(frozen=True, slots=True)
class HeaderField:
    """One extField of a request header, as its CommandCustomHeader declares it.

    `name` is the Java field name (the V1 name, the one every remark uses), `attr` the
    Python attribute of the header class, `v2` the one-letter SEND_MESSAGE_V2 name.
    """

    name: str
    kind: Kind
    required: bool = False
    min: int | None = None
    max: int | None = None
    max_len: int = NAME_MAX
    choices: frozenset[str] | None = None
    pattern: re.Pattern[str] | None = None  # text fields of a fixed form (message ids)
    form: str = ""  # what the pattern means, for the remark
    attr: str = ""
    v2: str | None = None

    def parse(self, raw: str) -> str | int | bool:
        """`raw` as this field's value; raises the `CommandError` that is the refusal's remark."""
        kind = self.kind
        if kind is Kind.STR:
            # a blank name is as unusable as a missing one (TopicValidator: "blank")
            if not raw and self.required:
                raise FieldRefused(f"header field {self.name!r} is blank")
            if len(raw) > self.max_len:
                raise FieldRefused(
                    f"header field {self.name!r} is longer than {self.max_len} characters"
                )
            if self.pattern is not None and not self.pattern.fullmatch(raw):
                raise FieldRefused(f"header field {self.name!r} is not {self.form}: {raw[:40]!r}")
            if self.choices is not None and raw not in self.choices:
                raise FieldRefused(
                    f"header field {self.name!r} must be one of "
                    f"{', '.join(sorted(self.choices))}, got {raw[:40]!r}"
                )
            return raw
        if kind is Kind.BOOL:
            return raw.lower() == "true"  # Boolean.parseBoolean: "true" in any case, else false
        if not (raw.isascii() and raw.isdigit()) and not _JAVA_INTEGER.fullmatch(raw):
            raise BadField(self.name, raw[:40], kind.value)
        value = int(raw)
        lo, hi = INT32 if kind is Kind.INT else INT64
        if not lo <= value <= hi:
            raise FieldRefused(
                f"header field {self.name!r} is out of the range of a Java {kind.value}: {raw[:40]}"
            )
        if self.min is not None and value < self.min or self.max is not None and value > self.max:
            bounds = f">= {self.min}" if self.max in (None, hi) else f"in [{self.min}, {self.max}]"
            raise FieldRefused(f"header field {self.name!r} must be {bounds}, got {value}")
        return value


# -- field constructors: what a header class writes next to each field ------------------------

_RULE = "rule"


def _declare(rule: HeaderField, default: Any) -> Any:
    if default is dataclasses.MISSING and not rule.required:
        default = None  # an optional field left out of the frame
    return dataclasses.field(default=default, metadata={_RULE: rule})


def text(
    required: bool = False,
    *,
    max_len: int = NAME_MAX,
    choices: frozenset[str] | None = None,
    name: str = "",
    v2: str | None = None,
    default: Any = dataclasses.MISSING,
) -> Any:
    """A String field (`name`: its Java name when not the attribute's camelCase)."""
    rule = HeaderField(name, Kind.STR, required, max_len=max_len, choices=choices, v2=v2)
    return _declare(rule, default)


def offset_msg_id(name: str = "") -> Any:
    """A required offset message id (32 hex digits)."""
    rule = HeaderField(
        name, Kind.STR, True, pattern=OFFSET_MSG_ID, form="an offset message id (32 hex digits)"
    )
    return _declare(rule, dataclasses.MISSING)


def i32(
    required: bool = False,
    *,
    min: int = INT32[0],
    max: int = INT32[1],
    name: str = "",
    v2: str | None = None,
    default: Any = dataclasses.MISSING,
) -> Any:
    """A Java int field, within [min, max]."""
    return _declare(HeaderField(name, Kind.INT, required, min=min, max=max, v2=v2), default)


def i64(
    required: bool = False,
    *,
    min: int = INT64[0],
    max: int = INT64[1],
    name: str = "",
    v2: str | None = None,
    default: Any = dataclasses.MISSING,
) -> Any:
    """A Java long field, within [min, max]."""
    return _declare(HeaderField(name, Kind.LONG, required, min=min, max=max, v2=v2), default)


def boolean(*, name: str = "", v2: str | None = None, default: Any = dataclasses.MISSING) -> Any:
    """An optional Java boolean field (Boolean.parseBoolean: never malformed); `default`: a Java
    primitive, always written."""
    return _declare(HeaderField(name, Kind.BOOL, False, v2=v2), default)


def queue_id(required: bool = True) -> Any:
    """A queue id: an int >= 0 (PullMessageProcessor: "queueId[%d] is illegal")."""
    return i32(required, min=0)


def physical_offset() -> Any:
    """A commit-log offset: a required long >= 0."""
    return i64(True, min=0)


# -- the header classes' base -----------------------------------------------------------------

_RULES: dict[type, tuple[HeaderField, ...]] = {}


def _java_name(attr: str) -> str:
    head, *rest = attr.split("_")
    return head + "".join(part.title() for part in rest)


# per class: the attributes, their Java names, their wire names with the V2 letters
_WRITES: dict[type, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {}


def _write_plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    rules = rules_of(cls)
    plan = (
        tuple(rule.attr for rule in rules),
        tuple(rule.name for rule in rules),
        tuple(rule.v2 or rule.name for rule in rules),
    )
    _WRITES[cls] = plan
    return plan


def _text_of(value: Any) -> str:
    """Java's text of a header value: what `to_fields` writes for a field that is set."""
    kind = type(value)
    if kind is str:
        return str(value)
    if kind is int:
        return str(value)
    if kind is bool:
        return "true" if value else "false"
    return ext_value_to_str(value) or ""


_Writer = Callable[[Any], dict[str, str]]
_WRITERS: dict[tuple[type, bool], _Writer] = {}


def _writer(cls: type, v2: bool) -> _Writer:
    """The function writing a header of `cls` as extFields (under the one-letter names if `v2`).

    Generated once per class, as dataclasses generates `__init__`: a statement per field, in
    the declared order, in place of a loop over the fields with a lookup each, since every
    request and answer is written through it. A field set to a str is written as it is, any
    other value as `_text_of` says; a field left None is left out.
    """
    _, names, v2_names = _WRITES.get(cls) or _write_plan(cls)
    # the declared kind's value written inline; any other value (an enum, a str in a number's
    # field) as `_text_of` writes it, which is what this field's kind would get if it held it
    inline = {
        Kind.STR: "value if type(value) is str",
        Kind.INT: "str(value) if type(value) is int",
        Kind.LONG: "str(value) if type(value) is int",
        Kind.BOOL: '("true" if value else "false") if type(value) is bool',
    }
    lines = ["def write(self):", "    out = {}"]
    for rule, name in zip(rules_of(cls), v2_names if v2 else names, strict=True):
        lines += [
            f"    value = self.{rule.attr}",
            "    if value is not None:",
            f"        out[{name!r}] = {inline[rule.kind]} else text_of(value)",
        ]
    lines.append("    return out")
    namespace: dict[str, Any] = {"text_of": _text_of}
    exec("\n".join(lines), namespace)  # the source holds only the class's own field names
    write: _Writer = namespace["write"]
    _WRITERS[(cls, v2)] = write
    return write


def rules_of(cls: type) -> tuple[HeaderField, ...]:
    """The declared fields of a header class, in the order they are written, with their names."""
    rules = _RULES.get(cls)
    if rules is None:
        rules = tuple(
            dataclasses.replace(
                f.metadata[_RULE], name=f.metadata[_RULE].name or _java_name(f.name), attr=f.name
            )
            for f in dataclasses.fields(cls)
        )
        _RULES[cls] = rules
    return rules


class CustomHeader:
    """Base of the typed headers (Java's CommandCustomHeader), of requests and of responses: frozen
    slotted dataclasses whose construction from a command is their shape check."""

    __slots__ = ()

    @classmethod
    def uses_v2_names(cls, code: int) -> bool:
        """True if requests of `code` carry this header under the fields' one-letter names."""
        return False

    @classmethod
    def of(cls, cmd: RemotingCommand) -> Self:
        """The header of `cmd`: the one the server decoded at the edge, or decoded now.

        Raises the `CommandError` naming the first field that breaks its rule (a request the
        server's dispatch checked never does).
        """
        if type(cmd.header) is cls:
            return cmd.header
        rules = rules_of(cls)
        names = (_WRITES.get(cls) or _write_plan(cls))[1]
        fields = cmd.ext_fields
        if cls.uses_v2_names(cmd.code):
            renames = {rule.v2: rule.name for rule in rules if rule.v2 is not None}
            fields = {renames.get(k, k): v for k, v in fields.items()}
        return cls(**read_fields(rules, fields, names))

    def to_fields(self, code: int | None = None) -> dict[str, str]:
        """The extFields that carry this header: Java's text of every field set, under its Java
        name (its one-letter name when requests of `code` use those: SEND_MESSAGE_V2)."""
        v2 = code is not None and self.uses_v2_names(code)
        write = _WRITERS.get((type(self), v2)) or _writer(type(self), v2)
        return write(self)


@dataclass(frozen=True, slots=True)
class NoHeader(CustomHeader):
    """The header of a request whose code declares no fields (RocketMQ's null custom header)."""


NO_HEADER = NoHeader()


def read_fields(
    rules: tuple[HeaderField, ...], fields: Mapping[str, str], names: tuple[str, ...]
) -> dict[str, Any]:
    """The values of `rules` in `fields` (each under the name at the same place in `names`), by
    attribute: what a header class is built from. Fields left out are left out.

    Raises `MissingField`, `BadField` or `FieldRefused` for the first field that breaks its rule.
    """
    values: dict[str, Any] = {}
    for rule, name in zip(rules, names, strict=True):
        raw = fields.get(name)
        if raw is None:
            if rule.required:
                raise MissingField(rule.name)
            continue
        values[rule.attr] = rule.parse(raw)
    return values


__all__ = [
    "INT32",
    "INT64",
    "NAME_MAX",
    "NO_HEADER",
    "OFFSET_MSG_ID",
    "TEXT_MAX",
    "FieldRefused",
    "HeaderField",
    "Kind",
    "NoHeader",
    "CustomHeader",
    "boolean",
    "i32",
    "i64",
    "offset_msg_id",
    "physical_offset",
    "queue_id",
    "read_fields",
    "rules_of",
    "text",
]
