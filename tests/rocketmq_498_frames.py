"""REGISTER_BROKER as a RocketMQ 4.9.8 broker sends it, and as a 4.9.8 name server reads it.

No RocketMQ build runs on this machine, so the peer of tests/test_rocketmq_cluster.py is this
module, written from the 4.9.8 sources (tag rocketmq-all-4.9.8) and not from es-broker's code:

- the frame (`register_frame`): BrokerOuterAPI#registerBrokerAll fills a
  RegisterBrokerRequestHeader (brokerName, brokerAddr, clusterName, haServerAddr, brokerId,
  compressed = BrokerConfig.compressedRegister, false by default) and sets bodyCrc32 to
  UtilAll.crc32 of the encoded body (CRC32 & 0x7FFFFFFF); RemotingCommand#createRequestCommand
  takes the version BrokerStartup put in rocketmq.remoting.version (MQVersion.CURRENT_VERSION,
  V4_9_8 = 409), language JAVA, flag 0; makeCustomHeaderToNet puts each non-null header field,
  in declaration order, into a java.util.HashMap as its toString(); headerEncode writes the
  command with fastjson (bean fields sorted by name, enums by name, nulls left out, the HashMap in
  its own iteration order); the frame is [length][serialize type 0 << 24 | header length][header]
  [body] (RemotingCommand#encodeHeader);
- the body: RegisterBrokerBody#encode(false) is fastjson's JSON of the bean
  (`filterServerList`, `topicConfigSerializeWrapper` = `dataVersion` {counter, timestamp} and
  `topicConfigTable`, TopicConfigManager's ConcurrentHashMap(1024), in its iteration order); a
  topic config's getters are order, perm, readQueueNums, topicFilterType, topicName,
  topicSysFlag, writeQueueNums. BrokerController#registerBrokerAll gives every topic the
  broker's perm when brokerPermission is not read-write (TopicConfig's 4-argument constructor);
  AdminBrokerProcessor#updateBrokerConfig moves the data version on (DataVersion#nextVersion:
  the time now, counter + 1) before that registration;
- the reading (`read_registration`): DefaultRequestProcessor takes the filter-server path from
  V3_0_11 (37) on, RemotingCommand#decodeCommandCustomHeader looks up the header class's fields
  only (any other ext field is never read), refuses a missing @CFNotNull one (brokerName,
  brokerAddr, clusterName, haServerAddr, brokerId) and parses String / Long.parseLong /
  Boolean.parseBoolean / Integer.parseInt (a value that does not parse is logged and left at
  its default); checksum() compares a non-zero bodyCrc32; RegisterBrokerBody.decode parses the
  JSON with fastjson (or the compressed form); RouteInfoManager#registerBroker changes a
  master's queue datas only on its first registration or when the data version differs.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

REGISTER_BROKER = 103
V3_0_11 = 37
V4_9_8 = 409
# RegisterBrokerRequestHeader's fields in declaration order, with their Java types
HEADER_FIELDS = (
    ("brokerName", "String", True),
    ("brokerAddr", "String", True),
    ("clusterName", "String", True),
    ("haServerAddr", "String", True),
    ("brokerId", "Long", True),
    ("compressed", "boolean", False),
    ("bodyCrc32", "Integer", False),
)


def java_string_hash(text: str) -> int:
    """String#hashCode as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _spread(key: str) -> int:
    h = java_string_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_hash_order(keys: list[str], capacity: int = 16) -> list[str]:
    """The iteration order of a java.util.HashMap (or a ConcurrentHashMap of `capacity`) the
    keys were put into in this order: by bucket, and within a bucket by insertion (Java 8+,
    whose resize keeps that order; no bucket here is long enough to become a tree)."""
    while len(keys) > capacity * 3 // 4:  # HashMap's load factor 0.75
        capacity *= 2
    return sorted(keys, key=lambda k: (_spread(k) & (capacity - 1), keys.index(k)))


