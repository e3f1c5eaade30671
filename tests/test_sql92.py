"""SQL92 selectors compile and evaluate as RocketMQ 4.9.8's filter module does (B-210..B-213).

The vectors restate the cases of 4.9.8's filter tests (ParserTest, ExpressionTest)
with the property values a broker really has: strings.
"""

from __future__ import annotations

import pytest

from es_broker.commands.sql92 import (
    SelectorError,
    cached_selector,
    compile_selector,
    message_properties,
)
from es_broker.remoting import message as wire

# ---------------------------------------------------------------------- B-210: the grammar

COMPILES = [
    "a=3 and b<>4 And c>5 AND d<=4",
    "a=3  and    b<>4 And c>5 AND d<=4",
    "a=3 or b<>4 Or c>5 OR d<=4",
    "a in ('3', '4', '5')",
    "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
    "(a between 2 and 10) AND (b not between 6 and 9)",
    "a is null",
    "a is not null",
    "a <= now",  # `now` is a property name, not a keyword
    "TRUE",
    "NULL",
    "a",  # a property alone is cast to a boolean
    "NOT a",
    "a > -5",
    "a > +5",
    "a > 5L",
    "a > 2147483648",
    "a > 3.1E10",
    "a > .5",
    "a > 5.",
    "a between 1 and 1",
    "a not between 10 and 0",  # only BETWEEN checks the order of its bounds
    "a = 1 -- a comment\n OR b = 2",
    "a = 1 /* a comment */ OR b = 2",
    "TRUE = a",
    "1 = TRUE",
    "(a > 1) = TRUE",
    "NOT a = 1",  # (NOT a) = 1
]

REFUSED = [
    ("", "can't be null"),
    ("a and between 2 and 10", "'between'"),
    (" a between 10 and 0", "must less than or equal"),
    ("a > 100000000000000000000000", "beyond a long"),
    ("a > " + "9" * 5000, "beyond a long"),
    ("a > 1" + "1" * 400 + "." + "1" * 400, "greater than"),
    ("a != 1", "unexpected '!'"),
    ("a > 'x'", "cannot be compared"),
    ("a > TRUE", "cannot be compared"),
    ("a > NULL", "cannot be compared"),
    ("a = NULL", "cannot be compared"),
    ("TRUE = 1", "cannot be compared with"),
    ("NOT a > 1", "cannot be compared"),  # NOT binds tighter: (NOT a) > 1
    ("a > 1 > 2", "cannot be compared"),
    ("'x' in ('x')", "Expected a property"),
    ("a in (1, 2)", "Encountered"),
    ("1", "will not result in a boolean"),
    ("'abc'", "will not result in a boolean"),
    ("-a", "will not result in a boolean"),
    ("a > 0.0", "less than"),  # 4.9.8 refuses a float literal below Double.MIN_VALUE, 0.0 too
    ("a between 'x' and 'y'", "cannot be compared"),
    ("a between NULL and 1", "can not be null"),
    ("a = 1 NOT b", "Encountered"),
    ("(a = 1", "end of the expression"),
    ("a = '" + "x", "unexpected"),
    ("(" * 150 + "a" + ")" * 150, "nested deeper"),
    ("a = '" + "x" * 70_000 + "'", "longer than 65536"),
]


@pytest.mark.parametrize("text", COMPILES)
def test_b210_rocketmq_selectors_compile(text):
    compile_selector(text)


@pytest.mark.parametrize(("text", "reason"), REFUSED)
def test_b210_bad_selectors_are_refused_with_the_reason(text, reason):
    with pytest.raises(SelectorError, match=None) as caught:
        compile_selector(text)
    assert reason in str(caught.value)


def test_b210_a_refusal_names_the_place_of_the_bad_token():
    with pytest.raises(SelectorError) as caught:
        compile_selector("a = 1 OR\n b IN 3")
    assert "line 2, column 7" in str(caught.value)


# ---------------------------------------------------------------------- B-211: trailing text


