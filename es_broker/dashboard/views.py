"""What each page shows, as JSON-able data, gathered over the wire with the admin client.

Every function here is the body of one JSON endpoint; the HTML page of the
same path renders exactly that data. Nothing reads a data directory: the
broker answers time-travel questions itself (es_broker/server/processors/time_travel.py).
"""

from __future__ import annotations

import dataclasses
import socket
import time
from dataclasses import dataclass
from typing import Any

import anyio

from es_broker.client.admin import Admin, AdminError
from es_broker.client.admin_timetravel import BrokerAnswer
from es_broker.dashboard.web import PageError
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting import fastjson
from es_broker.remoting.bodies import ConsumerConnection, SubscriptionGroupWrapper
from es_broker.remoting.body_view import plain
from es_broker.remoting.codes import RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.remoting.message import StoredMessage
from es_broker.remoting.peer_outcomes import peer_problems
from es_broker.remoting.query_bodies import AccountScopeBody


def perm_text(perm: int) -> str:
    """A topic's perm in one form everywhere (B-514): R and W as the forms name them, `-` for
    none, `+inherit` for PermName.PERM_INHERIT (1), which only a template topic like TBW102 has."""
    text = ("R" if perm & 4 else "") + ("W" if perm & 2 else "") or "-"
    return text + ("+inherit" if perm & 1 else "")


SYSTEM_GROUPS = frozenset(
    {
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        "CID_RMQ_SYS_TRANS",
    }
)
#: the producer group the dashboard announces on its connections, so the records name it
DASHBOARD_PRODUCER_GROUP = "ES_BROKER_DASHBOARD"


class Forbidden(Exception):
    """The dashboard's account may not see what a page asked for (the page answers 403)."""


ACL_EXCEPTION = "AclException: "


def acl_refusal(exc: AdminError) -> str | None:
    """The broker's ACL refusal in words (the AclException's message, without the Java frame)."""
    remark = exc.remark or ""
    if ACL_EXCEPTION not in remark:
        return None
    message = remark.split(ACL_EXCEPTION, 1)[1]
    return message.split(", org.apache.rocketmq.", 1)[0]


@dataclass(frozen=True, slots=True)
class AccountScope:
    """What the dashboard's account may see, as the brokers' ACCOUNT_SCOPE answers say (B-290).

    A name is visible when a broker that holds it says so; names no broker
    holds are not visible to an account that is limited by its perms.
    """

    acl: bool
    access_key: str | None
    everything: bool
    topics: dict[str, str]  # visible topic -> perm as the broker names it
    groups: dict[str, str]
    hidden_topics: dict[str, str]  # not visible -> perm (DENY, or the default that gives nothing)
    hidden_groups: dict[str, str]

    @classmethod
    def of(cls, answers: list[BrokerAnswer[AccountScopeBody]]) -> AccountScope:
        topics: dict[str, str] = {}
        groups: dict[str, str] = {}
        hidden_topics: dict[str, str] = {}
        hidden_groups: dict[str, str] = {}
        for answer in answers:
            for name, entry in answer.body.topics.items():
                (topics if entry.visible else hidden_topics)[name] = entry.perm
            for name, entry in answer.body.groups.items():
                (groups if entry.visible else hidden_groups)[name] = entry.perm
        for name in topics:
            hidden_topics.pop(name, None)
        for name in groups:
            hidden_groups.pop(name, None)
        return cls(
            acl=any(a.body.acl_enabled for a in answers),
            access_key=next((a.body.access_key for a in answers if a.body.access_key), None),
            everything=bool(answers) and all(a.body.everything for a in answers),
            topics=topics,
            groups=groups,
            hidden_topics=hidden_topics,
            hidden_groups=hidden_groups,
        )

    def sees_topic(self, topic: str) -> bool:
        return self.everything or topic in self.topics

    def sees_group(self, group: str) -> bool:
        return self.everything or group in self.groups

    def require_topic(self, topic: str) -> None:
        if not self.sees_topic(topic):
            raise Forbidden(self._refusal("topic", topic, self.hidden_topics.get(topic)))

    def require_group(self, group: str) -> None:
        if not self.sees_group(group):
            raise Forbidden(self._refusal("group", group, self.hidden_groups.get(group)))

    def _refusal(self, kind: str, name: str, perm: str | None) -> str:
        why = f"its perm there is {perm}" if perm else "no broker grants it"
        return (
            f"the dashboard's account {self.access_key or '(none)'} may not see {kind} {name}: "
            f"{why}, as the brokers' ACL rules say (PUB or SUB is needed to see it)"
        )


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def requester_id(listen: str) -> str:
    """The client id the dashboard announces: who did a write, in every record it causes."""
    return f"dashboard@{socket.gethostname()}@{listen}"


