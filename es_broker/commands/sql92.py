"""SQL92 property filters as RocketMQ 4.9.8 evaluates them (docs/semantics.md B-210..B-219).

A subscription of expressionType SQL92 is a selector over a message's
properties (its user properties and the system ones the broker stores, TAGS,
KEYS, UNIQ_KEY, ...). `compile_selector` turns its text into a `Selector` once
(cached by text); `Selector.matches` answers for one message's properties.

The grammar is 4.9.8's SelectorParser.jj, parsed with lark (imported on the
first SQL92 subscription, so a broker that never sees one does not load it).
The values are typed as the Java filter types them: a property is a string,
a decimal literal an Integer (or a Long outside int's range), a float literal
a Double, TRUE/FALSE a Boolean, NULL null. Comparisons convert between those
types as 4.9.8's ComparisonExpression does, and an evaluation that Java would
end with an exception makes the message not match, as ExpressionMessageFilter
does.
"""

from __future__ import annotations

import functools
import math
import re
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from es_broker.remoting.message import decode_properties, property_span

SQL92 = "SQL92"  # ExpressionType.SQL92
MAX_NESTING = 100  # es-broker's bound on nested parentheses / unary operators
MAX_LENGTH = 64 * 1024  # es-broker's bound on an expression's length (characters)
CACHE_SIZE = 1024  # compiled expressions kept (4.9.8's SelectorParser keeps 100)
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_DOUBLE_MIN_VALUE = 5e-324  # Double.MIN_VALUE: the smallest positive double


class SelectorError(ValueError):
    """An expression 4.9.8's SqlFilter would not compile; the text says why and where."""


class _EvalError(Exception):
    """An evaluation that throws in 4.9.8: the message does not match."""


class Long(int):
    """A Java Long value (an int is a Java Integer): a string compared with it is read as a long."""

    __slots__ = ()


Props = Mapping[str, str]
Eval = Callable[[Props], Any]


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled SQL92 selector."""

    text: str
    _eval: Eval

    def evaluate(self, props: Props) -> bool | None:
        """The expression's value for `props`: True, False, or None (unknown); raises on error."""
        value: bool | None = self._eval(props)
        return value

    def matches(self, props: Props) -> bool:
        """Whether a message with these properties is delivered (B-212)."""
        try:
            return self._eval(props) is True
        except Exception:  # 4.9.8 answers false to anything the evaluation throws
            return False

    def matches_message(self, raw: bytes) -> bool:
        """Whether a stored message (its commit-log bytes) is delivered (B-213, B-216)."""
        try:
            props = message_properties(raw)
        except (IndexError, ValueError, struct.error):
            return False  # 4.9.8's decoding throws, and its filter answers false
        return self.matches(props)


# ---------------------------------------------------------------------- Java value semantics


_JAVA_INT = re.compile(r"[+-]?\d+")
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_JAVA_HEX_DOUBLE = re.compile(
    r"([+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?"
)


_JAVA_BLANKS = "".join(chr(c) for c in range(33))  # what String.trim takes off


def _java_integer(text: str, lo: int, hi: int) -> int:
    """Integer.valueOf / Long.valueOf: a sign and decimal digits, in range, else an error."""
    if len(text) > 40 or not _JAVA_INT.fullmatch(text):  # 40: past any long, inside int()'s limit
        raise _EvalError(f"For input string: {_clip(text)!r}")
    value = int(text)
    if not lo <= value <= hi:
        raise _EvalError(f"For input string: {_clip(text)!r}")
    return value


def _java_double(text: str) -> float:
    """Double.valueOf: Java's floating-point literal forms, blanks (<= U+0020) trimmed."""
    trimmed = text.strip(_JAVA_BLANKS)
    if _JAVA_DOUBLE.fullmatch(trimmed):
        core = trimmed.rstrip("fFdD") if not trimmed.endswith(("NaN", "Infinity")) else trimmed
        return float(core.replace("Infinity", "inf"))
    hexed = _JAVA_HEX_DOUBLE.fullmatch(trimmed)
    if hexed:
        return float.fromhex(hexed.group(1))
    raise _EvalError(f"For input string: {_clip(text)!r}")


