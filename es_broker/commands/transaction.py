"""Transactional messages: half messages, END_TRANSACTION, the check (B-220..B-234).

A send whose TRAN_MSG property is "true" stores a *half message* in
RMQ_SYS_TRANS_HALF_TOPIC queue 0, its real topic and queue kept in REAL_TOPIC
and REAL_QID and its transaction bits cleared (4.9.8 parseHalfMessageInner):
the consume queues of the real topic never hold it, so no consumer can see it.
Its store record carries a `transaction` map (state "prepared"), which opens
the transaction in the transactions projection.

END_TRANSACTION commit stores a copy in the real queue (4.9.8
EndTransactionProcessor#endMessageTransaction): REAL_TOPIC, REAL_QID and
TRAN_MSG removed, the sys flag's transaction bits set to COMMIT, the half
message's commit-log offset as its prepared-transaction offset. The copy's
store record (`transaction` state "committed") is also the end of the
transaction, so a commit is one record. A rollback is a `transaction_ended`
record. The check pass records every check (`transaction_checked`, with the
attempt number and the client asked) and every discard (a copy in
TRANS_CHECK_MAX_TIME_TOPIC whose record says "discarded"), so replay decides
nothing again.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from es_broker.commands import delay, placement
from es_broker.commands.errors import BrokerError, NoPermission
from es_broker.commands.topics import auto_create_topic
from es_broker.log import AppendContext
from es_broker.log.types import (
    TransactionChecked,
    TransactionEnded,
    TransactionState,
)
from es_broker.remoting import message as wire
from es_broker.remoting.bodies import TopicConfig
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.response_headers import CheckTransactionStateRequestHeader
from es_broker.store import Store

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"

# MessageSysFlag: the transaction bits of a sys flag, and END_TRANSACTION's commitOrRollback
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC

MAX_PER_PASS = (
    256  # checks and discards per write transaction, so a pass never holds the writer long
)


def reset_transaction_value(sys_flag: int, kind: int) -> int:
    """MessageSysFlag.resetTransactionValue: replace the transaction bits of a sys flag."""
    return (sys_flag & ~TRANSACTION_ROLLBACK_TYPE) | kind


def is_half(properties: Mapping[str, str]) -> bool:
    """A send with TRAN_MSG "true" (Boolean.parseBoolean: any case) stores a half message (B-220)."""
    return properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"


def immunity_seconds(properties: Mapping[str, str]) -> int | None:
    """CHECK_IMMUNITY_TIME_IN_SECONDS as a number; None when absent or not a number (4.9.8 getLong -> -1)."""
    raw = properties.get(PROPERTY_CHECK_IMMUNITY)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        return None
    return value if 0 <= value <= 10**9 else None


def check_accepted(store: Store) -> None:
    """rejectTransactionMessage refuses half messages with NO_PERMISSION (4.9.8 SendMessageProcessor)."""
    if store.config.rejectTransactionMessage:
        raise NoPermission(
            f"the broker[{store.config.brokerIP1}] sending transaction message is forbidden"
        )


def _ensure_topic(store: Store, ctx: AppendContext, topic: str, requester: str) -> None:
    """The system topic with 1 queue, perm RW, created on first use as 4.9.8 creates it."""
    if store.topics.get(ctx.txn, topic) is None:
        auto_create_topic(store, ctx, TopicConfig(topic, 1, 1, 6), requester)


def store_half(
    store: Store,
    ctx: AppendContext,
    topic: str,
    queue_id: int,
    msg: placement.MessageIn,
    properties: dict[str, str],
    *,
    ts: int,
    host: tuple[str, int],
    producer_group: str,
    requester: str,
) -> placement.PutResult:
    """Store a half message in RMQ_SYS_TRANS_HALF_TOPIC queue 0 and open its transaction (B-220)."""
    _ensure_topic(store, ctx, HALF_TOPIC, requester)
    props = {k: v for k, v in properties.items() if k != delay.PROPERTY_DELAY}
    props[delay.PROPERTY_REAL_TOPIC] = topic
    props[delay.PROPERTY_REAL_QID] = str(queue_id)
    half = msg._replace(sys_flag=reset_transaction_value(msg.sys_flag, TRANSACTION_NOT_TYPE))
    raw, code = placement.encode_message(HALF_TOPIC, 0, half, props, host)
    group = props.get(PROPERTY_PRODUCER_GROUP) or producer_group
    result = placement.place(
        store,
        ctx,
        HALF_TOPIC,
        0,
        [raw],
        [code],
        ts=ts,
        host=host,
        producer_group=producer_group,
        requester=requester,
        transaction={
            "state": TransactionState.PREPARED,
            "producer_group": group,
            "real_topic": topic,
            "real_queue_id": queue_id,
            "transaction_id": props.get(PROPERTY_UNIQ_KEY, ""),
            "born_ts": msg.born_timestamp,
            "immunity_s": immunity_seconds(props),
        },
    )
    return result._replace(real_topic=topic, real_queue_id=queue_id)


# ---------------------------------------------------------------------- END_TRANSACTION


@dataclass(frozen=True, slots=True)
class EndRequest:
    """An END_TRANSACTION header as the broker reads it."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_check: bool
    msg_id: str
    transaction_id: str | None = None


