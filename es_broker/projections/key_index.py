"""The key index: (topic, key) -> stored messages, RocketMQ's IndexService (B-200..B-206).

QUERY_MESSAGE and a journey asked by UNIQ_KEY read it instead of every
message of a topic. Built from `messages_stored` records and the message
bytes that the same transaction wrote just before them (the record carries
no keys; the bytes do), so the log's records stay as they are and a replay,
which copies the bytes first, rebuilds it byte for byte.

Each token of the KEYS property (split on the space character, B-201) and
the UNIQ_KEY of a message are indexed under its topic. Only the properties
section of the stored bytes is read (`message_keys`): its place follows from
the fixed layout and the body and topic lengths, and the two names are found
with a byte search, without decoding the message.

Databases (U64 big-endian; a store time is biased by 2**63 so signed times sort):

| database   | key                                                 | value               |
|------------|-----------------------------------------------------|---------------------|
| key_index  | key_prefix(topic, key) + store time + physical offset | empty             |
| key_expiry | first indexed physical offset of a `messages_stored` record | its index keys |
| key_meta   | `built`                                             | the index covers the log |

A prefix is `topic NUL key NUL`; one that would push a key past LMDB's 511
bytes is replaced by 0xFF and a 16-byte BLAKE2b digest (0xFF never occurs in
UTF-8, so the two forms never meet). A lookup is one range scan of its prefix
from the asked end time backwards: it costs the matches it reads, not the
messages stored. Like RocketMQ's hash index, an entry is a candidate: every
match is checked against the stored message's own topic and properties
before it is answered (a digest collision, or a key whose bytes hold a NUL,
can put another key's entries inside a prefix range).

A journey by UNIQ_KEY has no topic: it looks in the index of every topic
with messages (one seek each) rather than keeping a second, topic-less entry
per message, which would cost every send one more B-tree insert.

Retention: a `commitlog_expired` record deletes the message bytes below the
new phyMin; `key_expiry` turns that into a range walk over the expired
records' entries, which deletes exactly the index keys they wrote. The
write transaction that applies the record thus does work in proportion to
what expires, like the deletion of the bytes in the same transaction; no
lookup ever has to skip dead entries and nothing is left to sweep later.
An entry of a record cut by phyMin (a batch that crossed into a new
commit-log file) keeps its surviving keys under its first surviving offset,
which is also what a replay writes for it, as the replay only has the
surviving bytes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator

import lmdb

from es_broker import compiled
from es_broker.log import Record, RecordLog, records
from es_broker.log.scan import prefixed_keys
from es_broker.log.types import CommitlogExpired, MessagesStoredRecord, RecordType, as_view
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.projections.keys import MAX_KEY, U64
from es_broker.remoting import message as wire

KEY_SEPARATOR = b" "  # MessageConst.KEY_SEPARATOR
_BIAS = 1 << 63
_TAIL = 16  # store time + physical offset
_HASHED = b"\xff"
_ENTRY = struct.Struct(">H")  # length of an index key in a key_expiry value
_BUILT = b"built"
_MAX_PREFIX = MAX_KEY - _TAIL

_TRANSACTION_MASK = 0xC  # MessageSysFlag: the transaction type bits; 0xC is a rollback
_ROLLBACK = 0xC


def _digest(data: bytes) -> bytes:
    return _HASHED + hashlib.blake2b(data, digest_size=16).digest()


def key_prefix(topic: bytes, key: bytes) -> bytes:
    """The start of every key_index key of (topic, key): `topic NUL key NUL`, or its digest."""
    prefix = topic + b"\x00" + key + b"\x00"
    return prefix if len(prefix) <= _MAX_PREFIX else _digest(prefix)


def _time(ts: int) -> bytes:
    return U64.pack(min(max(ts + _BIAS, 0), (1 << 64) - 1))


# the write path's one parse (compiled unless ES_BROKER_PURE_PYTHON)
message_keys = wire.message_keys


def key_tokens(keys: bytes | None) -> list[bytes]:
    """The index keys of a KEYS value: its parts between spaces, empty ones skipped (B-201)."""
    if not keys:
        return []
    if KEY_SEPARATOR in keys:
        return [k for k in keys.split(KEY_SEPARATOR) if k]
    return [keys]


def matches(raw: bytes, topic: bytes, key: bytes, *, uniq_only: bool = False) -> bool:
    """Whether stored message bytes are of topic and hold key as UNIQ_KEY (or in KEYS)."""
    try:
        _, topic_at, start, end = wire.property_span(raw)
    except (IndexError, ValueError, struct.error):
        return False
    if raw[topic_at : start - 2] != topic:
        return False
    if wire.last_property(raw, start, end, wire.UNIQ_KEY_NAME) == key:
        return True
    if uniq_only:
        return False
    keys = wire.last_property(raw, start, end, wire.KEYS_NAME)
    if not keys:
        return False
    return key in keys.split(KEY_SEPARATOR)


def index_entries(
    txn: lmdb.Transaction[bytes],
    payloads: lmdb._Database,
    units: list[list[int]],
    topic: bytes,
    ts: bytes,
) -> tuple[list[bytes], int]:
    """The key_index keys of a `messages_stored` record's messages, in order, and the first
    physical offset that has any (-1: none).

    `topic` is the topic's bytes and a NUL, `ts` the record's store time as a key part
    (`_time`); each message's bytes are read at its physical offset in `payloads`.
    """
    get, pack = txn.get, U64.pack
    written: list[bytes] = []
    first = -1
    for phy, _, _ in units:
        phy_key = pack(phy)
        raw = get(phy_key, None, payloads)
        if raw is None:
            continue  # expired before the index was built (a replay copies the surviving bytes)
        keys, uniq, sys_flag = message_keys(raw)
        if sys_flag & _TRANSACTION_MASK == _ROLLBACK:
            continue  # IndexService skips a rolled-back transaction message (B-201)
        tail = ts + phy_key
        for token in ([uniq] if uniq else []) + key_tokens(keys):  # UNIQ_KEY first, then KEYS
            prefix = topic + token + b"\x00"
            written.append((prefix if len(prefix) <= _MAX_PREFIX else _digest(prefix)) + tail)
        if first < 0 and written:
            first = phy
    return written, first


def pack_entries(keys: list[bytes]) -> bytes:
    """A key_expiry value: each index key after its length (2 bytes)."""
    pack = _ENTRY.pack
    return b"".join([pack(len(key)) + key for key in keys])


# the pure-Python functions that have a compiled twin (es_broker/projections/_speedups.pyx)
REFERENCE = {"index_entries": index_entries, "pack_entries": pack_entries}


class KeyIndexProjection(Dispatching):
    name = "key_index"
    databases = ("key_index", "key_expiry", "key_meta")

    def bind(self, log: RecordLog) -> None:
        self.index_db = log.db("key_index")
        self.expiry_db = log.db("key_expiry")
        self.meta_db = log.db("key_meta")
        self.payloads = log.commitlog_db

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._index(txn, as_view(record, RecordType.MESSAGES_STORED))

    def _expired(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._expire(txn, CommitlogExpired.from_record(record).phy_min)

    HANDLERS = handlers(
        {RecordType.MESSAGES_STORED: _stored, RecordType.COMMITLOG_EXPIRED: _expired}
    )

    def _index(self, txn: lmdb.Transaction[bytes], record: MessagesStoredRecord) -> None:
        topic = record["topic"].encode() + b"\x00"
        written, first = index_entries(
            txn, self.payloads, record["units"], topic, _time(record["ts"])
        )
        if first >= 0:
            txn.cursor(db=self.index_db).putmulti([(key, b"") for key in written])
            txn.put(U64.pack(first), pack_entries(written), db=self.expiry_db)

    def _expire(self, txn: lmdb.Transaction[bytes], phy_min: int) -> None:
        cur = txn.cursor(db=self.expiry_db)
        while cur.first() and U64.unpack(cur.key())[0] < phy_min:
            kept: list[bytes] = []
            for key in _parse_entries(cur.value()):
                if U64.unpack(key[-8:])[0] < phy_min:
                    txn.delete(key, db=self.index_db)
                else:
                    kept.append(key)
            cur.delete()
            if kept:  # a record cut by phyMin: its surviving keys stay, under their first offset
                first = min(U64.unpack(key[-8:])[0] for key in kept)
                txn.put(U64.pack(first), pack_entries(kept), db=self.expiry_db)

    # ------------------------------------------------------------------ building
    def is_built(self, txn: lmdb.Transaction[bytes]) -> bool:
        return self.meta_db is not None and txn.get(_BUILT, db=self.meta_db) is not None

    def ensure_built(self, log: RecordLog) -> bool:
        """Index a log written before this projection existed, once; True if it had to.

        A marker says the index covers the log, so a start reads one key. The
        build is one write transaction: a crash leaves no index (and no
        marker) or a complete one.
        """
        with log.env.begin() as txn:
            if self.is_built(txn):
                return False
        while True:
            try:
                with log.env.begin(write=True) as txn:
                    for db in (self.index_db, self.expiry_db):
                        txn.drop(db, delete=False)
                    for key, raw in txn.cursor(db=log.log_db):
                        record = records.unpack(raw)
                        if record["type"] in self.HANDLERS:
                            self.apply(txn, records.key_seq(key), record)
                    txn.put(_BUILT, b"1", db=self.meta_db)
                return log.last_seq > 0
            except lmdb.MapFullError:
                log.env.set_mapsize(log.env.info()["map_size"] * 2)

    # ------------------------------------------------------------------ reads
    def newest(
        self, txn: lmdb.Transaction[bytes], topic: str, key: str, begin: int, end: int, limit: int
    ) -> list[int]:
        """Physical offsets of the newest `limit` messages of topic with key, stored in [begin, end].

        Newest first (store time, then physical offset), each checked against
        the stored message (B-200, B-203).
        """
        # None: a read-only view of an old log
        if limit <= 0 or begin > end or self.index_db is None:
            return []
        topic_b, key_b = topic.encode(), key.encode()
        prefix = key_prefix(topic_b, key_b)
        plen = len(prefix)
        size, low = plen + _TAIL, _time(begin)
        found: list[int] = []
        get, payloads = txn.get, self.payloads
        stop = prefix + _time(end) + b"\xff" * 8
        for entry in prefixed_keys(txn, self.index_db, prefix, stop=stop, reverse=True):
            if len(entry) != size:
                continue  # another key whose bytes continue this prefix
            if entry[plen : plen + 8] < low:
                break
            raw = get(entry[-8:], db=payloads)
            if raw is not None and matches(raw, topic_b, key_b):
                found.append(U64.unpack(entry[-8:])[0])
                if len(found) >= limit:
                    break
        return found

    def oldest_with_uniq_key(
        self, txn: lmdb.Transaction[bytes], topic: str, uniq: str
    ) -> int | None:
        """Physical offset of the oldest message of topic whose UNIQ_KEY is uniq."""
        if self.index_db is None:
            return None
        topic_b, uniq_b = topic.encode(), uniq.encode()
        prefix = key_prefix(topic_b, uniq_b)
        size = len(prefix) + _TAIL
        for entry in prefixed_keys(txn, self.index_db, prefix):
            if len(entry) != size:
                continue
            raw = txn.get(entry[-8:], db=self.payloads)
            if raw is not None and matches(raw, topic_b, uniq_b, uniq_only=True):
                physical_offset: int = U64.unpack(entry[-8:])[0]
                return physical_offset
        return None

    def entries(self, txn: lmdb.Transaction[bytes]) -> Iterator[bytes]:
        """Every key_index key, in order (tests and diagnostics)."""
        yield from txn.cursor(db=self.index_db).iternext(keys=True, values=False)


def _parse_entries(value: bytes) -> Iterator[bytes]:
    p = 0
    while p < len(value):
        (size,) = _ENTRY.unpack_from(value, p)
        p += _ENTRY.size
        yield bytes(value[p : p + size])
        p += size


_compiled = compiled.load("es_broker.projections._speedups")
if _compiled is not None:
    index_entries = _compiled.index_entries  # noqa: F811
    pack_entries = _compiled.pack_entries  # noqa: F811