def _double_compare(a: float, b: float) -> int:
    """Double.compare: NaN above everything and equal to itself, -0.0 below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = math.isnan(a), math.isnan(b)
    if a_nan or b_nan:
        return int(a_nan) - int(b_nan)
    return int(math.copysign(1, a) > 0) - int(math.copysign(1, b) > 0)


def _same_type_compare(lv: Any, rv: Any) -> int:
    if type(lv) is float:
        return _double_compare(lv, float(rv))
    if type(lv) is bool:  # Boolean.compareTo
        return 0 if lv == rv else (1 if lv else -1)
    if type(lv) is str:  # only its sign against 0 is ever read
        return 0 if lv == rv else (-1 if lv < rv else 1)
    order: int = (lv > rv) - (lv < rv)
    return order


def _compare(lv: Any, rv: Any) -> int:
    """ComparisonExpression.__compare with string conversion on (as SelectorParser sets it)."""
    lc, rc = type(lv), type(rv)
    if lc is not rc:
        if lc is bool:
            if rc is str:  # 4.9.8 casts the Boolean itself to String here: ClassCastException
                raise _EvalError("java.lang.ClassCastException")
            return -1
        if lc is int:
            if rc is Long:
                pass
            elif rc is float:
                lv = float(lv)
            elif rc is str:
                rv = _java_integer(rv, _INT_MIN, _INT_MAX)
            else:
                return -1
        elif lc is Long:
            if rc is int:
                pass
            elif rc is float:
                lv = float(lv)
            elif rc is str:
                rv = _java_integer(rv, _LONG_MIN, _LONG_MAX)
            else:
                return -1
        elif lc is float:
            if rc is int or rc is Long:
                rv = float(rv)
            elif rc is str:
                rv = _java_double(rv)
            else:
                return -1
        elif lc is str:
            if rc is bool:
                lv = lv.lower() == "true"  # Boolean.valueOf
            elif rc is int:
                lv = _java_integer(lv, _INT_MIN, _INT_MAX)
            elif rc is Long:
                lv = _java_integer(lv, _LONG_MIN, _LONG_MAX)
            elif rc is float:
                lv = _java_double(lv)
            else:
                return -1
        else:
            return -1
    return _same_type_compare(lv, rv)


# ---------------------------------------------------------------------- expression nodes

# what 4.9.8's parse-time checks look at: the Java class of each operand
CONST, BOOL_CONST, PROPERTY, BOOLEAN, VALUE = "const", "bool_const", "property", "boolean", "value"


@dataclass(frozen=True, slots=True)
class _Node:
    kind: str
    eval: Eval
    value: Any = None  # a constant's value
    text: str = ""  # for messages


def _constant(value: Any, kind: str = CONST) -> _Node:
    return _Node(kind, lambda _p: value, value, _render(value))


def _render(value: Any) -> str:
    if value is None:
        return "NULL"
    if type(value) is bool:
        return "TRUE" if value else "FALSE"
    if type(value) is str:
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _as_boolean(node: _Node) -> _Node:
    """SelectorParser.asBooleanExpression: a property is cast, a non-boolean value refused."""
    if node.kind in (BOOLEAN, BOOL_CONST):
        return node
    if node.kind == PROPERTY:
        get = node.eval

        def cast(p: Props) -> Any:
            value = get(p)
            if value is None:
                return None
            return value if type(value) is bool else False

        return _Node(BOOLEAN, cast, text=node.text)
    raise SelectorError(f"Expression will not result in a boolean value: {node.text}")


def _check_less_than_operand(node: _Node) -> None:
    if node.kind in (CONST, BOOL_CONST):
        if type(node.value) in (int, Long, float):
            return
        raise SelectorError(f"Value '{node.text}' cannot be compared.")
    if node.kind == BOOLEAN:
        raise SelectorError(f"Value '{node.text}' cannot be compared.")


def _ordering(left: _Node, right: _Node, symbol: str, test: Callable[[int], bool]) -> _Node:
    _check_less_than_operand(left)
    _check_less_than_operand(right)
    lget, rget = left.eval, right.eval

    def ordered(p: Props) -> Any:
        lv = lget(p)
        if lv is None:
            return None
        rv = rget(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # two strings compare as doubles, or throw
            return test(_double_compare(_java_double(lv), _java_double(rv)))
        return test(_compare(lv, rv))

    return _Node(BOOLEAN, ordered, text=f"({left.text} {symbol} {right.text})")


def _equal(left: _Node, right: _Node, checked: bool = True) -> _Node:
    if checked:
        for side in (left, right):
            if side.kind in (CONST, BOOL_CONST) and side.value is None:
                raise SelectorError(f"'{side.text}' cannot be compared.")
        if (
            left.kind in (CONST, BOOL_CONST)
            and right.kind in (CONST, BOOL_CONST)
            and left.kind == BOOL_CONST
            and right.kind != BOOL_CONST
        ):
            raise SelectorError(f"'{left.text}' cannot be compared with '{right.text}'")
    lget, rget = left.eval, right.eval

    def equal(p: Props) -> Any:
        lv, rv = lget(p), rget(p)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None:
            return True
        return _compare(lv, rv) == 0

    return _Node(BOOLEAN, equal, text=f"({left.text} == {right.text})")


def _not(node: _Node) -> _Node:
    get = _as_boolean(node).eval

    def negated(p: Props) -> Any:
        value = get(p)
        return None if value is None else not value

    return _Node(BOOLEAN, negated, text=f"(NOT {node.text})")


def _logic(parts: list[_Node], is_or: bool) -> _Node:
    """A chain of ORs (or ANDs): left to right, stopping at the first TRUE (FALSE); null is unknown."""
    gets = tuple(_as_boolean(n).eval for n in parts)
    decisive = is_or

    def combined(p: Props) -> Any:
        unknown = False
        for get in gets:
            value = get(p)
            if value is None:
                unknown = True
            elif value is decisive:
                return decisive
        return None if unknown else not decisive

    joiner = " OR " if is_or else " AND "
    return _Node(BOOLEAN, combined, text="(" + joiner.join(n.text for n in parts) + ")")


def _negate(node: _Node) -> _Node:
    get = node.eval

    def negated(p: Props) -> Any:
        value = get(p)
        if type(value) is Long:
            return Long(-value)
        if type(value) in (int, float):
            return -value
        return None  # a string, a Boolean or null negates to null

    return _Node(VALUE, negated, text=f"(- {node.text})")


def _in(left: _Node, items: list[str], negated: bool) -> _Node:
    if left.kind != PROPERTY:
        raise SelectorError(f"Expected a property for In expression, got: {left.text}")
    get, members = left.eval, frozenset(items)

    def within(p: Props) -> Any:
        value = get(p)
        if type(value) is not str:
            return None
        return (value in members) != negated

    word = "NOT IN" if negated else "IN"
    return _Node(BOOLEAN, within, text=f"{left.text} {word} ({', '.join(map(_render, items))})")


def _between(value: _Node, low: _Node, high: _Node, negated: bool) -> _Node:
    if negated:
        return _logic(
            [
                _ordering(value, low, "<", lambda c: c < 0),
                _ordering(value, high, ">", lambda c: c > 0),
            ],
            True,
        )
    if low.kind in (CONST, BOOL_CONST) and high.kind in (CONST, BOOL_CONST):
        if low.value is None or high.value is None:
            raise SelectorError("Illegal values of between, values can not be null!")
        try:
            order = _compare(high.value, low.value)
        except _EvalError as exc:
            raise SelectorError(f"Illegal values of between: {exc}") from None
        if order < 0:
            raise SelectorError(
                f"Illegal values of between, left value({low.text}) must less than or equal"
                f" to right value({high.text})"
            )
    return _logic(
        [
            _ordering(value, low, ">=", lambda c: c >= 0),
            _ordering(value, high, "<=", lambda c: c <= 0),
        ],
        False,
    )


# ---------------------------------------------------------------------- the grammar

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*
?and_expr: eq_expr (_AND eq_expr)*
?eq_expr: cmp_expr eq_tail*
eq_tail: "=" cmp_expr -> eq
       | "<>" cmp_expr -> ne
       | _IS _NULL -> is_null
       | _IS _NOT _NULL -> is_not_null
?cmp_expr: unary cmp_tail*
cmp_tail: ">" unary -> gt
        | ">=" unary -> ge
        | "<" unary -> lt
        | "<=" unary -> le
        | _BETWEEN unary _AND unary -> between
        | _NOT _BETWEEN unary _AND unary -> not_between
        | _IN "(" STRING ("," STRING)* ")" -> in_list
        | _NOT _IN "(" STRING ("," STRING)* ")" -> not_in_list
?unary: "+" unary -> plus
      | "-" unary -> minus
      | _NOT unary -> not_
      | primary
?primary: STRING -> string
        | DECIMAL -> decimal
        | FLOAT -> float_
        | _TRUE -> true
        | _FALSE -> false
        | _NULL -> null
        | ID -> prop
        | "(" or_expr ")" -> paren

_NOT: "NOT"i
_AND: "AND"i
_OR: "OR"i
_BETWEEN: "BETWEEN"i
_IN: "IN"i
_TRUE: "TRUE"i
_FALSE: "FALSE"i
_NULL: "NULL"i
_IS: "IS"i
FLOAT.2: /[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+/
DECIMAL: /0|[1-9][0-9]*[lL]?/
STRING: /'(''|[^'])*'/
ID: /[a-z_$][a-z0-9_$]*/i
LINE_COMMENT.3: /--[^\n\r]*(\r\n|\n|\r)/
BLOCK_COMMENT.3: /\/\*[^*]*\*+([^*\/][^*]*\*+)*\//
WS: /[ \t\n\r\f]+/
%ignore WS
%ignore LINE_COMMENT
%ignore BLOCK_COMMENT
"""