@dataclass(frozen=True, slots=True)
class EndResult:
    """What END_TRANSACTION did: the state it left, and the stored copy of a commit."""

    state: str
    recorded: bool
    stored: placement.PutResult | None = None


FIND_FAILED = "Find prepared transaction message failed"


def end_job(store: Store, end: EndRequest, requester: str) -> Callable[[AppendContext], EndResult]:
    """Commit or roll back the half message at end.commit_log_offset (B-222..B-225)."""
    commit = end.commit_or_rollback == TRANSACTION_COMMIT_TYPE
    wanted = TransactionState.COMMITTED if commit else TransactionState.ROLLED_BACK

    def job(ctx: AppendContext) -> EndResult:
        txn = ctx.txn
        phy = end.commit_log_offset
        entry = store.txns.get_open(txn, phy)
        if entry is None:
            ended = store.txns.ended_state(txn, phy)
            if ended is None:
                raise BrokerError(FIND_FAILED, ResponseCode.SYSTEM_ERROR)
            if ended == wanted:  # the same decision again: nothing changes (B-224)
                return EndResult(ended, False)
            if ended != TransactionState.DISCARDED:
                raise BrokerError(
                    f"the transaction of this prepared message was already {ended.replace('_', ' ')}",
                    ResponseCode.SYSTEM_ERROR,
                )
            entry = _discarded_entry(store, txn, phy)
            if entry is None:
                raise BrokerError(FIND_FAILED, ResponseCode.SYSTEM_ERROR)
        if entry["producer_group"] != end.producer_group:
            raise BrokerError("The producer group wrong", ResponseCode.SYSTEM_ERROR)
        if entry["half_queue_offset"] != end.tran_state_table_offset:
            raise BrokerError("The transaction state table offset wrong", ResponseCode.SYSTEM_ERROR)
        now = store.clock.now_ms()
        common = {
            "prepared_phy": phy,
            "half_queue_offset": entry["half_queue_offset"],
            "producer_group": entry["producer_group"],
            "transaction_id": entry["transaction_id"],
            "from_check": end.from_check,
            "checks": entry["checks"],
        }
        if not commit:
            ctx.append(
                TransactionEnded(
                    state=TransactionState.ROLLED_BACK,
                    real_topic=entry["topic"],
                    real_queue_id=entry["queue_id"],
                    requester=requester,
                    **common,
                ).to_record(now)
            )
            return EndResult(TransactionState.ROLLED_BACK, True)
        raw = store.log.payload(txn, phy) if phy >= store.commitlog.phy_min(txn) else None
        if raw is None:  # removed by retention: nothing left to commit
            raise BrokerError(FIND_FAILED, ResponseCode.SYSTEM_ERROR)
        half = wire.decode_one(raw)[0]
        stored = _store_committed(store, ctx, half, entry, now, requester, common)
        return EndResult(TransactionState.COMMITTED, True, stored)

    return job


def _discarded_entry(store: Store, txn: Any, phy: int) -> dict[str, Any] | None:
    """The transaction of a discarded half message, rebuilt from its bytes, for a late END (B-225)."""
    raw = store.message_at(txn, phy) if phy >= store.commitlog.phy_min(txn) else None
    if raw is None:
        return None
    half = wire.decode_one(raw)[0]
    props = half.properties
    qid = props.get(delay.PROPERTY_REAL_QID, "")
    if half.topic != HALF_TOPIC or not qid.isdigit():
        return None
    checks = props.get(PROPERTY_CHECK_TIMES, "")
    return {
        "producer_group": props.get(PROPERTY_PRODUCER_GROUP, ""),
        "topic": props.get(delay.PROPERTY_REAL_TOPIC, ""),
        "queue_id": int(qid),
        "half_queue_offset": half.queue_offset,
        "transaction_id": props.get(PROPERTY_UNIQ_KEY, ""),
        "checks": int(checks) if checks.isdigit() else 0,
    }


