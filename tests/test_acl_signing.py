"""Request signatures are RocketMQ's: HmacSHA1 over the sorted extFields values, then the body."""

from __future__ import annotations

import base64
import hashlib
import hmac

from es_broker.acl.signing import sign, signed_content, verify


def test_the_content_is_the_values_in_name_order_then_the_body():
    fields = {"topic": "T", "AccessKey": "ak", "b": "2", "Signature": "x", "_UNIQUE_KEY_QUERY": "true"}
    assert signed_content(fields, b"BODY") == b"ak2TBODY"


def test_names_sort_as_java_strings_do():
    # U+FF5E sorts before U+1F600 by code point, after it by UTF-16 code unit (Java's String order)
    fields = {"\U0001F600": "astral", "\uff5e": "bmp"}
    assert signed_content(fields, None) == b"astralbmp"


def test_a_signed_request_verifies_and_any_change_breaks_it():
    fields = sign({"topic": "T", "queueId": "0"}, b"hello", "ak", "secret")
    expected = base64.b64encode(hmac.new(b"secret", b"ak0Thello", hashlib.sha1).digest()).decode()
    assert fields["Signature"] == expected and fields["AccessKey"] == "ak"
    assert verify(fields, b"hello", "secret")
    assert not verify(fields, b"hellO", "secret")
    assert not verify({**fields, "queueId": "1"}, b"hello", "secret")
    assert not verify(fields, b"hello", "other")
    assert not verify({k: v for k, v in fields.items() if k != "Signature"}, b"hello", "secret")