@pytest.mark.parametrize(
    ("text", "props", "expected"),
    [
        ("a = 1 b = 2", {"a": "1", "b": "3"}, True),  # `b = 2` is never read
        ("a = 1 )", {"a": "1"}, True),
        ("a = 1 -- no newline", {"a": "1"}, True),  # `-` ends the expression
        ("a = 1 (", {"a": "2"}, False),
        # 4.9.8's grammar has no CONTAINS / STARTSWITH / ENDSWITH: this is `a` cast to a boolean
        ("a contains 'x'", {"a": "x"}, False),
        ("a IS NULL contains 'x'", {}, True),
    ],
)
def test_b211_text_after_a_complete_expression_is_ignored(text, props, expected):
    assert compile_selector(text).matches(props) is expected


# ---------------------------------------------------------------------- B-212: evaluation

N = None  # the expression's value is unknown (null): never a match
EVAL = [
    # and / or chains, numbers given as strings
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "3", "b": "5", "c": "6", "d": "1"}, True),
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "4", "b": "5", "c": "6", "d": "1"}, False),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "3"}, True),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "5"}, True),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "6"}, True),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
    # IN / NOT IN compare strings
    ("a in ('3', '4', '5')", {"a": "3"}, True),
    ("a in ('3', '4', '5')", {"a": "5"}, True),
    ("a in ('3', '4', '5')", {"a": "8"}, False),
    ("a not in ('3', '4', '5')", {"a": "8"}, True),
    ("a not in ('3', '4', '5')", {"a": "4"}, False),
    ("a not in ('3', '4', '5')", {}, N),
    ("a in ('3.0')", {"a": "3"}, False),
    # BETWEEN is inclusive
    ("a between 2 and 10", {"a": "2"}, True),
    ("a between 2 and 10", {"a": "10"}, True),
    ("a between 2 and 10", {"a": "3"}, True),
    ("a between 2 and 10", {"a": "1"}, False),
    ("a between 2 and 10", {"a": "11"}, False),
    ("a not between 2 and 10", {"a": "1"}, True),
    ("a not between 2 and 10", {"a": "11"}, True),
    ("a not between 2 and 10", {"a": "5"}, False),
    ("a not between 2 and 10", {}, N),
    # IS NULL
    ("a is null", {}, True),
    ("a is null", {"a": "x"}, False),
    ("a is not null", {"a": "x"}, True),
    ("a is not null", {}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("a is not null and a='hello'", {"a": "abc"}, False),
    ("a is null OR a='hello'", {}, True),
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    # booleans: a string equals TRUE when it reads "true" in any case
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("a=TRUE", {"a": "TRUE"}, True),
    ("a=TRUE", {"a": "yes"}, False),
    ("TRUE = a", {"a": "true"}, False),  # 4.9.8 throws (ClassCastException): no match
    ("a", {"a": "true"}, False),  # a property is a string, never a Boolean
    ("a", {}, N),
    ("NOT a", {"a": "x"}, True),
    ("NOT a = 1", {"a": "1"}, False),  # (NOT a) = 1: a Boolean against an Integer
    ("1 = TRUE", {}, False),
    # quoting
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    # missing properties make comparisons unknown
    ("a > 1", {}, N),
    ("a = 'x'", {}, N),
    ("'x' = a", {}, False),  # the literal side is known: FALSE
    ("a <> 'x'", {}, N),
    ("a > 1 OR b = 'y'", {"b": "y"}, True),
    ("a > 1 AND b = 'y'", {"b": "z"}, False),
    ("a > 1 AND b = 'y'", {"b": "y"}, N),
    ("NOT (a > 1)", {}, N),
    ("NULL", {}, N),
    ("TRUE", {}, True),
    # a string against a number is read as that number's type
    ("a > 3.14", {"a": "3.1415"}, True),
    ("a > 3.1E10", {"a": "3.1415E10"}, True),
    ("a > 5", {"a": "6"}, True),
    ("a > 5", {"a": "+6"}, True),
    ("a > 5", {"a": "5.5"}, False),  # Integer.valueOf("5.5") throws: no match
    ("a > 5", {"a": " 6"}, False),  # Integer.valueOf does not trim
    ("a > 5", {"a": "3000000000"}, False),  # beyond an int: throws
    ("a > 5", {"a": "9" * 5000}, False),
    ("a > 2147483648", {"a": "3000000000"}, True),  # a Long literal reads a long
    ("a > 5.0E0", {"a": "6"}, True),
    ("a > 5.5", {"a": " 6 "}, True),  # Double.valueOf trims
    ("a > 5.5", {"a": "6d"}, True),  # and takes a type suffix
    ("a > 5.5", {"a": "Infinity"}, True),
    ("a < 5.5", {"a": "NaN"}, False),  # NaN compares above everything
    ("a > 5.5", {"a": "NaN"}, True),
    ("a > 5.5", {"a": "0x1p3"}, True),  # hex floating point: 8.0
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "05"}, True),
    ("a = 5", {"a": "5.0"}, False),  # throws
    ("a = 5.0E0", {"a": "5"}, True),
    ("a = 'abc'", {"a": "abc"}, True),
    ("a = 'abc'", {"a": "ABC"}, False),
    ("a > -5", {"a": "-4"}, True),
    ("a > - -5", {"a": "4"}, False),
    ("a > -'x'", {"a": "4"}, N),  # negating a string gives null
    ("-a < 1", {"a": "4"}, N),
    # two strings: ordered as doubles, or the comparison throws
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "20", "b": "10"}, True),
    ("a > b", {"a": "20", "b": "x"}, False),
    ("a=b", {"a": "3.14", "b": "3.14"}, True),
    ("a<>b", {"a": "3.14", "b": "3.14"}, False),
    ("a<>b", {"a": "3.14", "b": "3.141"}, True),
    ("a = b", {"a": "1", "b": "1.0"}, False),  # two strings are equal only as strings
    ("a between up and low", {"a": "3.14"}, N),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}, False),
    ("key is not null and key between 0 and 100", {"key": "con"}, False),
    ("a between 0 and 100", {"a": "abc"}, False),
    # an error in one branch of OR after a TRUE is never reached
    ("a = 1 OR b > 5", {"a": "1", "b": "x"}, True),
    ("b > 5 OR a = 1", {"a": "1", "b": "x"}, False),
    # chains of comparisons left to right
    ("(a = 1) = TRUE", {"a": "1"}, True),
    ("a = 1 = TRUE", {"a": "2"}, False),
]


