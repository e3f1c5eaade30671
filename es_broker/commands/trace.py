"""A message's whole journey, read from the records (messageTrace).

A journey is a chain of *hops*: stored messages that are copies of each
other. The send stores the first hop; a send-back stores the next one (in
SCHEDULE_TOPIC_XXXX for a delayed retry, or in `%DLQ%G`), the delay schedule
delivers a parked hop to `%RETRY%G`, a re-drive sends a dead letter on, and a
transactional half message (event `prepared`) is checked, then committed to
its real queue, rolled back, or discarded to TRANS_CHECK_MAX_TIME_TOPIC, and a
request's reply (event `replied`, with its push outcome) leads to the reply
stored in `<cluster>_REPLY_TOPIC`. The
trace index (projections/message_trace.py) links the hops; for each hop the
journey lists its deliveries (to which group and client), the offset commits
that moved past it, and the send-back, delivery or re-drive that led on.
A delivery a slave served (a `messages_delivered` record with `served_by`,
appended by the master when it merged the slave's journal) shows the slave's
brokerId and address and the slave's time of the delivery; `recordedTs` is
when the master recorded it. Events are in log order (`seq`), so a slave's
deliveries come where the merge put them.

Everything comes from records, so a trace reads the same after a replay and
after retention removed the message bodies (then only the body-derived
fields, such as born host and keys, are missing).
"""

from __future__ import annotations

from typing import Any

import lmdb

from es_broker.commands import client_trace, pop_trace
from es_broker.history.horizon import deliveries, offset_changes, store_seq
from es_broker.history.reader import record_at as read_record
from es_broker.history.reader import sources_of
from es_broker.log import Record
from es_broker.log.types import Cause, RecordType, SendBackDecision, TransactionState
from es_broker.projections.message_trace import FROM, TO
from es_broker.remoting import message as wire
from es_broker.store import Store

MAX_HOPS = 1000  # a journey is a chain; this only guards against a corrupt index


def record_at(store: Store, txn: lmdb.Transaction[bytes], seq: int) -> Record:
    """The record with sequence number seq (from the archive once its segment was sealed, B-408)."""
    return read_record(store, txn, seq)


def _stored_unit(
    store: Store, txn: lmdb.Transaction[bytes], phy: int
) -> tuple[int, Record, int] | None:
    """(seq, store record, index of the unit) of the message stored at physical offset phy."""
    seq = store_seq(store, txn, phy)  # the archive index's once its record is sealed (B-465)
    if seq is None:
        return None
    rec = record_at(store, txn, seq)
    for i, (unit_phy, _, _) in enumerate(rec["units"]):
        if unit_phy == phy:
            return seq, rec, i
    return None


def resolve(store: Store, txn: lmdb.Transaction[bytes], msg_id: str) -> int | None:
    """The physical offset of a message named by its offset msg id, or else by its UNIQ_KEY."""
    try:
        _, phy = wire.parse_offset_msg_id(msg_id)
    except ValueError:
        phy = None
    # an id's offset is any 8 bytes: outside [0, phy max) no message can be there
    if phy is not None and 0 <= phy < (1 << 63) - 1 and _stored_unit(store, txn, phy) is not None:
        return phy
    # a client id (UNIQ_KEY): the first message carrying it, from each topic's key index (B-206)
    topics = {topic for topic, _, _, _ in store.cq.queues(txn)}
    found = (store.keyindex.oldest_with_uniq_key(txn, topic, msg_id) for topic in sorted(topics))
    return min((phy for phy in found if phy is not None), default=None)


def _link_other_end(rec: Record, role: bytes) -> int | None:
    """The physical offset at the other end of a linking record."""
    kind = rec["type"]
    phy: int | None = None
    if kind == RecordType.MESSAGES_STORED:  # a delayed delivery, a commit or a discard: to the copy
        tx = rec.get("transaction")
        source = tx["prepared_phy"] if tx is not None else rec["delivery"]["schedule_phy"]
        phy = source if role == TO else rec["units"][0][0]
    elif kind in (RecordType.MESSAGE_SENT_BACK, RecordType.DEAD_LETTER_REDRIVEN):
        phy = rec["offset"] if role == TO else rec.get("stored_phy")
    elif kind == RecordType.REPLY_PUSHED:  # a request and its reply (B-333)
        phy = rec.get("request_phy") if role == TO else rec["reply_phy"]
    return phy


