"""plain_acl.yml: RocketMQ 4.9.8's plain ACL file, parsed into frozen, validated rules.

The file's keys are RocketMQ's (distribution/conf/plain_acl.yml,
PlainPermissionManager#load): `globalWhiteRemoteAddresses`, `accounts` (each
with `accessKey`, `secretKey`, `whiteRemoteAddress`, `admin`,
`defaultTopicPerm`, `defaultGroupPerm`, `topicPerms`, `groupPerms`) and
`dataVersion`. Where RocketMQ quietly reads a mistake as DENY or drops it
(an unknown perm, a misspelt key, an accessKey given twice), es-broker
refuses the file and says where: a typo in an ACL file must not silently
change who may do what. Error messages never contain a secret key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from es_broker.acl.addresses import AddressPattern, AddressPatternError, parse_pattern

RETRY_GROUP_TOPIC_PREFIX = (
    "%RETRY%"  # MixAll.RETRY_GROUP_TOPIC_PREFIX: a group is checked as its retry topic
)
ACCESS_KEY_MIN_LENGTH = 6  # AclConstants: keys must be longer than this
SECRET_KEY_MIN_LENGTH = 6


class Perm:
    """Permission bits (acl/common/Permission.java)."""

    DENY = 1
    ANY = 1 << 1
    PUB = 1 << 2
    SUB = 1 << 3

    NAMES: Mapping[str, int] = {
        "DENY": DENY,
        "PUB": PUB,
        "SUB": SUB,
        "PUB|SUB": PUB | SUB,
        "SUB|PUB": PUB | SUB,
    }

    @staticmethod
    def check(needed: int, owned: int) -> bool:
        """Permission#checkPermission: DENY refuses everything; ANY is PUB or SUB; else the bits must meet."""
        if owned & Perm.DENY:
            return False
        if needed & Perm.ANY:
            return bool(owned & (Perm.PUB | Perm.SUB))
        return bool(needed & owned)

    @staticmethod
    def name(perm: int) -> str:
        for name, bits in Perm.NAMES.items():
            if bits == perm:
                return name
        return str(perm)


class AclConfigError(ValueError):
    """An ACL file that cannot be used; the message names the file and the entry."""


def group_resource(group: str) -> str:
    """The resource a group's perms are kept under: its retry topic, as RocketMQ keeps them."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def is_group_resource(resource: str) -> bool:
    return resource.startswith(RETRY_GROUP_TOPIC_PREFIX)


def describe_resource(resource: str) -> str:
    """PlainAccessResource#printStr: `group:G` for a retry topic, `topic:T` otherwise."""
    if is_group_resource(resource):
        return f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX) :]}"
    return f"topic:{resource}"


