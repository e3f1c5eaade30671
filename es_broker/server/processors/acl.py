"""The ACL admin codes: accounts and the global white list changed over the wire (docs/semantics.md B-171..B-173).

As RocketMQ 4.9.8's AdminBrokerProcessor and PlainPermissionManager:

- UPDATE_AND_CREATE_ACL_CONFIG (50): header accessKey, secretKey, whiteRemoteAddress,
  admin, defaultTopicPerm, defaultGroupPerm, topicPerms and groupPerms (comma-separated
  NAME=PERM). Updates the account in the file that defines it, key by key, or adds it
  to the default plain_acl.yml. UPDATE_AND_CREATE_ACL_CONFIG_FAILED (209) otherwise.
- DELETE_ACL_CONFIG (51): header accessKey. DELETE_ACL_CONFIG_FAILED (210) when no file
  defines it.
- UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53): header globalWhiteAddrs (comma-separated) and
  optionally aclFileFullPath (one of the ACL files; default plain_acl.yml).
  UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED (211) otherwise.
- GET_BROKER_CLUSTER_ACL_INFO (52): response header version (the default file's
  dataVersion as JSON), allAclFileVersion (file path to dataVersion, JSON), brokerName,
  brokerAddr, clusterName.
- GET_BROKER_CLUSTER_ACL_CONFIG (54, 4.9.0; removed by 4.9.8): body {globalWhiteAddrs,
  plainAccessConfigs}, every secretKey masked.

Every write reads the file, changes one entry, bumps its dataVersion (counter + 1,
timestamp from the broker's clock), parses the result with es_broker/acl/plain.py (with
the other files, so an accessKey stays defined once) and only then replaces the file:
temp file in the same directory, fsync, rename, fsync of the directory. The new rules
are loaded (`AccessControl.check_reload(LoadCause.ADMIN, requester)`) before the answer
goes out. An update that would make the rules invalid is refused, the file unchanged.
Remarks and logs never carry a secret key.

With aclEnable=false the writes answer their FAILED code and the reads SYSTEM_ERROR,
each with the remark NOT_ENABLED (4.9.8: a NullPointerException, whose message is null,
for the writes; no answer at all for GET_BROKER_CLUSTER_ACL_INFO).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from es_broker.acl.access import AccessControl, LoadCause
from es_broker.acl.plain import (
    AclConfigError,
    DataVersion,
    Perm,
    PlainAclFile,
    combine,
    dump_tree,
    load_tree,
    next_version,
    parse_file,
    with_account,
    with_global_white,
    without_account,
)
from es_broker.net.channel import Channel
from es_broker.remoting import bodies
from es_broker.remoting.bodies import AclConfig, PlainAccessConfig
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.headers import (
    CreateAccessConfigRequestHeader,
    DeleteAccessConfigRequestHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
)
from es_broker.remoting.query_bodies import AclFileVersions, acl_version_text
from es_broker.remoting.response_headers import GetBrokerAclConfigResponseHeader
from es_broker.server.edge.remoting_server import Handler

log = logging.getLogger(__name__)

NOT_ENABLED = "ACL is not enabled on this broker (aclEnable=false)"
MASK = "******"  # what GET_BROKER_CLUSTER_ACL_CONFIG shows for every secretKey

Identity = Callable[[], tuple[str, str, str]]  # (clusterName, brokerName, brokerAddr)


class AclWriteError(Exception):
    """A change refused; the message is the remark (never a secret)."""


def _split(text: str | None) -> list[str] | None:
    """A comma-separated header list (UtilAll.split), without blanks; None when absent."""
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def wire_version(version: DataVersion) -> bodies.DataVersion:
    return bodies.DataVersion(timestamp=version.timestamp, counter=version.counter)


class AclProcessors:
    def __init__(
        self, access: AccessControl | None, now_ms: Callable[[], int], identity: Identity
    ) -> None:
        self.access = access
        self.now_ms = now_ms
        self.identity = identity

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: self.update_and_create_acl_config,
            RequestCode.DELETE_ACL_CONFIG: self.delete_acl_config,
            RequestCode.GET_BROKER_CLUSTER_ACL_INFO: self.get_broker_acl_config_version,
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: self.update_global_white_addrs_config,
            RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG: self.get_broker_cluster_acl_config,
        }

    # -- the codes -------------------------------------------------------------------------------
    async def update_and_create_acl_config(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        failed = ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
        if self.access is None:
            return response_to(req, failed, NOT_ENABLED)
        h = CreateAccessConfigRequestHeader.of(req)
        access_key = h.access_key
        changes: dict[str, Any] = {"accessKey": access_key}
        secret_key = h.secret_key
        if secret_key:
            changes["secretKey"] = secret_key
        if h.white_remote_address is not None:
            changes["whiteRemoteAddress"] = h.white_remote_address
        changes["admin"] = bool(h.admin)  # a Java boolean: absent is false
        for name, value in (
            ("defaultTopicPerm", h.default_topic_perm),
            ("defaultGroupPerm", h.default_group_perm),
        ):
            if value:
                changes[name] = value
        for name, text in (("topicPerms", h.topic_perms), ("groupPerms", h.group_perms)):
            items = _split(text)
            if items is not None:
                changes[name] = items
        where = self._file_of(access_key)
        try:
            if not secret_key:  # PlainPermissionManager#checkPlainAccessConfig, on an update too
                raise AclWriteError("secretKey is required and must be longer than 6 characters")
            self._write(where, lambda tree: with_account(tree, changes), channel, req)
        except AclWriteError as exc:
            return self._refuse(
                req, failed, f"accessKey {access_key}: not created or updated: {exc}"
            )
        return response_to(req, ResponseCode.SUCCESS)

    async def delete_acl_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        failed = ResponseCode.DELETE_ACL_CONFIG_FAILED
        if self.access is None:
            return response_to(req, failed, NOT_ENABLED)
        access_key = DeleteAccessConfigRequestHeader.of(req).access_key
        if access_key not in self.access.acl.accounts:
            return self._refuse(
                req, failed, f"accessKey {access_key}: not deleted: no ACL file defines it"
            )

        def delete(tree: dict[str, Any]) -> dict[str, Any]:
            out, found = without_account(tree, access_key)
            if not found:
                raise AclWriteError("the file no longer defines it")
            return out

        try:
            self._write(self._file_of(access_key), delete, channel, req)
        except AclWriteError as exc:
            return self._refuse(req, failed, f"accessKey {access_key}: not deleted: {exc}")
        return response_to(req, ResponseCode.SUCCESS)

    async def update_global_white_addrs_config(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        failed = ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
        if self.access is None:
            return response_to(req, failed, NOT_ENABLED)
        # blank: an empty list (nobody passes unsigned)
        h = UpdateGlobalWhiteAddrsConfigRequestHeader.of(req)
        patterns = _split(h.global_white_addrs)
        try:
            if patterns is None:
                raise AclWriteError(
                    "the header field globalWhiteAddrs is required (blank clears the list)"
                )
            where = self._named_file(h.acl_file_full_path)
            self._write(where, lambda tree: with_global_white(tree, patterns), channel, req)
        except AclWriteError as exc:
            return self._refuse(req, failed, f"globalWhiteRemoteAddresses not updated: {exc}")
        return response_to(req, ResponseCode.SUCCESS)

    async def get_broker_acl_config_version(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        if self.access is None:
            return response_to(req, ResponseCode.SYSTEM_ERROR, NOT_ENABLED)
        acl = self.access.acl
        default = str(self.access.sources.default_file)
        versions = AclFileVersions({f.path: wire_version(f.data_version) for f in acl.files})
        version = versions.versions.get(default, bodies.DataVersion())
        cluster, name, addr = self.identity()
        answer = GetBrokerAclConfigResponseHeader(
            version=acl_version_text(version),
            all_acl_file_version=versions.encode(),
            broker_name=name,
            broker_addr=addr,
            cluster_name=cluster,
        )
        return response_to(req, ResponseCode.SUCCESS, None, answer.to_fields())

    async def get_broker_cluster_acl_config(
        self, channel: Channel, req: RemotingCommand
    ) -> RemotingCommand:
        if self.access is None:
            return response_to(req, ResponseCode.SYSTEM_ERROR, NOT_ENABLED)
        acl = self.access.acl
        configs = tuple(
            PlainAccessConfig(
                access_key=account.access_key,
                secret_key=MASK,
                white_remote_address=account.white_remote_address.text or None,
                admin=account.admin,
                default_topic_perm=Perm.name(account.default_topic_perm),
                default_group_perm=Perm.name(account.default_group_perm),
                topic_perms=tuple(f"{name}={Perm.name(p)}" for name, p in account.topic_perms()),
                group_perms=tuple(f"{name}={Perm.name(p)}" for name, p in account.group_perms()),
            )
            for account in acl.accounts.values()
        )
        body = AclConfig(tuple(p.text for p in acl.global_white_remote_addresses), configs)
        return response_to(req, ResponseCode.SUCCESS, None, body=body.encode())

    # -- writing ---------------------------------------------------------------------------------
    def _file_of(self, access_key: str) -> Path:
        """The file that defines the account; the default file for a new one."""
        assert self.access is not None
        for acl_file in self.access.acl.files:
            if any(a.access_key == access_key for a in acl_file.accounts):
                return Path(acl_file.path)
        return self.access.sources.default_file

    def _named_file(self, name: str | None) -> Path:
        """aclFileFullPath: one of the files the rules are read from (default plain_acl.yml)."""
        assert self.access is not None
        if not name:
            return self.access.sources.default_file
        wanted = Path(name).resolve()
        if wanted not in self.access.sources.files():
            raise AclWriteError(f"aclFileFullPath {name} is not one of this broker's ACL files")
        return wanted

    def _refuse(self, req: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        log.warning("ACL admin request code %d refused: %s", req.code, remark)
        return response_to(req, code, remark)

    def _write(
        self,
        path: Path,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        channel: Channel,
        req: RemotingCommand,
    ) -> None:
        """Change `path` as `change` says, bump its dataVersion, check, replace, load. No await inside:
        no other request runs between the read and the reload (4.9.8's synchronized)."""
        access = self.access
        assert access is not None
        try:
            old = path.read_bytes()
            old_stat: os.stat_result | None = path.stat()
        except FileNotFoundError:
            old, old_stat = b"", None
        except OSError as exc:
            raise AclWriteError(f"{path} cannot be read: {exc.strerror}") from None
        try:
            tree, version = next_version(change(load_tree(path, old)), self.now_ms())
            data = dump_tree(tree)
            parsed = parse_file(path, data)
            others: list[PlainAclFile] = [f for f in access.acl.files if Path(f.path) != path]
            combine([*others, parsed])
        except AclConfigError as exc:
            raise AclWriteError(
                f"the result would not be a valid ACL file: {exc}; {path} is unchanged"
            ) from None
        requester = f"{req.access_key or 'anonymous'}@{channel.remote[0]}"
        _replace(path, data, old_stat)
        if not access.check_reload(LoadCause.ADMIN, requester=requester):
            reason = access.last_error or "the rules did not change"
            _replace(path, old, path.stat()) if old_stat is not None else path.unlink(
                missing_ok=True
            )
            access.check_reload(LoadCause.ADMIN, requester=requester)
            raise AclWriteError(f"written but not loaded ({reason}); {path} was restored")
        log.warning(
            "ACL admin request code %d by %s: %s is now dataVersion %d",
            req.code,
            requester,
            path,
            version.counter,
        )


def _replace(path: Path, data: bytes, old_stat: os.stat_result | None) -> None:
    """Write `data` to `path` atomically: a temp file beside it, fsync, rename, fsync of the directory.

    The modification time always moves forward, so the reload sees the change even on a clock
    tick shorter than the file system's timestamp granularity.
    """
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    # not *.yml: not read
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), (old_stat.st_mode & 0o7777) if old_stat is not None else 0o600)
            os.fsync(f.fileno())
        if old_stat is not None:
            now = os.stat(tmp).st_mtime_ns
            if now <= old_stat.st_mtime_ns:
                os.utime(tmp, ns=(now, old_stat.st_mtime_ns + 1_000_000))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
