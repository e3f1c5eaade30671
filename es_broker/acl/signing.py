"""Request signatures: RocketMQ's (AclClientRPCHook, PlainAccessValidator) and es-broker's own.

RocketMQ's: the signed content is the values of the request's extFields, sorted
by name as Java's TreeMap sorts strings (UTF-16 code units), without
`Signature` and the unique-key query flag, concatenated as UTF-8, followed by
the body. The signature is the base64 of its HmacSHA1 under the account's
secret key. It covers neither the request code nor the field names, and has
no time and no nonce: a captured request can be re-sent, or re-aimed at
another code.

es-broker's (version 1, docs/semantics.md B-345): HMAC-SHA256 over a canonical
form that binds the request code, every field name and value, the body's
SHA-256, a timestamp and a random nonce (`canonical_v1`). The broker checks
the timestamp against a window and remembers each nonce for as long as the
window could accept it (es_broker/acl/access.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from es_broker.remoting.command import ACCESS_KEY

SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"
UNIQUE_KEY_QUERY = (
    "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG: set after signing, never signed
)

UNSIGNED = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})

# es-broker's bound signature (B-345): the field names it adds to extFields
ES_SIG_VERSION = "esSigVersion"
ES_TIMESTAMP = "esTimestamp"  # milliseconds since the epoch, decimal
ES_NONCE = "esNonce"  # 32 lowercase hex digits (16 random bytes) from this client
ES_SIGNATURE = "esSignature"  # base64 (padded) of the HMAC-SHA256 of canonical_v1
ES_VERSION_1 = "1"
ES_CANONICAL_PREFIX = b"ES-HMAC-SHA256-1\n"
NONCE_MIN, NONCE_MAX = 16, 64  # characters of a nonce the broker accepts
NONCE_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_")


SCHEME_ES = "es-v1"  # es-broker's bound signature (the default of es-broker's clients)
SCHEME_ROCKETMQ = "rocketmq"  # AclClientRPCHook's: for a RocketMQ 4.x broker, which knows no other
SCHEMES = (SCHEME_ES, SCHEME_ROCKETMQ)


@dataclass(frozen=True, slots=True)
class Credentials:
    """An account's keys, as the Java client's SessionCredentials (the secret never leaves this side).

    `scheme`: how `sign_request` signs: es-broker's bound signature (default) or, to talk to a
    RocketMQ broker, RocketMQ's.
    """

    access_key: str
    secret_key: str
    security_token: str | None = None
    scheme: str = SCHEME_ES

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(
                f"unknown signature scheme {self.scheme!r} (one of {', '.join(SCHEMES)})"
            )

    def __repr__(self) -> str:
        return f"Credentials(access_key={self.access_key!r}, secret_key=<hidden>, scheme={self.scheme!r})"

    def sign(self, fields: Mapping[str, str], body: bytes | None) -> dict[str, str]:
        """RocketMQ's signature (AclClientRPCHook): what RocketMQ's own clients send."""
        return sign(fields, body, self.access_key, self.secret_key, self.security_token)

    def sign_request(
        self,
        code: int,
        fields: Mapping[str, str],
        body: bytes | None,
        *,
        now_ms: int | None = None,
        nonce: str | None = None,
    ) -> dict[str, str]:
        """The request as this account signs it: es-broker's bound signature (B-345), or RocketMQ's."""
        if self.scheme == SCHEME_ROCKETMQ:
            return self.sign(fields, body)
        return sign_v1(
            code,
            fields,
            body,
            self.access_key,
            self.secret_key,
            self.security_token,
            now_ms=now_ms,
            nonce=nonce,
        )


def _java_order(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def signed_content(fields: Mapping[str, str], body: bytes | None) -> bytes:
    """The bytes a signature covers: the sorted field values, then the body."""
    text = "".join(fields[name] for name in sorted(fields, key=_java_order) if name not in UNSIGNED)
    return text.encode("utf-8", "surrogatepass") + (body or b"")


def signature(content: bytes, secret_key: str) -> str:
    """base64(HmacSHA1(secret_key, content)), as AclUtils.calSignature."""
    return base64.b64encode(
        hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    ).decode("ascii")


def sign(
    fields: Mapping[str, str],
    body: bytes | None,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
) -> dict[str, str]:
    """`fields` with AccessKey (and SecurityToken) added and the Signature over all of them."""
    signed = {name: value for name, value in fields.items() if name not in UNSIGNED}
    signed[ACCESS_KEY] = access_key
    if security_token is not None:
        signed[SECURITY_TOKEN] = security_token
    signed[SIGNATURE] = signature(signed_content(signed, body), secret_key)
    return signed


def verify(fields: Mapping[str, str], body: bytes | None, secret_key: str) -> bool:
    """True if the request's Signature is the one `secret_key` gives its fields and body."""
    given = fields.get(SIGNATURE)
    if given is None:
        return False
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"),
        signature(signed_content(fields, body), secret_key).encode("ascii"),
    )