@functools.cache
def _parser() -> Any:
    import lark  # only a broker that meets a SQL92 subscription pays for it

    return lark.Lark(_GRAMMAR, parser="lalr", lexer="basic", maybe_placeholders=False)


def _parse_tree(text: str) -> Any:
    """Parse as 4.9.8's JavaCC parser does: the longest complete expression from the start.

    SelectorParser stops reading at the first token that cannot continue a
    complete expression and does not ask for the end of the text, so what
    follows it is never looked at (B-211). Any other failure is an error that
    names the token and its place.
    """
    import lark

    interactive = _parser().parse_interactive(text)
    last = None
    try:
        try:
            # lexes lazily and yields each token before feeding it
            for last in interactive.iter_parse():
                if last.type not in interactive.choices():
                    break
            else:
                last = None  # the text ended
        except lark.exceptions.UnexpectedToken:
            pass  # LALR may reduce on a token before it finds it unexpected
        try:  # the token cannot continue: what was read before it must be complete
            return interactive.feed_eof(last)
        except lark.exceptions.UnexpectedToken:
            if last is None:
                raise SelectorError("Encountered the end of the expression too early") from None
            raise SelectorError(
                f"Encountered {_clip(last.value)!r} at line {last.line}, column {last.column}"
            ) from None
    except lark.exceptions.UnexpectedCharacters as exc:
        raise SelectorError(
            f"Lexical error at line {exc.line}, column {exc.column}: unexpected {exc.char!r}"
        ) from None


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _string_literal(token: str) -> str:
    return token[1:-1].replace("''", "'")


