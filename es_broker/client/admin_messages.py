"""The admin client's message requests: look-ups, sends, re-drives, journeys."""

from __future__ import annotations

import json
import random
import time
from functools import cached_property
from typing import Any

from es_broker.client.admin_base import AdminBase, AdminError
from es_broker.client.messages import UNIQ_KEY, UniqIdGenerator
from es_broker.client.send_tries import STORED_STATUS
from es_broker.net.hosts import local_ip
from es_broker.net.remoting_client import RemotingError
from es_broker.remoting.admin_bodies import OpenTransaction, OpenTransactionsBody, RedriveBody
from es_broker.remoting.bodies import BrokerData
from es_broker.remoting.codes import EsRequestCode, RequestCode, ResponseCode
from es_broker.remoting.command import request
from es_broker.remoting.es_headers import (
    MessageTraceRequestHeader,
    OpenTransactionsRequestHeader,
    RedriveDlqRequestHeader,
)
from es_broker.remoting.headers import (
    PullMessageRequestHeader,
    QueryMessageRequestHeader,
    SendMessageRequestHeader,
    ViewMessageRequestHeader,
)
from es_broker.remoting.message import (
    StoredMessage,
    decode_all,
    encode_properties,
    parse_offset_msg_id,
)
from es_broker.remoting.response_headers import SendMessageResponseHeader


def _read_addr(data: BrokerData) -> str | None:
    """The address to read a broker name from: its master, else its lowest-id slave."""
    addrs = data.broker_addrs
    return addrs.get(0) or (addrs[min(addrs)] if addrs else None)


def _masterless(datas: tuple[BrokerData, ...], names: set[str]) -> str:
    """Why each of the broker names `names` cannot take a send, for an error message."""
    why = []
    for d in sorted(datas, key=lambda d: d.broker_name):
        if d.broker_name in names:
            slaves = ", ".join(str(i) for i in sorted(d.broker_addrs))
            why.append(
                f"{d.broker_name} has " + (f"only slaves {slaves}" if slaves else "no address")
            )
    return "; ".join(why) or "none"


