"""Bean: what makes a frozen dataclass a fastjson body (docs/protocol.md §9).

`encode()` writes what Java's fastjson writes (fields sorted, nulls omitted,
numeric and object map keys per section 9.1); `decode(body)` reads what Java or
ali-ons send, tolerant the way fastjson is: unknown keys are ignored, missing or
null fields take the Java default, numbers may arrive as strings and map keys as
quoted text (the BrowserCompatible form); anything else raises `BodyDecodeError`.
The bodies themselves are in `bodies.py`, `admin_bodies.py`, `query_bodies.py`
and `stats_bodies.py`.
"""

from __future__ import annotations

import contextlib
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self, TypeVar

from .command import ext_value_to_str
from .errors import BodyDecodeError
from .fastjson import ObjectKey, dumps, loads

_Converter = Callable[[Any, str], Any]
_B = TypeVar("_B", bound="Bean")


class Bean:
    """Mixin giving a frozen dataclass fastjson encoding and tolerant decoding."""

    __slots__ = ()
    _specs: ClassVar[dict[type, tuple[_FieldSpec, ...]]] = {}

    def __fastjson__(self) -> dict[str, Any]:
        """The Java bean view: JSON name -> value (None values are omitted on output)."""
        return {spec.json_name: getattr(self, spec.name) for spec in field_specs(type(self))}

    def encode(self, *, standard_json: bool = False) -> bytes:
        """The body bytes; `standard_json` quotes non-string keys (BrowserCompatible)."""
        return encode_bean(self, standard_json)

    @classmethod
    def decode(cls, body: bytes | str) -> Self:
        """Parse a body; raises `BodyDecodeError`."""
        return cls.from_json(loads(body))

    @classmethod
    def from_json(cls, value: Any, path: str = "") -> Self:
        """Build from an already parsed JSON object (a dict)."""
        return bean_from_json(cls, value, path)


# Module functions rather than super() calls: zero-argument super() does not
# work in methods of slots=True dataclasses, which are re-created classes.


def encode_bean(bean: Bean, standard_json: bool) -> bytes:
    return dumps(bean, browser_compatible=standard_json).encode("utf-8")


def bean_from_json(cls: type[_B], value: Any, path: str) -> _B:
    path = path or cls.__name__
    if not isinstance(value, Mapping):
        raise BodyDecodeError(f"{path}: expected an object, got {_json_kind(value)}")
    kwargs = {}
    for spec in field_specs(cls):
        raw = value.get(spec.json_name)
        for alias in spec.aliases:
            if raw is None:
                raw = value.get(alias)
        if raw is not None:
            kwargs[spec.name] = spec.convert(raw, f"{path}.{spec.json_name}")
    return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    json_name: str
    aliases: tuple[str, ...]
    convert: _Converter


def field_specs(cls: type) -> tuple[_FieldSpec, ...]:
    cached = Bean._specs.get(cls)
    if cached is None:
        hints = typing.get_type_hints(cls)
        camel = (
            getattr(cls, "__json_names__", "camel") == "camel"
        )  # "python": field names as they are
        cached = tuple(
            _FieldSpec(
                name=f.name,
                json_name=f.metadata.get("json", _camel(f.name) if camel else f.name),
                aliases=tuple(f.metadata.get("aliases", ())),
                convert=converter(hints[f.name]),
            )
            for f in fields(cls)
        )
        Bean._specs[cls] = cached
    return cached


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _json_kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return repr(value)


# -- converters: parsed JSON value -> field value ------------------------------------


