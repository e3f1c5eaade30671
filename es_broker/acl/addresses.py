"""Remote-address patterns of plain_acl.yml, as RocketMQ's RemoteAddressStrategyFactory reads them.

The forms (4.9.8 `acl/.../plain/RemoteAddressStrategyFactory.java`, `AclUtils.java`):

- blank (absent, empty): matches nothing (BlankRemoteAddressStrategy);
- `*`, `*.*.*.*`, `*:*:*:*:*:*:*:*`: matches every address (NullRemoteAddressStrategy);
- `192.168.1.{1,2,3}`, `1050::0005:{600,700}`: the prefix with each listed last part;
- `192.168.1.1,192.168.1.2`: a list of exact addresses;
- `192.168.*.*`, `192.168.1.1-100`, `1050:0:0:0:5:600:300c:*`, `...:1-ff`: ranges;
- anything else: one exact IPv4 or IPv6 address.

Addresses are compared as `ipaddress` objects, so IPv6 spellings (`::1`,
`0:0:0:0:0:0:0:1`) are equal, and an IPv4-mapped IPv6 peer (`::ffff:10.0.0.1`)
matches its IPv4 pattern. Ranges check every part (Java checks only the first
wildcard or range part; a pattern such as `192.*.1.*` is therefore stricter
here: its third part must be 1).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressPatternError(ValueError):
    """A whiteRemoteAddress / globalWhiteRemoteAddresses entry that is not one of the forms."""


def parse_host(host: str) -> IPAddress | None:
    """A peer's host as an address (IPv4-mapped IPv6 as IPv4); None if it is not an IP address."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """One parsed pattern; `match` tells whether a peer's address is covered."""

    text: str
    kind: str  # "blank" | "any" | "set" | "range"
    addresses: frozenset[IPAddress] = frozenset()
    # a range: per part (4 for IPv4, 8 for IPv6) the inclusive bounds
    version: int = 4
    bounds: tuple[tuple[int, int], ...] = ()

    def match(self, address: IPAddress | None) -> bool:
        kind = self.kind
        if kind == "any":
            return True
        if address is None or kind == "blank":
            return False
        if kind == "set":
            return address in self.addresses
        if address.version != self.version:
            return False
        parts: bytes | list[int]
        if self.version == 4:
            parts = address.packed
        else:
            packed = address.packed
            parts = [packed[i] << 8 | packed[i + 1] for i in range(0, 16, 2)]
        return all(lo <= part <= hi for part, (lo, hi) in zip(parts, self.bounds, strict=True))


BLANK = AddressPattern("", "blank")
ANY_FORMS = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


def parse_pattern(text: str | None) -> AddressPattern:
    """Parse one pattern; AddressPatternError names it and what is wrong."""
    if text is None or not text.strip():
        return BLANK
    text = text.strip()
    if text in ANY_FORMS:
        return AddressPattern(text, "any")
    if text.endswith("}"):
        return _braces(text)
    if "," in text:
        return AddressPattern(
            text, "set", frozenset(_exact(text, part) for part in text.split(",") if part)
        )
    if "*" in text or "-" in text:
        return _range(text)
    return AddressPattern(text, "set", frozenset({_exact(text, text)}))


def _exact(pattern: str, part: str) -> IPAddress:
    address = parse_host(part.strip()) if ":" in part or part.count(".") == 3 else None
    if address is None:
        raise AddressPatternError(
            f"remote address {pattern!r}: {part.strip()!r} is not an IPv4 or IPv6 address"
        )
    return address


def _braces(text: str) -> AddressPattern:
    head, brace, listed = text.partition("{")
    if not brace or "{" in listed or not listed.endswith("}"):
        raise AddressPatternError(
            f"remote address {text!r}: the list in braces must be the last part"
        )
    if ":" not in text and (head.count(".") != 3 or not head.endswith(".")):
        raise AddressPatternError(
            f"remote address {text!r}: the list in braces must be the fourth part"
        )
    if ":" in text and not head.endswith(":"):
        raise AddressPatternError(
            f"remote address {text!r}: the list in braces must be the last part"
        )
    items = [item.strip() for item in listed[:-1].split(",") if item.strip()]
    if not items:
        raise AddressPatternError(f"remote address {text!r}: the list in braces is empty")
    return AddressPattern(text, "set", frozenset(_exact(text, head + item) for item in items))


def _range(text: str) -> AddressPattern:
    if ":" in text:
        return _range6(text)
    parts = text.split(".")
    if len(parts) != 4:
        raise AddressPatternError(f"remote address {text!r}: an IPv4 range has four parts")
    bounds = tuple(_bounds(text, part, 255, 10) for part in parts)
    if "*" in parts[0] or "-" in parts[0]:
        raise AddressPatternError(f"remote address {text!r}: the first part must be a number")
    return AddressPattern(text, "range", version=4, bounds=bounds)


def _range6(text: str) -> AddressPattern:
    if "*" in text and not text.endswith("*"):
        raise AddressPatternError(
            f"remote address {text!r}: '*' must be the last part of an IPv6 range"
        )
    if text.count("::") > 1:
        raise AddressPatternError(f"remote address {text!r}: '::' may appear once")
    if "::" in text:
        left, _, right = text.partition("::")
        lparts = left.split(":") if left else []
        rparts = right.split(":") if right else []
        missing = 8 - len(lparts) - len(rparts)
        if missing < 1:
            raise AddressPatternError(f"remote address {text!r}: more than eight parts")
        parts = [*lparts, *(["0"] * missing), *rparts]
    else:
        parts = text.split(":")
    if len(parts) != 8:
        raise AddressPatternError(f"remote address {text!r}: an IPv6 range has eight parts")
    return AddressPattern(
        text, "range", version=6, bounds=tuple(_bounds(text, p, 0xFFFF, 16) for p in parts)
    )


def _bounds(text: str, part: str, top: int, base: int) -> tuple[int, int]:
    part = part.strip()
    if part == "*":
        return (0, top)
    try:
        if "-" in part:
            lo_text, _, hi_text = part.partition("-")
            lo, hi = int(lo_text, base), int(hi_text, base)
        else:
            lo = hi = int(part, base)
    except ValueError:
        raise AddressPatternError(
            f"remote address {text!r}: {part!r} is not a number, '*' or 'a-b'"
        ) from None
    if not (0 <= lo <= hi <= top) or part.startswith(("+", "-")):
        raise AddressPatternError(
            f"remote address {text!r}: {part!r} is not within 0..{top:{'d' if base == 10 else 'x'}}"
            " with start <= end"
        )
    return (lo, hi)