def _decimal(token: str) -> _Node:
    digits = token[:-1] if token[-1] in "lL" else token
    if len(digits) > 19 or int(digits) > _LONG_MAX:
        raise SelectorError(f"For input string: {_clip(digits)!r} (beyond a long)")
    value = int(digits)
    return _constant(value if value <= _INT_MAX else Long(value))


def _float(token: str) -> _Node:
    value = float(token)
    if value > 1.7976931348623157e308:
        raise SelectorError(f"{_clip(token)} is greater than {1.7976931348623157e308!r}")
    if value < _DOUBLE_MIN_VALUE:  # 4.9.8 refuses 0.0 itself here
        raise SelectorError(f"{_clip(token)} is less than {_DOUBLE_MIN_VALUE!r}")
    return _constant(value)


_ORDERINGS: dict[str, tuple[str, Callable[[int], bool]]] = {
    "gt": (">", lambda c: c > 0),
    "ge": (">=", lambda c: c >= 0),
    "lt": ("<", lambda c: c < 0),
    "le": ("<=", lambda c: c <= 0),
}


def _build(tree: Any, depth: int = 0) -> _Node:
    """A lark tree -> an expression node, with 4.9.8's parse-time checks."""
    if depth > MAX_NESTING:
        raise SelectorError(f"expression nested deeper than {MAX_NESTING} levels")
    rule, kids = tree.data, tree.children
    if rule == "or_expr" or rule == "and_expr":
        return _logic([_build(k, depth + 1) for k in kids], rule == "or_expr")
    if rule in ("eq_expr", "cmp_expr"):
        node = _build(kids[0], depth + 1)
        for tail in kids[1:]:
            node = _tail(node, tail, depth + 1)
        return node
    if rule == "plus":
        return _build(kids[0], depth + 1)
    if rule == "minus":
        return _negate(_build(kids[0], depth + 1))
    if rule == "not_":
        return _not(_build(kids[0], depth + 1))
    if rule == "paren":
        return _build(kids[0], depth + 1)
    if rule == "string":
        return _constant(_string_literal(kids[0]))
    if rule == "decimal":
        return _decimal(str(kids[0]))
    if rule == "float_":
        return _float(str(kids[0]))
    if rule == "true":
        return _constant(True, BOOL_CONST)
    if rule == "false":
        return _constant(False, BOOL_CONST)
    if rule == "null":
        return _constant(None, BOOL_CONST)
    if rule == "prop":
        name = str(kids[0])
        return _Node(PROPERTY, lambda p: p.get(name), text=name)
    raise SelectorError(f"unexpected construct {rule}")  # pragma: no cover - grammar bound


