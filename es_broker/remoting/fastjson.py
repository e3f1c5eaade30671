"""The fastjson dialect Java uses for command bodies (docs/protocol.md §9.1).

fastjson 1.2.x writes two things standard JSON cannot hold, both as map keys:

* numeric keys bare: ``{0:"10.0.0.1:10911"}``
* object keys as the object itself: ``{{"brokerName":"b","queueId":0,"topic":"T"}:42}``

`loads` accepts standard JSON and both extensions; `dumps` writes them, or, with
``browser_compatible=True``, the quoted form the name server sends to 4.9.4+
clients. Body types built on this live in `bodies.py`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]  # public at runtime, not in typeshed
from json.scanner import make_scanner
from typing import Any

from .errors import BodyDecodeError

__all__ = ["ObjectKey", "dumps", "loads"]

# Nesting limit: deeper input is garbage, and Python recursion must not blow up.
MAX_DEPTH = 64
_JS_SAFE_INTEGER = 9007199254740991  # 2**53 - 1


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """A JSON object used as a map key, frozen so it can be a dict key.

    `items` are the object's (name, value) pairs sorted by name; nested
    objects are ObjectKeys and arrays tuples.
    """

    items: tuple[tuple[str, Any], ...]

    def as_dict(self) -> dict[str, Any]:
        """The key object as a plain dict (nested values stay frozen)."""
        return dict(self.items)

    def __fastjson__(self) -> dict[str, Any]:
        return self.as_dict()


# -- decoding -------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_INT_KEY = re.compile(r"-?[0-9]+")
# the C scanner; we never feed it { or [ (typeshed wants a make_scanner as its context, where
# any object with a decoder's attributes does)
_scan_scalar = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _skip_ws(text: str, pos: int) -> int:
    """The position after the white space at `pos`."""
    match = _WS.match(text, pos)  # `*` matches the empty string too, so this never is None
    return match.end() if match is not None else pos


def loads(data: bytes | str) -> Any:
    """Parse fastjson text; raises `BodyDecodeError`.

    Object keys come back as `str`, `int` (bare numeric keys) or `ObjectKey`
    (object keys); arrays as lists, objects as dicts.
    """
    text = data.decode("utf-8", "replace") if isinstance(data, bytes | bytearray) else data
    if too_deep(text):  # B-501: refused before a parser (or a reader of its result) recurses
        raise BodyDecodeError(f"JSON body nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text)  # fast path: most bodies are standard JSON
    except RecursionError:
        raise BodyDecodeError("JSON body nests too deeply") from None
    except ValueError:
        pass
    try:
        value, end = _parse_value(text, _skip_ws(text, 0), 0)
        end = _skip_ws(text, end)
    except (ValueError, IndexError, StopIteration) as exc:
        raise BodyDecodeError(f"body is not fastjson text: {_describe(exc)}") from None
    if end != len(text):
        raise BodyDecodeError(f"body is not fastjson text: extra data at char {end}")
    return value


_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def too_deep(text: str) -> bool:
    """True if `text` opens more than MAX_DEPTH arrays or objects inside one another (strings
    skipped). Only text with that many brackets at all is scanned."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    for match in _STRUCTURE.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False


def _describe(exc: BaseException) -> str:
    if isinstance(exc, StopIteration):
        return f"unexpected character at char {exc.value}"
    if isinstance(exc, IndexError):
        return "unexpected end of text"
    return str(exc)


def _parse_value(text: str, pos: int, depth: int) -> tuple[Any, int]:
    char = text[pos : pos + 1]
    if char == "{":
        return _parse_object(text, pos + 1, depth + 1)
    if char == "[":
        return _parse_array(text, pos + 1, depth + 1)
    return _scan_scalar(text, pos)


def _parse_object(text: str, pos: int, depth: int) -> tuple[dict[Any, Any], int]:
    if depth > MAX_DEPTH:
        raise ValueError(f"nesting deeper than {MAX_DEPTH}")
    result: dict[Any, Any] = {}
    pos = _skip_ws(text, pos)
    if text[pos : pos + 1] == "}":
        return result, pos + 1
    while True:
        char = text[pos : pos + 1]
        key: Any
        if char == '"':
            key, pos = scanstring(text, pos + 1)
        elif char == "{":
            raw, pos = _parse_object(text, pos + 1, depth + 1)
            key = freeze(raw)
        elif (match := _INT_KEY.match(text, pos)) is not None:
            key, pos = int(match.group()), match.end()
        else:
            raise ValueError(f"expected a map key at char {pos}")
        pos = _skip_ws(text, pos)
        if text[pos : pos + 1] != ":":
            raise ValueError(f"expected ':' at char {pos}")
        pos = _skip_ws(text, pos + 1)
        result[key], pos = _parse_value(text, pos, depth)
        pos = _skip_ws(text, pos)
        char = text[pos : pos + 1]
        if char == "}":
            return result, pos + 1
        if char != ",":
            raise ValueError(f"expected ',' or '}}' at char {pos}")
        pos = _skip_ws(text, pos + 1)