def converter(tp: Any) -> _Converter:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return lambda raw, path: raw
    if origin in (types.UnionType, typing.Union):
        inner = converter(next(arg for arg in args if arg is not type(None)))
        return lambda raw, path: None if raw is None else inner(raw, path)
    if origin is tuple:
        return _tuple_converter(converter(args[0]))
    if origin is dict and args[1] is Any:
        return _open_map_converter(_key_converter(args[0]))
    if origin is dict:
        return _dict_converter(_key_converter(args[0]), converter(args[1]))
    if isinstance(tp, type) and issubclass(tp, Bean):
        return tp.from_json
    simple = {int: to_int, float: _to_float, bool: _to_bool, str: _to_str}.get(tp)
    if simple is None:
        raise TypeError(f"no fastjson converter for {tp!r}")
    return simple


_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def to_int(raw: Any, path: str) -> int:
    value: int | None = None
    if type(raw) is int:
        value = raw
    elif isinstance(raw, bool) or isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str):
        with contextlib.suppress(ValueError):
            value = int(raw.strip())
    if value is None:
        raise BodyDecodeError(f"{path}: expected an integer, got {_json_kind(raw)}")
    # Java's widest integer is a long: fastjson refuses anything beyond it
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise BodyDecodeError(f"{path}: {str(value)[:40]} is out of the range of a Java long")
    return value


def _to_float(raw: Any, path: str) -> float:
    if isinstance(raw, int | float | str) and not isinstance(raw, bool):
        try:
            number = float(raw)
        except (ValueError, OverflowError):  # not a number; an int beyond double range
            number = math.nan
        # fastjson writes NaN and infinities as null: they cannot be carried, so refuse them.
        if math.isfinite(number):
            return number
    raise BodyDecodeError(f"{path}: expected a number, got {_json_kind(raw)}")


def _to_bool(raw: Any, path: str) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise BodyDecodeError(f"{path}: expected a boolean, got {_json_kind(raw)}")


def _to_str(raw: Any, path: str) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool | int | float):
        return ext_value_to_str(raw) or ""
    raise BodyDecodeError(f"{path}: expected a string, got {_json_kind(raw)}")


def _tuple_converter(item: _Converter) -> _Converter:
    def convert(raw: Any, path: str) -> tuple[Any, ...]:
        if isinstance(raw, list | tuple):
            return tuple(item(value, f"{path}[{i}]") for i, value in enumerate(raw))
        if isinstance(raw, Mapping) and not raw:
            return ()  # JSON.stringify writes an empty JavaScript Set as {}
        raise BodyDecodeError(f"{path}: expected an array, got {_json_kind(raw)}")

    return convert


def _dict_converter(key: _Converter, item: _Converter) -> _Converter:
    def convert(raw: Any, path: str) -> dict[Any, Any]:
        if not isinstance(raw, Mapping):
            raise BodyDecodeError(f"{path}: expected an object, got {_json_kind(raw)}")
        out = {}
        for k, value in raw.items():
            if value is not None:
                out[key(k, path)] = item(value, f"{path}[{k!r}]")
        return out

    return convert


def _open_map_converter(key: _Converter) -> _Converter:
    """A map of any JSON values (es-broker's open records): taken as parsed, nulls kept."""

    def convert(raw: Any, path: str) -> dict[Any, Any]:
        if not isinstance(raw, Mapping):
            raise BodyDecodeError(f"{path}: expected an object, got {_json_kind(raw)}")
        return {key(k, path): value for k, value in raw.items()}

    return convert


def _key_converter(tp: Any) -> _Converter:
    if tp is str:
        return lambda raw, path: raw if isinstance(raw, str) else _to_str(raw, f"{path} key")
    if tp is int:
        return lambda raw, path: to_int(raw, f"{path} key")
    if isinstance(tp, type) and issubclass(tp, Bean):
        return lambda raw, path: _bean_key(tp, raw, path)
    raise TypeError(f"no fastjson key converter for {tp!r}")


def _bean_key(tp: type[Bean], raw: Any, path: str) -> Any:
    if isinstance(raw, ObjectKey):
        raw = raw.as_dict()
    elif isinstance(raw, str):  # BrowserCompatible: the key object as quoted JSON text
        raw = loads(raw)
    return tp.from_json(raw, f"{path} key")
