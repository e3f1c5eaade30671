"""The admin API (what mqadmin's DefaultMQAdminExt does), over the wire protocol only."""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from es_broker.acl.signing import Credentials
from es_broker.client.remoting_client import RemotingClient, RemotingError
from es_broker.client.tls import TlsClientSettings
from es_broker.remoting import fastjson
from es_broker.remoting.admin_bodies import CleanPassResult, RedriveBody
from es_broker.remoting.bodies import (
    AclConfig,
    ClusterInfo,
    ConsumeStats,
    KVTable,
    ProducerConnection,
    ResetOffsetBody,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    TopicStatsTable,
)
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, request
from es_broker.remoting.headers import SendMessageRequestHeader
from es_broker.remoting.message import StoredMessage, decode_all, parse_offset_msg_id
from es_broker.remoting.stats_bodies import BrokerStatsData, GroupList, StatsHistoryBody


class AdminError(Exception):
    """A broker or name server refused an admin request."""

    def __init__(self, what: str, response: RemotingCommand) -> None:
        super().__init__(f"{what}: CODE: {response.code} DESC: {response.remark}")
        self.code = response.code
        self.remark = response.remark


@dataclass(frozen=True, slots=True)
class QueueProgress:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset


def _plain(value: Any) -> Any:
    """fastjson's object keys (a MessageQueue in mqTable) as their JSON text: plain JSON."""
    if isinstance(value, dict):
        return {
            k
            if isinstance(k, str)
            else fastjson.dumps(k.as_dict() if isinstance(k, fastjson.ObjectKey) else k): _plain(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class Admin:
    """mqadmin's requests through `client`; a client with credentials signs every one of them.

    `async with Admin.open(namesrv, credentials=Credentials(ak, sk)) as admin:`
    makes its own connections and closes them at the end.
    """

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
    ) -> AsyncIterator[Admin]:
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
        self, code: int, fields: dict | None = None, what: str = ""
    ) -> RemotingCommand:
        return await self._ok(
            self.namesrv_addrs[0],
            what or f"name server request {code}",
            request(code, fields or {}),
        )

    # ------------------------------------------------------------------ name server
    async def route(self, topic: str) -> TopicRouteData:
        r = await self._namesrv(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, f"topic route of {topic}"
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

    # ------------------------------------------------------------------ topics and groups
    async def update_topic(
        self,
        addr: str,
        topic: str,
        read: int = 8,
        write: int = 8,
        perm: int = 6,
        order: bool = False,
    ) -> None:
        await self._ok(
            addr,
            f"create topic {topic} on {addr}",
            request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": topic,
                    "defaultTopic": "TBW102",
                    "readQueueNums": read,
                    "writeQueueNums": write,
                    "perm": perm,
                    "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": 0,
                    "order": order,
                },
            ),
        )

    async def topic_configs(self, addr: str) -> dict[str, TopicConfig]:
        r = await self._ok(addr, "topic configs", request(RequestCode.GET_ALL_TOPIC_CONFIG))
        return TopicConfigSerializeWrapper.decode(r.body).topic_config_table

    async def update_topic_perm(self, addr: str, topic: str, perm: int) -> dict[str, Any]:
        config = (await self.topic_configs(addr)).get(topic)
        if config is None:
            raise ValueError(f"topic {topic} does not exist on {addr}")
        await self.update_topic(
            addr, topic, config.read_queue_nums, config.write_queue_nums, perm, config.order
        )
        return {"broker": addr, "topic": topic, "oldPerm": config.perm, "perm": perm}

    async def delete_topic(self, addrs: list[str], topic: str) -> None:
        for addr in addrs:
            await self._ok(
                addr,
                f"delete topic {topic}",
                request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}),
            )
        for ns in self.namesrv_addrs:
            await self._ok(
                ns,
                f"delete topic {topic} in name server",
                request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}),
            )

    async def topic_status(self, topic: str) -> list[dict[str, Any]]:
        rows = []
        for _name, addr in await self.topic_brokers(topic):
            r = await self._ok(
                addr,
                f"topic status of {topic}",
                request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}),
            )
            for mq, stats in TopicStatsTable.decode(r.body).offset_table.items():
                rows.append(
                    {
                        "brokerName": mq.broker_name,
                        "queueId": mq.queue_id,
                        "minOffset": stats.min_offset,
                        "maxOffset": stats.max_offset,
                        "lastUpdateTimestamp": stats.last_update_timestamp,
                    }
                )
        return sorted(rows, key=lambda r: (r["brokerName"], r["queueId"]))

    async def update_group(self, addr: str, config: dict[str, Any]) -> None:
        await self._ok(
            addr,
            f"update group {config['groupName']}",
            request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, fastjson.dumps(config).encode()
            ),
        )

    async def delete_group(self, addr: str, group: str, remove_offset: bool = False) -> None:
        await self._ok(
            addr,
            f"delete group {group}",
            request(
                RequestCode.DELETE_SUBSCRIPTIONGROUP,
                {"groupName": group, "removeOffset": remove_offset},
            ),
        )

    # ------------------------------------------------------------------ consumers
    async def consumer_progress(self, group: str) -> list[QueueProgress]:
        """consumerProgress: per queue of every topic the group consumes, on every broker."""
        rows: list[QueueProgress] = []
        brokers = await self.broker_names()
        for _name, addrs in sorted(brokers.items()):
            addr = addrs.get(0) or next(iter(addrs.values()))
            r = await self._ok(
                addr,
                f"consume stats of {group}",
                request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group}),
            )
            for mq, stats in ConsumeStats.decode(r.body).offset_table.items():
                rows.append(
                    QueueProgress(
                        mq.topic,
                        mq.broker_name,
                        mq.queue_id,
                        stats.broker_offset,
                        stats.consumer_offset,
                        stats.last_timestamp,
                    )
                )
        return sorted(rows, key=lambda q: (q.topic, q.broker_name, q.queue_id))

    async def consumer_connection(self, group: str) -> dict[str, Any]:
        for addr in await self.master_addrs():
            r = await self.client.invoke(
                addr, request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
            )
            if r.code == ResponseCode.SUCCESS:
                return fastjson.loads(r.body)
        raise AdminError(f"consumer connection of {group}", r)

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp: int, force: bool, cpp: bool = False
    ) -> dict[str, Any]:
        """resetOffsetByTime: the broker path, or the old path when the group is offline (B-73, B-81)."""
        from es_broker.remoting.codes import LanguageCode

        rows = []
        for _name, addr in await self.topic_brokers(topic):
            r = await self.client.invoke(
                addr,
                request(
                    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                    {"topic": topic, "group": group, "timestamp": timestamp, "isForce": force},
                    language=LanguageCode.CPP if cpp else LanguageCode.JAVA,
                ),
            )
            if r.code == ResponseCode.CONSUMER_NOT_ONLINE:
                return {
                    "path": "old",
                    "queues": await self.reset_offset_old(group, topic, timestamp, force),
                }
            if r.code != ResponseCode.SUCCESS:
                raise AdminError(f"reset offset of {group} on {topic}", r)
            table = ResetOffsetBody.decode(r.body).offset_table  # either form (C++ or Java)
            rows += [
                {"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
                for mq, off in table.items()
            ]
        return {
            "path": "broker",
            "queues": sorted(rows, key=lambda r: (r["brokerName"], r["queueId"])),
        }

    async def reset_offset(
        self,
        group: str,
        topic: str,
        kind: str,
        value: int,
        *,
        force: bool = True,
        dry_run: bool = False,
        mode: str | None = None,
        scope: str | None = None,
    ) -> list[dict[str, Any]]:
        """es-broker's reset on every broker of the topic (S-2): per-queue current/target/final/outcome."""
        from es_broker.remoting.codes import EsRequestCode

        out = []
        for _name, addr in await self.topic_brokers(topic):
            fields = {
                "topic": topic,
                "group": group,
                "kind": kind,
                "value": value,
                "isForce": force,
                "dryRun": dry_run,
                "mode": mode,
                "scope": scope,
            }
            r = await self._ok(
                addr,
                f"reset offset of {group} on {topic}",
                request(EsRequestCode.RESET_OFFSET, fields),
            )
            out.append(fastjson.loads(r.body))
        return out

    async def reset_offset_old(
        self, group: str, topic: str, timestamp: int, force: bool
    ) -> list[dict[str, Any]]:
        """resetOffsetByTimestampOld: the admin writes each queue's offset itself (B-81)."""
        rows = []
        for name, addr in await self.topic_brokers(topic):
            r = await self._ok(
                addr,
                f"consume stats of {group}",
                request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}),
            )
            queues = {}
            for mq, stats in ConsumeStats.decode(r.body).offset_table.items():
                if mq.topic == topic:
                    queues[mq.queue_id] = (stats.broker_offset, stats.consumer_offset)
            if not queues:  # never consumed here: start from each queue's min (B-81)
                for row in await self.topic_status(topic):
                    if row["brokerName"] == name:
                        queues[row["queueId"]] = (row["maxOffset"], row["minOffset"])
            for qid, (broker_offset, consumer_offset) in sorted(queues.items()):
                if timestamp == -1:
                    code, fields = RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": qid}
                else:
                    code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
                    fields = {"topic": topic, "queueId": qid, "timestamp": timestamp}
                target = int(
                    (await self._ok(addr, "offset lookup", request(code, fields))).ext_fields[
                        "offset"
                    ]
                )
                rollback = target if force or target <= consumer_offset else consumer_offset
                if rollback == target:
                    await self._ok(
                        addr,
                        "update consumer offset",
                        request(
                            RequestCode.UPDATE_CONSUMER_OFFSET,
                            {
                                "consumerGroup": group,
                                "topic": topic,
                                "queueId": qid,
                                "commitOffset": target,
                            },
                        ),
                    )
                rows.append(
                    {
                        "brokerName": name,
                        "queueId": qid,
                        "brokerOffset": broker_offset,
                        "consumerOffset": consumer_offset,
                        "timestampOffset": target,
                        "rollbackOffset": rollback,
                    }
                )
        return rows

    # ------------------------------------------------------------------ messages
    async def view_message(self, msg_id: str) -> StoredMessage:
        (host, port), phy = parse_offset_msg_id(msg_id)
        r = await self._ok(
            f"{host}:{port}",
            f"message {msg_id}",
            request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phy}),
        )
        return decode_all(r.body)[0]

    async def message_by_offset(
        self, topic: str, broker_name: str, queue_id: int, offset: int
    ) -> StoredMessage:
        addr = (await self.broker_names())[broker_name][0]
        r = await self._ok(
            addr,
            f"message at {topic}/{broker_name}/{queue_id}/{offset}",
            request(
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "TOOLS_CONSUMER",
                    "topic": topic,
                    "queueId": queue_id,
                    "queueOffset": offset,
                    "maxMsgNums": 1,
                    "sysFlag": 4,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                    "subVersion": 0,
                },
            ),
            allowed=(0, 19, 20, 21),
        )
        if r.code != ResponseCode.SUCCESS:
            raise ValueError(
                f"no message at offset {offset} of {topic}/{broker_name}/{queue_id}: {r.remark}"
            )
        return decode_all(r.body)[0]

    async def messages_by_key(self, topic: str, key: str, max_num: int = 64) -> list[StoredMessage]:
        found = []
        for _, addr in await self.topic_brokers(topic):
            r = await self._ok(
                addr,
                f"messages with key {key}",
                request(
                    RequestCode.QUERY_MESSAGE,
                    {
                        "topic": topic,
                        "key": key,
                        "maxNum": max_num,
                        "beginTimestamp": 0,
                        "endTimestamp": 2**62,
                    },
                ),
                allowed=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
            )
            if r.code == ResponseCode.SUCCESS:
                found.extend(decode_all(r.body))
        return found

    async def send_message(
        self,
        topic: str,
        body: bytes,
        tags: str | None,
        keys: str | None,
        broker_name: str | None = None,
        queue_id: int | None = None,
    ) -> dict[str, Any]:
        from es_broker.remoting.message import encode_properties

        route = await self.route(topic)
        writable = [
            q
            for q in route.queue_datas
            if q.perm & 2 and (not broker_name or q.broker_name == broker_name)
        ]
        if not writable:
            raise ValueError(
                f"topic {topic} has no writable queue{' on ' + broker_name if broker_name else ''}"
            )
        qd = writable[0]
        addrs = {d.broker_name: d.broker_addrs for d in route.broker_datas}
        addr = addrs[qd.broker_name][0]
        props = {k: v for k, v in (("TAGS", tags), ("KEYS", keys)) if v}
        qid = queue_id if queue_id is not None else random.randrange(qd.write_queue_nums)
        r = await self._ok(
            addr,
            f"send to {topic}",
            request(
                RequestCode.SEND_MESSAGE_V2,
                SendMessageRequestHeader(
                    producer_group="TOOLS_PRODUCER",
                    topic=topic,
                    default_topic="TBW102",
                    default_topic_queue_nums=4,
                    queue_id=qid,
                    sys_flag=0,
                    born_timestamp=time.time_ns() // 1_000_000,
                    flag=0,
                    properties=encode_properties(props).decode(),
                    reconsume_times=0,
                    unit_mode=False,
                    batch=False,
                ).v2_fields(),
                body,
            ),
        )
        return {
            "brokerName": qd.broker_name,
            "queueId": int(r.ext_fields["queueId"]),
            "queueOffset": int(r.ext_fields["queueOffset"]),
            "msgId": r.ext_fields["msgId"],
            "sendStatus": "SEND_OK",
        }

    async def broker_runtime(self, addr: str) -> dict[str, str]:
        r = await self._ok(addr, "broker status", request(RequestCode.GET_BROKER_RUNTIME_INFO))
        return KVTable.decode(r.body).table

    async def ha_switch(self, addr: str, to: str) -> dict[str, str]:
        """HA_SWITCH (B-386): the leader at addr hands its group's leader key to follower node `to`."""
        r = await self._ok(
            addr, "switch-over", request(EsRequestCode.HA_SWITCH, {"to": to}), timeout=60.0
        )
        return dict(r.ext_fields)

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
            addr, "update broker config", request(RequestCode.UPDATE_BROKER_CONFIG, {}, body)
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
            request(EsRequestCode.HISTORY_ARCHIVE, {"before": before}),
            timeout,
        )
        answer: dict[str, Any] = json.loads(r.body)
        return answer

    async def clone_group_offset(
        self, addr: str, src: str, dest: str, topic: str, offline: bool
    ) -> None:
        """CLONE_GROUP_OFFSET (B-35) on one broker: dest's offsets of topic become src's."""
        await self._ok(
            addr,
            f"clone offsets of {src} to {dest}",
            request(
                RequestCode.CLONE_GROUP_OFFSET,
                {"srcGroup": src, "destGroup": dest, "topic": topic, "offline": offline},
            ),
        )

    async def producer_connection(self, group: str, topic: str) -> ProducerConnection:
        """GET_PRODUCER_CONNECTION_LIST on the topic's brokers; the first that knows the group."""
        r: RemotingCommand | None = None
        for _, addr in await self.topic_brokers(topic):
            r = await self.client.invoke(
                addr, request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
            )
            if r.code == ResponseCode.SUCCESS:
                return ProducerConnection.decode(r.body)
        if r is None:
            raise ValueError(f"topic {topic} has no broker")
        raise AdminError(f"producer connection of {group}", r)

    async def group_config(self, addr: str, group: str) -> dict[str, Any] | None:
        """One subscription group's config from GET_ALL_SUBSCRIPTIONGROUP_CONFIG; None if absent."""
        r = await self._ok(
            addr, "subscription groups", request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        )
        table = SubscriptionGroupWrapper.decode(r.body).subscription_group_table
        config = table.get(group)
        return fastjson.loads(config.encode()) if config is not None else None

    async def consumer_running_info(
        self, group: str, client_id: str, jstack: bool = False
    ) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO relayed by a broker the consumer is connected to."""
        fields = {"consumerGroup": group, "clientId": client_id, "jstackEnable": jstack}
        r: RemotingCommand | None = None
        for addr in await self.master_addrs():
            r = await self.client.invoke(
                addr, request(RequestCode.GET_CONSUMER_RUNNING_INFO, fields), timeout=15.0
            )
            if r.code == ResponseCode.SUCCESS:
                return _plain(fastjson.loads(r.body))
        if r is None:
            raise ValueError("no broker is registered with the name server")
        raise AdminError(f"running info of {client_id} in {group}", r)

    async def messages_by_uniq_key(
        self, topic: str, uniq_key: str, max_num: int = 32
    ) -> list[StoredMessage]:
        """QUERY_MESSAGE with the unique-key flag on each broker of the topic (B-202)."""
        found: list[StoredMessage] = []
        for _, addr in await self.topic_brokers(topic):
            r = await self._ok(
                addr,
                f"messages with unique key {uniq_key}",
                request(
                    RequestCode.QUERY_MESSAGE,
                    {
                        "topic": topic,
                        "key": uniq_key,
                        "maxNum": max_num,
                        "beginTimestamp": 0,
                        "endTimestamp": 2**62,
                        "_UNIQUE_KEY_QUERY": "true",
                    },
                ),
                allowed=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
            )
            if r.code == ResponseCode.SUCCESS:
                found.extend(
                    m for m in decode_all(r.body) if m.properties.get("UNIQ_KEY") == uniq_key
                )
        return found

    async def queue_offsets(
        self, addr: str, topic: str, queue_id: int, *, at: int | None = None
    ) -> int:
        """GET_MAX_OFFSET, or SEARCH_OFFSET_BY_TIMESTAMP with `at` (ms)."""
        fields: dict[str, Any] = {"topic": topic, "queueId": queue_id}
        code = RequestCode.GET_MAX_OFFSET
        if at is not None:
            fields["timestamp"] = at
            code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
        r = await self._ok(addr, f"offset of {topic}/{queue_id}", request(code, fields))
        return int(r.ext_fields["offset"])

    async def min_offset(self, addr: str, topic: str, queue_id: int) -> int:
        r = await self._ok(
            addr,
            f"min offset of {topic}/{queue_id}",
            request(RequestCode.GET_MIN_OFFSET, {"topic": topic, "queueId": queue_id}),
        )
        return int(r.ext_fields["offset"])

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
        fields: dict[str, Any] = {"accessKey": access_key, "secretKey": secret_key, "admin": admin}
        optional = {
            "whiteRemoteAddress": white_remote_address,
            "defaultTopicPerm": default_topic_perm,
            "defaultGroupPerm": default_group_perm,
            "topicPerms": None if topic_perms is None else ",".join(topic_perms),
            "groupPerms": None if group_perms is None else ",".join(group_perms),
        }
        fields.update((k, v) for k, v in optional.items() if v is not None)
        await self._ok(
            addr,
            f"update ACL account {access_key} on {addr}",
            request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, fields),
        )

    async def delete_acl_config(self, addr: str, access_key: str) -> None:
        await self._ok(
            addr,
            f"delete ACL account {access_key} on {addr}",
            request(RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key}),
        )

    async def update_global_white_addrs(
        self, addr: str, addrs: list[str], acl_file: str | None = None
    ) -> None:
        fields = {"globalWhiteAddrs": ",".join(addrs)}
        if acl_file:
            fields["aclFileFullPath"] = acl_file
        await self._ok(
            addr,
            f"update the global white list on {addr}",
            request(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, fields),
        )

    async def acl_config_version(self, addr: str) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_ACL_INFO: the broker, its default file's dataVersion and every file's."""
        r = await self._ok(
            addr, f"ACL config version of {addr}", request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
        )
        f = r.ext_fields
        return {
            "clusterName": f.get("clusterName"),
            "brokerName": f.get("brokerName"),
            "brokerAddr": f.get("brokerAddr"),
            "version": json.loads(f.get("version") or "{}"),
            "allAclFileVersion": json.loads(f.get("allAclFileVersion") or "{}"),
        }

    async def acl_config(self, addr: str) -> AclConfig:
        """GET_BROKER_CLUSTER_ACL_CONFIG (4.9.0's): the global white list and the accounts, secrets masked."""
        r = await self._ok(
            addr, f"ACL config of {addr}", request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        )
        return AclConfig.decode(r.body)

    # ------------------------------------------------------------------ dead letters and journeys (es-broker)
    async def redrive_dlq(
        self,
        group: str,
        topic: str | None = None,
        target: str = "retry",
        max_count: int | None = None,
        dry_run: bool = False,
    ) -> list[dict[str, Any]]:
        """REDRIVE_DLQ on every master that holds `%DLQ%group`; each row names its broker."""
        rows: list[dict[str, Any]] = []
        for addr in await self.master_addrs():
            remaining = max_count
            while remaining is None or remaining > 0:
                fields: dict[str, Any] = {"group": group, "target": target, "dryRun": dry_run}
                if topic:
                    fields["topic"] = topic
                if remaining is not None:
                    fields["maxCount"] = remaining
                r = await self._ok(
                    addr,
                    f"re-drive dead letters of {group}",
                    request(EsRequestCode.REDRIVE_DLQ, fields),
                    timeout=60.0,
                    allowed=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST),
                )
                if r.code == ResponseCode.TOPIC_NOT_EXIST:
                    break  # no dead letters of this group on this broker
                answer = RedriveBody.decode(r.body)
                rows += [dict(item.__fastjson__(), broker=addr) for item in answer.items]
                sent = sum(1 for item in answer.items if item.new_msg_id)
                if remaining is not None:
                    remaining -= len(answer.items)
                # a dry run changes nothing, so asking again would list the same ones
                if dry_run or not answer.more or sent == 0:
                    break
        return rows

    async def open_transactions(self, producer_group: str | None = None) -> list[dict[str, Any]]:
        """OPEN_TRANSACTIONS on every master: the half messages not yet committed or rolled back."""
        fields = {"producerGroup": producer_group} if producer_group else {}
        rows: list[dict[str, Any]] = []
        for addr in await self.master_addrs():
            r = await self.client.invoke(
                addr, request(EsRequestCode.OPEN_TRANSACTIONS, fields), 30.0
            )
            if r.code != ResponseCode.SUCCESS:
                raise AdminError(f"open transactions at {addr}", r)
            rows += [dict(item, broker=addr) for item in json.loads(r.body)["transactions"]]
        return rows

    async def message_trace(self, msg_id: str) -> dict[str, Any]:
        """MESSAGE_TRACE: the journey from the broker that stored the message (its offset id names it),
        else from the first master that knows the id."""
        addrs: list[str] = []
        try:
            (host, port), _ = parse_offset_msg_id(msg_id)
            addrs.append(f"{host}:{port}")
        except ValueError:
            pass  # a UNIQ_KEY, or another kind of id: ask every master
        addrs += [a for a in await self.master_addrs() if a not in addrs]
        for addr in addrs:
            try:
                r = await self.client.invoke(
                    addr, request(EsRequestCode.MESSAGE_TRACE, {"msgId": msg_id}), 30.0
                )
            except RemotingError:
                continue  # an old store host (the broker restarted on another port), or gone
            if r.code == ResponseCode.SUCCESS:
                return dict(json.loads(r.body), broker=addr)
        raise ValueError(f"no broker knows message {msg_id}")

    # ------------------------------------------------------------------ time travel over the wire (es-broker)
    async def _group_query(
        self, code: int, what: str, fields: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """One es-broker query on every master (else a slave) of the cluster; each answer names its broker."""
        answers = []
        for name, addrs in sorted((await self.broker_names()).items()):
            addr = addrs.get(0) or next(iter(addrs.values()))
            given = {k: v for k, v in fields.items() if v is not None}
            r = await self._ok(addr, what, request(code, given), timeout=60.0)
            answers.append(dict(json.loads(r.body), brokerName=name, broker=addr))
        return answers

    async def offsets_at(
        self, group: str, at: int, topic: str | None = None, durable: bool = False
    ) -> list[dict[str, Any]]:
        """OFFSETS_AT: `es-broker offsets --at` of every broker, from its own time index."""
        fields = {"group": group, "topic": topic, "at": at, "durable": durable}
        return await self._group_query(EsRequestCode.OFFSETS_AT, f"offsets of {group}", fields)

    async def offset_history(
        self,
        group: str,
        topic: str | None = None,
        since: int | None = None,
        until: int | None = None,
        max_entries: int | None = None,
        changes_only: bool = False,
    ) -> list[dict[str, Any]]:
        """OFFSET_HISTORY: the newest offset changes of a group (and their explaining records) per broker.

        `changes_only`: the offset changes alone, each once (not the reset or merge record beside them).
        """
        fields = {
            "group": group,
            "topic": topic,
            "since": since,
            "until": until,
            "maxEntries": max_entries,
            "changesOnly": changes_only or None,
        }
        return await self._group_query(EsRequestCode.OFFSET_HISTORY, f"history of {group}", fields)

    async def offset_timeline(
        self,
        group: str,
        topic: str | None = None,
        since: int | None = None,
        until: int | None = None,
        points: int | None = None,
    ) -> list[dict[str, Any]]:
        """OFFSET_TIMELINE: a group's offsets and lag sampled over a window, and its events, per broker."""
        fields = {"group": group, "topic": topic, "since": since, "until": until, "points": points}
        return await self._group_query(
            EsRequestCode.OFFSET_TIMELINE, f"timeline of {group}", fields
        )

    async def account_scope(
        self, topic: str | None = None, group: str | None = None
    ) -> list[dict[str, Any]]:
        """ACCOUNT_SCOPE of every broker: the topics and groups this client's account may see."""
        fields = {"topic": topic, "group": group}
        return await self._group_query(EsRequestCode.ACCOUNT_SCOPE, "account scope", fields)

    async def explain_group(self, group: str, topic: str) -> list[dict[str, Any]]:
        """EXPLAIN_GROUP: `es-broker explain` of every broker."""
        fields = {"group": group, "topic": topic}
        return await self._group_query(EsRequestCode.EXPLAIN_GROUP, f"explain {group}", fields)

    # ------------------------------------------------------------------ message counts
    async def broker_stats(
        self, addr: str, name: str, key: str, at: int | None = None
    ) -> BrokerStatsData:
        """VIEW_BROKER_STATS_DATA (B-363): `at` asks es-broker for a past moment."""
        fields: dict[str, Any] = {"statsName": name, "statsKey": key}
        if at is not None:
            fields["at"] = at
        r = await self._ok(
            addr,
            f"stats {name} {key}",
            request(RequestCode.VIEW_BROKER_STATS_DATA, fields),
        )
        return BrokerStatsData.decode(r.body)

    async def topic_consumed_by(self, addr: str, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO (B-365): the groups consuming `topic` on one broker."""
        r = await self._ok(
            addr,
            f"groups of {topic}",
            request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}),
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
        fields: dict[str, Any] = {"since": since, "until": until}
        if step_minutes is not None:
            fields["stepMinutes"] = step_minutes
        if topic:
            fields["topic"] = topic
        r = await self._ok(
            addr, "stats history", request(EsRequestCode.STATS_HISTORY, fields), timeout=30.0
        )
        return StatsHistoryBody.decode(r.body)
