"""JSON command bodies (docs/protocol.md §9), as frozen dataclasses.

Each class mirrors a Java body class: `encode()` writes what Java's fastjson
writes (fields sorted, nulls omitted, numeric and object map keys per section
9.1), `decode(body)` reads what Java or ali-ons send. Decoding is tolerant
in the way fastjson is: unknown keys are ignored, missing or null fields take
the Java default, numbers may arrive as strings and map keys as quoted text
(the BrowserCompatible form); anything else raises `BodyDecodeError`.

Field names are the Python spelling of the Java ones (`brokerName` ->
`broker_name`); `field(metadata={"json": ...})` marks the irregular ones.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from .bean import Bean, bean_from_json, converter, encode_bean, to_int
from .codes import Version
from .command import RemotingCommand
from .errors import BodyDecodeError
from .fastjson import dumps, loads

# -- common beans --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue(Bean):
    """(topic, brokerName, queueId), docs/protocol.md §9.5; orders like Java's compareTo."""

    topic: str = ""
    broker_name: str = ""
    queue_id: int = 0


@dataclass(frozen=True, slots=True)
class DataVersion(Bean):
    """Version of a broker's metadata tables, docs/protocol.md §9.7; equal iff both fields are."""

    timestamp: int = 0
    counter: int = 0

    def next_version(self, now_ms: int) -> DataVersion:
        """The version after a change made at `now_ms`."""
        return DataVersion(timestamp=now_ms, counter=self.counter + 1)


@dataclass(frozen=True, slots=True)
class KVTable(Bean):
    """`{"table":{"k":"v"}}`: KV config namespaces and broker runtime info."""

    table: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicList(Bean):
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER / GET_TOPICS_BY_CLUSTER body."""

    topic_list: tuple[str, ...] = ()
    broker_addr: str | None = None


# -- name server: routes and cluster (9.2, 9.8) ----------------------------------------


@dataclass(frozen=True, slots=True)
class QueueData(Bean):
    """One broker's queues for a topic in a route."""

    broker_name: str = ""
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = 0
    # Spelled topicSynFlag before 4.9.0: accept both, write the 4.9 name.
    topic_sys_flag: int = field(default=0, metadata={"aliases": ("topicSynFlag",)})


@dataclass(frozen=True, slots=True)
class BrokerData(Bean):
    """A broker name and its live addresses by broker id (0 = master)."""

    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicRouteData(Bean):
    """GET_ROUTEINFO_BY_TOPIC body. Encode with `standard_json=True` for requests of
    version >= 401 or with acceptStandardJsonOnly, else the legacy bare-key form."""

    queue_datas: tuple[QueueData, ...] = ()
    broker_datas: tuple[BrokerData, ...] = ()
    filter_server_table: dict[str, tuple[str, ...]] = field(default_factory=dict)
    order_topic_conf: str | None = None


def wants_standard_json(route_request: RemotingCommand) -> bool:
    """Whether a GET_ROUTEINFO_BY_TOPIC request gets standard JSON (docs/protocol.md §7.1.1):
    request version >= V4_9_4, or extField acceptStandardJsonOnly=true."""
    return route_request.version >= Version.V4_9_4 or bool(
        route_request.get_bool("acceptStandardJsonOnly", False)
    )


