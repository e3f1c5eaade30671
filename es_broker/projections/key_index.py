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

The layout is IndexService's (B-470): a hash of `topic NUL key` picks a
bucket, and the bucket holds 14-byte entries in a DUPSORT+DUPFIXED
database, so an entry costs its 14 bytes in a packed page instead of a
B-tree key of its own:

| database | key                                   | duplicates, sorted                               |
|----------|---------------------------------------|--------------------------------------------------|
| key_hash | high 16 bits of CRC-32(`topic NUL key` without its last 2 bytes) | low 16 bits of CRC-32(`topic NUL key`) + store time (48 bits, ms) + physical offset (48 bits) |

The bucket leaves out a key's last two bytes so that keys which differ only
there (a client's UNIQ_KEYs, `order-1234`, `order-1235`) share it: the entries
of a batch of sends land in a few pages, not one page each, which is what a
write transaction costs (its dirty pages).

Like RocketMQ's hash index, an entry is a candidate: a lookup seeks the
entries of its 32-bit hash in the bucket, walks them from the newest store
time back (the order B-200 answers in) within the time range, and checks
each one against the stored message's own topic and properties before
answering it. The store time is the message's STORETIMESTAMP,
clamped to 48 bits for the order only (the range check reads the bytes).

A journey by UNIQ_KEY has no topic: it looks in the index of every topic
with messages (one seek each) rather than keeping a second, topic-less entry
per message, which would cost every send one more insert.

Retention: a `commitlog_expired` record deletes the message bytes below the
new phyMin. This projection is applied before the commit log's (see
`all_projections`): it reads the bytes about to go, derives their entries as
the send did (`payload_entries`) and deletes exactly those. The write
transaction thus does work in proportion to what expires, no lookup ever
has to skip dead entries and nothing is left to sweep later; a replay, which
only has the surviving bytes, writes the same entries. A replay from a
sealing's snapshot (B-407) cannot delete that way the snapshot's entries of
messages expired since (their bytes are gone from the commit log it copied),
so it leaves them out as it loads the snapshot (`expired_since`, B-670).

