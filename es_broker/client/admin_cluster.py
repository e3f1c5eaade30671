"""The admin client's broker requests: runtime, settings, ACL and message counts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from es_broker.client.admin_base import AdminBase, AdminError
from es_broker.remoting.admin_bodies import CleanPassResult
from es_broker.remoting.bodies import (
    AclConfig,
    DataVersion,
    KVTable,
)
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.remoting.es_headers import (
    HaSwitchRequestHeader,
    HaSwitchResponseHeader,
    HistoryArchiveRequestHeader,
    StatsHistoryRequestHeader,
)
from es_broker.remoting.headers import (
    CreateAccessConfigRequestHeader,
    DeleteAccessConfigRequestHeader,
    TopicRequestHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from es_broker.remoting.query_bodies import AclFileVersions, acl_version_text, read_acl_version
from es_broker.remoting.response_headers import GetBrokerAclConfigResponseHeader
from es_broker.remoting.stats_bodies import BrokerStatsData, GroupList, StatsHistoryBody


@dataclass(frozen=True, slots=True)
class AclVersionInfo:
    """GET_BROKER_CLUSTER_ACL_INFO's header fields: the broker, its default ACL file's
    dataVersion (None: not sent) and every ACL file's."""

    cluster_name: str | None
    broker_name: str | None
    broker_addr: str | None
    version: DataVersion | None
    all_versions: AclFileVersions

    def __json_view__(self) -> dict[str, Any]:
        """As mqadmin's verb prints it: the header fields, the versions as JSON objects."""
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "brokerAddr": self.broker_addr,
            "version": json.loads(acl_version_text(self.version)) if self.version else {},
            "allAclFileVersion": json.loads(self.all_versions.encode()),
        }


