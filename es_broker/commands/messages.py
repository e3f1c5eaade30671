"""Storing messages (send, batch send) and reading them back (pull), B-08..B-13, B-58..B-62."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from enum import Enum

import lmdb

from es_broker.commands import names
from es_broker.commands.errors import (
    IllegalRequest,
    MessageIllegal,
    NoPermission,
    ServiceNotAvailable,
    TopicNotExist,
)
from es_broker.commands.store import Store
from es_broker.commands.topics import topic_config_record
from es_broker.log import AppendContext, make
from es_broker.projections.consume_queue import UNITS_PER_FILE
from es_broker.projections.topics import PERM_INHERIT, PERM_READ, PERM_WRITE
from es_broker.remoting import message as wire

_PATCH_OFFSETS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET at byte 20
_PATCH_STORE_TS = struct.Struct(">q")  # STORETIMESTAMP at byte 56 (IPv4 born host)
MAX_PROPERTIES = 32767


@dataclass(frozen=True, slots=True)
class MessageIn:
    """A message as a producer hands it over."""

    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0


@dataclass(frozen=True, slots=True)
class PutResult:
    topic: str
    queue_id: int
    queue_offset: int
    physical_offsets: tuple[int, ...]
    msg_ids: tuple[str, ...]
    store_timestamp: int
    seq: int


@dataclass(frozen=True, slots=True)
class _Prepared:
    topic: str
    queue_id: int
    encoded: tuple[bytes, ...]
    tags_codes: tuple[int, ...]
    producer_group: str
    default_topic: str | None
    default_topic_queue_nums: int


def prepare_put(
    store: Store,
    topic: str,
    queue_id: int,
    messages: list[MessageIn],
    *,
    producer_group: str = "",
    default_topic: str | None = None,
    default_topic_queue_nums: int = 4,
) -> _Prepared:
    """Validate a send and encode its messages; the offsets are filled in at append."""
    names.check_topic_name(topic)
    names.check_sendable(topic)
    if store.config.brokerRole == "SLAVE":
        raise ServiceNotAvailable("service not available now. the broker is a slave")
    if not messages:
        raise MessageIllegal("the batch holds no message")
    if not isinstance(queue_id, int):
        raise IllegalRequest(f"queueId must be an integer, got {queue_id!r}")
    store_host = (store.config.brokerIP1, store.config.listenPort)
    encoded, codes = [], []
    for msg in messages:
        if len(msg.body) > store.config.maxMessageSize:
            raise MessageIllegal(
                f"the message body size {len(msg.body)} exceeds maxMessageSize {store.config.maxMessageSize}"
            )
        if len(msg.body) + 91 + len(topic) > store.config.mappedFileSizeCommitLog:
            raise MessageIllegal("the message is larger than a commit-log file (mappedFileSizeCommitLog)")
        props = {k: v for k, v in msg.properties.items() if k != "WAIT"}
        props["CLUSTER"] = store.config.brokerClusterName
        tags = props.get("TAGS")
        try:
            raw = wire.encode(
                wire.StoredMessage(
                    topic=topic,
                    queue_id=queue_id,
                    body=msg.body,
                    properties=props,
                    flag=msg.flag,
                    sys_flag=msg.sys_flag,
                    born_timestamp=msg.born_timestamp,
                    born_host=msg.born_host,
                    store_host=store_host,
                    reconsume_times=msg.reconsume_times,
                )
            )
        except ValueError as exc:
            raise MessageIllegal(f"the message cannot be stored: {exc}") from None
        except struct.error as exc:
            raise MessageIllegal(f"a message field is out of range: {exc}") from None
        encoded.append(raw)
        codes.append(wire.tag_hash(tags) if tags else 0)
    return _Prepared(
        topic, queue_id, tuple(encoded), tuple(codes), producer_group, default_topic, default_topic_queue_nums
    )


def put_job(store: Store, prepared: _Prepared, requester: str):
    """The group-commit job that places prepared messages and records them."""

    def job(ctx: AppendContext) -> PutResult:
        txn = ctx.txn
        topic = prepared.topic
        config = store.topics.get(txn, topic) or _auto_create(store, ctx, prepared, requester)
        write_nums, read_nums = config["writeQueueNums"], config["readQueueNums"]
        queue_id = prepared.queue_id
        if queue_id < 0:
            queue_id = random.randrange(write_nums)  # decided here, recorded below
        elif queue_id >= max(write_nums, read_nums):
            raise IllegalRequest(f"request queueId[{queue_id}] is illegal, topic:{topic} ...")
        ts = store.clock.now_ms()
        phy = store.commitlog.phy_max(txn)
        _, queue_offset = store.cq.bounds(txn, topic, queue_id)
        units, ids, phys = [], [], []
        host = (store.config.brokerIP1, store.config.listenPort)
        file_size = store.config.mappedFileSizeCommitLog
        for i, (raw, code) in enumerate(zip(prepared.encoded, prepared.tags_codes, strict=True)):
            if phy // file_size != (phy + len(raw) - 1) // file_size:
                phy = (phy // file_size + 1) * file_size  # never straddle two commit-log files (B-08)
            buf = bytearray(raw)
            struct.pack_into(">i", buf, 12, queue_id)
            _PATCH_OFFSETS.pack_into(buf, 20, queue_offset + i, phy)
            _PATCH_STORE_TS.pack_into(buf, 56, ts)
            ctx.put_payload(phy, bytes(buf))
            units.append([phy, len(buf), code])
            phys.append(phy)
            ids.append(wire.offset_msg_id(host, phy))
            phy += len(buf)
        seq = ctx.append(
            make(
                "messages_stored",
                ts,
                topic=topic,
                queue_id=queue_id,
                queue_offset=queue_offset,
                units=units,
                producer_group=prepared.producer_group,
                requester=requester,
            )
        )
        return PutResult(topic, queue_id, queue_offset, tuple(phys), tuple(ids), ts, seq)

    return job


def _auto_create(store: Store, ctx: AppendContext, prepared: _Prepared, requester: str) -> dict:
    """Create a topic on first send when RocketMQ would (remoting spec 7.2.1 step 3, B-25)."""
    topic = prepared.topic
    if topic.startswith(names.RETRY_PREFIX):
        config = topic_config_record(topic, 1, 1, PERM_READ | PERM_WRITE)
    else:
        template = store.topics.get(ctx.txn, prepared.default_topic) if prepared.default_topic else None
        if template is None or not template["perm"] & PERM_INHERIT:
            raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
        nums = max(1, min(prepared.default_topic_queue_nums, template["writeQueueNums"]))
        config = topic_config_record(topic, nums, nums, template["perm"] & ~PERM_INHERIT)
    ctx.append(make("topic_updated", store.clock.now_ms(), topic=topic, config=config,
                    requester=requester, cause="auto_create"))
    return config


# ---------------------------------------------------------------------- pull


class GetStatus(Enum):
    """DefaultMessageStore's read result (B-58)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(frozen=True, slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: tuple[bytes, ...] = ()
    offsets: tuple[int, ...] = ()
    slow: bool = False  # the last unit read lies on disk (B-115)

    @property
    def body(self) -> bytes:
        """The pull answer body: stored messages back to back (remoting spec 8.2)."""
        return b"".join(self.messages)