def acting_as(client_id: str, operator: str | None) -> str:
    """The client id of a signed-in operator's writes: its account first (B-514)."""
    return f"{operator}@{client_id}" if operator else client_id


def tps(value: str | None) -> list[float | None]:
    """RocketMQ's "10s 1min 10min" rates (putTps, getTransferedTps): None where it has none yet."""
    parts = (value or "").split(" ")
    out: list[float | None] = []
    for part in (parts + ["", "", ""])[:3]:
        try:
            out.append(float(part))
        except ValueError:
            out.append(None)
    return out


def slave_lag(row: dict[str, Any], master: dict[str, Any] | None) -> str:
    """How far a slave is behind its master, in words (from the ha* keys both report)."""
    rt = row["runtime"]
    if row["brokerId"] == 0:
        count = int(rt.get("haSlaveCount", 0) or 0)
        if not count:
            return "no slave connected"
        acked = int(rt.get("haSlaveAckedSeq", 0) or 0)
        behind = max(row["recordLogLastSeq"] - acked, 0)
        plural = "s" if count > 1 else ""
        return f"{count} slave{plural}; acknowledged up to record {acked} ({behind} behind)"
    if rt.get("haConnected") != "True":
        where = rt.get("haMasterAddr") or "unknown"
        return f"not connected to its master ({where}); at record {rt.get('haAppliedSeq', '?')}"
    applied = int(rt.get("haAppliedSeq", 0) or 0)
    master_seq = int(rt.get("haMasterLastSeq", 0) or 0)
    behind = max(master_seq - applied, 0)
    words = f"{behind} records behind the master"
    if master is not None and "commitLogMaxOffset" in master:
        gap = max(master["commitLogMaxOffset"] - row["commitLogMaxOffset"], 0)
        words += f", {gap} commit-log bytes"
    return words + (" (caught up)" if behind == 0 else "")


def readmodel_words(rt: dict[str, str]) -> str:
    """The SQL read-model follower as the broker reports it, in words."""
    state = rt.get("readModelFollower")
    if state is None:
        return "not reported"
    if state == "off":
        return "off (no --readmodel-url)"
    behind = int(rt.get("readModelBehind", -1) or -1)
    position = int(rt.get("readModelPosition", -1) or -1)
    where = (
        "no checkpoint reported yet"
        if position < 0
        else f"at record {position}, "
        + ("caught up" if behind == 0 else f"{behind} behind the log")
    )
    if state == "running":
        return f"running (pid {rt.get('readModelFollowerPid')}), {where}"
    last = rt.get("readModelFollowerLastExit") or "?"
    return f"NOT running (last exit {last}; restarted by the broker), {where}"


