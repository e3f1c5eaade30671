"""Request signatures: RocketMQ's (HmacSHA1 over the sorted extFields values, then the body) and
es-broker's bound one (HMAC-SHA256 over the code, names, values, body digest, time and nonce: B-345)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import trio

from es_broker.acl.signing import (
    SCHEME_ROCKETMQ,
    Credentials,
    canonical_v1,
    sign,
    sign_v1,
    signed_content,
    verify,
    verify_v1,
)
from es_broker.net.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request, response_to
from es_broker.server.edge.remoting_server import RemotingServer


def test_the_content_is_the_values_in_name_order_then_the_body():
    fields = {
        "topic": "T",
        "AccessKey": "ak",
        "b": "2",
        "Signature": "x",
        "_UNIQUE_KEY_QUERY": "true",
    }
    assert signed_content(fields, b"BODY") == b"ak2TBODY"


def test_names_sort_as_java_strings_do():
    # U+FF5E sorts before U+1F600 by code point, after it by UTF-16 code unit (Java's String order)
    fields = {"\U0001f600": "astral", "\uff5e": "bmp"}
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


async def test_a_client_with_credentials_signs_every_request_it_sends():
    seen = []

    async def echo(channel, command):
        seen.append(command)
        return response_to(command, ResponseCode.SUCCESS, None)

    server = RemotingServer("t", {RequestCode.GET_ALL_TOPIC_CONFIG: echo})
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        client = RemotingClient(nursery, credentials=Credentials("ak", "sk"))
        await client.invoke(
            f"127.0.0.1:{port}", request(RequestCode.GET_ALL_TOPIC_CONFIG, {"x": "1"}, b"b")
        )
        await client.aclose()
        nursery.cancel_scope.cancel()
    assert "sk" not in repr(client.credentials)
    (got,) = seen
    assert got.ext_fields["AccessKey"] == "ak"
    assert verify_v1(got.code, got.ext_fields, got.body, "sk")
    assert "Signature" not in got.ext_fields


def test_b345_the_canonical_form_is_code_counted_length_prefixed_fields_and_body_digest():
    """B-345: the canonical form written out in docs/semantics.md, byte for byte."""
    fields = {"topic": "T", "AccessKey": "ak", "b": "", "\u00e9": "\u00fc", "esSignature": "x"}
    body_digest = hashlib.sha256(b"BODY").hexdigest().encode()
    assert canonical_v1(215, fields, b"BODY") == (
        b"ES-HMAC-SHA256-1\n215\n4\n"
        b"9:AccessKey=2:ak\n1:b=0:\n5:topic=1:T\n2:\xc3\xa9=2:\xc3\xbc\n" + body_digest + b"\n"
    )
    assert canonical_v1(215, {}, None).endswith(hashlib.sha256(b"").hexdigest().encode() + b"\n")


def test_b345_the_bound_signature_is_hmac_sha256_of_the_canonical_form():
    """B-345: esSignature = base64(HMAC-SHA256(secret, canonical)); time and nonce are fields."""
    fields = sign_v1(10, {"topic": "T"}, b"x", "ak", "secret", now_ms=1234, nonce="n" * 32)
    assert fields["esSigVersion"] == "1" and fields["esTimestamp"] == "1234"
    assert fields["esNonce"] == "n" * 32 and fields["AccessKey"] == "ak"
    expected = hmac.new(b"secret", canonical_v1(10, fields, b"x"), hashlib.sha256).digest()
    assert fields["esSignature"] == base64.b64encode(expected).decode()
    assert verify_v1(10, fields, b"x", "secret")


def test_b346_the_bound_signature_breaks_on_another_code_renamed_or_extra_fields():
    """B-346: re-aiming at another code, renaming a field, adding an empty one all fail verification."""
    fields = sign_v1(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Victim1"}, None, "ak", "secret")
    assert verify_v1(RequestCode.GET_TOPIC_STATS_INFO, fields, None, "secret")
    assert not verify_v1(RequestCode.DELETE_TOPIC_IN_BROKER, fields, None, "secret")
    renamed = {("groupName" if k == "topic" else k): v for k, v in fields.items()}
    assert not verify_v1(RequestCode.GET_TOPIC_STATS_INFO, renamed, None, "secret")
    assert not verify_v1(RequestCode.GET_TOPIC_STATS_INFO, {**fields, "x": ""}, None, "secret")
    assert not verify_v1(RequestCode.GET_TOPIC_STATS_INFO, fields, b"", "other")
    assert not verify_v1(RequestCode.GET_TOPIC_STATS_INFO, fields, b"body", "secret")
    two = sign_v1(1, {}, None, "ak", "secret")
    assert two["esNonce"] != sign_v1(1, {}, None, "ak", "secret")["esNonce"]


def test_b345_credentials_can_sign_as_rocketmq_for_a_rocketmq_broker():
    """B-345: Credentials(scheme='rocketmq') signs as AclClientRPCHook, for RocketMQ brokers."""
    creds = Credentials("ak", "sk", scheme=SCHEME_ROCKETMQ)
    fields = creds.sign_request(10, {"topic": "T"}, b"x")
    assert verify(fields, b"x", "sk") and "esSignature" not in fields
    assert "sk" not in repr(creds)


def test_b345_the_documented_test_vector():
    """B-345: the worked example of docs/semantics.md, for clients in other languages."""
    fields = sign_v1(
        10,
        {"topic": "TopicA", "queueId": "0"},
        b"hello",
        "ak",
        "secret",
        now_ms=1700000000000,
        nonce="0123456789abcdef0123456789abcdef",
    )
    canonical = (
        b"ES-HMAC-SHA256-1\n10\n6\n9:AccessKey=2:ak\n"
        b"7:esNonce=32:0123456789abcdef0123456789abcdef\n12:esSigVersion=1:1\n"
        b"11:esTimestamp=13:1700000000000\n7:queueId=1:0\n5:topic=6:TopicA\n"
        b"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\n"
    )
    assert canonical_v1(10, fields, b"hello") == canonical
    digest = hmac.new(b"secret", canonical, hashlib.sha256).digest()
    assert fields["esSignature"] == base64.b64encode(digest).decode()
    assert fields["esSignature"] == "HLkLvVZW2I/Cx1ydZXAXi+n60zeKR1aHk4kkkumwEWY="
