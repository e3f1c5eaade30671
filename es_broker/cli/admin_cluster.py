"""`es-broker admin`'s cluster verbs (clusterList, the fail-over's, brokerStatus) and mqadmin's ACL verbs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from es_broker.cli.admin_verbs import V, opt, table, verb
from es_broker.client.admin import Admin, AdminError
from es_broker.client.admin_cluster import AclVersionInfo
from es_broker.config import BrokerRole
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting import fastjson
from es_broker.remoting.peer_outcomes import peer_problems
from es_broker.timetravel.timeparse import format_time

# ---------------------------------------------------------------------- cluster


@verb(
    "clusterList",
    lambda rows: table(
        [
            "#Cluster Name",
            "#Broker Name",
            "#BID",
            "#Addr",
            "#Version",
            "#Peer Requests",
            "#Role",
            "#Epoch",
            "#Lag",
        ],
        [
            [
                r["cluster"],
                r["brokerName"],
                r["brokerId"],
                r["addr"],
                r["version"],
                r["peers"],
                r.get("role", ""),
                r.get("epoch", ""),
                r.get("lag", ""),
            ]
            for r in rows
        ],
    ),
)
async def cluster_list(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    info = await admin.cluster_info()
    rows = []
    for cluster, names in sorted(info.cluster_addr_table.items()):
        for name in names:
            for bid, addr in sorted(info.broker_addr_table[name].broker_addrs.items()):
                runtime = {}
                try:
                    runtime = await admin.broker_runtime(addr)
                except (AdminError, RemotingError):
                    version, peers = "(unreachable)", ""
                else:
                    # what its name servers, master or clients refused it (B-316)
                    version = runtime.get("brokerVersionDesc", "")
                    peers = "; ".join(peer_problems(runtime)) or "ok"
                rows.append(
                    {
                        "cluster": cluster,
                        "brokerName": name,
                        "brokerId": bid,
                        "addr": addr,
                        "version": version,
                        "peers": peers,
                        **ha_columns(runtime),
                    }
                )
    return rows


def ha_columns(runtime: dict[str, str]) -> dict[str, str]:
    """A node's role, fail-over epoch and lag in records behind its master (B-387)."""
    lag = ""
    if runtime.get("brokerRole") == BrokerRole.SLAVE and runtime.get("haMasterLastSeq"):
        lag = str(max(int(runtime["haMasterLastSeq"]) - int(runtime.get("haAppliedSeq", 0)), 0))
    elif runtime.get("brokerRole"):
        lag = "0"
    return {
        "role": runtime.get("brokerRole", ""),
        "epoch": runtime.get("haEpoch", ""),
        "lag": lag,
    }


HA_STATUS_KEYS = ("brokerRole", "brokerId", "recordLogLastSeq")


@verb("haStatus", lambda r: "\n".join(f"{k:<32}: {v}" for k, v in sorted(r.items())))
@opt("-b", "--brokerAddr", required=True)
async def ha_status(admin: Admin, a: argparse.Namespace) -> dict[str, str]:
    """A node's fail-over state: node, epoch, leader, fence, replication (B-387)."""
    runtime = await admin.broker_runtime(a.brokerAddr)
    return {k: v for k, v in runtime.items() if k.startswith("ha") or k in HA_STATUS_KEYS}


@verb("haSwitch", lambda r: f"switch-over from {r.get('from')} to {r.get('to')} done")
@opt("-b", "--brokerAddr", required=True, help="the leader's address")
@opt("-t", "--to", required=True, help="the follower's ha_node_id")
async def ha_switch(admin: Admin, a: argparse.Namespace) -> dict[str, str]:
    """Planned switch-over: the leader stops writes, waits for the follower to hold them all, hands over."""
    return await admin.ha_switch(a.brokerAddr, a.to)


@verb("brokerStatus", lambda r: "\n".join(f"{k:<32}: {v}" for k, v in sorted(r.items())))
@opt("-b", "--brokerAddr", required=True)
async def broker_status(admin: Admin, a: argparse.Namespace) -> dict[str, str]:
    return await admin.broker_runtime(a.brokerAddr)


# ---------------------------------------------------------------------- ACL (mqadmin's acl verbs)


def _acl_target_opts(fn: V) -> V:
    for names in [("-b", "--brokerAddr"), ("-c", "--clusterName")]:
        fn = opt(*names)(fn)
    return fn