class Views:
    """The data of every page, from one Admin (its connections live as long as the app)."""

    def __init__(self, admin: Admin, client_id: str, writes: anyio.Lock | None = None) -> None:
        self.admin = admin
        self.client_id = client_id
        # operators share the connections: a write and the announce naming its author go
        # together, one write at a time (the broker names a write by its connection's client id)
        self.writes = writes or anyio.Lock()

    # ------------------------------------------------------------------ identity of writes
    async def announce(self, addr: str) -> None:
        """A producer heartbeat on the dashboard's connection to `addr`: the broker records it by name."""
        body = {
            "clientID": self.client_id,
            "producerDataSet": [{"groupName": DASHBOARD_PRODUCER_GROUP}],
            "consumerDataSet": [],
        }
        # best effort: refused (e.g. an ACL account without the right), the broker records the address
        await self.admin.client.invoke(
            addr, request(RequestCode.HEART_BEAT, body=fastjson.dumps(body).encode()), 5.0
        )

    async def announce_everywhere(self) -> None:
        for addrs in (await self.admin.broker_names()).values():
            for addr in addrs.values():
                await self.announce(addr)

    # ------------------------------------------------------------------ what the account may see
    async def scope(self, topic: str | None = None, group: str | None = None) -> AccountScope:
        """The brokers' answer for the dashboard's account (ACCOUNT_SCOPE), with `topic`/`group` asked."""
        return AccountScope.of(await self.admin.account_scope(topic=topic, group=group))

    async def require_topic(self, topic: str) -> AccountScope:
        scope = await self.scope(topic=topic)
        scope.require_topic(topic)
        return scope

    async def require_group(self, group: str) -> AccountScope:
        scope = await self.scope(group=group)
        scope.require_group(group)
        return scope

    # ------------------------------------------------------------------ cluster
    async def cluster(self) -> dict[str, Any]:
        info = await self.admin.cluster_info()
        cluster_of = {
            name: cluster for cluster, names in info.cluster_addr_table.items() for name in names
        }
        brokers = []
        for name, data in sorted(info.broker_addr_table.items()):
            for broker_id, addr in sorted(data.broker_addrs.items()):
                row: dict[str, Any] = {
                    "cluster": cluster_of.get(name, ""),
                    "brokerName": name,
                    "brokerId": int(broker_id),
                    "role": "master" if int(broker_id) == 0 else "slave",
                    "address": addr,
                }
                try:
                    runtime = await self.admin.broker_runtime(addr)
                except Exception as exc:  # a broker that does not answer is shown as such
                    row["error"] = str(exc)
                    brokers.append(row)
                    continue
                put_tps, get_tps = tps(runtime.get("putTps")), tps(runtime.get("getTransferedTps"))
                row.update(
                    role=runtime.get("brokerRole", row["role"]),
                    version=runtime.get("brokerVersionDesc", ""),
                    recordLogLastSeq=int(runtime.get("recordLogLastSeq", 0) or 0),
                    commitLogMaxOffset=int(runtime.get("commitLogMaxOffset", 0) or 0),
                    putTps=put_tps,
                    getTps=get_tps,
                    diskRatio=runtime.get("commitLogDiskRatio", ""),
                    diskCapacity=runtime.get("commitLogDirCapacity", ""),
                    storeSizeBytes=int(runtime.get("storeSizeBytes", 0) or 0),
                    diskFull=runtime.get("diskFull", "False") == "True",
                    readModel=readmodel_words(runtime),
                    # refusals and failures of what the broker sends on its own (B-316)
                    peerProblems=peer_problems(runtime),
                    # automatic fail-over (B-387): the node, its epoch, whether it takes writes
                    haNode=runtime.get("haNode", ""),
                    haEpoch=runtime.get("haEpoch", ""),
                    haFence=runtime.get("haFence", ""),
                    runtime=runtime,
                )
                brokers.append(row)
        masters = {b["brokerName"]: b for b in brokers if b["brokerId"] == 0 and "runtime" in b}
        for b in brokers:
            if "runtime" in b:
                b["slaveLag"] = slave_lag(b, masters.get(b["brokerName"]))
        return {"brokers": brokers, "at": now_ms()}

    # ------------------------------------------------------------------ topics
    async def topics(self) -> dict[str, Any]:
        scope = await self.scope()
        configs: dict[str, dict[str, Any]] = {}
        for name, addrs in sorted((await self.admin.broker_names()).items()):
            addr = addrs.get(0) or next(iter(addrs.values()))
            for topic, config in (await self.admin.topic_configs(addr)).items():
                if not scope.sees_topic(topic):
                    continue
                entry = configs.setdefault(
                    topic,
                    {
                        "topic": topic,
                        "brokers": [],
                        "readQueueNums": config.read_queue_nums,
                        "writeQueueNums": config.write_queue_nums,
                        "perm": config.perm,
                        "permText": perm_text(config.perm),
                        "system": topic.startswith(("%RETRY%", "%DLQ%", "RMQ_SYS", "SCHEDULE_"))
                        or topic in ("TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT")
                        or topic == "BenchmarkTest"  # 4.9.8's start-up topics (B-481)
                        or topic.endswith("_REPLY_TOPIC")
                        or topic == name,
                    },
                )
                entry["brokers"].append(name)
        return {
            "topics": sorted(configs.values(), key=lambda t: (t["system"], t["topic"])),
            "account": scope.access_key if scope.acl else None,
        }

    async def topic(self, topic: str) -> dict[str, Any]:
        await self.require_topic(topic)
        route = await self.admin.route(topic)
        queues = await self.admin.topic_status(topic)
        return {
            "topic": topic,
            "route": {
                "queueDatas": [
                    dict(fastjson.loads(q.encode()), permText=perm_text(q.perm))
                    for q in route.queue_datas
                ],
                "brokerDatas": [
                    {
                        "brokerName": d.broker_name,
                        "cluster": d.cluster,
                        "brokerAddrs": {str(k): v for k, v in d.broker_addrs.items()},
                    }
                    for d in route.broker_datas
                ],
            },
            "queues": queues,
        }

    async def create_topic(self, topic: str, queues: int, perm: int) -> dict[str, Any]:
        """mqadmin updateTopic on every master (-c of each cluster), as `es-broker admin updateTopic`."""
        addrs = await self.admin.master_addrs()
        async with self.writes:
            for addr in addrs:
                await self.announce(addr)
                await self.admin.update_topic(addr, topic, queues, queues, perm)
        return {"topic": topic, "brokers": addrs, "queues": queues, "perm": perm}

    async def update_topic_perm(self, topic: str, perm: int) -> dict[str, Any]:
        """mqadmin updateTopicPerm on every broker of the topic's route."""
        await self.require_topic(topic)
        changed = []
        async with self.writes:
            for _name, addr in await self.admin.topic_brokers(topic):
                await self.announce(addr)
                changed.append(await self.admin.update_topic_perm(addr, topic, perm))
        return {"topic": topic, "changes": changed}

    # ------------------------------------------------------------------ groups
    async def groups(self) -> dict[str, Any]:
        scope = await self.scope()
        found: dict[str, dict[str, Any]] = {}
        for name, addrs in sorted((await self.admin.broker_names()).items()):
            addr = addrs.get(0) or next(iter(addrs.values()))
            r = await self.admin.client.invoke(
                addr, request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 10.0
            )
            if r.code != ResponseCode.SUCCESS:
                raise AdminError("subscription groups", r)
            table = SubscriptionGroupWrapper.decode(r.body).subscription_group_table
            for group, config in table.items():
                if not scope.sees_group(group):
                    continue
                entry = found.setdefault(
                    group,
                    {
                        "group": group,
                        "brokers": [],
                        "retryMaxTimes": config.retry_max_times,
                        "consumeBroadcastEnable": config.consume_broadcast_enable,
                        "system": group in SYSTEM_GROUPS,
                    },
                )
                entry["brokers"].append(name)
        for entry in found.values():  # B-514: how its consumers consume, not whether they may
            entry["messageModel"] = await self.message_model(entry["group"])
        return {
            "groups": sorted(found.values(), key=lambda g: (g["system"], g["group"])),
            "account": scope.access_key if scope.acl else None,
        }

    async def message_model(self, group: str) -> str | None:
        """CLUSTERING or BROADCASTING, as the group's online consumers say; None: none online."""
        try:
            return (await self.admin.consumer_connection(group)).message_model or None
        except AdminError:
            return None

    async def group(self, group: str) -> dict[str, Any]:
        """consumerProgress's numbers, the connections, and consumeFromWhere.

        Rows of topics the account may not see are left out (and counted).
        """
        scope = await self.require_group(group)
        everything = await self.admin.consumer_progress(group)
        progress = [q for q in everything if scope.sees_topic(q.topic)]
        queues = [
            {
                "topic": q.topic,
                "brokerName": q.broker_name,
                "queueId": q.queue_id,
                "brokerOffset": q.broker_offset,
                "consumerOffset": q.consumer_offset,
                "diff": q.diff,
                "lastTimestamp": q.last_timestamp,
            }
            for q in progress
        ]
        try:
            connection: ConsumerConnection | None = await self.admin.consumer_connection(group)
        except AdminError:
            connection = None  # no consumer online (CONSUMER_NOT_ONLINE)
        topics = sorted({q.topic for q in progress})
        return {
            "group": group,
            "topics": topics,
            "queues": queues,
            "diffTotal": sum(q["diff"] for q in queues),
            "hiddenQueues": len(everything) - len(progress),
            "online": connection is not None,
            "connections": list(connection.connection_set) if connection else [],
            "consumeType": connection.consume_type if connection else None,
            "messageModel": connection.message_model if connection else None,
            "consumeFromWhere": connection.consume_from_where if connection else None,
        }

    async def explain(self, group: str, topic: str) -> dict[str, Any]:
        (await self.require_group(group)).require_topic(topic)
        answers = await self.admin.explain_group(group, topic)
        return {"group": group, "topic": topic, "brokers": answers}

    async def timeline(
        self, group: str, since: int | None, until: int | None, points: int = 120
    ) -> dict[str, Any]:
        await self.require_group(group)
        answers = await self.admin.offset_timeline(group, since=since, until=until, points=points)
        history = await self.admin.offset_history(
            group, since=since, until=until, max_entries=200, changes_only=True
        )
        return {"group": group, "brokers": answers, "history": history}

    async def throughput(
        self, since: int, until: int, step_minutes: int | None, topic: str | None
    ) -> dict[str, Any]:
        """STATS_HISTORY of every broker (its master, else a slave): messages in and out per
        interval of the broker and of each topic, from its records (B-368)."""
        brokers: list[dict[str, Any]] = []
        readable: list[str] | None = None  # an account that may not see every topic: its own
        for name, addrs in sorted((await self.admin.broker_names()).items()):
            addr = addrs.get(0) or next(iter(addrs.values()))
            try:
                history: dict[str, Any] | None
                if readable is None:
                    body = await self.admin.stats_history(addr, since, until, step_minutes, topic)
                    history = dataclasses.asdict(body)
                else:
                    history = await self.own_history(addr, since, until, step_minutes, readable)
            except AdminError as exc:
                if acl_refusal(exc) is None or readable is not None or topic is not None:
                    brokers.append({"brokerName": name, "error": str(exc)})
                    continue
                # B-515: not an admin: the history of each topic the account may read
                scope = await self.scope()
                readable = sorted(t for t, perm in scope.topics.items() if "SUB" in perm)
                history = await self.own_history(addr, since, until, step_minutes, readable)
            except RemotingError as exc:  # shown as the broker's answer
                brokers.append({"brokerName": name, "error": str(exc)})
                continue
            if history is None:
                brokers.append({"brokerName": name, "error": "the account may read no topic"})
                continue
            brokers.append({"brokerName": name, "history": history})
        account = (await self.scope()).access_key if readable is not None else None
        return {
            "since": since,
            "until": until,
            "topic": topic,
            "brokers": brokers,
            "ownTopics": readable,
            "account": account,
        }

    async def own_history(
        self, addr: str, since: int, until: int, step_minutes: int | None, topics: list[str]
    ) -> dict[str, Any] | None:
        """STATS_HISTORY of each of `topics` from one broker, as one answer of those topics only;
        its `broker` series, the whole broker's, left at zero (an admin's to see)."""
        merged: dict[str, Any] | None = None
        for name in topics:
            history = dataclasses.asdict(
                await self.admin.stats_history(addr, since, until, step_minutes, name)
            )
            if merged is None:
                merged = history
                merged["topics"] = list(history["topics"])
                for key in ("in_messages", "out_messages"):
                    merged["broker"][key] = [0] * len(history["broker"][key])
            else:
                merged["topics"] += history["topics"]
        return merged

    async def offsets_at(self, group: str, at: int) -> dict[str, Any]:
        await self.require_group(group)
        answers = await self.admin.offsets_at(group, at)
        rows = sorted(
            ((a.broker_name, q) for a in answers for q in a.body.queues),
            key=lambda row: (row[1].topic, row[0], row[1].queue_id),
        )
        # each row as its broker wrote it, with the broker's name (the table and /api alike)
        queues = [dict(plain(q), brokerName=name) for name, q in rows]
        return {"group": group, "at": at, "queues": queues, "brokers": answers}

    # ------------------------------------------------------------------ messages
    async def find_messages(
        self,
        msg_id: str | None = None,
        topic: str | None = None,
        key: str | None = None,
        broker: str | None = None,
        queue_id: int | None = None,
        offset: int | None = None,
    ) -> dict[str, Any]:
        """A message by id, the messages of a key, or one by queue and offset (the fields of
        one of these searches, checked by `pages.messages`)."""
        found: list[StoredMessage] = []
        if topic:
            await self.require_topic(topic)
        if msg_id:
            try:  # an offset msg id, else a UNIQ_KEY, as mqadmin queryMsgById (B-491)
                found = [await self.admin.message_by_id(msg_id, topic)]
            except ValueError as exc:
                raise PageError(404, str(exc)) from None
        elif topic and key:
            found = await self.admin.messages_by_key(topic, key)
        elif topic and broker and queue_id is not None and offset is not None:
            found = [await self.message_at(topic, broker, queue_id, offset)]
        if found and not topic:  # found by id: only what the account may see
            scope = await self.scope()
            found = [m for m in found if scope.sees_topic(m.topic)]
        return {"messages": [message_row(m) for m in found]}

    async def message_at(
        self, topic: str, broker: str, queue_id: int, offset: int
    ) -> StoredMessage:
        """The message at `offset` of a queue, the broker and queue checked against the route."""
        route = await self.admin.route(topic)
        queues = {q.broker_name: q.read_queue_nums for q in route.queue_datas}
        if broker not in queues:
            known = ", ".join(sorted(queues)) or "none"
            raise PageError(400, f"topic {topic} has no broker {broker} (its brokers: {known})")
        if not 0 <= queue_id < queues[broker]:
            raise PageError(
                400, f"{topic} has queues 0..{queues[broker] - 1} on {broker}, not {queue_id}"
            )
        if offset < 0:
            raise PageError(400, f"an offset is 0 or more, not {offset}")
        try:
            return await self.admin.message_by_offset(topic, broker, queue_id, offset)
        except ValueError as exc:  # the broker and queue are the route's: no message there
            raise PageError(404, str(exc)) from None

    async def trace(self, msg_id: str) -> dict[str, Any]:
        return await self.admin.message_trace(msg_id)

    # ------------------------------------------------------------------ dead letters and resets
    async def dead_letters(self, group: str) -> dict[str, Any]:
        """The dead letters of a group not yet re-driven: a dry run of REDRIVE_DLQ (it changes nothing)."""
        await self.require_group(group)
        items = await self.admin.redrive_dlq(group, dry_run=True)
        return {"group": group, "items": items}

    async def redrive(self, group: str, target: str, dry_run: bool) -> dict[str, Any]:
        await self.require_group(group)
        async with self.writes:
            if not dry_run:
                await self.announce_everywhere()
            items = await self.admin.redrive_dlq(group, target=target, dry_run=dry_run)
        return {"group": group, "target": target, "dryRun": dry_run, "items": items}

    async def reset(
        self,
        group: str,
        topic: str,
        kind: str,
        value: int,
        *,
        force: bool,
        mode: str | None,
        dry_run: bool,
    ) -> dict[str, Any]:
        """The reset asked of every broker of the topic; `brokers` are their answers (ResetOffsetResult)."""
        (await self.require_group(group)).require_topic(topic)
        async with self.writes:
            if not dry_run:
                await self.announce_everywhere()
            brokers = await self.admin.reset_offset(
                group, topic, kind, value, force=force, dry_run=dry_run, mode=mode
            )
        return {
            "group": group,
            "topic": topic,
            "kind": kind,
            "value": value,
            "force": force,
            "mode": mode,
            "dryRun": dry_run,
            "brokers": brokers,
        }


def message_row(m: StoredMessage) -> dict[str, Any]:
    return {
        "msgId": m.msg_id,
        "uniqKey": m.properties.get("UNIQ_KEY"),
        "topic": m.topic,
        "tags": m.tags,
        "keys": " ".join(m.keys),
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "reconsumeTimes": m.reconsume_times,
        "storeTimestamp": m.store_timestamp,
        "bornTimestamp": m.born_timestamp,
        "bodySize": len(m.body),
        "body": m.body[:512].decode("utf-8", "replace"),
        "properties": dict(m.properties),
    }