@dataclass(frozen=True, slots=True)
class Account:
    """One entry of `accounts`. The secret key is never shown by repr."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressPattern
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    resource_perms: Mapping[str, int]  # topics by name, groups by retry topic (group_resource)

    def perm_for(self, resource: str) -> int:
        owned = self.resource_perms.get(resource)
        if owned is None:
            return (
                self.default_group_perm if is_group_resource(resource) else self.default_topic_perm
            )
        return owned

    @property
    def has_every_perm(self) -> bool:
        """An admin account that lists no resource perms may do everything (PlainPermissionManager#checkPerm)."""
        return self.admin and not self.resource_perms

    def may(self, resource: str, needed: int) -> bool:
        """The perm step of the access check for one resource."""
        return self.has_every_perm or Perm.check(needed, self.perm_for(resource))

    def topic_perms(self) -> list[tuple[str, int]]:
        """(topic, perm) of the topics this account lists."""
        return [(r, p) for r, p in self.resource_perms.items() if not is_group_resource(r)]

    def group_perms(self) -> list[tuple[str, int]]:
        """(group, perm) of the groups this account lists (kept under their retry topics)."""
        return [
            (r[len(RETRY_GROUP_TOPIC_PREFIX) :], p)
            for r, p in self.resource_perms.items()
            if is_group_resource(r)
        ]


@dataclass(frozen=True, slots=True)
class DataVersion:
    """The file's `dataVersion` (its first element), as RocketMQ's DataVersion."""

    timestamp: int = 0
    counter: int = 0


@dataclass(frozen=True, slots=True)
class PlainAclFile:
    """One parsed file."""

    path: str
    digest: str  # sha256 of its bytes
    global_white_remote_addresses: tuple[AddressPattern, ...]
    accounts: tuple[Account, ...]
    data_version: DataVersion


@dataclass(frozen=True, slots=True)
class PlainAcl:
    """The rules in force: every file's white list and accounts (an accessKey is defined in one file)."""

    files: tuple[PlainAclFile, ...]
    global_white_remote_addresses: tuple[AddressPattern, ...]
    accounts: Mapping[str, Account]

    @property
    def data_version(self) -> DataVersion:
        """The first file's dataVersion (RocketMQ reports the default file's)."""
        return self.files[0].data_version if self.files else DataVersion()

    def summary(self) -> str:
        """One line for the log: files, accounts (by accessKey), white-list entries; never a secret."""
        keys = ", ".join(sorted(self.accounts)) or "none"
        return (
            f"{len(self.files)} file(s), accounts: {keys}; "
            f"{len(self.global_white_remote_addresses)} global white-list pattern(s)"
        )


TOP_KEYS = frozenset({"globalWhiteRemoteAddresses", "accounts", "dataVersion"})
ACCOUNT_KEYS = frozenset(
    {
        "accessKey",
        "secretKey",
        "whiteRemoteAddress",
        "admin",
        "defaultTopicPerm",
        "defaultGroupPerm",
        "topicPerms",
        "groupPerms",
    }
)


def parse_file(path: str | Path, data: bytes) -> PlainAclFile:
    """Parse one plain_acl.yml's bytes; AclConfigError names the file and what is wrong."""
    import yaml  # here, not at the top: a broker without ACL never parses YAML

    where = str(path)
    try:
        tree = yaml.safe_load(data)
    except (
        yaml.MarkedYAMLError
    ) as exc:  # the message alone: the context snippet could show a secret
        mark = exc.problem_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise AclConfigError(f"{where}: not valid YAML{at}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise AclConfigError(f"{where}: not valid YAML: {type(exc).__name__}") from None
    digest = hashlib.sha256(data).hexdigest()
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise AclConfigError(
            f"{where}: the top level must be a mapping (globalWhiteRemoteAddresses, accounts, "
            f"dataVersion), got {_kind(tree)}"
        )
    unknown = sorted(str(k) for k in tree if k not in TOP_KEYS)
    if unknown:
        raise AclConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; expected {', '.join(sorted(TOP_KEYS))}"
        )
    white = tuple(
        _pattern(where, f"globalWhiteRemoteAddresses[{i}]", item)
        for i, item in enumerate(
            _list(where, "globalWhiteRemoteAddresses", tree.get("globalWhiteRemoteAddresses"))
        )
    )
    accounts: list[Account] = []
    seen: set[str] = set()
    for i, entry in enumerate(_list(where, "accounts", tree.get("accounts"))):
        account = _account(where, i, entry)
        if account.access_key in seen:
            raise AclConfigError(
                f"{where}: accounts[{i}]: accessKey {account.access_key!r} is defined twice"
            )
        seen.add(account.access_key)
        accounts.append(account)
    return PlainAclFile(
        where, digest, white, tuple(accounts), _data_version(where, tree.get("dataVersion"))
    )


def combine(files: list[PlainAclFile]) -> PlainAcl:
    """The rules of several files (ROCKETMQ_HOME/conf/acl/*.yml and the default file).

    RocketMQ keeps the first file's account when an accessKey is defined in
    two files and warns; es-broker refuses, as the intent is ambiguous.
    """
    accounts: dict[str, Account] = {}
    owner: dict[str, str] = {}
    white: list[AddressPattern] = []
    for acl_file in files:
        white.extend(acl_file.global_white_remote_addresses)
        for account in acl_file.accounts:
            if account.access_key in owner:
                raise AclConfigError(
                    f"accessKey {account.access_key!r} is defined in both {owner[account.access_key]}"
                    f" and {acl_file.path}"
                )
            owner[account.access_key] = acl_file.path
            accounts[account.access_key] = account
    return PlainAcl(tuple(files), tuple(white), accounts)


def _kind(value: Any) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "text",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "nothing",
    }.get(type(value), type(value).__name__)