def root_of(store: Store, txn: lmdb.Transaction[bytes], phy: int) -> int:
    """Follow the links back to the message the producer sent."""
    seen = {phy}
    while True:
        parent = next(
            (
                _link_other_end(record_at(store, txn, seq), TO)
                for seq, role in store.trace.links_of(txn, phy)
                if role == TO
            ),
            None,
        )
        if parent is None or parent in seen or len(seen) > MAX_HOPS:
            return phy
        seen.add(parent)
        phy = parent


def journey(store: Store, msg_id: str) -> dict[str, Any]:
    """Every step of a message's life, oldest first, as plain JSON-able data."""
    with store.read() as txn:
        phy = resolve(store, txn, msg_id)
        if phy is None:
            return {"msgId": msg_id, "found": False, "hops": [], "events": []}
        root = root_of(store, txn, phy)
        hops: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        pending, seen = [root], set()
        while pending and len(hops) < MAX_HOPS:
            hop_phy = pending.pop(0)
            if hop_phy in seen:
                continue
            seen.add(hop_phy)
            hop = _hop(store, txn, hop_phy, events)
            if hop is None:
                continue
            hops.append(hop)
            pending.extend(_onward(store, txn, hop, events))
            # a popped message's dead letter (B-591)
            pending.extend(pop_trace.onward(events))
        events.sort(key=lambda e: e["seq"])
        ids = [msg_id] + [i for h in hops for i in (h.get("msgId"), h.get("uniqKey")) if i]
        clients = client_trace.contexts_of(store, txn, ids)
    out = {
        "msgId": msg_id,
        "found": True,
        "hops": hops,
        "events": events,
        "readFrom": sources_of(store, [h["seq"] for h in hops] + [e["seq"] for e in events]),
    }
    if clients:  # the clients' own contexts, when a client with message trace on wrote some (B-483)
        out["clientTrace"] = clients
    return out


