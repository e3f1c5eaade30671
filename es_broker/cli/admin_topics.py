"""`es-broker admin`'s topic and subscription-group verbs, with mqadmin's options and output."""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from es_broker.cli.admin_verbs import V, opt, table, verb
from es_broker.client.admin import Admin, AdminError
from es_broker.commands.names import DLQ_PREFIX, RETRY_PREFIX
from es_broker.net.remoting_client import RemotingError
from es_broker.timetravel.timeparse import format_time

# ---------------------------------------------------------------------- topics


def _topic_opts(fn: V) -> V:
    for o in [
        (("-b", "--brokerAddr"), {}),
        (("-c", "--clusterName"), {}),
        (("-t", "--topic"), {"required": True}),
    ]:
        fn = opt(*o[0], **o[1])(fn)
    return fn


@verb(
    "updateTopic",
    lambda r: "\n".join(f"create topic to {a} success." for a in r["brokers"]) + f"\n{r['config']}",
)
@_topic_opts
@opt("-r", "--readQueueNums", type=int, default=8)
@opt("-w", "--writeQueueNums", type=int, default=8)
@opt("-p", "--perm", type=int, default=6)
@opt("-o", "--order", default="false")
@opt("-a", "--attributes", help="RocketMQ 5's topic attributes: +message.type=FIFO,-key")
async def update_topic(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    for addr in addrs:
        await admin.update_topic(
            addr,
            a.topic,
            a.readQueueNums,
            a.writeQueueNums,
            a.perm,
            a.order == "true",
            attributes=a.attributes,
        )
    config: dict[str, Any] = {
        "topicName": a.topic,
        "readQueueNums": a.readQueueNums,
        "writeQueueNums": a.writeQueueNums,
        "perm": a.perm,
    }
    if a.attributes:
        config["attributes"] = a.attributes
    return {"brokers": addrs, "config": config}


@verb(
    "updateTopicPerm",
    lambda r: "\n".join(
        f"update topic perm from {x['oldPerm']} to {x['perm']} in {x['broker']} success." for x in r
    ),
)
@_topic_opts
@opt("-p", "--perm", type=int, required=True)
async def update_topic_perm(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        await admin.update_topic_perm(addr, a.topic, a.perm)
        for addr in await admin.targets(a.brokerAddr, a.clusterName)
    ]


@verb(
    "deleteTopic", lambda r: f"delete topic [{r['topic']}] from cluster [{r['cluster']}] success."
)
@opt("-t", "--topic", required=True)
@opt("-c", "--clusterName", required=True)
async def delete_topic(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    await admin.delete_topic(await admin.master_addrs(a.clusterName), a.topic)
    return {"topic": a.topic, "cluster": a.clusterName}


def _topic_list_lines(rows: list[Any]) -> str:
    """The topics, one a line; with -c mqadmin's table of cluster, topic and consumer group."""
    if not rows or not isinstance(rows[0], dict):
        return "\n".join(rows)
    line = "{:<20}  {:<48}  {:<48}"
    return "\n".join(
        [line.format("#Cluster Name", "#Topic", "#Consumer Group")]
        + [line.format(r["cluster"][:20], r["topic"][:48], r["group"][:48]) for r in rows]
    )


@verb("topicList", _topic_list_lines)
@opt(
    "-c",
    "--clusterModel",
    action="store_true",
    help="each topic's cluster and the groups consuming it (retry and DLQ topics left out)",
)
async def topic_list(admin: Admin, a: argparse.Namespace) -> list[str] | list[dict[str, str]]:
    topics = await admin.topic_list()
    if not a.clusterModel:
        return topics
    clusters = (await admin.cluster_info()).cluster_addr_table
    rows: list[dict[str, str]] = []
    for topic in topics:
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            continue
        cluster, groups = "", [""]
        # as mqadmin: the cluster of the route's first broker, the groups its master names; a
        # topic either is not found for is listed with what was found
        with contextlib.suppress(AdminError, RemotingError, IndexError):
            first = (await admin.route(topic)).broker_datas[0]
            cluster = next((c for c, names in clusters.items() if first.broker_name in names), "")
            addr = first.broker_addrs.get(0) or next(iter(first.broker_addrs.values()), None)
            if addr is not None:
                groups = await admin.topic_consumed_by(addr, topic) or [""]
        rows += [{"cluster": cluster, "topic": topic, "group": g} for g in groups]
    return rows


@verb("topicRoute", lambda r: json.dumps(r, indent=2, default=str))
@opt("-t", "--topic", required=True)
async def topic_route(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    route = await admin.route(a.topic)
    plain: dict[str, Any] = json.loads(
        route.encode(standard_json=True)
    )  # broker ids as string keys
    return plain


@verb(
    "topicStatus",
    lambda rows: table(
        ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
        [
            [
                r["brokerName"],
                r["queueId"],
                r["minOffset"],
                r["maxOffset"],
                format_time(r["lastUpdateTimestamp"]),
            ]
            for r in rows
        ],
    ),
)
@opt("-t", "--topic", required=True)
async def topic_status(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    return await admin.topic_status(a.topic)


# ---------------------------------------------------------------------- groups


@verb(
    "updateSubGroup",
    lambda r: (
        "\n".join(f"create subscription group to {x} success." for x in r["brokers"])
        + f"\n{r['config']}"
    ),
)
@opt("-b", "--brokerAddr")
@opt("-c", "--clusterName")
@opt("-g", "--groupName", required=True)
@opt("-s", "--consumeEnable", default="true")
@opt("-m", "--consumeFromMinEnable", default="false")
@opt("-d", "--consumeBroadcastEnable", default="false")
@opt("-q", "--retryQueueNums", type=int, default=1)
@opt("-r", "--retryMaxTimes", type=int, default=16)
@opt("-i", "--brokerId", type=int, default=0)
@opt("-w", "--whichBrokerWhenConsumeSlowly", type=int, default=1)
@opt("-a", "--notifyConsumerIdsChanged", default="true")
async def update_sub_group(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    config = {
        "groupName": a.groupName,
        "consumeEnable": a.consumeEnable == "true",
        "consumeFromMinEnable": a.consumeFromMinEnable == "true",
        "consumeBroadcastEnable": a.consumeBroadcastEnable == "true",
        "retryQueueNums": a.retryQueueNums,
        "retryMaxTimes": a.retryMaxTimes,
        "brokerId": a.brokerId,
        "whichBrokerWhenConsumeSlowly": a.whichBrokerWhenConsumeSlowly,
        "notifyConsumerIdsChangedEnable": a.notifyConsumerIdsChanged == "true",
    }
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    for addr in addrs:
        await admin.update_group(addr, config)
    return {"brokers": addrs, "config": config}


@verb(
    "deleteSubGroup",
    lambda r: "\n".join(
        f"delete subscription group [{r['group']}] from broker [{x}] success." for x in r["brokers"]
    ),
)
@opt("-b", "--brokerAddr")
@opt("-c", "--clusterName")
@opt("-g", "--groupName", required=True)
@opt("-r", "--removeOffset", default="false")
async def delete_sub_group(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    for addr in addrs:
        await admin.delete_group(addr, a.groupName, a.removeOffset == "true")
    return {"group": a.groupName, "brokers": addrs}
