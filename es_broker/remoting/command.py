"""`RemotingCommand`: one decoded frame, request or response (docs/protocol.md §2)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, overload

from es_broker import compiled

from .codes import CURRENT_VERSION, FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, SerializeType
from .errors import BadField, MissingField

_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)
# Java's Integer/Long.parseLong syntax: no blanks, no underscores, ASCII digits only
# (Python's int() is more lenient on all three).
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
# AclClientRPCHook's field naming the account that signed a request (SessionCredentials.ACCESS_KEY)
ACCESS_KEY = "AccessKey"


@dataclass(frozen=True, slots=True, repr=False)
class RemotingCommand:
    """A RocketMQ remoting command: the header fields of docs/protocol.md §2 plus the body.

    `ext_fields` always holds strings, as Java writes them; decoding converts
    the numbers and booleans ali-ons sends (docs/protocol.md §3). Use the typed
    accessors (`get_int`, `require_long`, ...) to read them back.
    """

    code: int
    language: LanguageCode = LanguageCode.JAVA
    version: int = CURRENT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON
    # the typed request header the server's dispatch decoded from ext_fields (requests.decode), read
    # by processors with `HeaderClass.of(request)`; None until then, and on responses
    header: Any = field(default=None, init=False, repr=False, compare=False)

    def with_opaque(self, opaque: int) -> RemotingCommand:
        """This command under another opaque (what a request sent again needs), without
        dataclasses.replace's per-call walk of the fields."""
        return RemotingCommand(
            self.code,
            self.language,
            self.version,
            opaque,
            self.flag,
            self.remark,
            self.ext_fields,
            self.body,
            self.serialize_type,
        )

    @property
    def is_response(self) -> bool:
        """True if flag bit 0 is set: the command answers one of our requests."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_request(self) -> bool:
        """True if flag bit 0 is clear."""
        return not self.flag & FLAG_RESPONSE

    @property
    def is_oneway(self) -> bool:
        """True if flag bit 1 is set: the sender wants no response (docs/protocol.md §5)."""
        return bool(self.flag & FLAG_ONEWAY)

    def __repr__(self) -> str:
        # Bodies can be megabytes of message data; show their size only.
        return (
            f"RemotingCommand(code={self.code}, language={self.language.name}, "
            f"version={self.version}, opaque={self.opaque}, flag={self.flag}, "
            f"remark={self.remark!r}, ext_fields={self.ext_fields!r}, "
            f"body=<{len(self.body)} bytes>, serialize_type={self.serialize_type.name})"
        )

    # -- the whole map, for the two readers that need every field ------------------

    def signature_fields(self) -> Mapping[str, str]:
        """Every extField, as a request signature covers them: RocketMQ's signs every value but
        `Signature`, es-broker's every name and value (es_broker/acl/signing.py). The ACL reads
        its keys (AccessKey, esNonce, ...) from this map because they are part of what is
        signed; every other reader goes through a header class (remoting/headers.py)."""
        return self.ext_fields

    @property
    def access_key(self) -> str | None:
        """The AccessKey a signed request names (AclClientRPCHook); None when unsigned."""
        return self.ext_fields.get(ACCESS_KEY)

    def signed_with(self, fields: dict[str, str]) -> RemotingCommand:
        """The request as its signer sends it: `fields` is the signer's answer, this request's
        fields plus the signature's (Credentials.sign_request)."""
        return dataclasses.replace(self, ext_fields=fields)

    def relayed(self, body: bytes) -> RemotingCommand:
        """This request passed on verbatim to the client it is about (GET_CONSUMER_RUNNING_INFO,
        CONSUME_MESSAGE_DIRECTLY: AdminBrokerProcessor forwards the admin's header as it came),
        with `body`; the opaque is the forwarding channel's to assign."""
        return request(self.code, self.ext_fields, body)

    def relayed_answer(self, answer: RemotingCommand) -> RemotingCommand:
        """A client's `answer` to a relayed request, passed back verbatim as the answer to this one."""
        return response_to(self, answer.code, answer.remark, answer.ext_fields, answer.body)

    # -- typed extFields accessors ---------------------------------------------

    def get_str(self, name: str, default: str | None = None) -> str | None:
        """The extField `name` as a string, or `default` if absent."""
        return self.ext_fields.get(name, default)

    def get_int(self, name: str, default: int | None = None) -> int | None:
        """The extField `name` as a Java int (32-bit), or `default` if absent.

        Raises `BadField` if present but not a decimal int in range.
        """
        raw = self.ext_fields.get(name)
        return default if raw is None else parse_integer(name, raw, _I32, "int")

    def get_long(self, name: str, default: int | None = None) -> int | None:
        """The extField `name` as a Java long (64-bit), or `default` if absent."""
        raw = self.ext_fields.get(name)
        return default if raw is None else parse_integer(name, raw, _I64, "long")

    @overload
    def get_bool(self, name: str, default: bool) -> bool: ...

    @overload
    def get_bool(self, name: str, default: None = None) -> bool | None: ...

    def get_bool(self, name: str, default: bool | None = None) -> bool | None:
        """The extField `name` as a boolean, or `default` if absent.

        Like Java's `Boolean.parseBoolean`: "true" in any case is True, any
        other text is False (so this never raises).
        """
        raw = self.ext_fields.get(name)
        return default if raw is None else raw.lower() == "true"

    def require_str(self, name: str) -> str:
        """The extField `name`; raises `MissingField` if absent."""
        raw = self.ext_fields.get(name)
        if raw is None:
            raise MissingField(name)
        return raw

    def require_int(self, name: str) -> int:
        """The extField `name` as a Java int; raises `MissingField` or `BadField`."""
        return parse_integer(name, self.require_str(name), _I32, "int")

    def require_long(self, name: str) -> int:
        """The extField `name` as a Java long; raises `MissingField` or `BadField`."""
        return parse_integer(name, self.require_str(name), _I64, "long")

    def require_bool(self, name: str) -> bool:
        """The extField `name` as a boolean (see `get_bool`); raises `MissingField`."""
        return self.require_str(name).lower() == "true"