def _parse_array(text: str, pos: int, depth: int) -> tuple[list[Any], int]:
    if depth > MAX_DEPTH:
        raise ValueError(f"nesting deeper than {MAX_DEPTH}")
    result: list[Any] = []
    pos = _skip_ws(text, pos)
    if text[pos : pos + 1] == "]":
        return result, pos + 1
    while True:
        value, pos = _parse_value(text, pos, depth)
        result.append(value)
        pos = _skip_ws(text, pos)
        char = text[pos : pos + 1]
        if char == "]":
            return result, pos + 1
        if char != ",":
            raise ValueError(f"expected ',' or ']' at char {pos}")
        pos = _skip_ws(text, pos + 1)


def freeze(value: Any) -> Any:
    """A hashable copy of a parsed JSON value: dicts become ObjectKeys, lists tuples."""
    if isinstance(value, dict):
        return ObjectKey(tuple(sorted(((str(k), freeze(v)) for k, v in value.items()), key=_first)))
    if isinstance(value, list):
        return tuple(freeze(item) for item in value)
    return value


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]


# -- encoding -------------------------------------------------------------------


def dumps(value: Any, *, browser_compatible: bool = False) -> str:
    """Write `value` as fastjson does by default.

    Accepts None, bool, int, float, str, lists/tuples/sets, dicts, and objects
    with a ``__fastjson__()`` method returning a dict (beans; they may also be map
    keys). Map entries with None values are omitted and keys are sorted
    (fastjson sorts bean fields; sorting maps too keeps output deterministic).
    Non-string keys are written bare (ints) or as nested objects; with
    `browser_compatible` they are quoted, non-ASCII is escaped and integers
    outside JavaScript's safe range become strings, as fastjson's
    BrowserCompatible feature does.
    """
    parts: list[str] = []
    _write(value, parts, browser_compatible, 0)
    return "".join(parts)


def _write(value: Any, out: list[str], browser: bool, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"value nests deeper than {MAX_DEPTH}")
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=browser))
    elif isinstance(value, int):
        number = int(value)
        if browser and not -_JS_SAFE_INTEGER <= number <= _JS_SAFE_INTEGER:
            out.append(f'"{number}"')
        else:
            out.append(str(number))
    elif isinstance(value, float):
        out.append(_float_text(value))
    elif isinstance(value, Mapping):
        _write_map(value, out, browser, depth)
    elif isinstance(value, list | tuple):
        _write_array(value, out, browser, depth)
    elif isinstance(value, set | frozenset):
        _write_array(_sorted_if_possible(value), out, browser, depth)
    elif hasattr(value, "__fastjson__"):
        _write_map(value.__fastjson__(), out, browser, depth)
    else:
        raise TypeError(f"cannot write {type(value).__name__} as fastjson")


def _float_text(value: float) -> str:
    if not math.isfinite(value):
        return "null"  # fastjson writes NaN and infinities as null
    text = repr(value)
    return text if ("." in text or "e" in text) else text + ".0"


def _write_array(items: Iterable[Any], out: list[str], browser: bool, depth: int) -> None:
    out.append("[")
    first = True
    for item in items:
        if not first:
            out.append(",")
        first = False
        _write(item, out, browser, depth + 1)
    out.append("]")


def _write_map(mapping: Mapping[Any, Any], out: list[str], browser: bool, depth: int) -> None:
    out.append("{")
    first = True
    for key, item in _sorted_if_possible(mapping.items(), key=_first):
        if item is None:
            continue
        if not first:
            out.append(",")
        first = False
        out.append(_key_text(key, browser, depth))
        out.append(":")
        _write(item, out, browser, depth + 1)
    out.append("}")


def _key_text(key: Any, browser: bool, depth: int) -> str:
    if isinstance(key, str):
        return json.dumps(key, ensure_ascii=browser)
    if isinstance(key, int) and not isinstance(key, bool):
        text = str(int(key))
    elif isinstance(key, Mapping) or hasattr(key, "__fastjson__"):
        parts: list[str] = []
        _write(key, parts, browser, depth + 1)
        text = "".join(parts)
    else:
        raise TypeError(f"cannot write a {type(key).__name__} map key as fastjson")
    # BrowserCompatible turns every non-string key into a quoted string of its JSON.
    return json.dumps(text, ensure_ascii=True) if browser else text


def _sorted_if_possible(items: Iterable[Any], key: Any = None) -> list[Any]:
    listed = list(items)
    try:
        return sorted(listed, key=key)
    except TypeError:  # mixed key types: keep the caller's order
        return listed