def _store_committed(
    store: Store,
    ctx: AppendContext,
    half: wire.StoredMessage,
    entry: dict[str, Any],
    now: int,
    requester: str,
    common: dict[str, Any],
) -> placement.PutResult:
    """endMessageTransaction + putMessage: the visible copy in the real queue (B-223)."""
    topic, queue_id = entry["topic"], entry["queue_id"]
    drop = (delay.PROPERTY_REAL_TOPIC, delay.PROPERTY_REAL_QID, PROPERTY_TRANSACTION_PREPARED)
    props = {k: v for k, v in half.properties.items() if k not in drop}
    if entry["checks"]:
        props[PROPERTY_CHECK_TIMES] = str(entry["checks"])  # as on 4.9.8's re-put half message
    try:
        raw = wire.encode_fields(
            topic,
            queue_id,
            half.body,
            props,
            half.flag,
            reset_transaction_value(half.sys_flag, TRANSACTION_COMMIT_TYPE),
            0,
            0,
            half.born_timestamp,
            half.born_host,
            0,
            half.store_host,
            half.reconsume_times,
            half.physical_offset,
            None,
        )
    except (ValueError, OverflowError, struct.error) as exc:
        raise BrokerError(
            f"the message cannot be stored: {exc}", ResponseCode.MESSAGE_ILLEGAL
        ) from None
    tags = props.get("TAGS")
    return placement.place(
        store,
        ctx,
        topic,
        queue_id,
        [raw],
        [wire.tag_hash(tags) if tags else 0],
        ts=now,
        host=half.store_host,
        producer_group=entry["producer_group"],
        requester=requester,
        transaction={"state": TransactionState.COMMITTED, **common},
    )


# ---------------------------------------------------------------------- the check


@dataclass(frozen=True, slots=True)
class CheckSent:
    """A check decided and recorded: what CHECK_TRANSACTION_STATE to send, and to whom."""

    producer_group: str
    client: str  # "" when the group had no live producer: the check counted, nothing was sent
    attempt: int
    header: CheckTransactionStateRequestHeader
    body: bytes


@dataclass(frozen=True, slots=True)
class CheckPass:
    checks: tuple[CheckSent, ...]
    discarded: int
    more: bool  # stopped at MAX_PER_PASS: run again at once
    now: int


def check_due(entry: dict[str, Any], now: int, timeout_ms: int, interval_ms: int) -> bool:
    """Whether an open transaction is checked now (4.9.8 TransactionalMessageServiceImpl#check).

    First after `transactionTimeOut` (or its own CHECK_IMMUNITY_TIME_IN_SECONDS)
    since its born time, at once when born in the future, then once a pass;
    never twice within `transactionCheckInterval` (nor discarded within it of
    its last check, so the last check's answer has the same time to come).
    """
    if _checked_within(entry, now, interval_ms):
        return False
    age = now - entry["born_ts"]
    immunity = entry["immunity_s"]
    threshold = timeout_ms if immunity is None else immunity * 1000
    due: bool = age < 0 or age >= threshold
    return due


def _checked_within(entry: dict[str, Any], now: int, interval_ms: int) -> bool:
    last = entry["last_check_ts"]
    return last is not None and now - last < interval_ms


def check_pass_job(
    store: Store,
    live: Mapping[str, list[str]],
    *,
    max_actions: int = MAX_PER_PASS,
    rng: random.Random | None = None,
) -> Callable[[AppendContext], CheckPass]:
    """One check pass over the open transactions; live: producer group -> client ids connected now."""
    pick = rng or random.Random()

    def job(ctx: AppendContext) -> CheckPass:
        txn = ctx.txn
        cfg = store.config
        now = store.clock.now_ms()
        phy_min = store.commitlog.phy_min(txn)
        reserved_ms = cfg.fileReservedTime * 3_600_000
        sent: list[CheckSent] = []
        discarded = 0
        for phy, entry in list(store.txns.open_transactions(txn)):
            if len(sent) + discarded >= max_actions:
                return CheckPass(tuple(sent), discarded, True, now)
            raw = store.log.payload(txn, phy) if phy >= phy_min else None
            if raw is None:
                _discard(store, ctx, phy, entry, None, now, "message_removed")
                discarded += 1
            elif _checked_within(entry, now, cfg.transactionCheckInterval):
                continue  # the last check's answer may still come
            elif entry["checks"] >= cfg.transactionCheckMax:
                _discard(store, ctx, phy, entry, raw, now, "check_max")
                discarded += 1
            elif now - entry["born_ts"] > reserved_ms:  # needSkip: older than the files it lives in
                _discard(store, ctx, phy, entry, raw, now, "file_reserved_time")
                discarded += 1
            elif check_due(entry, now, cfg.transactionTimeOut, cfg.transactionCheckInterval):
                sent.append(_check(ctx, phy, entry, raw, now, live, pick))
        return CheckPass(tuple(sent), discarded, False, now)

    return job