def _tail(left: _Node, tail: Any, depth: int) -> _Node:
    op, kids = tail.data, tail.children
    if op == "eq":
        return _equal(left, _build(kids[0], depth))
    if op == "ne":
        return _not(_equal(left, _build(kids[0], depth)))
    if op == "is_null":
        return _equal(left, _constant(None, BOOL_CONST), checked=False)
    if op == "is_not_null":
        return _not(_equal(left, _constant(None, BOOL_CONST), checked=False))
    if op in _ORDERINGS:
        symbol, test = _ORDERINGS[op]
        return _ordering(left, _build(kids[0], depth), symbol, test)
    if op in ("between", "not_between"):
        low, high = _build(kids[0], depth), _build(kids[1], depth)
        return _between(left, low, high, op == "not_between")
    return _in(left, [_string_literal(k) for k in kids], op == "not_in_list")


@dataclass(frozen=True, slots=True)
class _Failed:
    reason: str


def _compile(text: str) -> Selector | _Failed:
    try:
        tree = _parse_tree(text)
        return Selector(text, _as_boolean(_build(tree)).eval)
    except SelectorError as exc:
        return _Failed(str(exc))
    except RecursionError:
        return _Failed(f"expression nested deeper than {MAX_NESTING} levels")


_CACHE: dict[str, Selector | _Failed] = {}  # by text, oldest first; failures too, as 4.9.8 caches
_CACHE_LOCK = threading.Lock()  # compiles may run in worker threads


def cached_selector(text: str | None) -> Selector | None:
    """The compiled selector of `text` if it is cached (None if not); a cached failure raises."""
    result = _CACHE.get(text) if text else None
    if isinstance(result, _Failed):
        raise SelectorError(result.reason)
    return result


def compile_selector(text: str | None) -> Selector:
    """Compile a SQL92 selector (cached by its text); a bad one raises SelectorError.

    Compiling costs about 10 us per byte of text: callers on an event loop run it
    in a worker thread unless `cached_selector` has it.
    """
    if not text:
        raise SelectorError("Expression can't be null! SQL92")
    if len(text) > MAX_LENGTH:
        raise SelectorError(f"expression longer than {MAX_LENGTH} characters")
    result = _CACHE.get(text)
    if result is None:
        result = _compile(text)
        with _CACHE_LOCK:
            while len(_CACHE) >= CACHE_SIZE:
                del _CACHE[next(iter(_CACHE))]
            _CACHE[text] = result
    if isinstance(result, _Failed):
        raise SelectorError(result.reason)
    return result


def message_properties(raw: bytes) -> dict[str, str]:
    """A stored message's properties as 4.9.8's MessageDecoder.decodeProperties reads them.

    A pair with an empty name or an empty value is left out, as
    string2messageProperties does; the last pair of a name wins. Raises
    IndexError, ValueError or struct.error on bytes that hold no message.
    """
    _, _, start, end = property_span(raw)
    section = raw[start:end]
    props = decode_properties(section)  # compiled; it keeps empty values
    if all(props.values()):
        return props
    exact: dict[str, str] = {}  # an empty value never hides an earlier one of its name
    for pair in section.decode("utf-8", errors="replace").split("\x02"):
        name, sep, value = pair.partition("\x01")
        if name and sep and value:
            exact[name] = value
    return exact
