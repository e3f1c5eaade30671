"""Request signatures are RocketMQ's: HmacSHA1 over the sorted extFields values, then the body."""

from __future__ import annotations

import base64
import hashlib
import hmac

import trio

from es_broker.acl.signing import Credentials, sign, signed_content, verify
from es_broker.client.remoting_client import RemotingClient
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request, response_to
from es_broker.server.remoting_server import RemotingServer


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
    assert got.ext_fields["AccessKey"] == "ak" and verify(got.ext_fields, got.body, "sk")