def _check(
    ctx: AppendContext,
    phy: int,
    entry: dict[str, Any],
    raw: bytes,
    now: int,
    live: Mapping[str, list[str]],
    pick: random.Random,
) -> CheckSent:
    group = entry["producer_group"]
    clients = sorted(live.get(group, ()))
    client = pick.choice(clients) if clients else ""  # decided here, recorded below
    attempt = entry["checks"] + 1
    ctx.append(
        TransactionChecked(
            prepared_phy=phy,
            attempt=attempt,
            producer_group=group,
            client=client,
            real_topic=entry["topic"],
            real_queue_id=entry["queue_id"],
            transaction_id=entry["transaction_id"],
        ).to_record(now)
    )
    half = wire.decode_one(raw)[0]
    props = dict(half.properties)
    props[PROPERTY_CHECK_TIMES] = str(attempt)
    # the half message as the producer's check listener sees it: real topic and queue (4.9.8 sendCheckMessage)
    body = wire.encode_fields(
        entry["topic"],
        entry["queue_id"],
        half.body,
        props,
        half.flag,
        half.sys_flag,
        half.queue_offset,
        phy,
        half.born_timestamp,
        half.born_host,
        half.store_timestamp,
        half.store_host,
        half.reconsume_times,
        0,
        None,
    )
    uniq = entry["transaction_id"] or None
    header = CheckTransactionStateRequestHeader(
        tran_state_table_offset=entry["half_queue_offset"],
        commit_log_offset=phy,
        msg_id=uniq,
        transaction_id=uniq,
        offset_msg_id=wire.offset_msg_id(half.store_host, phy),
    )
    return CheckSent(group, client, attempt, header, body)


def _discard(
    store: Store,
    ctx: AppendContext,
    phy: int,
    entry: dict[str, Any],
    raw: bytes | None,
    now: int,
    reason: str,
) -> None:
    """resolveDiscardMsg: a copy to TRANS_CHECK_MAX_TIME_TOPIC queue 0, the transaction ended (B-228)."""
    common = {
        "prepared_phy": phy,
        "half_queue_offset": entry["half_queue_offset"],
        "producer_group": entry["producer_group"],
        "transaction_id": entry["transaction_id"],
        "checks": entry["checks"],
        "reason": reason,
    }
    if raw is None:
        ctx.append(
            TransactionEnded(
                state=TransactionState.DISCARDED,
                real_topic=entry["topic"],
                real_queue_id=entry["queue_id"],
                from_check=False,
                requester="transaction_check",
                **common,
            ).to_record(now)
        )
        return
    _ensure_topic(store, ctx, CHECK_MAX_TIME_TOPIC, "transaction_check")
    half = wire.decode_one(raw)[0]
    props = dict(half.properties)
    if entry["checks"]:
        props[PROPERTY_CHECK_TIMES] = str(entry["checks"])
    copy = placement.MessageIn(
        half.body,
        {},
        half.flag,
        half.sys_flag,
        half.born_timestamp,
        half.born_host,
        half.reconsume_times,
    )
    encoded, code = placement.encode_message(CHECK_MAX_TIME_TOPIC, 0, copy, props, half.store_host)
    placement.place(
        store,
        ctx,
        CHECK_MAX_TIME_TOPIC,
        0,
        [encoded],
        [code],
        ts=now,
        host=half.store_host,
        producer_group=entry["producer_group"],
        requester="transaction_check",
        transaction={"state": TransactionState.DISCARDED, **common},
    )


# ---------------------------------------------------------------------- the admin view


def open_transactions(store: Store, group: str | None = None) -> list[dict[str, Any]]:
    """The open transactions, per producer group (es-broker's admin view, B-232)."""
    host = (store.config.brokerIP1, store.config.listenPort)
    out = []
    with store.read() as txn:
        for phy, entry in store.txns.open_transactions(txn):
            if group is not None and entry["producer_group"] != group:
                continue
            out.append(
                {
                    "producerGroup": entry["producer_group"],
                    "topic": entry["topic"],
                    "queueId": entry["queue_id"],
                    "transactionId": entry["transaction_id"],
                    "offsetMsgId": wire.offset_msg_id(host, phy),
                    "commitLogOffset": phy,
                    "tranStateTableOffset": entry["half_queue_offset"],
                    "bornTimestamp": entry["born_ts"],
                    "storeTimestamp": entry["store_ts"],
                    "checks": entry["checks"],
                    "lastCheckTimestamp": entry["last_check_ts"] or -1,
                }
            )
    return out