# -- es-broker's bound signature, version 1 (docs/semantics.md B-345) ------------------------------
def _netstring(data: bytes) -> bytes:
    return str(len(data)).encode("ascii") + b":" + data


def canonical_v1(code: int, fields: Mapping[str, str], body: bytes | None) -> bytes:
    """The bytes the bound signature covers.

    `ES-HMAC-SHA256-1\\n`, the request code in decimal and `\\n`, the number of
    signed fields in decimal and `\\n`, then for each extFields entry but
    `esSignature`, in the order of the names' UTF-8 bytes: `<len>:<name>=<len>:<value>\\n`
    (lengths in bytes, UTF-8, decimal), then the lowercase hex SHA-256 of the
    body (of no bytes when there is none) and `\\n`.
    """
    encoded = sorted(
        (name.encode("utf-8", "surrogatepass"), value.encode("utf-8", "surrogatepass"))
        for name, value in fields.items()
        if name != ES_SIGNATURE
    )
    parts = [ES_CANONICAL_PREFIX, b"%d\n%d\n" % (int(code), len(encoded))]
    for name, value in encoded:
        parts += [_netstring(name), b"=", _netstring(value), b"\n"]
    parts += [hashlib.sha256(body or b"").hexdigest().encode("ascii"), b"\n"]
    return b"".join(parts)


def signature_v1(content: bytes, secret_key: str) -> str:
    """base64(HMAC-SHA256(secret_key as UTF-8, content))."""
    return base64.b64encode(
        hmac.new(secret_key.encode("utf-8"), content, hashlib.sha256).digest()
    ).decode("ascii")


def sign_v1(
    code: int,
    fields: Mapping[str, str],
    body: bytes | None,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
    *,
    now_ms: int | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """`fields` with AccessKey, the version, a timestamp, a fresh nonce and esSignature over them all.

    A RocketMQ `Signature` left in `fields` is dropped (a request carries one scheme).
    """
    signed = {
        name: value for name, value in fields.items() if name not in (SIGNATURE, ES_SIGNATURE)
    }
    signed[ACCESS_KEY] = access_key
    if security_token is not None:
        signed[SECURITY_TOKEN] = security_token
    signed[ES_SIG_VERSION] = ES_VERSION_1
    signed[ES_TIMESTAMP] = str(time.time_ns() // 1_000_000 if now_ms is None else now_ms)
    signed[ES_NONCE] = os.urandom(16).hex() if nonce is None else nonce
    signed[ES_SIGNATURE] = signature_v1(canonical_v1(code, signed, body), secret_key)
    return signed


def verify_v1(code: int, fields: Mapping[str, str], body: bytes | None, secret_key: str) -> bool:
    """True if the request's esSignature is the one `secret_key` gives its code, fields and body."""
    given = fields.get(ES_SIGNATURE)
    if given is None:
        return False
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"),
        signature_v1(canonical_v1(code, fields, body), secret_key).encode("ascii"),
    )