def fastjson(value: Any) -> str:
    """fastjson's compact JSON of plain values (dicts here already in the order it writes)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Topic:
    name: str
    read: int = 16  # TopicConfig's defaults
    write: int = 16
    perm: int = 6
    filter_type: str = "SINGLE_TAG"
    sys_flag: int = 0
    order: bool = False

    def bean(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read,
            "topicFilterType": self.filter_type,
            "topicName": self.name,
            "topicSysFlag": self.sys_flag,
            "writeQueueNums": self.write,
        }


def default_topics(broker_name: str, cluster: str) -> list[Topic]:
    """TopicConfigManager's topics of a 4.9.8 broker with its defaults (autoCreateTopicEnable,
    clusterTopicEnable and brokerTopicEnable true, traceTopicEnable false)."""
    return [
        Topic("SELF_TEST_TOPIC", 1, 1),
        Topic("TBW102", 8, 8, perm=7),
        Topic("BenchmarkTest", 1024, 1024),
        Topic(cluster, perm=7),
        Topic(broker_name, 1, 1, perm=7),
        Topic("OFFSET_MOVED_EVENT", 1, 1),
        Topic("SCHEDULE_TOPIC_XXXX", 18, 18),
        Topic(f"{cluster}_REPLY_TOPIC", 1, 1),
    ]


@dataclass
class Broker498:
    """A 4.9.8 broker's registration state: its names, topics, data version and permission."""

    name: str
    addr: str
    cluster: str = "DefaultCluster"
    broker_id: int = 0
    topics: list[Topic] = field(default_factory=list)
    timestamp: int = 1_764_000_000_000  # DataVersion: the time it was made, then moved on
    counter: int = 1
    permission: int = 6  # brokerPermission
    opaque: int = 0

    @property
    def ha_addr(self) -> str:  # getHAServerAddr: brokerIP2 and haListenPort (listenPort + 1)
        host, port = self.addr.rsplit(":", 1)
        return f"{host}:{int(port) + 1}"

    def update_permission(self, perm: int, now_ms: int) -> None:
        """updateBrokerConfig brokerPermission: the data version moves on (nextVersion)."""
        self.permission, self.timestamp, self.counter = perm, now_ms, self.counter + 1

    def body(self) -> bytes:
        topics = {t.name: t for t in [*default_topics(self.name, self.cluster), *self.topics]}
        if self.permission != 6:  # registerBrokerAll: every topic with the broker's perm
            topics = {n: Topic(n, t.read, t.write, perm=self.permission) for n, t in topics.items()}
        order = java_hash_order(list(topics), capacity=2048)  # ConcurrentHashMap(1024)
        table = "".join(
            f"{',' if i else ''}{fastjson(n)}:{fastjson(topics[n].bean())}"
            for i, n in enumerate(order)
        )
        version = fastjson({"counter": self.counter, "timestamp": self.timestamp})
        return (
            '{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":'
            f'{version},"topicConfigTable":{{{table}}}}}}}'
        ).encode()

    def register_frame(self) -> bytes:
        """The REGISTER_BROKER frame of registerBrokerAll (not compressed, as by default)."""
        body = self.body()
        values = {
            "brokerName": self.name,
            "brokerAddr": self.addr,
            "clusterName": self.cluster,
            "haServerAddr": self.ha_addr,
            "brokerId": str(self.broker_id),
            "compressed": "false",
            "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
        }
        ext = "".join(
            f"{',' if i else ''}{fastjson(k)}:{fastjson(values[k])}"
            for i, k in enumerate(java_hash_order([name for name, _, _ in HEADER_FIELDS]))
        )
        self.opaque += 1
        header = (
            f'{{"code":{REGISTER_BROKER},"extFields":{{{ext}}},"flag":0,"language":"JAVA",'
            f'"opaque":{self.opaque},"serializeTypeCurrentRPC":"JSON","version":{V4_9_8}}}'
        ).encode()
        return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


# ---------------------------------------------------------------------- a 4.9.8 name server's reading


class Refused(ValueError):
    """What a 4.9.8 name server would answer with an error (or log and fail on)."""


@dataclass
class Registration:
    header: dict[str, Any]  # the RegisterBrokerRequestHeader as 4.9.8 fills it
    ignored: dict[str, str]  # ext fields the header class has not: never read
    version: int
    data_version: tuple[int, int]  # (counter, timestamp)
    topics: dict[str, dict[str, Any]]  # TopicConfig fields as fastjson fills them


def split_frame(frame: bytes) -> tuple[dict[str, Any], bytes]:
    """(the JSON header, the body) of one frame (serialize type 0, JSON)."""
    length, word = struct.unpack_from(">ii", frame)
    if length != len(frame) - 4:
        raise Refused(f"frame length {length}, {len(frame) - 4} bytes follow")
    if word >> 24 != 0:
        raise Refused(f"serialize type {word >> 24}: this reading takes JSON headers")
    header_len = word & 0xFFFFFF
    return json.loads(frame[8 : 8 + header_len]), frame[8 + header_len :]