def check_readable(store: Store, txn: lmdb.Transaction, topic: str, queue_id: int) -> dict:
    """The pull pre-checks on the topic (B-21, B-13); returns the topic config."""
    if not store.config.brokerPermission & PERM_READ:
        raise NoPermission(f"the broker[{store.config.brokerIP1}] pulling message is forbidden")
    config = store.topics.get(txn, topic)
    if config is None:
        raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
    if not config["perm"] & PERM_READ:
        raise NoPermission(f"the topic[{topic}] pulling message is forbidden")
    if not isinstance(queue_id, int) or queue_id < 0 or queue_id >= config["readQueueNums"]:
        raise IllegalRequest(
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
            f"[{config['readQueueNums']}] consumer:[...]"
        )
    return config


def check_pull_args(offset: object, max_msg_nums: object) -> None:
    if not isinstance(offset, int) or offset < 0:
        raise IllegalRequest(f"queueOffset {offset!r} is negative or not an integer")
    if not isinstance(max_msg_nums, int) or max_msg_nums <= 0:
        raise IllegalRequest(f"maxMsgNums {max_msg_nums!r} must be a positive integer")


def check_writable(config: dict, topic: str) -> None:
    if not config["perm"] & PERM_WRITE:
        raise NoPermission(f"the topic[{topic}] sending message is forbidden")