@pytest.mark.parametrize(("text", "props", "expected"), EVAL)
def test_b212_evaluation_as_rocketmq(text, props, expected):
    selector = compile_selector(text)
    assert selector.matches(props) is (expected is True)
    if expected is None:
        assert selector.evaluate(props) is None


def test_b212_compilation_is_cached_by_text():
    assert compile_selector("a = 1 AND b = 2") is compile_selector("a = 1 AND b = 2")
    assert cached_selector("a = 1 AND b = 2") is compile_selector("a = 1 AND b = 2")
    assert cached_selector("a = 3 AND never_compiled = 1") is None
    with pytest.raises(SelectorError):
        compile_selector("a = = 1")
    with pytest.raises(SelectorError):  # a failure is remembered too
        cached_selector("a = = 1")


def test_b212_a_long_or_chain_evaluates_without_recursion():
    text = " OR ".join(f"a = {i}" for i in range(3000))
    assert compile_selector(text).matches({"a": "2999"})


# ---------------------------------------------------------------------- B-213: properties


def _stored(props: dict[str, str]) -> bytes:
    msg = wire.StoredMessage(topic="T", queue_id=0, body=b"x", properties=props)
    return wire.encode(msg)


def test_b213_a_message_shows_its_user_and_system_properties():
    raw = _stored({"TAGS": "tagA", "KEYS": "k1", "region": "eu", "price": "12"})
    props = message_properties(raw)
    assert props == {"TAGS": "tagA", "KEYS": "k1", "region": "eu", "price": "12"}
    assert compile_selector("TAGS = 'tagA' AND price > 10").matches(props)


def test_b213_a_property_with_an_empty_value_is_absent():
    props = message_properties(_stored({"a": "", "b": "1"}))
    assert props == {"b": "1"}
    assert compile_selector("a IS NULL").matches(props)


def test_b213_an_empty_value_does_not_hide_an_earlier_value_of_its_name():
    # the same name again with an empty value, as no client writes but the format allows
    forged = _stored({"a": "1", "b": "2"}).replace(b"b\x012", b"a\x01\x02")
    assert message_properties(forged) == {"a": "1"}


def test_b213_bytes_that_hold_no_message_never_match():
    assert not compile_selector("a IS NULL").matches_message(b"\x00" * 10)
    assert compile_selector("a IS NULL").matches_message(_stored({"b": "1"}))
