"""The machinery of the typed records: a frozen, slotted class per record type and version.

A class holds what was decided; `to_record(ts)` stamps it with the broker time and
gives the record exactly as the log has always stored it (same keys, same order,
hence the same msgpack bytes), checked by `records.check`. `parse(record)` turns a
record read from the log (already upcast to the current version) back into its class.
The classes themselves are in `types.py`.

Field rules, read by `_generate`:
- every field is keyword-only, in the order the record stores it;
- a field whose default is None is left out of the record while it is None (a record
  that never held that key reads back as None); a field without a default is always
  written, None included;
- `ORDERS` lists other key orders some writers have always used for a set of keys:
  when the keys present are exactly one of them, the record takes that order.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, ClassVar, TypeVar, get_type_hints

from es_broker import compiled
from es_broker.log.records import Record, check
from es_broker.log.vocabulary import RecordType

T = TypeVar("T", bound="TypedRecord")

_CLASSES: dict[str, type[TypedRecord]] = {}


class TypedRecord:
    """Base of the record classes; `to_record` and `from_record` are generated per class."""

    __slots__ = ()
    TYPE: ClassVar[RecordType]
    VERSION: ClassVar[int] = 1
    ORDERS: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def to_record(self, ts: int) -> Record:
        """The record as the log stores it, decided at broker time `ts` (ms); checked."""
        raise NotImplementedError

    @classmethod
    def from_record(cls: type[T], record: Record) -> T:
        """The typed form of a current-version record of this class' type."""
        raise NotImplementedError


def parse(record: Record) -> TypedRecord:
    """The typed form of a record read from the log (upcast already by `records.unpack`)."""
    kind = record["type"]
    cls = _CLASSES.get(kind)
    if cls is None:
        raise ValueError(f"unknown record type {kind!r}")
    if record["v"] != cls.VERSION:
        raise ValueError(f"record {kind} version {record['v']} has no upcaster to {cls.VERSION}")
    return cls.from_record(record)


def typed(cls: type[T]) -> type[T]:
    """Register a record class and generate its encoder and decoder."""
    if cls.TYPE in _CLASSES:
        raise TypeError(f"two classes for record type {cls.TYPE}")
    _generate(cls)
    _CLASSES[cls.TYPE] = cls
    return cls


def _generate(cls: type[TypedRecord]) -> None:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    hints = {n: _enum_of(h) for n, h in get_type_hints(cls).items()}
    names = [f.name for f in fields]
    optional = {f.name for f in fields if f.default is None}
    # an enum is written as its text, so a live projection sees what a replay will read
    value = {n: f"str(self.{n})" if _is_enum(hints[n]) else f"self.{n}" for n in names}
    # the keys up to the first optional one in a literal, then one statement per key
    first = min((names.index(n) for n in optional), default=len(names))
    lead = "".join(f'"{n}": {value[n]}, ' for n in names[:first])
    lines = [
        "def to_record(self, ts):",
        f'    r = {{"type": "{cls.TYPE.value}", "v": {cls.VERSION}, "ts": ts, {lead}}}',
    ]
    for n in names[first:]:
        if n in optional:
            lines.append(f"    if self.{n} is not None:")
            lines.append(f'        r["{n}"] = {value[n]}')
        else:
            lines.append(f'    r["{n}"] = {value[n]}')
    if cls.ORDERS:
        lines.append("    r = _reorder(r, ORDERS)")
    lines.append("    return check(r)")
    converters: dict[str, Any] = {}
    args = []
    for n in names:
        hint = hints[n]
        read = f'record.get("{n}")' if n in optional else f'record["{n}"]'
        if _is_enum(hint):
            converters[f"_{n}"] = hint
            read = f"_{n}({read})" if n not in optional else f"_opt(_{n}, {read})"
        args.append(f"{n}={read}")
    decoder = [
        "def from_record(cls, record):",
        "    extra = record.keys() - KNOWN",
        "    if extra:",
        "        raise ValueError(f\"record {record['type']} holds unknown fields {sorted(extra)}\")",
        f"    return cls({', '.join(args)})",
    ]
    # a frozen dataclass sets each field through object.__setattr__; the slots' own setters
    # do the same work in a fraction of the instructions, and records are built per request;
    # the compiled `fill` sets them all in one call
    params = ", ".join(f"{n}=None" if n in optional else n for n in names)
    init = [f"def __init__(self, *, {params}):"]
    if fill is not REFERENCE["fill"] and names:
        init.append(f"    _fill(self, MEMBERS, ({''.join(f'{n}, ' for n in names)}))")
    else:  # `fill`'s loop in the generated code, a pre-bound setter a field
        init += [f"    _set_{n}(self, {n})" for n in names] or ["    pass"]
    setters = {f"_set_{n}": cls.__dict__[n].__set__ for n in names}
    namespace: dict[str, Any] = {
        **setters,
        "_fill": fill,
        "MEMBERS": tuple(cls.__dict__[n] for n in names),
        "check": check,
        "ORDERS": cls.ORDERS,
        "_reorder": _reorder,
        "_opt": _opt,
        "KNOWN": frozenset(["type", "v", "ts", *names]),
        **converters,
    }
    source = "\n\n".join("\n".join(part) for part in (lines, decoder, init))
    exec(source, namespace)  # noqa: S102 - generated from field names only
    namespace["to_record"].__qualname__ = f"{cls.__qualname__}.to_record"
    cls.to_record = namespace["to_record"]  # type: ignore[method-assign]
    namespace["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = namespace["__init__"]  # type: ignore[method-assign]
    cls.from_record = classmethod(namespace["from_record"])  # type: ignore[assignment]


def fill(obj: object, members: tuple[Any, ...], values: tuple[Any, ...]) -> None:
    """Set each slot of `members` (a slotted class' member descriptors) on obj to the value at
    its place in `values`, in order: what a frozen record class' `__init__` does (its own
    `__setattr__` refuses)."""
    for member, value in zip(members, values, strict=True):
        member.__set__(obj, value)


# the pure-Python function that has a compiled twin (es_broker/log/_speedups.pyx)
REFERENCE = {"fill": fill}


def _enum_of(hint: Any) -> Any:
    """The enum class of `E` or `E | None`, else the hint itself."""
    for arg in typing.get_args(hint) or (hint,):
        if _is_enum(arg):
            return arg
    return hint


def _is_enum(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, enum.Enum)


def _opt(kind: type[enum.Enum], value: Any) -> Any:
    return None if value is None else kind(value)


def _reorder(record: Record, orders: tuple[tuple[str, ...], ...]) -> Record:
    keys = set(record) - {"type", "v", "ts"}
    for order in orders:
        if keys == set(order):
            out = {"type": record["type"], "v": record["v"], "ts": record["ts"]}
            for key in order:
                out[key] = record[key]
            return out
    return record


def unregistered_types() -> set[RecordType]:
    """The record types no class was registered for (none, once `types.py` is imported)."""
    return set(RecordType) - set(_CLASSES)


compiled.install(globals(), "es_broker.log._speedups", "fill")