def get_message(
    store: Store,
    txn: lmdb.Transaction,
    topic: str,
    queue_id: int,
    offset: int,
    max_msg_nums: int,
    tags_codes: frozenset[int] | None = None,
) -> GetResult:
    """Read up to max_msg_nums messages from offset, with RocketMQ's statuses (B-58..B-62)."""
    check_pull_args(offset, max_msg_nums)
    config = store.config
    lo, hi = store.cq.bounds(txn, topic, queue_id)
    if hi == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
    if offset < lo:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
    if offset == hi:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
    if offset > hi:
        nxt = 0 if config.overflow_badly_next == "legacy" and lo == 0 else hi
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, nxt, lo, hi)

    phy_max = store.commitlog.phy_max(txn)
    phy_min = store.commitlog.phy_min(txn)
    threshold = config.in_memory_threshold
    # at most max(16000 bytes, maxMsgNums x 20) of consume queue, never past its file (B-58)
    scan = max(16000, max_msg_nums * 20) // 20
    file_end = (offset // UNITS_PER_FILE + 1) * UNITS_PER_FILE
    end = min(hi, offset + scan, file_end)
    status = GetStatus.NO_MATCHED_MESSAGE
    messages: list[bytes] = []
    offsets: list[int] = []
    total = 0
    next_offset = offset
    last_phy = -1
    seen = False
    for unit in store.cq.units(txn, topic, queue_id, offset, end):
        in_disk = phy_max - unit.physical_offset > threshold
        if _batch_full(config, unit.size, max_msg_nums, total, len(messages), in_disk):
            break
        seen = True
        next_offset = unit.offset + 1
        last_phy = unit.physical_offset
        if tags_codes is not None and unit.tags_code not in tags_codes:
            continue
        raw = store.log.payload(txn, unit.physical_offset) if unit.physical_offset >= phy_min else None
        if raw is None:
            if not messages:
                status = GetStatus.MESSAGE_WAS_REMOVING
            continue
        messages.append(raw)
        offsets.append(unit.offset)
        total += len(raw)
        status = GetStatus.FOUND
    else:
        next_offset = end
    if not seen:  # the units are gone: skip to the next consume-queue file
        return GetResult(GetStatus.OFFSET_FOUND_NULL, file_end, lo, hi)
    slow = last_phy >= 0 and phy_max - last_phy > threshold
    return GetResult(status, next_offset, lo, hi, tuple(messages), tuple(offsets), slow)


def _batch_full(config, size: int, max_nums: int, total: int, count: int, in_disk: bool) -> bool:
    """DefaultMessageStore#isTheBatchFull (B-62): the first message always fits."""
    if total == 0 or count == 0:
        return False
    if max_nums <= count:
        return True
    if in_disk:
        return (
            total + size > config.maxTransferBytesOnMessageInDisk
            or count > config.maxTransferCountOnMessageInDisk - 1
        )
    return (
        total + size > config.maxTransferBytesOnMessageInMemory
        or count > config.maxTransferCountOnMessageInMemory - 1
    )