class ClusterAdmin(AdminBase):
    """Brokers: runtime, fail-over, settings, clean passes, the history archive, ACL, counts."""

    async def broker_runtime(self, addr: str) -> dict[str, str]:
        r = await self._ok(addr, "broker status", request(RequestCode.GET_BROKER_RUNTIME_INFO))
        return KVTable.decode(r.body).table

    async def ha_switch(self, addr: str, to: str) -> dict[str, str]:
        """HA_SWITCH (B-386): the leader at addr hands its group's leader key to follower node `to`."""
        r = await self._ok(
            addr,
            "switch-over",
            request(EsRequestCode.HA_SWITCH, HaSwitchRequestHeader(to=to)),
            timeout=60.0,
            allowed=(ResponseCode.SUCCESS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED),
        )
        if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:  # served only with a coordinator
            raise AdminError(
                f"switch-over: {addr} runs without the automatic fail-over "
                "(broker.conf's ha_coordinator is empty), so it has no follower to hand over to",
                r,
            )
        return HaSwitchResponseHeader.of(r).to_fields()

    # ------------------------------------------------------------------ broker operations
    async def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings as it runs (its secret key left out)."""
        r = await self._ok(addr, "broker config", request(RequestCode.GET_BROKER_CONFIG))
        out: dict[str, str] = {}
        for line in (r.body or b"").decode("utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key] = value
        return out

    async def update_broker_config(self, addr: str, settings: dict[str, str]) -> None:
        """UPDATE_BROKER_CONFIG: key=value lines, as java.util.Properties writes them."""
        body = "".join(f"{k}={v}\n" for k, v in settings.items()).encode()
        await self._ok(
            addr, "update broker config", request(RequestCode.UPDATE_BROKER_CONFIG, body=body)
        )

    async def delete_expired_commitlog(self, addr: str) -> CleanPassResult:
        """DELETE_EXPIRED_COMMITLOG: one manual clean pass now (expired files only)."""
        r = await self._ok(
            addr, "delete expired commit log", request(RequestCode.DELETE_EXPIRED_COMMITLOG)
        )
        return CleanPassResult.decode(r.body) if r.body else CleanPassResult()

    async def history_archive(self, addr: str, before: int, timeout: float) -> dict[str, Any]:
        """HISTORY_ARCHIVE (B-411): the broker seals what it may before `before`; what it sealed."""
        r = await self._ok(
            addr,
            "seal the log's old segments",
            request(EsRequestCode.HISTORY_ARCHIVE, HistoryArchiveRequestHeader(before=before)),
            timeout,
        )
        answer: dict[str, Any] = json.loads(r.body)
        return answer

    # ------------------------------------------------------------------ ACL (mqadmin's acl verbs)
    async def update_acl_config(
        self,
        addr: str,
        access_key: str,
        secret_key: str,
        *,
        white_remote_address: str | None = None,
        admin: bool = False,
        default_topic_perm: str | None = None,
        default_group_perm: str | None = None,
        topic_perms: list[str] | None = None,
        group_perms: list[str] | None = None,
    ) -> None:
        """UPDATE_AND_CREATE_ACL_CONFIG: create the account, or update the keys given (None: kept)."""
        header = CreateAccessConfigRequestHeader(
            access_key=access_key,
            secret_key=secret_key,
            white_remote_address=white_remote_address,
            admin=admin,
            default_topic_perm=default_topic_perm,
            default_group_perm=default_group_perm,
            topic_perms=None if topic_perms is None else ",".join(topic_perms),
            group_perms=None if group_perms is None else ",".join(group_perms),
        )
        await self._ok(
            addr,
            f"update ACL account {access_key} on {addr}",
            request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, header),
        )

    async def delete_acl_config(self, addr: str, access_key: str) -> None:
        await self._ok(
            addr,
            f"delete ACL account {access_key} on {addr}",
            request(
                RequestCode.DELETE_ACL_CONFIG,
                DeleteAccessConfigRequestHeader(access_key=access_key),
            ),
        )

    async def update_global_white_addrs(
        self, addr: str, addrs: list[str], acl_file: str | None = None
    ) -> None:
        header = UpdateGlobalWhiteAddrsConfigRequestHeader(
            global_white_addrs=",".join(addrs), acl_file_full_path=acl_file or None
        )
        await self._ok(
            addr,
            f"update the global white list on {addr}",
            request(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, header),
        )

    async def acl_config_version(self, addr: str) -> AclVersionInfo:
        """GET_BROKER_CLUSTER_ACL_INFO: the broker, its default file's dataVersion and every file's."""
        r = await self._ok(
            addr, f"ACL config version of {addr}", request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
        )
        f = GetBrokerAclConfigResponseHeader.of(r)
        return AclVersionInfo(
            cluster_name=f.cluster_name,
            broker_name=f.broker_name,
            broker_addr=f.broker_addr,
            version=read_acl_version(f.version) if f.version else None,
            all_versions=AclFileVersions.decode(f.all_acl_file_version),
        )

    async def acl_config(self, addr: str) -> AclConfig:
        """GET_BROKER_CLUSTER_ACL_CONFIG (4.9.0's): the global white list and the accounts, secrets masked."""
        r = await self._ok(
            addr, f"ACL config of {addr}", request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        )
        return AclConfig.decode(r.body)

    # ------------------------------------------------------------------ message counts
    async def broker_stats(
        self, addr: str, name: str, key: str, at: int | None = None
    ) -> BrokerStatsData:
        """VIEW_BROKER_STATS_DATA (B-363): `at` asks es-broker for a past moment."""
        r = await self._ok(
            addr,
            f"stats {name} {key}",
            request(
                RequestCode.VIEW_BROKER_STATS_DATA,
                ViewBrokerStatsDataRequestHeader(stats_name=name, stats_key=key, at=at),
            ),
        )
        return BrokerStatsData.decode(r.body)

    async def topic_consumed_by(self, addr: str, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO (B-365): the groups consuming `topic` on one broker."""
        r = await self._ok(
            addr,
            f"groups of {topic}",
            request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, TopicRequestHeader(topic=topic)),
        )
        return list(GroupList.decode(r.body).group_list)

    async def stats_history(
        self,
        addr: str,
        since: int,
        until: int,
        step_minutes: int | None = None,
        topic: str | None = None,
    ) -> StatsHistoryBody:
        """STATS_HISTORY (B-368): messages in and out per interval of one broker and its topics."""
        header = StatsHistoryRequestHeader(
            since=since, until=until, step_minutes=step_minutes, topic=topic or None
        )
        r = await self._ok(
            addr, "stats history", request(EsRequestCode.STATS_HISTORY, header), timeout=30.0
        )
        return StatsHistoryBody.decode(r.body)