class MessageAdmin(AdminBase):
    """Messages: look-ups, sends, dead-letter re-drives, journeys and open transactions."""

    @cached_property
    def _ids(self) -> UniqIdGenerator:
        """The unique keys of this admin's sends, as a producer's (MessageClientIDSetter)."""
        return UniqIdGenerator(local_ip())

    async def view_message(self, msg_id: str) -> StoredMessage:
        (host, port), phy = parse_offset_msg_id(msg_id)
        r = await self._ok(
            f"{host}:{port}",
            f"message {msg_id}",
            request(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=phy)),
        )
        return decode_all(r.body)[0]

    async def message_by_offset(
        self, topic: str, broker_name: str, queue_id: int, offset: int
    ) -> StoredMessage:
        """One message of a queue, read as mqadmin's pull does: from the master, else a slave."""
        route = await self.route(topic)
        data = next((d for d in route.broker_datas if d.broker_name == broker_name), None)
        addr = _read_addr(data) if data is not None else None
        if addr is None:
            known = ", ".join(sorted(d.broker_name for d in route.broker_datas)) or "none"
            raise ValueError(
                f"broker {broker_name} has no address in the route of topic {topic} (brokers: {known})"
            )
        r = await self._ok(
            addr,
            f"message at {topic}/{broker_name}/{queue_id}/{offset}",
            request(
                RequestCode.PULL_MESSAGE,
                PullMessageRequestHeader(
                    consumer_group="TOOLS_CONSUMER",
                    topic=topic,
                    queue_id=queue_id,
                    queue_offset=offset,
                    max_msg_nums=1,
                    sys_flag=4,
                    commit_offset=0,
                    suspend_timeout_millis=0,
                    subscription="*",
                    sub_version=0,
                ),
            ),
            allowed=(0, 19, 20, 21),
        )
        if r.code != ResponseCode.SUCCESS:
            raise ValueError(
                f"no message at offset {offset} of {topic}/{broker_name}/{queue_id}: {r.remark}"
            )
        return decode_all(r.body)[0]

    async def messages_by_key(self, topic: str, key: str, max_num: int = 64) -> list[StoredMessage]:
        return await self._query_messages(topic, key, max_num, f"messages with key {key}")

    async def _query_messages(
        self, topic: str, key: str, max_num: int, what: str, unique_key_query: str | None = None
    ) -> list[StoredMessage]:
        """QUERY_MESSAGE on each broker of the topic, over all time; what every broker found."""
        header = QueryMessageRequestHeader(
            topic=topic,
            key=key,
            max_num=max_num,
            begin_timestamp=0,
            end_timestamp=2**62,
            unique_key_query=unique_key_query,
        )
        found: list[StoredMessage] = []
        for _, addr in await self.topic_brokers(topic):
            r = await self._ok(
                addr,
                what,
                request(RequestCode.QUERY_MESSAGE, header),
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
        """Send one message as mqadmin's sendMessage does, through a DefaultMQProducer (B-681).

        The message carries a UNIQ_KEY, as every producer's send sets one, and `msgId` is that
        unique key (SendResult#getMsgId); `offsetMsgId` is the broker's offset message id.
        """
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
        # as a producer, send to masters only: a slave refuses sends, and a fail-over gap has none
        masters = {
            d.broker_name: d.broker_addrs[0] for d in route.broker_datas if d.broker_addrs.get(0)
        }
        sendable = [q for q in writable if q.broker_name in masters]
        if not sendable:
            why = _masterless(route.broker_datas, {q.broker_name for q in writable})
            raise ValueError(
                f"no master of topic {topic}{' on ' + broker_name if broker_name else ''} in its"
                f" route: sends need a master (brokers: {why})"
            )
        qd = sendable[0]
        addr = masters[qd.broker_name]
        props = {k: v for k, v in (("TAGS", tags), ("KEYS", keys)) if v}
        props[UNIQ_KEY] = self._ids.next_id()
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
                ),
                body,
            ),
            allowed=tuple(STORED_STATUS),  # a SYNC_MASTER's "stored, but" answers too
        )
        stored = SendMessageResponseHeader.of(r)
        return {
            "brokerName": qd.broker_name,
            "queueId": stored.queue_id,
            "queueOffset": stored.queue_offset,
            "msgId": props[UNIQ_KEY],
            "offsetMsgId": stored.msg_id,
            "sendStatus": STORED_STATUS[r.code].value,
        }

    async def messages_by_uniq_key(
        self, topic: str, uniq_key: str, max_num: int = 32
    ) -> list[StoredMessage]:
        """QUERY_MESSAGE with the unique-key flag on each broker of the topic (B-202)."""
        found = await self._query_messages(
            topic, uniq_key, max_num, f"messages with unique key {uniq_key}", "true"
        )
        return [m for m in found if m.properties.get("UNIQ_KEY") == uniq_key]

    async def message_by_id(self, msg_id: str, topic: str | None = None) -> StoredMessage:
        """The message an id names: an offset message id, else a unique key (B-491).

        `Producer.send` prints the unique key (UNIQ_KEY, 32 hex digits like an IPv4 offset id),
        so an id whose port is not a port is no offset id; nor is one the broker it names
        does not answer for, nor one of another length (a RocketMQ 5 client's). As mqadmin's
        `viewMessage(topic, msgId)`, the unique key is then looked up (QUERY_MESSAGE with the
        unique-key flag) in `topic`, or in every topic the name server lists; the oldest
        message carrying it is the one sent (a retry keeps it).
        """
        try:
            (host, port), _ = parse_offset_msg_id(msg_id)
        except ValueError as exc:
            tried = str(exc)  # another client's id (RocketMQ 5's has 34 digits): a unique key
        else:
            tried = f"port {port} is not a port, so it is no offset message id"
            if 0 < port < 65536:
                try:
                    return await self.view_message(msg_id)
                except (AdminError, RemotingError) as exc:
                    tried = f"as an offset message id of {host}:{port}: {exc}"
        topics = [topic] if topic else sorted(await self.topic_list())
        for name in topics:
            found = await self.messages_by_uniq_key(name, msg_id)
            if found:
                return min(found, key=lambda m: (m.store_timestamp, m.physical_offset))
        where = f"topic {topic}" if topic else f"any of the {len(topics)} topics"
        raise ValueError(
            f"no message {msg_id}: {tried}; and no message in {where} has it as its unique key"
        )

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
                header = RedriveDlqRequestHeader(
                    group=group,
                    topic=topic or None,
                    target=target,
                    max_count=remaining,
                    dry_run=dry_run,
                )
                r = await self._ok(
                    addr,
                    f"re-drive dead letters of {group}",
                    request(EsRequestCode.REDRIVE_DLQ, header),
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

    async def open_transactions(
        self, producer_group: str | None = None
    ) -> list[tuple[str, OpenTransaction]]:
        """OPEN_TRANSACTIONS on every master: the half messages not yet committed or rolled back,
        each with the address of the master that holds it."""
        header = OpenTransactionsRequestHeader(producer_group=producer_group or None)
        rows: list[tuple[str, OpenTransaction]] = []
        for addr in await self.master_addrs():
            r = await self.client.invoke(
                addr, request(EsRequestCode.OPEN_TRANSACTIONS, header), 30.0
            )
            if r.code != ResponseCode.SUCCESS:
                raise AdminError(f"open transactions at {addr}", r)
            rows += [(addr, t) for t in OpenTransactionsBody.decode(r.body).transactions]
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
                    addr,
                    request(EsRequestCode.MESSAGE_TRACE, MessageTraceRequestHeader(msg_id=msg_id)),
                    30.0,
                )
            except RemotingError:
                continue  # an old store host (the broker restarted on another port), or gone
            if r.code == ResponseCode.SUCCESS:
                return dict(json.loads(r.body), broker=addr)
        raise ValueError(f"no broker knows message {msg_id}")
