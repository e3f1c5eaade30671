"""The admin client's core: its connections, the request checks, the name server's answers."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Self

import anyio

from es_broker.acl.signing import Credentials
from es_broker.net.remoting_client import RemotingClient
from es_broker.net.tls import TlsClientSettings
from es_broker.remoting.bodies import (
    ClusterInfo,
    TopicList,
    TopicRouteData,
)
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.header_fields import CustomHeader
from es_broker.remoting.headers import (
    GetRouteInfoRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
)
from es_broker.remoting.response_headers import OffsetResponseHeader


class AdminError(Exception):
    """A broker or name server refused an admin request."""

    def __init__(self, what: str, response: RemotingCommand) -> None:
        super().__init__(f"{what}: CODE: {response.code} DESC: {response.remark}")
        self.code = response.code
        self.remark = response.remark


class AdminBase:
    """The connections, the request checks and the name server's answers every admin role uses."""

    def __init__(self, client: RemotingClient, namesrv: str) -> None:
        self.client = client
        self.namesrv_addrs = [a for a in namesrv.split(";") if a]

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        namesrv: str,
        *,
        credentials: Credentials | None = None,
        tls: TlsClientSettings | None = None,
    ) -> AsyncIterator[Self]:
        """An Admin on connections of its own (signed with `credentials`, TLS with `tls`), closed on exit."""
        async with anyio.create_task_group() as nursery:
            client = RemotingClient(nursery, credentials=credentials, tls=tls)
            try:
                yield cls(client, namesrv)
            finally:
                with anyio.CancelScope(shield=True):
                    await client.aclose()
                nursery.cancel_scope.cancel()

    async def _ok(
        self,
        addr: str,
        what: str,
        command: RemotingCommand,
        timeout: float = 5.0,
        allowed: tuple[int, ...] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        response = await self.client.invoke(addr, command, timeout)
        if response.code not in allowed:
            raise AdminError(what, response)
        return response

    async def _namesrv(
        self, code: int, header: CustomHeader | None = None, what: str = ""
    ) -> RemotingCommand:
        return await self._ok(
            self.namesrv_addrs[0], what or f"name server request {code}", request(code, header)
        )

    # ------------------------------------------------------------------ name server
    async def route(self, topic: str) -> TopicRouteData:
        r = await self._namesrv(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            GetRouteInfoRequestHeader(topic=topic),
            f"topic route of {topic}",
        )
        return TopicRouteData.decode(r.body)  # standard JSON's quoted broker ids read as ints

    async def cluster_info(self) -> ClusterInfo:
        return ClusterInfo.decode((await self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)).body)

    async def topic_list(self) -> list[str]:
        r = await self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return list(TopicList.decode(r.body).topic_list)

    async def master_addrs(self, cluster: str | None = None) -> list[str]:
        info = await self.cluster_info()
        names = info.cluster_addr_table.get(cluster) if cluster else None
        if cluster and names is None:
            raise ValueError(f"cluster {cluster!r} is not known to the name server")
        out = []
        for name, data in sorted(info.broker_addr_table.items()):
            if names is None or name in names:
                addr = data.broker_addrs.get(0)
                if addr:
                    out.append(addr)
        return out

    async def broker_names(self) -> dict[str, dict[int, str]]:
        info = await self.cluster_info()
        return {name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items()}

    async def targets(self, broker: str | None, cluster: str | None) -> list[str]:
        """-b addr, or every master of -c cluster (mqadmin's convention)."""
        if broker:
            return [broker]
        if cluster:
            return await self.master_addrs(cluster)
        raise ValueError("give a broker address (-b) or a cluster name (-c)")

    async def topic_brokers(self, topic: str) -> list[tuple[str, str]]:
        """(brokerName, address) per broker of the topic: the master, else a random slave (B-113)."""
        route = await self.route(topic)
        out = []
        for data in route.broker_datas:
            addrs = data.broker_addrs
            addr = addrs.get(0) or random.choice(list(addrs.values()))
            out.append((data.broker_name, addr))
        return out

    async def queue_offsets(
        self, addr: str, topic: str, queue_id: int, *, at: int | None = None
    ) -> int:
        """GET_MAX_OFFSET, or SEARCH_OFFSET_BY_TIMESTAMP with `at` (ms)."""
        r = await self._ok(
            addr, f"offset of {topic}/{queue_id}", offset_lookup(topic, queue_id, at)
        )
        return OffsetResponseHeader.of(r).offset

    async def min_offset(self, addr: str, topic: str, queue_id: int) -> int:
        r = await self._ok(
            addr,
            f"min offset of {topic}/{queue_id}",
            request(
                RequestCode.GET_MIN_OFFSET, TopicQueueRequestHeader(topic=topic, queue_id=queue_id)
            ),
        )
        return OffsetResponseHeader.of(r).offset


def offset_lookup(topic: str, queue_id: int, at: int | None) -> RemotingCommand:
    """GET_MAX_OFFSET of a queue, or SEARCH_OFFSET_BY_TIMESTAMP with `at` (ms)."""
    if at is None:
        return request(
            RequestCode.GET_MAX_OFFSET, TopicQueueRequestHeader(topic=topic, queue_id=queue_id)
        )
    return request(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        SearchOffsetRequestHeader(topic=topic, queue_id=queue_id, timestamp=at),
    )
