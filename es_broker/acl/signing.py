"""Request signatures as RocketMQ's AclClientRPCHook makes them and PlainAccessValidator checks them.

The signed content is the values of the request's extFields, sorted by name as
Java's TreeMap sorts strings (UTF-16 code units), without `Signature` and the
unique-key query flag, concatenated as UTF-8, followed by the body. The
signature is the base64 of its HmacSHA1 under the account's secret key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"
UNIQUE_KEY_QUERY = (
    "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG: set after signing, never signed
)

UNSIGNED = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})


@dataclass(frozen=True, slots=True)
class Credentials:
    """An account's keys, as the Java client's SessionCredentials (the secret never leaves this side)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:
        return f"Credentials(access_key={self.access_key!r}, secret_key=<hidden>)"

    def sign(self, fields: Mapping[str, str], body: bytes | None) -> dict[str, str]:
        return sign(fields, body, self.access_key, self.secret_key, self.security_token)


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