def _java_value(name: str, kind: str, value: str) -> Any:
    try:
        if kind in ("Long", "Integer"):
            text = value.strip()
            if not text.lstrip("-").isdigit():
                raise ValueError(value)
            number = int(text)
            bits = 63 if kind == "Long" else 31
            if not -(1 << bits) <= number < 1 << bits:
                raise ValueError(value)
            return number
        if kind == "boolean":
            return value.lower() == "true"  # Boolean.parseBoolean: anything else is false
        return value
    except ValueError:
        raise Refused(f"the custom field <{name}> does not parse as {kind}: {value!r}") from None


def read_registration(frame: bytes) -> Registration:
    """REGISTER_BROKER read as 4.9.8's name server reads it; `Refused` where it would fail."""
    command, body = split_frame(frame)
    if command.get("code") != REGISTER_BROKER:
        raise Refused(f"code {command.get('code')}")
    version = command.get("version", 0)
    if version < V3_0_11:
        raise Refused(f"version {version}: 4.9.8 would read the pre-3.0.11 body")
    ext = command.get("extFields") or {}
    if any(not isinstance(v, str) for v in ext.values()):
        raise Refused(f"extFields is a HashMap<String, String>: {ext}")
    header: dict[str, Any] = {"compressed": False, "bodyCrc32": 0}
    for name, kind, required in HEADER_FIELDS:
        if name not in ext:
            if required:
                raise Refused(f"the custom field <{name}> is null")
            continue
        header[name] = _java_value(name, kind, ext[name])
    ignored = {k: v for k, v in ext.items() if k not in dict((n, 0) for n, _, _ in HEADER_FIELDS)}
    if header["bodyCrc32"] and zlib.crc32(body) & 0x7FFFFFFF != header["bodyCrc32"]:
        raise Refused("crc32 not match")
    if not body:
        return Registration(header, ignored, version, (0, 0), {})
    if header["compressed"]:
        return Registration(header, ignored, version, *_compressed(body))
    parsed = json.loads(body.decode("utf-8"))
    wrapper = parsed.get("topicConfigSerializeWrapper") or {}
    dv = wrapper.get("dataVersion") or {}
    if not isinstance(dv.get("counter", 0), int) or not isinstance(dv.get("timestamp", 0), int):
        raise Refused(f"DataVersion {dv}: counter (AtomicLong) and timestamp (long) are numbers")
    topics = {}
    for name, config in (wrapper.get("topicConfigTable") or {}).items():
        filled = {**Topic(name).bean(), **config}  # fastjson leaves a missing field's default
        if not isinstance(filled["perm"], int) or filled["topicFilterType"] not in (
            "SINGLE_TAG",
            "MULTI_TAG",
        ):
            raise Refused(f"topic config {config}")
        topics[name] = filled
    return Registration(
        header, ignored, version, (dv.get("counter", 0), dv.get("timestamp", 0)), topics
    )


def _compressed(body: bytes) -> tuple[tuple[int, int], dict[str, dict[str, Any]]]:
    data = zlib.decompress(body)
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4 + n
        return data[pos - n : pos]

    dv = json.loads(chunk())
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    topics = {}
    for _ in range(count):
        name, read, write, perm, filter_type = chunk().decode("utf-8").split(" ")
        topics[name] = {
            **Topic(name).bean(),
            "readQueueNums": int(read),
            "writeQueueNums": int(write),
            "perm": int(perm),
            "topicFilterType": filter_type,
        }
    return (dv["counter"], dv["timestamp"]), topics


@dataclass
class RouteTable498:
    """RouteInfoManager#registerBroker's queue datas: a master's topics change only on its first
    registration or when its data version differs from the one it last registered."""

    versions: dict[str, tuple[int, int]] = field(default_factory=dict)  # by broker address
    queue_perm: dict[tuple[str, str], int] = field(default_factory=dict)  # (topic, broker name)

    def register(self, reg: Registration) -> bool:
        """Apply a registration; True when its topics were taken."""
        addr, name = reg.header["brokerAddr"], reg.header["brokerName"]
        first = addr not in self.versions
        changed = first or self.versions[addr] != reg.data_version
        self.versions[addr] = reg.data_version
        if reg.header["brokerId"] != 0 or not changed:
            return False
        for topic, config in reg.topics.items():
            self.queue_perm[(topic, name)] = config["perm"]
        return True