def bind_header(cmd: RemotingCommand, header: object) -> None:
    """Attach the typed header decoded from `cmd`'s extFields (the one decode, at the server's edge).

    The command stays frozen for everything else: its fields are what was received.
    """
    object.__setattr__(cmd, "header", header)


def parse_integer(name: str, raw: str, bounds: tuple[int, int], kind: str) -> int:
    """`raw` as a Java int or long within `bounds`; raises `BadField` naming `name` and `kind`."""
    # ASCII digits only is what nearly every header holds: no regular expression for those
    if (raw.isascii() and raw.isdigit()) or _JAVA_INTEGER.fullmatch(raw):
        value = int(raw)
        if bounds[0] <= value <= bounds[1]:
            return value
    raise BadField(name, raw, kind)


def ext_value_to_str(value: object) -> str | None:
    """Canonical Java string form of an extFields value; None means "absent".

    Booleans become "true"/"false" (not Python's "True"), integers plain
    decimal, integral floats (what JavaScript numbers look like) decimal too.
    """
    if type(value) is str:
        return value
    if value is None:
        return None
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))  # int() so an IntEnum member gives digits, not its name
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:  # JavaScript prints these without ".0"
            return str(int(value))
        return repr(value)
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def normalize_ext_fields(fields: Mapping[str, object] | None) -> dict[str, str]:
    """Copy `fields` with every value in Java string form; None values are dropped."""
    if not fields:
        return {}
    out: dict[str, str] = {}
    for key, value in fields.items():
        text = ext_value_to_str(value)
        if text is not None:
            out[str(key)] = text
    return out


def with_ext_fields(cmd: RemotingCommand, ext_fields: dict[str, str]) -> RemotingCommand:
    """`cmd` with other extFields (taken as they are: strings already), every other field the same."""
    return dataclasses.replace(cmd, ext_fields=ext_fields)


class WritesFields(Protocol):
    """A typed header as `request` writes it: `CustomHeader` (header_fields.py, which builds on
    this module) gives the extFields that carry it for a request code."""

    def to_fields(self, code: int | None = None) -> dict[str, str]: ...


def request(
    code: int,
    header: WritesFields | Mapping[str, object] | None = None,
    body: bytes = b"",
    *,
    opaque: int = 0,
    oneway: bool = False,
    remark: str | None = None,
    language: LanguageCode = LanguageCode.JAVA,
    version: int = CURRENT_VERSION,
    serialize_type: SerializeType = SerializeType.JSON,
) -> RemotingCommand:
    """Build a request of `code` carrying `header`: its typed header (remoting/headers.py,
    es_headers.py), written as the class declares it (`to_fields(code)`), or None for a code
    whose header declares no fields.

    A mapping of extFields is taken too (values may be ints/bools, stored as Java's text): what
    tests use to send a header no class would write, and what a relay passes on as it came.
    """
    if header is None or isinstance(header, Mapping):
        fields = normalize_ext_fields(header)
    else:
        fields = header.to_fields(code)
    return RemotingCommand(
        code=int(code),
        language=language,
        version=version,
        opaque=opaque,
        flag=FLAG_ONEWAY if oneway else 0,
        remark=remark,
        ext_fields=fields,
        body=bytes(body),
        serialize_type=serialize_type,
    )


def response_to(
    request: RemotingCommand,
    code: int,
    remark: str | None = None,
    ext_fields: Mapping[str, object] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """Build the response to `request`.

    Copies the opaque and the serialize type (a client must get its answer in
    the header format it used, docs/protocol.md §3) and sets the response flag bit.
    """
    return RemotingCommand(
        code=int(code),
        language=LanguageCode.JAVA,
        version=CURRENT_VERSION,
        opaque=request.opaque,
        flag=FLAG_RESPONSE,
        remark=remark,
        ext_fields=normalize_ext_fields(ext_fields),
        body=bytes(body),
        serialize_type=request.serialize_type,
    )


# ---------------------------------------------------------------------- the compiled hot path
# The functions above, and the JSON header and frame codec of header.py and frames.py, are the
# reference. Their compiled twins (_codec.pyx, built by `pip install .`) replace them unless
# ES_BROKER_PURE_PYTHON is set (es_broker.compiled); they give equal commands and byte-identical
# frames, and hand anything unusual back to REFERENCE.
REFERENCE = {
    "ext_value_to_str": ext_value_to_str,
    "normalize_ext_fields": normalize_ext_fields,
    "response_to": response_to,
    "with_ext_fields": with_ext_fields,
}

codec = compiled.install(
    globals(), "es_broker.remoting._codec", "normalize_ext_fields", "response_to", "with_ext_fields"
)