def _hop(
    store: Store, txn: lmdb.Transaction[bytes], phy: int, events: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """One stored message: its store event, deliveries and the commits that passed it."""
    found = _stored_unit(store, txn, phy)
    if found is None:
        return None
    seq, rec, i = found
    raw = store.log.payload(txn, phy)
    message = wire.decode_one(raw)[0] if raw is not None else None
    topic, queue_id, queue_offset = rec["topic"], rec["queue_id"], rec["queue_offset"] + i
    host = message.store_host if message else ("0.0.0.0", 0)
    hop = {
        "msgId": wire.offset_msg_id(host, phy) if message else None,
        "physicalOffset": phy,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": queue_offset,
        "storeTimestamp": rec["ts"],
        "seq": seq,
        "bodyAvailable": message is not None,
    }
    if message is not None:
        hop.update(
            reconsumeTimes=message.reconsume_times,
            uniqKey=message.properties.get("UNIQ_KEY"),
            tags=message.tags,
            keys=" ".join(message.keys),
            bornTimestamp=message.born_timestamp,
            bornHost=f"{message.born_host[0]}:{message.born_host[1]}",
            storeHost=f"{message.store_host[0]}:{message.store_host[1]}",
            properties=message.properties,
        )
    tx_state = (rec.get("transaction") or {}).get("state")
    if (
        "delivery" not in rec
        and rec.get("cause") not in (Cause.SEND_BACK, Cause.REDRIVE)
        and tx_state in (None, TransactionState.PREPARED)
    ):
        # the producer's send (or a send to %RETRY%G diverted to the DLQ, B-95), or a half message's
        event = {
            "seq": seq,
            "ts": rec["ts"],
            "event": "prepared" if tx_state else "sent",
            "msgId": hop["msgId"],
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": queue_offset,
            "producerGroup": rec.get("producer_group", ""),
            "requester": rec.get("requester", ""),
            "bornHost": hop.get("bornHost"),
            "bornTimestamp": hop.get("bornTimestamp"),
        }
        if rec.get("diverted_from"):
            event["divertedFrom"] = rec["diverted_from"]
        if rec.get("delay"):
            event["delay"] = rec["delay"]
        if tx_state:
            tx = rec["transaction"]
            event.update(
                topic=tx["real_topic"],
                queueId=tx["real_queue_id"],
                halfTopic=topic,
                halfQueueOffset=queue_offset,
                transactionId=tx["transaction_id"],
                producerGroup=tx["producer_group"],
            )
            del event["queueOffset"]
        events.append(event)
    for delivered_seq in deliveries(store, txn, topic, queue_id, queue_offset):
        events.append(
            _delivered(
                record_at(store, txn, delivered_seq),
                delivered_seq,
                hop["msgId"],
                topic,
                queue_id,
                queue_offset,
            )
        )
    # RocketMQ 5's pops of it: who held it, until when, who acked it (B-591), each before the
    # offset commit its record made
    events.extend(pop_trace.events_of(store, txn, topic, queue_id, queue_offset, hop["msgId"]))
    events.extend(_commits_past(store, txn, topic, queue_id, queue_offset, seq, hop["msgId"]))
    return hop


def _delivered(
    d: Record, seq: int, msg_id: str | None, topic: str, queue_id: int, queue_offset: int
) -> dict[str, Any]:
    """A delivery event; one a slave served is at the slave's time, with the slave and the merge's time."""
    event = {
        "seq": seq,
        "ts": d["ts"],
        "event": "delivered",
        "msgId": msg_id,
        "group": d["group"],
        "client": d.get("client", ""),
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": queue_offset,
        "pullOffset": d["offset"],
        "nextOffset": d["next_offset"],
    }
    served_by = d.get("served_by")
    if served_by is not None:  # recorded by the master when the slave's journal was merged
        event.update(
            ts=served_by["ts"],
            recordedTs=d["ts"],
            servedBy={
                "brokerId": served_by["broker_id"],
                "addr": served_by.get("addr", ""),
                "localSeq": served_by.get("local_seq"),
            },
        )
    return event


def _commits_past(
    store: Store,
    txn: lmdb.Transaction[bytes],
    topic: str,
    queue_id: int,
    queue_offset: int,
    stored_seq: int,
    msg_id: str | None,
) -> list[dict[str, Any]]:
    """Offset changes of any group on the hop's queue that moved past it, or back before it."""
    out = []
    groups = sorted({g for t, g, q, _ in store.offsets.table(txn) if t == topic and q == queue_id})
    for group in groups:
        for change in offset_changes(store, txn, topic, group, queue_id):
            if change.seq < stored_seq:
                continue
            forward = change.old <= queue_offset < change.new
            backward = change.new <= queue_offset < change.old
            if forward or backward:
                out.append(
                    {
                        "seq": change.seq,
                        "ts": change.ts,
                        "event": "offset_committed" if forward else "offset_moved_back",
                        "msgId": msg_id,
                        "group": group,
                        "topic": topic,
                        "queueId": queue_id,
                        "old": change.old,
                        "new": change.new,
                        "cause": change.cause,
                        "requester": change.requester,
                    }
                )
    return out


def _onward(
    store: Store, txn: lmdb.Transaction[bytes], hop: dict[str, Any], events: list[dict[str, Any]]
) -> list[int]:
    """The records that led from this hop to others; their events, and the next hops."""
    nxt = []
    for seq, role in store.trace.links_of(txn, hop["physicalOffset"]):
        if role != FROM:
            continue
        rec = record_at(store, txn, seq)
        kind = rec["type"]
        event: dict[str, Any] = {"seq": seq, "ts": rec["ts"], "msgId": hop["msgId"]}
        if kind == RecordType.MESSAGE_SENT_BACK:
            decision = rec["decision"]
            event["event"] = {
                SendBackDecision.RETRY: "sent_back",
                SendBackDecision.DLQ: "dead_lettered",
            }.get(decision, "dropped")
            event.update(
                group=rec["group"], requester=rec.get("requester", ""), reason=rec.get("reason")
            )
            if decision != SendBackDecision.DROPPED:
                event.update(
                    targetTopic=rec["target_topic"],
                    targetQueueId=rec["target_queue_id"],
                    delayLevel=rec["delay_level"],
                    delayMs=rec["delay_ms"],
                    deliverAt=rec["deliver_at"],
                    reconsumeTimes=rec["reconsume_times"] + 1,
                    maxReconsumeTimes=rec["max_reconsume_times"],
                    newMsgId=rec["stored_msg_id"],
                )
        elif kind == RecordType.MESSAGES_STORED and "transaction" in rec:
            tx = rec["transaction"]
            event.update(
                event=tx["state"],  # committed, or discarded into TRANS_CHECK_MAX_TIME_TOPIC
                producerGroup=tx["producer_group"],
                checks=tx["checks"],
                topic=rec["topic"],
                queueId=rec["queue_id"],
                queueOffset=rec["queue_offset"],
                newMsgId=wire.offset_msg_id(_host_of(hop), rec["units"][0][0]),
                requester=rec.get("requester", ""),
            )
            if "from_check" in tx:
                event["fromTransactionCheck"] = tx["from_check"]
            if "reason" in tx:
                event["reason"] = tx["reason"]
        elif kind == RecordType.TRANSACTION_CHECKED:
            event.update(
                event="checked",
                attempt=rec["attempt"],
                producerGroup=rec["producer_group"],
                client=rec["client"],
            )
        elif kind == RecordType.TRANSACTION_ENDED:
            event.update(
                event=rec["state"],  # rolled_back, or discarded when the message was gone
                producerGroup=rec["producer_group"],
                checks=rec["checks"],
                fromTransactionCheck=rec["from_check"],
                requester=rec.get("requester", ""),
            )
            if "reason" in rec:
                event["reason"] = rec["reason"]
        elif kind == RecordType.MESSAGES_STORED:
            delivery = rec["delivery"]
            event.update(
                event="delay_delivered",
                level=delivery["level"],
                due=delivery["due"],
                topic=rec["topic"],
                queueId=rec["queue_id"],
                queueOffset=rec["queue_offset"],
                newMsgId=wire.offset_msg_id(_host_of(hop), rec["units"][0][0]),
            )
        elif kind == RecordType.DEAD_LETTER_REDRIVEN:
            event.update(
                event="redriven",
                group=rec["group"],
                requester=rec.get("requester", ""),
                targetTopic=rec["target_topic"],
                targetQueueId=rec["target_queue_id"],
                newMsgId=rec["stored_msg_id"],
            )
        elif kind == RecordType.DELAYED_MESSAGE_SKIPPED:
            event.update(event="delay_skipped", level=rec["level"], reason=rec["reason"])
        elif kind == RecordType.REPLY_PUSHED:
            event.update(
                event="replied",
                correlationId=rec["correlation_id"],
                replyTo=rec["reply_to"],
                outcome=rec["outcome"],
                topic=rec["reply_topic"],
                queueId=rec["reply_queue_id"],
                newMsgId=rec["reply_msg_id"],
                deadline=rec["deadline"],
                requester=rec.get("requester", ""),
            )
            for key, name in (
                ("reason", "reason"),
                ("push_code", "pushCode"),
                ("push_remark", "pushRemark"),
            ):
                if key in rec:
                    event[name] = rec[key]
        else:
            continue
        events.append(event)
        other = _link_other_end(rec, FROM)
        if other is not None:
            nxt.append(other)
    return nxt


def _host_of(hop: dict[str, Any]) -> tuple[str, int]:
    host, _, port = (hop.get("storeHost") or "0.0.0.0:0").rpartition(":")
    return host, int(port)