An older directory kept `key_index` (a B-tree key per entry) and `key_expiry`
(each record's entries, for retention); the upgrade to store format 2
(store_format.py) builds `key_hash` from the commit log's bytes and drops them.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator

import lmdb

from es_broker import compiled
from es_broker.log import Record, RecordLog
from es_broker.log.types import CommitlogExpired, MessagesStoredRecord, RecordType
from es_broker.projections.dispatch import Dispatching, handlers
from es_broker.remoting import message as wire

KEY_SEPARATOR = b" "  # MessageConst.KEY_SEPARATOR
BUCKET = struct.Struct(">H")
DATABASE = "key_hash"
LEGACY_DATABASES = ("key_index", "key_expiry", "key_meta")  # store format 1
_PHY_LIMIT = 1 << 48  # 256 TiB of commit log: an entry keeps 48 bits of the physical offset
_TIME_MAX = (1 << 48) - 1  # year 10889, in ms
ENTRY_SIZE = 14
NEIGHBOURS = (
    2  # the last bytes of a key that do not pick its bucket: keys that differ there share it
)
_I32_AT = struct.Struct(">i").unpack_from
_I64_AT = struct.Struct(">q").unpack_from

_TRANSACTION_MASK = 0xC  # MessageSysFlag: the transaction type bits; 0xC is a rollback
_ROLLBACK = 0xC


def key_hash(topic: bytes, key: bytes) -> tuple[bytes, int]:
    """(bucket, low 16 bits of the hash) of an index key: the bucket is the high 16 bits of
    CRC-32 of `topic NUL key` without the key's last NEIGHBOURS bytes, the low bits those of
    CRC-32 of `topic NUL key`."""
    seed = zlib.crc32(topic + b"\x00")
    near = zlib.crc32(key[: max(len(key) - NEIGHBOURS, 0)], seed)
    return BUCKET.pack(near >> 16), zlib.crc32(key, seed) & 0xFFFF


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


def store_time(raw: bytes) -> int:
    """STORETIMESTAMP of stored message bytes (after an IPv6 born host, 12 bytes later)."""
    v6 = _I32_AT(raw, wire.SYS_FLAG_AT)[0] & wire.FLAG_BORNHOST_V6
    return int(_I64_AT(raw, wire.STORE_TIMESTAMP_AT + (12 if v6 else 0))[0])


def _entry_time(ts: int) -> int:
    return min(max(ts, 0), _TIME_MAX)


def index_entries(
    read: Callable[[int], bytes | None],
    units: list[list[int]],
    topic: bytes,
) -> list[tuple[bytes, bytes]]:
    """The key_hash (bucket, entry) pairs of a `messages_stored` record's messages, in order.

    `topic` is the topic's bytes and a NUL; `read` gives each message's bytes
    by its physical offset (the commit log's chunks, RecordLog.payload_reader).
    A message without bytes (expired before the index was built: a replay
    copies the surviving bytes only) or a rolled-back transaction message
    (B-201) has none.
    """
    written: list[tuple[bytes, bytes]] = []
    seed = zlib.crc32(topic)
    for phy, _, _ in units:
        raw = read(phy)
        if raw is None:
            continue
        keys, uniq, sys_flag = message_keys(raw)
        if sys_flag & _TRANSACTION_MASK == _ROLLBACK:
            continue  # IndexService skips a rolled-back transaction message (B-201)
        tokens = ([uniq] if uniq else []) + key_tokens(keys)  # UNIQ_KEY first, then KEYS
        if not tokens:
            continue
        if phy >= _PHY_LIMIT:
            raise ValueError(f"physical offset {phy} past the key index's 48 bits")
        tail = (_entry_time(store_time(raw)) << 48) | phy
        for token in tokens:
            near = zlib.crc32(token[: max(len(token) - NEIGHBOURS, 0)], seed)
            entry = ((zlib.crc32(token, seed) & 0xFFFF) << 96) | tail
            written.append((BUCKET.pack(near >> 16), entry.to_bytes(ENTRY_SIZE, "big")))
    return written


def entry_offset(entry: bytes) -> int:
    """The physical offset of the message a key_hash entry points at (its last 48 bits)."""
    return int.from_bytes(entry[-6:], "big")


def expired_since(entry: bytes, first_message: int | None) -> bool:
    """Whether a key_hash entry of a snapshot is of a message whose bytes retention deleted
    after the snapshot, given the physical offset of the first message whose bytes are left
    (None: none are). Retention deletes the bytes below phyMin and, applied live, the entries
    derived from them (`_expire`); the bytes left are thus those from the first one on."""
    return first_message is None or entry_offset(entry) < first_message


# the pure-Python function that has a compiled twin (es_broker/projections/_speedups.pyx)
REFERENCE = {"index_entries": index_entries}


def payload_entries(phy: int, raw: bytes) -> list[tuple[bytes, bytes]]:
    """The key_hash pairs of stored message bytes at phy, their topic read from the bytes."""
    try:
        _, topic_at, start, _ = wire.property_span(raw)
    except (IndexError, ValueError, struct.error):
        return []
    topic = bytes(raw[topic_at : start - 2]) + b"\x00"
    return index_entries(lambda at: raw if at == phy else None, [[phy, 0, 0]], topic)


class KeyIndexProjection(Dispatching):
    name = "key_index"
    databases = (DATABASE,)
    dupsort = frozenset({DATABASE})

    def bind(self, log: RecordLog) -> None:
        self.index_db = log.db(DATABASE)
        self.log = log

    def _stored(self, txn: lmdb.Transaction[bytes], seq: int, stored: MessagesStoredRecord) -> None:
        topic = stored["topic"].encode() + b"\x00"
        written = index_entries(self.log.payload_reader(txn), stored["units"], topic)
        if written:
            txn.cursor(self.index_db).putmulti(written, True)  # dupdata, by position

    def _expired(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        self._expire(txn, CommitlogExpired.from_record(record).phy_min)

    HANDLERS = handlers(
        {RecordType.MESSAGES_STORED: _stored, RecordType.COMMITLOG_EXPIRED: _expired}
    )

    def _expire(self, txn: lmdb.Transaction[bytes], phy_min: int) -> None:
        """Delete the entries of the message bytes below phy_min, still there (read before the
        commit log's projection deletes them)."""
        delete, db = txn.delete, self.index_db
        for phy, raw in self.log.payloads_in(txn):
            if phy >= phy_min:
                break
            for bucket, entry in payload_entries(phy, raw):
                delete(bucket, entry, db=db)

    def rebuild(self, txn: lmdb.Transaction[bytes], messages: Iterable[tuple[int, bytes]]) -> None:
        """Build key_hash from every message's bytes in the commit log, (physical offset, bytes).

        What the records' application builds, as the bytes are all it reads
        (store format 2's upgrade, and a snapshot older than it).
        """
        txn.drop(self.index_db, delete=False)
        put, db = txn.put, self.index_db
        for phy, raw in messages:
            for bucket, entry in payload_entries(phy, raw):
                put(bucket, entry, dupdata=True, db=db)

    # ------------------------------------------------------------------ reads
    def _candidates(
        self,
        txn: lmdb.Transaction[bytes],
        topic: bytes,
        key: bytes,
        begin: int = 0,
        end: int = _TIME_MAX,
        *,
        newest_first: bool,
    ) -> Iterator[tuple[int, bytes]]:
        """(physical offset, stored bytes) of the bucket's entries whose hash is key's and whose
        store time lies in [begin, end] (clamped to the entries' 48 bits), in (time, offset) order.

        The entries of one hash are adjacent: a seek finds the newest (or oldest) of them, so a
        lookup reads its own candidates only, however full the bucket.
        """
        if self.index_db is None:  # a read-only view of an old directory
            return
        bucket, low16 = key_hash(topic, key)
        low = low16.to_bytes(2, "big")
        first, last = _entry_time(begin), _entry_time(end)
        cur = txn.cursor(db=self.index_db)
        if newest_first:
            if not cur.set_range_dup(
                bucket, low + (last << 48 | _PHY_LIMIT - 1).to_bytes(12, "big")
            ):
                if not cur.set_key(bucket):
                    return
                cur.last_dup()
            entries = cur.iterprev_dup(keys=False)
        else:
            if not cur.set_range_dup(bucket, low + (first << 48).to_bytes(12, "big")):
                return
            entries = cur.iternext_dup(keys=False)
        read = self.log.payload_reader(txn)
        for entry in entries:
            if entry[:2] != low:
                if (entry[:2] < low) == newest_first:
                    return  # past this hash's entries in the walk's direction
                continue
            value = int.from_bytes(entry[2:], "big")
            t = value >> 48
            if t > last or t < first:
                if (t < first) == newest_first:
                    return
                continue
            phy = value & (_PHY_LIMIT - 1)
            raw = read(phy)
            if raw is not None:
                yield phy, raw

    def newest(
        self, txn: lmdb.Transaction[bytes], topic: str, key: str, begin: int, end: int, limit: int
    ) -> list[int]:
        """Physical offsets of the newest `limit` messages of topic with key, stored in [begin, end].

        Newest first (store time, then physical offset), each checked against
        the stored message (B-200, B-203).
        """
        if limit <= 0 or begin > end:
            return []
        topic_b, key_b = topic.encode(), key.encode()
        found: list[int] = []
        for phy, raw in self._candidates(txn, topic_b, key_b, begin, end, newest_first=True):
            if matches(raw, topic_b, key_b) and begin <= store_time(raw) <= end:
                found.append(phy)
                if len(found) >= limit:
                    break
        return found

    def oldest_with_uniq_key(
        self, txn: lmdb.Transaction[bytes], topic: str, uniq: str
    ) -> int | None:
        """Physical offset of the oldest message of topic whose UNIQ_KEY is uniq."""
        topic_b, uniq_b = topic.encode(), uniq.encode()
        for phy, raw in self._candidates(txn, topic_b, uniq_b, newest_first=False):
            if matches(raw, topic_b, uniq_b, uniq_only=True):
                return phy
        return None

    def entries(self, txn: lmdb.Transaction[bytes]) -> Iterator[tuple[bytes, bytes]]:
        """Every (bucket, entry) of key_hash, in order (tests and diagnostics)."""
        yield from txn.cursor(db=self.index_db).iternext()


compiled.install(globals(), "es_broker.projections._speedups", "index_entries")