def _list(where: str, name: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclConfigError(f"{where}: {name} must be a list, got {_kind(value)}")
    return value


def _text(where: str, name: str, value: Any) -> str | None:
    """A scalar as Java's fastjson reads it into a String field (numbers become their digits)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise AclConfigError(f"{where}: {name} must be text, got a boolean")
    if isinstance(value, int | float | str):
        return str(value)
    raise AclConfigError(f"{where}: {name} must be text, got {_kind(value)}")


def _pattern(where: str, name: str, value: Any) -> AddressPattern:
    try:
        return parse_pattern(_text(where, name, value))
    except AddressPatternError as exc:
        raise AclConfigError(f"{where}: {name}: {exc}") from None


def _perm(where: str, name: str, value: Any) -> int:
    text = _text(where, name, value)
    if text is None:
        return Perm.DENY  # Permission#parsePermFromString(null)
    perm = Perm.NAMES.get(text.strip())
    if perm is None:
        raise AclConfigError(
            f"{where}: {name} must be DENY, PUB, SUB or PUB|SUB, got {text.strip()[:40]!r}"
        )
    return perm


def _account(where: str, index: int, entry: Any) -> Account:
    at = f"accounts[{index}]"
    if not isinstance(entry, dict):
        raise AclConfigError(f"{where}: {at} must be a mapping, got {_kind(entry)}")
    access_key = _text(where, f"{at}.accessKey", entry.get("accessKey"))
    if access_key is None or len(access_key) <= ACCESS_KEY_MIN_LENGTH:
        raise AclConfigError(
            f"{where}: {at}: accessKey is required and must be longer than "
            f"{ACCESS_KEY_MIN_LENGTH} characters"
        )
    at = f"{at} (accessKey {access_key!r})"
    unknown = sorted(str(k) for k in entry if k not in ACCOUNT_KEYS)
    if unknown:
        raise AclConfigError(f"{where}: {at}: unknown key(s) {', '.join(unknown)}")
    if isinstance(entry.get("secretKey"), dict | list):
        raise AclConfigError(f"{where}: {at}: secretKey must be text")
    secret_key = _text(where, f"{at}.secretKey", entry.get("secretKey"))
    if secret_key is None or len(secret_key) <= SECRET_KEY_MIN_LENGTH:  # the value is never shown
        raise AclConfigError(
            f"{where}: {at}: secretKey is required and must be longer than "
            f"{SECRET_KEY_MIN_LENGTH} characters"
        )
    admin = entry.get("admin", False)
    if admin is None:
        admin = False
    if not isinstance(admin, bool):
        raise AclConfigError(f"{where}: {at}: admin must be true or false, got {_kind(admin)}")
    perms: dict[str, int] = {}
    for key, is_topic in (("topicPerms", True), ("groupPerms", False)):
        for i, item in enumerate(_list(where, f"{at}.{key}", entry.get(key))):
            text = _text(where, f"{at}.{key}[{i}]", item) or ""
            # StringUtils.split drops empty tokens
            items = [part for part in text.split("=") if part]
            if len(items) != 2 or not items[0].strip():
                raise AclConfigError(
                    f"{where}: {at}.{key}[{i}]: expected NAME=PERM (e.g. topicA=SUB), "
                    f"got {text[:80]!r}"
                )
            name = items[0].strip()
            resource = name if is_topic else group_resource(name)
            perms[resource] = _perm(where, f"{at}.{key}[{i}]", items[1])
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white_remote_address=_pattern(
            where, f"{at}.whiteRemoteAddress", entry.get("whiteRemoteAddress")
        ),
        admin=admin,
        default_topic_perm=_perm(where, f"{at}.defaultTopicPerm", entry.get("defaultTopicPerm")),
        default_group_perm=_perm(where, f"{at}.defaultGroupPerm", entry.get("defaultGroupPerm")),
        resource_perms=perms,
    )


def _data_version(where: str, value: Any) -> DataVersion:
    items = _list(where, "dataVersion", value)
    if not items:
        return DataVersion()
    first = items[0]
    if not isinstance(first, dict):
        raise AclConfigError(
            f"{where}: dataVersion[0] must be a mapping with timestamp and counter"
        )
    out = {}
    for name in ("timestamp", "counter"):
        raw = first.get(name, 0)
        if isinstance(raw, bool) or not isinstance(raw, int) or not -(1 << 63) <= raw < (1 << 63):
            raise AclConfigError(f"{where}: dataVersion[0].{name} must be a long, got {_kind(raw)}")
        out[name] = raw
    return DataVersion(**out)


# -- writing (the ACL admin codes, es_broker/server/processors/acl.py) ---------------------------
# As PlainPermissionManager 4.9.8 does: the file is read as a plain YAML tree, one entry is changed,
# dataVersion is bumped and the whole tree written back (comments are not kept, as in RocketMQ).
# The result is parsed with `parse_file` before it may replace anything.


def load_tree(path: str | Path, data: bytes) -> dict[str, Any]:
    """A file's YAML as a mapping (an empty file is an empty mapping); AclConfigError otherwise."""
    import yaml

    try:
        tree = yaml.safe_load(data)
    except yaml.YAMLError:
        raise AclConfigError(
            f"{path}: not valid YAML; fix the file by hand before changing it"
        ) from None
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise AclConfigError(f"{path}: the top level must be a mapping, got {_kind(tree)}")
    return tree


def with_account(tree: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """The tree with the account `changes["accessKey"]` created, or updated key by key.

    Only the keys given in `changes` replace the stored ones (PlainPermissionManager#createAclAccessConfigMap);
    a new account goes at the end of `accounts`.
    """
    out = dict(tree)
    if not isinstance(out.get("accounts") or [], list):
        raise AclConfigError("accounts must be a list")
    accounts = [dict(a) if isinstance(a, dict) else a for a in (out.get("accounts") or [])]
    key = changes["accessKey"]
    for i, account in enumerate(accounts):
        if isinstance(account, dict) and _text("", "accessKey", account.get("accessKey")) == key:
            accounts[i] = {**account, **changes}
            break
    else:
        accounts.append(dict(changes))
    out["accounts"] = accounts
    return out


def without_account(tree: dict[str, Any], access_key: str) -> tuple[dict[str, Any], bool]:
    """The tree without the account `access_key`, and whether there was one."""
    out = dict(tree)
    accounts = out.get("accounts") or []
    if not isinstance(accounts, list):
        raise AclConfigError("accounts must be a list")
    kept = [
        a
        for a in accounts
        if not (isinstance(a, dict) and _text("", "accessKey", a.get("accessKey")) == access_key)
    ]
    out["accounts"] = kept
    return out, len(kept) != len(accounts)


def with_global_white(tree: dict[str, Any], patterns: list[str]) -> dict[str, Any]:
    return {**tree, "globalWhiteRemoteAddresses": list(patterns)}


def next_version(tree: dict[str, Any], now_ms: int) -> tuple[dict[str, Any], DataVersion]:
    """DataVersion#nextVersion on the tree's dataVersion: counter + 1, the timestamp `now_ms`."""
    counter = 0
    items = tree.get("dataVersion")
    if isinstance(items, list) and items and isinstance(items[0], dict):
        raw = items[0].get("counter", 0)
        if isinstance(raw, int) and not isinstance(raw, bool):
            counter = raw
    version = DataVersion(timestamp=now_ms, counter=counter + 1)
    return {
        **tree,
        "dataVersion": [{"counter": version.counter, "timestamp": version.timestamp}],
    }, version


_ORDER = ("globalWhiteRemoteAddresses", "accounts", "dataVersion")


def dump_tree(tree: Mapping[str, Any]) -> bytes:
    """The tree as plain_acl.yml text RocketMQ reads: block style, RocketMQ's key order, no comments."""
    import yaml

    ordered = {k: tree[k] for k in _ORDER if k in tree}
    ordered.update((k, v) for k, v in tree.items() if k not in ordered)
    return yaml.safe_dump(
        ordered, default_flow_style=False, sort_keys=False, allow_unicode=True
    ).encode()
