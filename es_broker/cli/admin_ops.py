"""More of mqadmin 4.9.8's verbs, with its option names and output (`--json` for scripts).

getBrokerConfig, updateBrokerConfig, deleteExpiredCommitLog, cloneGroupOffset,
producerConnection, consumerStatus, getConsumerConfig, topicClusterList,
queryMsgByUniqueKey and printMsg. Which mqadmin verbs are left out, and why:
docs/semantics.md, B-260..B-268.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from es_broker.cli.admin_verbs import java_map, message_fields, opt, verb
from es_broker.client.admin import Admin, AdminError
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.admin_bodies import CleanPassResult
from es_broker.remoting.bodies import ProducerConnection
from es_broker.remoting.codes import version_name
from es_broker.remoting.message import StoredMessage, encode
from es_broker.timetravel.timeparse import parse_time

BODY_DIR = Path("/tmp/rocketmq/msgbodys")  # where mqadmin's queryMsgByUniqueKey writes bodies
# consumerStatus's running-info files; mqadmin writes them under the working directory (B-266)
STATUS_DIR = Path("/tmp/rocketmq/consumerStatus")


# ---------------------------------------------------------------------- broker config


async def _masters_and_slaves(admin: Admin, cluster: str) -> list[tuple[str, list[str]]]:
    """(master address, its slaves' addresses) per broker of a cluster (CommandUtil)."""
    info = await admin.cluster_info()
    names = info.cluster_addr_table.get(cluster)
    if names is None:
        raise ValueError(f"cluster {cluster!r} is not known to the name server")
    out = []
    for name in sorted(names):
        addrs = info.broker_addr_table[name].broker_addrs
        if 0 in addrs:
            out.append((addrs[0], [a for bid, a in sorted(addrs.items()) if bid != 0]))
    return out


def _render_broker_config(r: list[dict[str, Any]]) -> str:
    out = []
    for b in r:
        out.append(b["title"])
        out += [f"{k:<50}=  {v}" for k, v in b["config"].items()]
        out.append("")
    return "\n".join(out)


@verb("getBrokerConfig", _render_broker_config)
@opt("-b", "--brokerAddr")
@opt("-c", "--clusterName")
async def get_broker_config(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    """The settings a broker runs with (its peer secret key is never sent)."""
    if a.brokerAddr:
        wanted = [(f"============{a.brokerAddr}============", a.brokerAddr)]
    elif a.clusterName:
        wanted = []
        for master, slaves in await _masters_and_slaves(admin, a.clusterName):
            wanted.append((f"============Master: {master}============", master))
            wanted += [
                (f"============My Master: {master}=====Slave: {s}============", s) for s in slaves
            ]
    else:
        raise ValueError("give a broker address (-b) or a cluster name (-c)")
    return [
        {"title": title, "brokerAddr": addr, "config": await admin.broker_config(addr)}
        for title, addr in wanted
    ]


@verb(
    "updateBrokerConfig",
    lambda r: "\n".join(f"update broker config success, {x}" for x in r["brokers"]),
)
@opt("-b", "--brokerAddr")
@opt("-c", "--clusterName")
@opt("-k", "--key", required=True)
@opt("-v", "--value", required=True)
async def update_broker_config(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    """One setting on a broker, or on every master of a cluster (only the runtime-changeable keys)."""
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    key, value = a.key.strip(), a.value.strip()
    for addr in addrs:
        await admin.update_broker_config(addr, {key: value})
    return {"brokers": addrs, "key": key, "value": value}


@verb("deleteExpiredCommitLog", lambda r: "success")
@opt("-b", "--brokerAddr")
@opt("-c", "--cluster")
async def delete_expired_commit_log(
    admin: Admin, a: argparse.Namespace
) -> dict[str, CleanPassResult]:
    """A clean pass now on a broker, or every master of a cluster: expired files only (B-264)."""
    addrs = [a.brokerAddr] if a.brokerAddr else await admin.master_addrs(a.cluster)
    return {addr: await admin.delete_expired_commitlog(addr) for addr in addrs}


# ---------------------------------------------------------------------- groups and connections


@verb(
    "cloneGroupOffset",
    lambda r: (
        f"clone group offset success. srcGroup[{r['srcGroup']}], destGroup=[{r['destGroup']}], "
        f"topic[{r['topic']}]"
    ),
)
@opt("-s", "--srcGroup", required=True)
@opt("-d", "--destGroup", required=True)
@opt("-t", "--topic", required=True)
@opt("-o", "--offline", default="false")
async def clone_group_offset(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    """dest's offsets of the topic become src's, on each broker of the topic (B-35, B-262)."""
    src, dest, topic = a.srcGroup.strip(), a.destGroup.strip(), a.topic.strip()
    brokers = await admin.topic_brokers(topic)
    for _, addr in brokers:
        await admin.clone_group_offset(addr, src, dest, topic, a.offline.strip() == "true")
    return {
        "srcGroup": src,
        "destGroup": dest,
        "topic": topic,
        "brokers": [name for name, _ in brokers],
    }


def _version(v: Any) -> str:
    return version_name(int(v)) if str(v).lstrip("-").isdigit() else str(v)


@verb(
    "producerConnection",
    lambda r: "\n".join(
        f"{i:04d}  {c.client_id:<32} {c.client_addr:<22} {c.language:<8} {_version(c.version)}"
        for i, c in enumerate(r.connection_set, 1)
    ),
)
@opt("-g", "--producerGroup", required=True)
@opt("-t", "--topic", required=True)
async def producer_connection(admin: Admin, a: argparse.Namespace) -> ProducerConnection:
    return await admin.producer_connection(a.producerGroup.strip(), a.topic.strip())


def _render_consumer_status(r: dict[str, Any]) -> str:
    if r.get("clientId"):
        return json.dumps(r["runningInfo"], indent=2, sort_keys=True)
    lines = [f"{'#Index':<10} {'#ClientId':<40} {'#Version':<20} #ConsumerRunningInfoFile"]
    for i, c in enumerate(r["clients"], 1):
        lines.append(f"{i:<10d} {c['clientId']:<40} {_version(c['version']):<20} {c['file']}")
    subs = {json.dumps(c["subscriptions"], sort_keys=True) for c in r["clients"]}
    if len(subs) == 1:
        lines += ["", "", "Same subscription in the same group of consumer"]
    elif subs:
        lines += ["", "", "WARN: Different subscription in the same group of consumer!!!"]
    return "\n".join(lines)


@verb("consumerStatus", _render_consumer_status)
@opt("-g", "--consumerGroup", required=True)
@opt("-i", "--clientId")
@opt("-b", "--brokerAddr")
@opt("-s", "--jstack", action="store_true")
async def consumer_status(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    """Each consumer's running info (GET_CONSUMER_RUNNING_INFO), saved as mqadmin saves it."""
    group = a.consumerGroup.strip()
    if a.clientId:
        info = await admin.consumer_running_info(group, a.clientId.strip(), a.jstack)
        return {"group": group, "clientId": a.clientId.strip(), "runningInfo": info}
    connection = await admin.consumer_connection(group)
    now = STATUS_DIR / str(_now_ms())  # mqadmin's now/clientId
    clients = []
    for c in sorted(connection.connection_set, key=lambda c: c.client_id):
        try:
            info = await admin.consumer_running_info(group, c.client_id, a.jstack)
        except (AdminError, RemotingError):
            continue  # mqadmin skips a client that does not answer
        path = now / c.client_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(info, indent=2, sort_keys=True))
        clients.append(
            {
                "clientId": c.client_id,
                "version": c.version,
                "file": str(path),
                "subscriptions": sorted(
                    s.get("topic", "") + ":" + str(s.get("subString", ""))
                    for s in info.get("subscriptionSet", [])
                ),
            }
        )
    return {"group": group, "clients": clients}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _render_group_config(rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        out.append(
            f"============================={r['cluster']}:{r['brokerName']}============================="
        )
        out += [
            f"{k:<40}=  {'' if v is None else (str(v).lower() if isinstance(v, bool) else v)}"
            for k, v in r["config"].items()
        ]
    return "\n".join(out)


@verb("getConsumerConfig", _render_group_config)
@opt("-g", "--groupName", required=True)
async def get_consumer_config(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    """The subscription group's config on every broker that has it."""
    info = await admin.cluster_info()
    cluster_of = {n: c for c, names in info.cluster_addr_table.items() for n in names}
    rows = []
    for name, data in sorted(info.broker_addr_table.items()):
        addrs = data.broker_addrs
        addr = addrs.get(0) or next(iter(addrs.values()))
        config = await admin.group_config(addr, a.groupName.strip())
        if config is not None:
            rows.append({"cluster": cluster_of.get(name), "brokerName": name, "config": config})
    return rows


# ---------------------------------------------------------------------- topics


@verb("topicClusterList", lambda r: "\n".join(r))
@opt("-t", "--topic", required=True)
async def topic_cluster_list(admin: Admin, a: argparse.Namespace) -> list[str]:
    """The clusters whose brokers hold the topic."""
    route = await admin.route(a.topic.strip())
    info = await admin.cluster_info()
    out: list[str] = []
    for data in route.broker_datas:
        for cluster, names in sorted(info.cluster_addr_table.items()):
            if data.broker_name in names and cluster not in out:
                out.append(cluster)
    return out


# ---------------------------------------------------------------------- messages


def _unique_key_view(m: StoredMessage, body_path: str) -> dict[str, Any]:
    return {
        "msgId": m.properties.get("UNIQ_KEY") or m.msg_id,
        "offsetMsgId": m.msg_id,
        "topic": m.topic,
        "tags": m.tags,
        "keys": " ".join(m.keys) if m.keys else None,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.physical_offset,
        "reconsumeTimes": m.reconsume_times,
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
        "bornHost": f"{m.born_host[0]}:{m.born_host[1]}",
        "storeHost": f"{m.store_host[0]}:{m.store_host[1]}",
        "sysFlag": m.sys_flag,
        "properties": m.properties,
        "bodyPath": body_path,
        "body": m.uncompressed_body().decode("utf-8", errors="replace"),
    }


def _render_unique_key(rows: list[dict[str, Any]]) -> str:
    out = []
    for m in rows:
        fields = [*message_fields(m), ("Message Body Path", m["bodyPath"])]
        out += [f"{k + ':':<20} {v}" for k, v in fields]
    return "\n".join(out)


@verb("queryMsgByUniqueKey", _render_unique_key)
@opt("-i", "--msgId", required=True)
@opt("-t", "--topic", required=True)
@opt("-g", "--consumerGroup")
@opt("-d", "--clientId")
@opt("-a", "--showAll", action="store_true")
async def query_msg_by_unique_key(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    """The message(s) with a UNIQ_KEY, oldest first; bodies written where mqadmin writes them."""
    if a.consumerGroup or a.clientId:
        raise ValueError(
            "-g/-d (consume the message directly on a client) is not offered by es-broker admin"
        )
    uniq, topic = a.msgId.strip(), a.topic.strip()
    found = sorted(
        await admin.messages_by_uniq_key(topic, uniq, 32),
        key=lambda m: m.store_timestamp,
    )
    if not found:  # mqadmin fails: "query message by key finished, but no message." (B-680)
        raise ValueError(f"no message with unique key {uniq} in topic {topic}")
    rows = []
    for i, m in enumerate(found if a.showAll else found[:1]):
        BODY_DIR.mkdir(parents=True, exist_ok=True)
        path = BODY_DIR / (uniq + (f"_{i}" if i else ""))
        path.write_bytes(m.uncompressed_body())
        rows.append(_unique_key_view(m, str(path)))
    return rows


def _java_bytes(data: bytes) -> str:
    """Arrays.toString(byte[]): signed bytes."""
    return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in data) + "]"


def message_ext_string(m: StoredMessage, broker_name: str) -> str:
    """MessageExt#toString, as printMsg prints it."""
    return (
        f"MessageExt [brokerName={broker_name}, queueId={m.queue_id}, storeSize={len(encode(m))}, "
        f"queueOffset={m.queue_offset}, sysFlag={m.sys_flag}, bornTimestamp={m.born_timestamp}, "
        f"bornHost=/{m.born_host[0]}:{m.born_host[1]}, storeTimestamp={m.store_timestamp}, "
        f"storeHost=/{m.store_host[0]}:{m.store_host[1]}, msgId={m.msg_id}, "
        f"commitLogOffset={m.physical_offset}, bodyCRC={m.body_crc}, "
        f"reconsumeTimes={m.reconsume_times}, preparedTransactionOffset={m.prepared_transaction_offset}, "
        f"toString()=Message{{topic='{m.topic}', flag={m.flag}, properties={java_map(m.properties)}, "
        f"body={_java_bytes(m.body)}, transactionId='null'}}]"
    )


def _tag_matches(expression: str, tags: str | None) -> bool:
    wanted = {t.strip() for t in expression.split("||")}
    return "*" in wanted or (tags is not None and tags in wanted)


def _render_print(r: dict[str, Any]) -> str:
    out = []
    for q in r["queues"]:
        mq = f"MessageQueue [topic={r['topic']}, brokerName={q['brokerName']}, queueId={q['queueId']}]"
        out.append(f"minOffset={q['minOffset']}, maxOffset={q['maxOffset']}, {mq}")
        for m in q["messages"]:
            body = m["body"] if r["printBody"] else "NOT PRINT BODY"
            out.append(f"MSGID: {m['msgId']} {m['messageExt']} BODY: {body}")
        out.append("--------------------------------------------------------")
    return "\n".join(out)


@verb("printMsg", _render_print)
@opt("-t", "--topic", required=True)
@opt("-c", "--charsetName", default="UTF-8")
@opt("-s", "--subExpression", default="*")
@opt("-b", "--beginTimestamp", help="currentTimeMillis | yyyy-MM-dd#HH:mm:ss:SSS")
@opt("-e", "--endTimestamp", help="currentTimeMillis | yyyy-MM-dd#HH:mm:ss:SSS")
@opt("-d", "--printBody", default="true")
async def print_msg(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    """Every message of each queue of the topic, from min (or -b) to max (or -e) offset."""
    topic = a.topic.strip()
    begin = parse_time(a.beginTimestamp) if a.beginTimestamp else None
    end = parse_time(a.endTimestamp) if a.endTimestamp else None
    route = await admin.route(topic)
    addrs = {d.broker_name: d.broker_addrs for d in route.broker_datas}
    queues = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        name = qd.broker_name
        addr = addrs[name].get(0) or next(iter(addrs[name].values()))
        for qid in range(qd.read_queue_nums):
            lo = await admin.min_offset(addr, topic, qid)
            hi = await admin.queue_offsets(addr, topic, qid)
            if begin is not None:
                lo = await admin.queue_offsets(addr, topic, qid, at=begin)
            if end is not None:
                hi = await admin.queue_offsets(addr, topic, qid, at=end)
            messages = []
            for offset in range(lo, hi):
                try:
                    m = await admin.message_by_offset(topic, name, qid, offset)
                except ValueError:
                    break
                if _tag_matches(a.subExpression, m.tags):
                    messages.append(
                        {
                            "msgId": m.properties.get("UNIQ_KEY") or m.msg_id,
                            "messageExt": message_ext_string(m, name),
                            "body": m.uncompressed_body().decode(a.charsetName, errors="replace"),
                        }
                    )
            queues.append(
                {
                    "brokerName": name,
                    "queueId": qid,
                    "minOffset": lo,
                    "maxOffset": hi,
                    "messages": messages,
                }
            )
    return {"topic": topic, "printBody": a.printBody.strip().lower() == "true", "queues": queues}
