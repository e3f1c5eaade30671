# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twins of the projections' per-message loops for a `messages_stored` record.

Each function has the name, signature and results of its pure-Python
reference (`REFERENCE` in consume_queue.py and key_index.py), byte for byte
(tests/test_compiled_identity.py). The fast path takes well-formed input only;
anything else (a value out of range, a type the reference coerces or refuses,
a key prefix long enough to be digested) is handed to the reference, so its
results and its errors are the reference's own.

Imported by those modules at the end of their own import; what it uses of
them is bound at the first call.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy

from es_broker._bigendian cimport _put32, _put64

cdef int64_t INT64_MAX = 0x7FFFFFFFFFFFFFFF
cdef int UNIT_SIZE = 28  # consume_queue.UNIT: >qiqq
cdef int ROLLBACK = 0xC  # key_index: a rolled-back transaction message is not indexed

cdef dict _REF = None
cdef object _message_keys = None
cdef Py_ssize_t _MAX_PREFIX = 0


cdef int _bind() except -1:
    global _REF, _message_keys, _MAX_PREFIX
    from es_broker.projections import consume_queue, key_index

    if consume_queue.UNIT.size != UNIT_SIZE or (key_index._TRANSACTION_MASK, key_index._ROLLBACK) != (ROLLBACK, ROLLBACK):
        raise ImportError("es_broker.projections._speedups was built from other layouts than the projections'")
    _message_keys = key_index.message_keys
    _MAX_PREFIX = key_index._MAX_PREFIX
    _REF = dict(consume_queue.REFERENCE, **key_index.REFERENCE)
    return 0


cdef inline bytes _u64(int64_t value):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 8)
    _put64(PyBytes_AS_STRING(out), value)
    return out


cdef inline bint _is_unit(object unit) noexcept:
    return (type(unit) is list or type(unit) is tuple) and len(unit) == 3


# ------------------------------------------------------------------ consume queue

def queue_units(prefix, offset, units, ts):
    cdef int64_t c_offset, c_ts, phy, tags_code
    cdef int32_t size
    cdef Py_ssize_t i, n, prefix_len
    cdef list out
    cdef bytes key, value
    cdef char* p
    if _REF is None:
        _bind()
    if type(prefix) is not bytes or (type(units) is not list and type(units) is not tuple):
        return _REF["queue_units"](prefix, offset, units, ts)
    n = len(units)
    try:
        c_offset = offset
        c_ts = ts
    except Exception:
        return _REF["queue_units"](prefix, offset, units, ts)
    if c_offset < 0 or c_offset > INT64_MAX - n:
        return _REF["queue_units"](prefix, offset, units, ts)
    prefix_len = PyBytes_GET_SIZE(prefix)
    out = []
    for i in range(n):
        unit = units[i]
        if not _is_unit(unit):
            return _REF["queue_units"](prefix, offset, units, ts)
        try:
            phy = unit[0]
            size = unit[1]
            tags_code = unit[2]
        except Exception:
            return _REF["queue_units"](prefix, offset, units, ts)
        key = PyBytes_FromStringAndSize(NULL, prefix_len + 8)
        p = PyBytes_AS_STRING(key)
        memcpy(p, PyBytes_AS_STRING(prefix), prefix_len)
        _put64(p + prefix_len, c_offset + i)
        value = PyBytes_FromStringAndSize(NULL, UNIT_SIZE)
        p = PyBytes_AS_STRING(value)
        _put64(p, phy)
        _put32(p + 8, size)
        _put64(p + 12, tags_code)
        _put64(p + 20, c_ts)
        out.append((key, value))
    return out


# ------------------------------------------------------------------ key index

cdef inline bytes _index_key(bytes topic, bytes key, bytes tail):
    """topic + key + NUL + tail, or None when the prefix is too long (the reference digests it)."""
    cdef Py_ssize_t topic_len = PyBytes_GET_SIZE(topic), key_len = PyBytes_GET_SIZE(key)
    cdef Py_ssize_t tail_len = PyBytes_GET_SIZE(tail)
    cdef bytes out
    cdef char* p
    if topic_len + key_len + 1 > _MAX_PREFIX:
        return None
    out = PyBytes_FromStringAndSize(NULL, topic_len + key_len + 1 + tail_len)
    p = PyBytes_AS_STRING(out)
    memcpy(p, PyBytes_AS_STRING(topic), topic_len)
    memcpy(p + topic_len, PyBytes_AS_STRING(key), key_len)
    p[topic_len + key_len] = 0
    memcpy(p + topic_len + key_len + 1, PyBytes_AS_STRING(tail), tail_len)
    return out


def index_entries(txn, payloads, units, topic, ts):
    cdef int64_t phy, first = -1
    cdef list written = []
    cdef bytes phy_key, tail, entry
    if _REF is None:
        _bind()
    if type(topic) is not bytes or type(ts) is not bytes or (type(units) is not list and type(units) is not tuple):
        return _REF["index_entries"](txn, payloads, units, topic, ts)
    get = txn.get
    for unit in units:
        if not _is_unit(unit) or type(unit[0]) is not int:
            return _REF["index_entries"](txn, payloads, units, topic, ts)
        try:
            phy = unit[0]
        except OverflowError:
            return _REF["index_entries"](txn, payloads, units, topic, ts)
        if phy < 0:
            return _REF["index_entries"](txn, payloads, units, topic, ts)
        phy_key = _u64(phy)
        raw = get(phy_key, None, payloads)
        if raw is None:
            continue
        keys, uniq, sys_flag = _message_keys(raw)
        if sys_flag & ROLLBACK == ROLLBACK:
            continue
        if (uniq and type(uniq) is not bytes) or (keys and type(keys) is not bytes):
            return _REF["index_entries"](txn, payloads, units, topic, ts)
        tail = ts + phy_key
        tokens = (<bytes>keys).split(b" ") if keys else []
        if uniq:
            tokens.insert(0, uniq)  # UNIQ_KEY first, then KEYS
        for token in tokens:
            if token:
                entry = _index_key(topic, token, tail)
                if entry is None:
                    return _REF["index_entries"](txn, payloads, units, topic, ts)
                written.append(entry)
        if first < 0 and written:
            first = phy
    return written, first


def pack_entries(keys):
    cdef Py_ssize_t total = 0, size
    cdef bytes out
    cdef char* p
    if _REF is None:
        _bind()
    if type(keys) is not list:
        return _REF["pack_entries"](keys)
    for key in keys:
        if type(key) is not bytes or PyBytes_GET_SIZE(key) > 0xFFFF:
            return _REF["pack_entries"](keys)
        total += 2 + PyBytes_GET_SIZE(key)
    out = PyBytes_FromStringAndSize(NULL, total)
    p = PyBytes_AS_STRING(out)
    for key in keys:
        size = PyBytes_GET_SIZE(key)
        p[0] = <char>(size >> 8)
        p[1] = <char>size
        memcpy(p + 2, PyBytes_AS_STRING(key), size)
        p += 2 + size
    return out
