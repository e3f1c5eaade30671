# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twins of the projections' per-message loops for a `messages_stored` record, of
the consume queue's read of a queue's units (`queue_units`, the pull's), and of two appliers
every message pays: the stats' counts of a send and a pull, and the time index's entry of every
record.

Each function has the name, signature and results of its pure-Python
reference (`REFERENCE` in consume_queue.py, key_index.py, stats.py and time_index.py), byte for
byte (tests/test_compiled_identity.py, tests/test_stats_compiled.py,
tests/test_time_index_compiled.py). The fast path takes well-formed input only;
anything else (a value out of range, a type the reference coerces or refuses,
a physical offset past the key index's 48 bits) is handed to the reference, so its
results and its errors are the reference's own. The appliers' twins need no such hand-over:
they take the reference's steps on the same Python values, so they raise what it raises.

Imported by those modules at the end of their own import; what it uses of
them is bound at the first call.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport UINT32_MAX, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from libc.string cimport memcmp

from es_broker._bigendian cimport _get32, _get64, _put32, _put64


# CRC-32 as zlib.crc32 computes it (IEEE 802.3, reflected, polynomial 0xEDB88320), byte by byte
# from a table, without a Python call per key (the key index's hashes) and without zlib's header
# or library at build time
cdef uint32_t _CRC_TABLE[256]


cdef void _crc_table() noexcept:
    cdef uint32_t c
    cdef int n, k
    for n in range(256):
        c = n
        for k in range(8):
            c = (c >> 1) ^ 0xEDB88320U if c & 1 else c >> 1
        _CRC_TABLE[n] = c


_crc_table()


cdef inline unsigned long crc32(unsigned long crc, const unsigned char* buf, unsigned int length) noexcept nogil:
    cdef uint32_t c = <uint32_t>crc ^ 0xFFFFFFFFU
    cdef unsigned int i
    for i in range(length):
        c = _CRC_TABLE[(c ^ buf[i]) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFFU

cdef int UNIT_SIZE = 28  # consume_queue.UNIT: >qiqq
cdef int ROLLBACK = 0xC  # key_index: a rolled-back transaction message is not indexed

cdef int64_t PHY_LIMIT = 0x1000000000000  # key_index: an entry keeps 48 bits of the physical offset
cdef int64_t TIME_MAX = 0xFFFFFFFFFFFF  # ... and 48 bits of the store time
cdef int ENTRY_SIZE = 14
cdef Py_ssize_t NEIGHBOURS = 2
cdef Py_ssize_t STORE_TIMESTAMP_AT = 56
cdef int BORNHOST_V6 = 0x10

cdef dict _REF = None
cdef object _message_keys = None


cdef int _bind() except -1:
    global _REF, _message_keys
    from es_broker.projections import consume_queue, key_index

    if (
        consume_queue.UNIT.size != UNIT_SIZE
        or (key_index._TRANSACTION_MASK, key_index._ROLLBACK) != (ROLLBACK, ROLLBACK)
        or (key_index._PHY_LIMIT, key_index._TIME_MAX, key_index.ENTRY_SIZE) != (PHY_LIMIT, TIME_MAX, ENTRY_SIZE)
        or key_index.NEIGHBOURS != NEIGHBOURS
        or (key_index.wire.STORE_TIMESTAMP_AT, key_index.wire.FLAG_BORNHOST_V6) != (STORE_TIMESTAMP_AT, BORNHOST_V6)
    ):
        raise ImportError("es_broker.projections._speedups was built from other layouts than the projections'")
    _message_keys = key_index.message_keys
    _REF = dict(consume_queue.REFERENCE, **key_index.REFERENCE)
    return 0


cdef inline bint _is_unit(object unit) noexcept:
    # exact ints only: Cython would truncate a float where struct.pack refuses it
    return (
        (type(unit) is list or type(unit) is tuple)
        and len(unit) == 3
        and type(unit[0]) is int
        and type(unit[1]) is int
        and type(unit[2]) is int
    )


# ------------------------------------------------------------------ consume queue

def queue_block(units, ts):
    cdef int64_t c_ts, phy, tags_code
    cdef int32_t size
    cdef Py_ssize_t i, n
    cdef bytes out
    cdef char* p
    if _REF is None:
        _bind()
    if type(units) is not list and type(units) is not tuple:
        return _REF["queue_block"](units, ts)
    n = len(units)
    if type(ts) is not int:
        return _REF["queue_block"](units, ts)
    try:
        c_ts = ts
    except Exception:
        return _REF["queue_block"](units, ts)
    out = PyBytes_FromStringAndSize(NULL, n * UNIT_SIZE)
    p = PyBytes_AS_STRING(out)
    for i in range(n):
        unit = units[i]
        if not _is_unit(unit):
            return _REF["queue_block"](units, ts)
        try:
            phy = unit[0]
            size = unit[1]
            tags_code = unit[2]
        except Exception:
            return _REF["queue_block"](units, ts)
        _put64(p, phy)
        _put32(p + 8, size)
        _put64(p + 12, tags_code)
        _put64(p + 20, c_ts)
        p += UNIT_SIZE
    return out


# ------------------------------------------------------------------ key index

def index_entries(read, units, topic):
    cdef int64_t phy, ts
    cdef uint32_t seed, h, near
    cdef Py_ssize_t near_len
    cdef Py_ssize_t at
    cdef list written = []
    cdef bytes bucket, entry
    cdef char* p
    cdef const unsigned char* key
    if _REF is None:
        _bind()
    if type(topic) is not bytes or (type(units) is not list and type(units) is not tuple):
        return _REF["index_entries"](read, units, topic)
    if PyBytes_GET_SIZE(topic) > UINT32_MAX:
        return _REF["index_entries"](read, units, topic)
    seed = crc32(0, <const unsigned char*>PyBytes_AS_STRING(topic), <unsigned int>PyBytes_GET_SIZE(topic))
    for unit in units:
        if not _is_unit(unit) or type(unit[0]) is not int:
            return _REF["index_entries"](read, units, topic)
        try:
            phy = unit[0]
        except OverflowError:
            return _REF["index_entries"](read, units, topic)
        if phy < 0:
            return _REF["index_entries"](read, units, topic)
        raw = read(phy)
        if raw is None:
            continue
        keys, uniq, sys_flag = _message_keys(raw)
        if sys_flag & ROLLBACK == ROLLBACK:
            continue
        if (uniq and type(uniq) is not bytes) or (keys and type(keys) is not bytes):
            return _REF["index_entries"](read, units, topic)
        tokens = [t for t in (<bytes>keys).split(b" ") if t] if keys else []
        if uniq:
            tokens.insert(0, uniq)  # UNIQ_KEY first, then KEYS
        if not tokens:
            continue
        at = STORE_TIMESTAMP_AT + (12 if sys_flag & BORNHOST_V6 else 0)
        if phy >= PHY_LIMIT or type(raw) is not bytes or PyBytes_GET_SIZE(raw) < at + 8:
            return _REF["index_entries"](read, units, topic)
        ts = _get64(<const uint8_t*>PyBytes_AS_STRING(raw) + at)
        if ts < 0:
            ts = 0
        elif ts > TIME_MAX:
            ts = TIME_MAX
        for token in tokens:
            if type(token) is not bytes or PyBytes_GET_SIZE(token) > UINT32_MAX:
                return _REF["index_entries"](read, units, topic)
            # CRC-32 runs on: the key's hash continues its bucket's from the last NEIGHBOURS bytes
            near_len = PyBytes_GET_SIZE(token) - NEIGHBOURS
            if near_len < 0:
                near_len = 0
            key = <const unsigned char*>PyBytes_AS_STRING(token)
            near = crc32(seed, key, <unsigned int>near_len)
            h = crc32(near, key + near_len, <unsigned int>(PyBytes_GET_SIZE(token) - near_len))
            bucket = PyBytes_FromStringAndSize(NULL, 2)
            p = PyBytes_AS_STRING(bucket)
            p[0] = <char>(near >> 24)
            p[1] = <char>(near >> 16)
            entry = PyBytes_FromStringAndSize(NULL, ENTRY_SIZE)
            p = PyBytes_AS_STRING(entry)
            _put64(p, <int64_t>(h & 0xFFFF) << 48 | ts)  # the hash's low 16 bits, time (6 bytes)
            _put32(p + 8, <int32_t>(phy >> 16))  # the offset (6 bytes)
            p[12] = <char>(phy >> 8)
            p[13] = <char>phy
            written.append((bucket, entry))
    return written


# ------------------------------------------------------------------ consume queue: a queue's units
# (`queue_units`, the pull's read of the units it hands out)

cdef int64_t OFFSET_LIMIT = 1 << 62  # offsets above are handed to the reference (U64 keys)


def queue_units(cur, queue, start, end, timed):
    if _REF is None:
        _bind()
    if (
        type(queue) is not bytes or type(start) is not int or type(end) is not int
        or type(timed) is not bool or not 0 <= start <= OFFSET_LIMIT or not 0 <= end <= OFFSET_LIMIT
    ):
        return _REF["queue_units"](cur, queue, start, end, timed)
    return _queue_units(cur, <bytes>queue, start, end, timed)


def _queue_units(cur, bytes queue, int64_t start, int64_t end, bint timed):
    cdef Py_ssize_t qlen = PyBytes_GET_SIZE(queue), count, i, lo, hi
    cdef int64_t first, offset
    cdef uint64_t key_first
    cdef const uint8_t* p
    for key, value in cur:
        if type(key) is not bytes or type(value) is not bytes:  # a transaction with buffers=True
            yield from _REF["queue_units"](cur, queue, start, end, bool(timed))  # from this block
            return
        if PyBytes_GET_SIZE(key) != qlen + 8 or memcmp(
            PyBytes_AS_STRING(key), PyBytes_AS_STRING(queue), qlen
        ) != 0:
            if key[:qlen] < queue:
                continue  # the block before the queue's first
            return
        key_first = <uint64_t>_get64(<const uint8_t*>PyBytes_AS_STRING(key) + qlen)
        if key_first > <uint64_t>OFFSET_LIMIT:
            yield from _REF["queue_units"](cur, queue, start, end, bool(timed))  # from this block
            return
        first = <int64_t>key_first
        if first >= end:
            return
        count = PyBytes_GET_SIZE(value) // UNIT_SIZE
        if first + count <= start:
            continue
        lo = start - first if start > first else 0
        hi = end - first if end - first < count else count
        offset = first + lo
        p = <const uint8_t*>PyBytes_AS_STRING(value) + lo * UNIT_SIZE
        for i in range(lo, hi):
            if timed:
                yield offset, _get64(p), _get32(p + 8), _get64(p + 12), _get64(p + 20)
            else:
                yield offset, _get64(p), _get32(p + 8), _get64(p + 12)
            offset += 1
            p += UNIT_SIZE


# ------------------------------------------------------------------ stats: a send's and a pull's counts
# (`count_stored`, `count_delivered`: StatsProjection's appliers of every message's records)
#
# The reference's steps, in its order, on the projection's own attributes (`_txn`, `_pending`,
# `_same`, `total_db`, `minute_db`, `cq`); what it adds to its counts stays a Python object, so any
# value a record holds counts as the reference counts it and raises what the reference raises.
# What is compiled is the calls: `_again`, `_add` and `_bump` are C functions here, not methods.
# These twins of the appliers (and the time index's below) index as Python
# does, checked and from the end (`boundscheck`, `wraparound`), unlike this module's loops above.

cdef object _stats = None  # es_broker.projections.stats, bound at the first call, and what is read of it
cdef object _put_of, _size_buckets, _bisect_left, _size_bounds, _minute_ms, _u64_pack
cdef bytes _topic_put, _group_get, _broker_put, _broker_get, _size_kind


cdef int _bind_stats() except -1:
    global _stats, _put_of, _size_buckets, _bisect_left, _size_bounds, _minute_ms, _u64_pack
    global _topic_put, _group_get, _broker_put, _broker_get, _size_kind
    from es_broker.projections import stats
    _put_of, _size_buckets = stats.put_of, stats.size_buckets
    _bisect_left, _size_bounds = stats.bisect.bisect_left, stats.MESSAGE_SIZE_BOUNDS
    _minute_ms, _u64_pack = stats.MINUTE_MS, stats.U64.pack
    _topic_put, _group_get, _size_kind = stats.TOPIC_PUT, stats.GROUP_GET, stats.SIZE_BUCKETS
    _broker_put, _broker_get = stats.BROKER_PUT, stats.BROKER_GET
    _stats = stats
    return 0


@cython.boundscheck(True)
@cython.wraparound(True)
cdef list _bump(object proj, object txn, bytes key, object db, object n, object size):
    """StatsProjection._bump."""
    cdef dict pending_counts
    cdef list pending
    if txn is not proj._txn:  # a new transaction: what an aborted one kept is dropped
        proj._txn = txn
        proj._pending.clear()
        proj._same.clear()
    pending_counts = proj._pending
    count = (db, key)
    found = pending_counts.get(count)
    if found is None:
        pending = [n, size, 1]
        pending_counts[count] = pending
        return pending
    pending = found
    pending[0] += n
    pending[1] += size
    pending[2] += 1
    return pending


@cython.boundscheck(True)
@cython.wraparound(True)
cdef list _add(object proj, object txn, bytes key, object minute, object n, object size, bint total):
    """StatsProjection._add."""
    cdef list counts = []
    if total:
        counts.append(_bump(proj, txn, key, proj.total_db, n, size))
    if key.find(b"\x00") >= 0:  # the per-type total's minute is kept under the topic alone
        return counts
    minute_key = key + b"\x00" + _u64_pack(max(minute, 0))
    counts.append(_bump(proj, txn, minute_key, proj.minute_db, n, size))
    return counts


@cython.boundscheck(True)
@cython.wraparound(True)
cdef bint _again(object proj, object txn, tuple same, object n, object size) except -1:
    """StatsProjection._again."""
    cdef list pending
    counts = proj._same.get(same) if txn is proj._txn else None
    if counts is None:
        return False
    for pending in counts:
        pending[0] += n
        pending[1] += size
        pending[2] += 1
    return True


@cython.boundscheck(True)
@cython.wraparound(True)
def count_stored(proj, txn, seq, stored):
    if _stats is None:
        _bind_stats()
    put = _put_of(stored)
    if put is None:
        return
    topic, message_type = put
    units = stored["units"]
    if len(units) == 1:  # a single message: its size's bucket, as size_buckets finds it
        n, size = 1, units[0][1]
        buckets = [(_bisect_left(_size_bounds, size), (1, size))]
    else:
        sizes = [u[1] for u in units]
        n, size = len(sizes), sum(sizes)
        buckets = _size_buckets(sizes)
    minute = stored["ts"] // _minute_ms
    kind = _topic_put
    same = (kind, topic, message_type, minute, buckets[0][0]) if len(buckets) == 1 else None
    if same is not None and _again(proj, txn, same, n, size):
        return
    counts = _add(proj, txn, kind + f"{topic}\x00{message_type}".encode(), minute, n, size, True)
    counts.extend(_add(proj, txn, kind + topic.encode(), minute, n, size, False))
    counts.extend(_add(proj, txn, _broker_put, minute, n, size, True))
    for which, (k, s) in buckets:
        key = _size_kind + f"{topic}\x00{message_type}\x00{which}".encode()
        counts.append(_bump(proj, txn, key, proj.total_db, k, s))
    if same is not None:
        proj._same[same] = counts


@cython.boundscheck(True)
@cython.wraparound(True)
def count_delivered(proj, txn, seq, delivered):
    if _stats is None:
        _bind_stats()
    topic, qid = delivered["topic"], delivered["queue_id"]
    size = proj.cq.sizes(txn, topic, qid, delivered["offsets"])
    n, minute = len(delivered["offsets"]), delivered["ts"] // _minute_ms
    same = (_group_get, topic, delivered["group"], minute)
    if _again(proj, txn, same, n, size):
        return
    name = f"{topic}@{delivered['group']}".encode()
    counts = _add(proj, txn, _group_get + name, minute, n, size, True)
    proj._same[same] = counts + _add(proj, txn, _broker_get, minute, n, size, True)


# ------------------------------------------------------------------ time index: every record's entry
# (`time_index_apply`, TimeIndexProjection.apply: the effective time, then the record's handler)

cdef object _time_index = None  # es_broker.projections.time_index, bound at the first call
cdef object _tt_u64_pack, _tt_u64_unpack, _tt_groups_named, _tt_event_key, _tt_pack
cdef frozenset _tt_quiet


cdef int _bind_time_index() except -1:
    global _time_index, _tt_u64_pack, _tt_u64_unpack, _tt_groups_named, _tt_event_key, _tt_pack
    global _tt_quiet
    from es_broker.projections import time_index
    _tt_u64_pack, _tt_u64_unpack = time_index.U64.pack, time_index.U64.unpack
    _tt_groups_named, _tt_event_key = time_index.groups_named, time_index.event_key
    _tt_pack, _tt_quiet = time_index.records.pack, time_index.QUIET_GROUP_RECORDS
    _time_index = time_index
    return 0


@cython.boundscheck(True)
@cython.wraparound(True)
def time_index_apply(proj, txn, seq, record):
    if _time_index is None:
        _bind_time_index()
    ts = record.get("ts")
    if type(ts) is not int or ts < 0:  # none, or before the epoch: as 0
        ts = max(int(ts or 0), 0)
    if txn is proj._txn:
        grew = proj._time < ts
    else:
        cur = txn.cursor(proj.time_db)
        grew = not cur.last() or _tt_u64_unpack(cur.key())[0] < ts
        proj._txn, proj._time = txn, ts if grew else _tt_u64_unpack(cur.key())[0]
    if grew:
        # the effective time grew: one entry each way, both keys ascending
        txn.put(_tt_u64_pack(ts), _tt_u64_pack(seq), True, True, True, proj.time_db)
        txn.put(_tt_u64_pack(seq), _tt_u64_pack(ts), True, True, True, proj.seq_db)
        proj._time = ts
    handler = proj.HANDLERS.get(record["type"])
    if handler is not None:
        handler(proj, txn, seq, record)
    elif record["type"] not in _tt_quiet:
        for group in _tt_groups_named(record):
            txn.put(_tt_event_key(group, seq), _tt_pack(record), db=proj.events_db)