def _csv(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def _render_acl_update(r: dict[str, Any]) -> str:
    lines = [f"create or update plain access config to {a} success." for a in r["brokers"]]
    return "\n".join(lines + [json.dumps(r["config"])])


@verb("updateAclConfig", _render_acl_update)
@_acl_target_opts
@opt("-a", "--accessKey", required=True)
@opt("-s", "--secretKey", required=True)
@opt("-w", "--whiteRemoteAddress")
@opt("-i", "--defaultTopicPerm")
@opt("-u", "--defaultGroupPerm")
@opt("-t", "--topicPerms", help="e.g. topicA=DENY,topicD=SUB")
@opt("-g", "--groupPerms", help="e.g. groupA=DENY,groupD=SUB")
@opt("-m", "--admin", default="false")
async def update_acl_config(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    config = {
        "accessKey": a.accessKey,
        "whiteRemoteAddress": a.whiteRemoteAddress,
        "admin": a.admin.lower() == "true",
        "defaultTopicPerm": a.defaultTopicPerm,
        "defaultGroupPerm": a.defaultGroupPerm,
        "topicPerms": _csv(a.topicPerms),
        "groupPerms": _csv(a.groupPerms),
    }
    for addr in addrs:
        await admin.update_acl_config(
            addr,
            a.accessKey,
            a.secretKey,
            white_remote_address=a.whiteRemoteAddress,
            admin=config["admin"],
            default_topic_perm=a.defaultTopicPerm,
            default_group_perm=a.defaultGroupPerm,
            topic_perms=config["topicPerms"],
            group_perms=config["groupPerms"],
        )
    # the secret is never printed
    return {
        "brokers": addrs,
        "config": {**config, "secretKey": "******"},
    }


@verb(
    "deleteAclConfig",
    lambda r: "\n".join(
        [f"delete plain access config account from {a} success." for a in r["brokers"]]
        + [f"account's accesskey is:{r['accessKey']}"]
    ),
)
@_acl_target_opts
@opt("-a", "--accessKey", required=True)
async def delete_acl_config(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    for addr in addrs:
        await admin.delete_acl_config(addr, a.accessKey)
    return {"brokers": addrs, "accessKey": a.accessKey}


@verb(
    "updateGlobalWhiteAddr",
    lambda r: "\n".join(
        f"update global white remote addresses to {a} success." for a in r["brokers"]
    ),
)
@_acl_target_opts
@opt("-g", "--globalWhiteRemoteAddresses", required=True, help="e.g. 10.10.103.*,192.168.0.*")
@opt("-p", "--aclFileFullPath", help="the ACL file to change (default: the broker's plain_acl.yml)")
async def update_global_white_addr(admin: Admin, a: argparse.Namespace) -> dict[str, Any]:
    addrs = await admin.targets(a.brokerAddr, a.clusterName)
    patterns = _csv(a.globalWhiteRemoteAddresses) or []
    for addr in addrs:
        await admin.update_global_white_addrs(addr, patterns, a.aclFileFullPath)
    return {"brokers": addrs, "globalWhiteRemoteAddresses": patterns}


def _render_acl_versions(rows: list[AclVersionInfo]) -> str:
    return table(
        [
            "#Cluster Name",
            "#Broker Name",
            "#Broker Addr",
            "#AclFilePath",
            "#AclConfigVersionNum",
            "#AclLastUpdateTime",
        ],
        [
            [
                r.cluster_name,
                r.broker_name,
                r.broker_addr,
                path,
                v.counter,
                format_time(v.timestamp),
            ]
            for r in rows
            for path, v in sorted(r.all_versions.versions.items())
        ],
    )


@verb("clusterAclConfigVersion", _render_acl_versions)
@_acl_target_opts
async def cluster_acl_config_version(admin: Admin, a: argparse.Namespace) -> list[AclVersionInfo]:
    return [
        await admin.acl_config_version(addr)
        for addr in await admin.targets(a.brokerAddr, a.clusterName)
    ]


def _render_acl_config(rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        out += [
            f"broker {r['brokerAddr']}",
            "",
            f"{'globalWhiteRemoteAddresses':<20}: {r['globalWhiteAddrs']}",
            "",
            "accounts:",
        ]
        for account in r["plainAccessConfigs"]:
            out += [f"  {k:<18}: {'' if v is None else v}" for k, v in account.items()] + [""]
    return "\n".join(out)


@verb("getAccessConfigSubCommand", _render_acl_config)
@_acl_target_opts
async def get_access_config(admin: Admin, a: argparse.Namespace) -> list[dict[str, Any]]:
    """4.9.0's listing of every account; es-broker masks the secret keys."""
    return [
        {"brokerAddr": addr, **fastjson.loads((await admin.acl_config(addr)).encode())}
        for addr in await admin.targets(a.brokerAddr, a.clusterName)
    ]
