"""Who a 5.x request comes from: its `authorization` metadata checked against the plain ACL.

A RocketMQ 5 client signs every call: `authorization: MQv2-HMAC-SHA1
Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>`, the
signature being HMAC-SHA1 of the `x-mq-date-time` header's text keyed with the
secret key. The proxy reads the same plain_acl.yml files as the brokers (given
with --acl-file / the broker's ACL sources), so a 5.x client signs with the
accounts 4.x clients use; a request that does not verify ends with the gRPC
status UNAUTHENTICATED before anything reaches a broker. Permissions are the
brokers' to check: the proxy forwards as the account (cluster.py).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Mapping
from pathlib import Path

import grpc

from es_broker.acl.access import AclSources
from es_broker.acl.plain import Account, AclConfigError, PlainAcl, combine, parse_file
from es_broker.proxy.status import Abort

log = logging.getLogger(__name__)

_AUTHORIZATION = re.compile(
    r"^MQv2-HMAC-SHA1 Credential=(?P<ak>[^,\s]*), ?SignedHeaders=(?P<signed>[^,\s]+), ?"
    r"Signature=(?P<sig>[0-9A-Fa-f]+)$"
)
DATE_HEADER = "x-mq-date-time"


def _unauthenticated(why: str) -> Abort:
    return Abort(grpc.StatusCode.UNAUTHENTICATED, why)


class Authenticator:
    """The accounts of the ACL files, read again when one of the files changes."""

    def __init__(self, sources: AclSources | None) -> None:
        self.sources = sources
        self._stamp: tuple[tuple[str, int, int], ...] = ()
        self._acl: PlainAcl | None = None
        if sources is not None:
            self._acl = self._load()

    @property
    def enabled(self) -> bool:
        return self.sources is not None

    def _files_stamp(self) -> tuple[tuple[str, int, int], ...]:
        assert self.sources is not None
        out = []
        for path in self.sources.files():
            try:
                st = path.stat()
                out.append((str(path), st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((str(path), -1, -1))
        return tuple(out)

    def _load(self) -> PlainAcl:
        assert self.sources is not None
        self._stamp = self._files_stamp()
        files = []
        for path in self.sources.files():
            try:
                files.append(parse_file(path, Path(path).read_bytes()))
            except OSError as exc:
                raise AclConfigError(f"{path}: cannot be read: {exc.strerror}") from None
        return combine(files)

    def _rules(self) -> PlainAcl:
        assert self._acl is not None
        if self._files_stamp() != self._stamp:
            try:
                self._acl = self._load()
            except AclConfigError as exc:  # the rules in force stay, as the broker keeps them
                log.warning("the ACL files changed but cannot be used: %s", exc)
        return self._acl

    def account(self, metadata: Mapping[str, str]) -> Account | None:
        """The account a call is signed by; None without ACL. Raises Abort(UNAUTHENTICATED)."""
        if self.sources is None:
            return None
        header = metadata.get("authorization")
        if not header:
            raise _unauthenticated("the call is not signed: no authorization metadata")
        match = _AUTHORIZATION.match(header)
        if match is None:
            raise _unauthenticated("the authorization metadata is not MQv2-HMAC-SHA1 Credential=…")
        if match["signed"].lower() != DATE_HEADER:
            raise _unauthenticated(f"the signature must cover {DATE_HEADER} alone")
        date = metadata.get(DATE_HEADER)
        if not date:
            raise _unauthenticated(f"the signed header {DATE_HEADER} is missing")
        account = self._rules().accounts.get(match["ak"])
        if account is None:
            raise _unauthenticated(f"no account has the accessKey {match['ak']!r}")
        expected = hmac.new(account.secret_key.encode(), date.encode(), hashlib.sha1).hexdigest()
        if not hmac.compare_digest(expected, match["sig"].lower()):
            raise _unauthenticated(f"the signature of accessKey {match['ak']!r} does not match")
        return account