@dataclass(frozen=True, slots=True)
class ClusterInfo(Bean):
    """GET_BROKER_CLUSTER_INFO body."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, tuple[str, ...]] = field(default_factory=dict)


# -- broker metadata (9.7) -----------------------------------------------------------


MESSAGE_TYPE = "message.type"  # the topic attribute naming a RocketMQ 5 topic's message type


@dataclass(frozen=True, slots=True)
class TopicConfig(Bean):
    """A topic's configuration on a broker; defaults are Java's."""

    topic_name: str = ""
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] | None = None  # RocketMQ 5's topic attributes (message.type)

    def message_type(self) -> str | None:
        """The `message.type` attribute (RocketMQ 5's topic type); None when not set."""
        return (self.attributes or {}).get(MESSAGE_TYPE)


@dataclass(frozen=True, slots=True)
class TopicConfigSerializeWrapper(Bean):
    """GET_ALL_TOPIC_CONFIG body, and part of RegisterBrokerBody."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig(Bean):
    """A consumer group's configuration on a broker; defaults are Java's."""

    group_name: str = ""
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True


@dataclass(frozen=True, slots=True)
class SubscriptionGroupWrapper(Bean):
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG body."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


@dataclass(frozen=True, slots=True)
class ConsumerOffsetSerializeWrapper(Bean):
    """GET_ALL_CONSUMER_OFFSET body: "topic@group" -> queueId -> offset (bare int keys)."""

    offset_table: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DelayOffsetSerializeWrapper(Bean):
    """GET_ALL_DELAY_OFFSET body: delay level -> offset in SCHEDULE_TOPIC_XXXX."""

    offset_table: dict[int, int] = field(default_factory=dict)


_COMPRESSED_INT = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RegisterBrokerBody(Bean):
    """REGISTER_BROKER body, plain JSON or the zlib form of docs/protocol.md §7.1.2."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: tuple[str, ...] = ()

    def encode(self, *, standard_json: bool = False, compressed: bool = False) -> bytes:
        """The body; `compressed` gives the form sent with header `compressed=true`."""
        if not compressed:
            return encode_bean(self, standard_json)
        wrapper = self.topic_config_serialize_wrapper
        parts = [_length_prefixed(wrapper.data_version.encode())]
        parts.append(_COMPRESSED_INT.pack(len(wrapper.topic_config_table)))
        for config in wrapper.topic_config_table.values():
            text = (
                f"{config.topic_name} {config.read_queue_nums} {config.write_queue_nums} "
                f"{config.perm} {config.topic_filter_type}"
            )
            parts.append(_length_prefixed(text.encode("utf-8")))
        parts.append(_length_prefixed(dumps(list(self.filter_server_list)).encode("utf-8")))
        return zlib.compress(b"".join(parts), 9)  # Java uses BEST_COMPRESSION

    @classmethod
    def decode(cls, body: bytes | str, *, compressed: bool = False) -> Self:
        """Parse the body; `compressed` as announced by the request's header."""
        if not compressed:
            return cls.from_json(loads(body))
        try:
            data = zlib.decompress(body if isinstance(body, bytes) else body.encode("utf-8"))
        except zlib.error as exc:
            raise BodyDecodeError(f"compressed RegisterBrokerBody: {exc}") from None
        reader = _Reader(data, "compressed RegisterBrokerBody")
        version = DataVersion.decode(reader.chunk())
        table = {}
        for _ in range(reader.int32()):
            config = _topic_config_from_text(reader.chunk().decode("utf-8", "replace"))
            table[config.topic_name] = config
        filter_servers = converter(tuple[str, ...])(loads(reader.chunk()), "filterServerList")
        return cls(TopicConfigSerializeWrapper(table, version), filter_servers)


def _length_prefixed(data: bytes) -> bytes:
    return _COMPRESSED_INT.pack(len(data)) + data


def _topic_config_from_text(text: str) -> TopicConfig:
    parts = text.split(" ")
    if len(parts) != 5:
        raise BodyDecodeError(f"compressed RegisterBrokerBody: bad topic config {text!r}")
    name, read, write, perm, filter_type = parts
    path = f"topic config {name!r}"
    return TopicConfig(
        topic_name=name,
        read_queue_nums=to_int(read, path),
        write_queue_nums=to_int(write, path),
        perm=to_int(perm, path),
        topic_filter_type=filter_type,
    )


class _Reader:
    """Sequential reader of length-prefixed chunks; raises BodyDecodeError on overrun."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def int32(self) -> int:
        if len(self._data) - self._pos < 4:
            raise BodyDecodeError(f"{self._what}: truncated")
        value: int = _COMPRESSED_INT.unpack_from(self._data, self._pos)[0]
        self._pos += 4
        return value

    def chunk(self) -> bytes:
        size = self.int32()
        if size < 0 or size > len(self._data) - self._pos:
            raise BodyDecodeError(f"{self._what}: chunk of {size} bytes overruns the data")
        self._pos += size
        return self._data[self._pos - size : self._pos]


# -- client registration (9.3, 9.4) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscriptionData(Bean):
    """One topic subscription of a consumer group. Missing expressionType means TAG."""

    topic: str = ""
    sub_string: str = "*"
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False
    filter_class_source: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerData(Bean):
    """A consumer group as announced in a heartbeat."""

    group_name: str = ""
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False


@dataclass(frozen=True, slots=True)
class ProducerData(Bean):
    """A producer group as announced in a heartbeat."""

    group_name: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatData(Bean):
    """HEART_BEAT request body."""

    client_id: str = field(default="", metadata={"json": "clientID"})
    producer_data_set: tuple[ProducerData, ...] = ()
    consumer_data_set: tuple[ConsumerData, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckClientRequestBody(Bean):
    """CHECK_CLIENT_CONFIG request body: a subscription the broker is asked to parse."""

    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None


@dataclass(frozen=True, slots=True)
class GetConsumerListByGroupResponseBody(Bean):
    """GET_CONSUMER_LIST_BY_GROUP response body."""

    consumer_id_list: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LockBatchRequestBody(Bean):
    """LOCK_BATCH_MQ request body (docs/protocol.md §7.4.8)."""

    consumer_group: str = ""
    client_id: str = ""
    mq_set: tuple[MessageQueue, ...] = ()


@dataclass(frozen=True, slots=True)
class UnlockBatchRequestBody(Bean):
    """UNLOCK_BATCH_MQ request body."""

    consumer_group: str = ""
    client_id: str = ""
    mq_set: tuple[MessageQueue, ...] = ()


@dataclass(frozen=True, slots=True)
class LockBatchResponseBody(Bean):
    """LOCK_BATCH_MQ response body: the queues the client now holds."""

    lock_ok_mq_set: tuple[MessageQueue, ...] = field(default=(), metadata={"json": "lockOKMQSet"})


# -- reset offset (9.6) --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResetOffsetBody(Bean):
    """RESET_CONSUMER_CLIENT_OFFSET body / INVOKE_BROKER_TO_RESET_OFFSET response."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def encode(self, *, standard_json: bool = False, for_cpp: bool = False) -> bytes:
        """Object-key form, or with `for_cpp` the list form (ResetOffsetBodyForC)."""
        if not for_cpp:
            return encode_bean(self, standard_json)
        entries = [
            {
                "brokerName": mq.broker_name,
                "offset": offset,
                "queueId": mq.queue_id,
                "topic": mq.topic,
            }
            for mq, offset in sorted(self.offset_table.items())
        ]
        return dumps({"offsetTable": entries}, browser_compatible=standard_json).encode("utf-8")

    @classmethod
    def from_json(cls, value: Any, path: str = "") -> Self:
        """Accept the object-key map and the C++ list form."""
        path = path or cls.__name__
        table = value.get("offsetTable") if isinstance(value, Mapping) else None
        if not isinstance(table, list):
            return bean_from_json(cls, value, path)
        offsets = {}
        for i, entry in enumerate(table):
            entry_path = f"{path}.offsetTable[{i}]"
            mq = MessageQueue.from_json(entry, entry_path)
            offsets[mq] = to_int(entry.get("offset", 0), f"{entry_path}.offset")
        return cls(offsets)


# -- stats with object keys (9.9) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicOffset(Bean):
    """A write queue's offsets in TopicStatsTable."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class TopicStatsTable(Bean):
    """GET_TOPIC_STATS_INFO body."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OffsetWrapper(Bean):
    """A queue's broker and consumer offsets in ConsumeStats."""

    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ConsumeStats(Bean):
    """GET_CONSUME_STATS body."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0


# -- consumer running info (9.10) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcessQueueInfo(Bean):
    """A client's view of one assigned queue."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mi_b: int = field(default=0, metadata={"json": "cachedMsgSizeInMiB"})
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False  # (sic), the Java name
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ConsumeStatus(Bean):
    """A client's consume statistics for one topic."""

    pull_rt: float = field(default=0.0, metadata={"json": "pullRT"})
    pull_tps: float = field(default=0.0, metadata={"json": "pullTPS"})
    consume_rt: float = field(default=0.0, metadata={"json": "consumeRT"})
    consume_ok_tps: float = field(default=0.0, metadata={"json": "consumeOKTPS"})
    consume_failed_tps: float = field(default=0.0, metadata={"json": "consumeFailedTPS"})
    consume_failed_msgs: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerRunningInfo(Bean):
    """A client's answer to GET_CONSUMER_RUNNING_INFO (relayed, not interpreted)."""

    properties: dict[str, str] = field(default_factory=dict)
    subscription_set: tuple[SubscriptionData, ...] = ()
    mq_table: dict[MessageQueue, ProcessQueueInfo] = field(default_factory=dict)
    status_table: dict[str, ConsumeStatus] = field(default_factory=dict)
    jstack: str | None = None


# -- connections (9.11) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientConnection(Bean):
    """One client channel (Java `Connection`; renamed to not clash with ours)."""

    client_id: str = ""
    client_addr: str = ""
    language: str = "JAVA"
    version: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerConnection(Bean):
    """GET_CONSUMER_CONNECTION_LIST body."""

    connection_set: tuple[ClientConnection, ...] = ()
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


@dataclass(frozen=True, slots=True)
class ProducerConnection(Bean):
    """GET_PRODUCER_CONNECTION_LIST body."""

    connection_set: tuple[ClientConnection, ...] = ()


# -- ACL (GET_BROKER_CLUSTER_ACL_CONFIG) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlainAccessConfig(Bean):
    """One account of plain ACL, its secret key masked when a broker answers with it."""

    access_key: str = ""
    secret_key: str = ""
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: tuple[str, ...] = ()
    group_perms: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AclConfig(Bean):
    """GET_BROKER_CLUSTER_ACL_CONFIG body: the global white list and the accounts."""

    global_white_addrs: tuple[str, ...] = ()
    plain_access_configs: tuple[PlainAccessConfig, ...] = ()
