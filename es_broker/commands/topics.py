"""Topic configs and subscription groups: create, update, perm change, delete (B-20..B-26, B-03)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from es_broker.commands import names, offsets
from es_broker.commands.errors import GroupNotExist, IllegalRequest, TopicNotExist
from es_broker.config import BrokerRole
from es_broker.log import AppendContext
from es_broker.log.types import (
    Cause,
    SubgroupDeleted,
    SubgroupUpdated,
    TopicDeleted,
    TopicPermChanged,
    TopicUpdated,
)
from es_broker.projections.configs import as_record
from es_broker.remoting.bodies import MESSAGE_TYPE, SubscriptionGroupConfig, TopicConfig
from es_broker.store import Store

SLAVE_REFUSAL = (
    "Can't modify topic or subscription group from slave broker, "
    "please execute it from master broker."
)
MAX_QUEUE_NUMS = 1024


def auto_create_topic(
    store: Store, ctx: AppendContext, config: TopicConfig, requester: str
) -> TopicConfig:
    """Record a topic the broker creates on first use (cause `auto_create`); returns its config."""
    ctx.append(
        TopicUpdated(
            topic=config.topic_name,
            config=as_record(config),
            requester=requester,
            cause=Cause.AUTO_CREATE,
        ).to_record(store.clock.now_ms())
    )
    return config


def _check_master(store: Store) -> None:
    if store.config.brokerRole == BrokerRole.SLAVE:
        raise IllegalRequest(SLAVE_REFUSAL)


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise IllegalRequest(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


# B-600: RocketMQ 5's topic attributes, of which es-broker knows `message.type`
# (TopicAttributes#TOPIC_MESSAGE_TYPE_ATTRIBUTE): the values a topic may declare
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
_ATTRIBUTES: dict[str, tuple[str, ...]] = {MESSAGE_TYPE: MESSAGE_TYPES}
MAX_ATTRIBUTES_TEXT = 1024


def parse_attributes(text: object) -> dict[str, str | None]:
    """`+key=value,-key` (AttributeParser#parseToMap): a value to set, or None to remove."""
    if text is None or text == "":
        return {}
    if isinstance(text, Mapping):  # a stored topic's attributes (an import): each one set
        text = ",".join(f"+{k}={v}" for k, v in text.items())
    if not isinstance(text, str) or len(text) > MAX_ATTRIBUTES_TEXT:
        raise IllegalRequest(f"attributes must be text of at most {MAX_ATTRIBUTES_TEXT} characters")
    changes: dict[str, str | None] = {}
    for item in text.split(","):
        sign, body = item[:1], item[1:]
        key, eq, value = body.partition("=")
        if sign == "+" and eq and key and value:
            changes[key] = value
        elif sign == "-" and key and not eq:
            changes[key] = None
        else:
            raise IllegalRequest(f"attribute {item!r} is neither +key=value nor -key")
        if key not in _ATTRIBUTES:
            raise IllegalRequest(
                f"unsupported attribute {key!r}; supported: {', '.join(_ATTRIBUTES)}"
            )
        if value and value not in _ATTRIBUTES[key]:
            raise IllegalRequest(
                f"value {value!r} of attribute {key} is not one of {', '.join(_ATTRIBUTES[key])}"
            )
    return changes


def alter_attributes(
    current: Mapping[str, str] | None, changes: Mapping[str, str | None], *, creating: bool
) -> dict[str, str]:
    """A topic's attributes after an update (AttributeUtil#alterCurrentAttributes): a new topic
    takes only additions; an update sets and removes over what the topic had."""
    out = dict(current or {})
    for key, value in changes.items():
        if value is None:
            if creating:
                raise IllegalRequest(f"only +key=value attributes are taken when creating: -{key}")
            if key not in out:
                raise IllegalRequest(f"attribute {key} is not set on the topic: cannot remove it")
            out.pop(key)
        else:
            out[key] = value
    return out


def update_topic_job(
    store: Store,
    config: dict[str, Any],
    requester: str,
    *,
    system: bool = False,
    cause: Cause = Cause.UPDATE,
) -> Callable[[AppendContext], int]:
    """UPDATE_AND_CREATE_TOPIC: replace the whole config of a topic (B-26); an import's topics
    come this way too (cause `import`, B-522)."""
    topic = names.check_topic_name(config.get("topicName"))
    if not system and names.is_system_topic(topic):
        raise IllegalRequest(f"The topic[{topic}] is conflict with system topic.")
    _check_master(store)
    full = as_record(TopicConfig(topic))  # defaults 16/16, perm 6 (B-02)
    full.update({k: v for k, v in config.items() if k in full})
    _check_int("readQueueNums", full["readQueueNums"], 0, MAX_QUEUE_NUMS)
    _check_int("writeQueueNums", full["writeQueueNums"], 0, MAX_QUEUE_NUMS)
    _check_int("perm", full["perm"], 0, 15)
    changes = parse_attributes(config.get("attributes"))  # the request's +key=value,-key

    def job(ctx: AppendContext) -> int:
        current = store.topics.get(ctx.txn, topic)
        kept = current.attributes if current is not None else None
        attributes = alter_attributes(kept, changes, creating=current is None)
        record = dict(full, attributes=attributes) if attributes else full
        return ctx.append(
            TopicUpdated(topic=topic, config=record, requester=requester, cause=cause).to_record(
                store.clock.now_ms()
            )
        )

    return job


def update_topic_perm_job(
    store: Store, topic: str, perm: int, requester: str
) -> Callable[[AppendContext], int]:
    """Change only a topic's perm, as `mqadmin updateTopicPerm` does."""
    names.check_topic_name(topic)
    _check_int("perm", perm, 0, 15)
    _check_master(store)

    def job(ctx: AppendContext) -> int:
        config = store.topics.get(ctx.txn, topic)
        if config is None:
            raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
        return ctx.append(
            TopicPermChanged(
                topic=topic, old_perm=config.perm, perm=perm, requester=requester
            ).to_record(store.clock.now_ms())
        )

    return job


def delete_topic_job(
    store: Store, topic: str, requester: str
) -> Callable[[AppendContext], int | None]:
    names.check_topic_name(topic)
    if names.is_system_topic(topic):
        raise IllegalRequest(f"The topic[{topic}] is conflict with system topic.")
    _check_master(store)

    def job(ctx: AppendContext) -> int | None:
        if store.topics.get(ctx.txn, topic) is None:
            return None
        return ctx.append(
            TopicDeleted(topic=topic, requester=requester).to_record(store.clock.now_ms())
        )

    return job


def update_group_job(
    store: Store, config: dict[str, Any], requester: str, *, cause: Cause = Cause.UPDATE
) -> Callable[[AppendContext], int]:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: replace a group's config; an import's groups come
    this way too (cause `import`, B-522)."""
    group = names.check_group_name(config.get("groupName"))
    _check_master(store)
    full = as_record(SubscriptionGroupConfig(group))  # the defaults of B-03
    full.update({k: v for k, v in config.items() if k in full})
    _check_int("retryQueueNums", full["retryQueueNums"], 0, MAX_QUEUE_NUMS)
    if store.config.strict_retry_config and full["retryQueueNums"] <= 0:
        # RocketMQ accepts 0 and then silently drops every failed message (B-94); S-10 refuses it
        raise IllegalRequest(
            f"retryQueueNums of group {group} must be at least 1: with 0 every message the "
            "group fails is dropped (strict_retry_config=true)"
        )
    _check_int("retryMaxTimes", full["retryMaxTimes"], -1, 1 << 31)
    _check_int("brokerId", full["brokerId"], 0, 1 << 31)
    _check_int("whichBrokerWhenConsumeSlowly", full["whichBrokerWhenConsumeSlowly"], 0, 1 << 31)

    def job(ctx: AppendContext) -> int:
        return ctx.append(
            SubgroupUpdated(group=group, config=full, requester=requester, cause=cause).to_record(
                store.clock.now_ms()
            )
        )

    return job


def delete_group_job(
    store: Store, group: str, requester: str, *, remove_offsets: bool = False
) -> Callable[[AppendContext], int | None]:
    """DELETE_SUBSCRIPTIONGROUP: `subgroup_deleted` when the group exists; with
    `remove_offsets`, every `*@group` offset goes too (B-34), in that same record (B-431),
    so no crash or full disk can leave the group gone and its offsets kept. A group with
    offsets but no config loses them by `offsets_removed`, as 4.9.8 removes them whether or
    not the config existed. Returns the deletion's record (None: no such group)."""
    names.check_group_name(group)
    _check_master(store)
    remove = (
        offsets.remove_group_offsets_job(store, group, requester=requester)
        if remove_offsets
        else None
    )

    def job(ctx: AppendContext) -> int | None:
        if store.groups.get(ctx.txn, group) is None:
            if remove is not None:
                remove(ctx)
            return None
        removed = offsets.group_offsets(store, ctx.txn, group) if remove_offsets else []
        return ctx.append(
            SubgroupDeleted(group=group, requester=requester, offsets=removed or None).to_record(
                store.clock.now_ms()
            )
        )

    return job


def find_or_create_group(
    store: Store, ctx: AppendContext, group: str, requester: str
) -> SubscriptionGroupConfig:
    """The group's config, created with the defaults when RocketMQ would (B-03)."""
    config = store.groups.get(ctx.txn, group)
    if config is not None:
        return config
    if not (store.config.autoCreateSubscriptionGroup or group.startswith("CID_RMQ_SYS_")):
        raise GroupNotExist(f"subscription group [{group}] does not exist, apply first please!")
    config = SubscriptionGroupConfig(group)
    ctx.append(
        SubgroupUpdated(
            group=group, config=as_record(config), requester=requester, cause=Cause.AUTO_CREATE
        ).to_record(store.clock.now_ms())
    )
    return config
