"""What `es-broker serve` settles about access before anything listens.

The listeners' plain ACL (aclEnable, B-160), the broker's own account for the
requests it signs (B-175), what a broker needs to register with a name server
that has ACL on (B-314), and the warning for listeners others can reach with
ACL off (B-353).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping

from es_broker.acl.access import AccessControl, OnChange, default_acl_sources
from es_broker.acl.rules import Rule
from es_broker.acl.signing import Credentials
from es_broker.config import BrokerConfig

log = logging.getLogger("es_broker")


def _loopback(host: str) -> bool:
    """True if only this machine can reach a listener on `host` (a name is looked at as written)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name, "", 0.0.0.0's spellings: reachable from elsewhere


def open_listener_warning(config: BrokerConfig, listeners: Mapping[str, str]) -> str | None:
    """With ACL off, the warning for the listeners (role -> host) that others can reach (B-353)."""
    if config.aclEnable:
        return None
    exposed = [
        f"{role} on {host or '*'}" for role, host in listeners.items() if not _loopback(host)
    ]
    if not exposed:
        return None
    return (
        f"aclEnable=false and listening beyond loopback ({', '.join(exposed)}): anyone who "
        "can reach these ports can send and read every message, commit or reset any group's "
        "offsets, create and delete topics and groups, change the broker's settings, fetch "
        "the whole log as a slave, and register brokers or change routes on the name server. "
        "Turn aclEnable on (plain_acl.yml), or listen on 127.0.0.1 only"
    )


def say_who_registers(access: AccessControl, addr: str, alone: bool) -> None:
    """B-314: what a broker needs to register with a name server that has aclEnable (RocketMQ's has no ACL)."""
    admins = sorted(a.access_key for a in access.acl.accounts.values() if a.admin)
    need = (
        f"a broker registers with name server {addr} only when its broker.conf sets "
        "peer_access_key / peer_secret_key to an admin account of "
        f"{access.sources.default_file} (admin accounts: {', '.join(admins) or 'none'})"
    )
    if alone:  # `serve --role namesrv`: every broker is a wire peer
        log.warning("aclEnable: %s", need)
    else:
        log.info("aclEnable: this process's broker registers in-process; any other: %s", need)


def access_control(
    config: BrokerConfig, rules: Mapping[int, Rule], name: str, on_change: OnChange | None = None
) -> AccessControl | None:
    """The listener's plain ACL when aclEnable=true (AclConfigError, a ValueError, if its files are unusable)."""
    if not config.aclEnable:
        return None
    return AccessControl(
        default_acl_sources(config.acl_plain_file, config.storePathRootDir),
        rules,
        name=name,
        on_change=on_change,
        window_ms=config.aclSignatureWindowMs,
        strict=config.aclStrictSignatures,
        admin_rocketmq=config.aclAdminRocketmqSignatures,
        nonces_max=config.aclNonceCacheSize,
    )


def peer_credentials(config: BrokerConfig) -> Credentials | None:
    """The broker's own account (peer_access_key / peer_secret_key), or None when not configured."""
    if not config.peer_access_key and not config.peer_secret_key:
        return None
    if not config.peer_access_key or not config.peer_secret_key:
        raise ValueError(
            "peer_access_key and peer_secret_key are set together (the broker's own account)"
        )
    return Credentials(config.peer_access_key, config.peer_secret_key)
