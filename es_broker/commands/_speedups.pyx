# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of the send path's per-message loop (`encode_batch` in commands/messages.py).

Same name, signature and results as the pure-Python reference (`REFERENCE` in
messages.py), byte for byte (tests/test_compiled_identity.py). Each message is
written here in the stored layout `es_broker.remoting.message.encode_fields`
writes, its stored properties encoded without building their dict, the topic and
the hosts encoded once per batch; its tags are hashed by `tag_hash` (compiled
unless ES_BROKER_PURE_PYTHON). A message the fast path does not take (a refusal, a
type other than MessageIn, anything that raises) sends the whole batch to the
reference, so its results and its errors are the reference's own.

Imported by messages.py at the end of its own import; what it uses of it is
bound at the first call.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t

from es_broker._stored_layout cimport STORED_MAGIC_CODE, _write_stored

import zlib

cdef object _crc32 = zlib.crc32

# the stored message's layout (es_broker/remoting/message.py; its compiled twin checks LAYOUT)
cdef int32_t V6_FLAGS = 0x10 | 0x20  # FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6

cdef dict _REF = None
cdef object _MessageIn = None
cdef object _encode_fields = None
cdef object _tag_hash = None
cdef object _host_bytes = None
cdef Py_ssize_t _FIXED_SIZE = 0
cdef str _WAIT = None


cdef int _bind() except -1:
    global _REF, _MessageIn, _encode_fields, _tag_hash, _host_bytes, _FIXED_SIZE, _WAIT
    from es_broker.commands import delay, messages
    from es_broker.remoting import message as wire

    if wire.MAGIC_CODE != STORED_MAGIC_CODE or wire.FIXED_SIZE != 91 or wire.LAYOUT[1:6] != (
        12, 20, 36, 56, 84
    ):
        raise ImportError("es_broker.commands._speedups was built for another stored layout")
    _MessageIn = messages.MessageIn
    _encode_fields = wire.encode_fields
    _tag_hash = wire.tag_hash
    _host_bytes = wire._host_bytes
    _FIXED_SIZE = wire.FIXED_SIZE
    _WAIT = delay.PROPERTY_WAIT
    _REF = messages.REFERENCE
    return 0


cdef bytes _stored(bytes topic_raw, int32_t queue_id, bytes body, bytes props, int32_t flag,
                   int32_t sys_flag, int64_t born_ts, bytes born, bytes store, int32_t reconsume,
                   int32_t crc):
    """`encode_fields(topic, queue_id, body, props, flag, sys_flag, 0, 0, born_ts, born_host, 0,
    store_host, reconsume, 0, None)` of fields already converted and checked."""
    cdef Py_ssize_t total = (
        _FIXED_SIZE + PyBytes_GET_SIZE(body) + PyBytes_GET_SIZE(topic_raw) + PyBytes_GET_SIZE(props)
    )
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    # queue offset, physical offset and store time: 0, stamped at placement
    _write_stored(
        PyBytes_AS_STRING(out), total, crc, queue_id, flag, 0, 0, sys_flag, born_ts, born, 0,
        store, reconsume, 0, body, topic_raw, props,
    )
    return out


def encode_batch(topic, queue_id, messages, cluster, store_host, max_body, file_size):
    cdef Py_ssize_t c_max_body, c_file_size, topic_len, body_len
    cdef int32_t c_queue_id
    cdef list encoded = [], codes = [], parts
    cdef tuple msg
    cdef dict given
    cdef bytes topic_raw, props, store, born = None
    cdef bint clustered
    if _REF is None:
        _bind()
    args = (topic, queue_id, messages, cluster, store_host, max_body, file_size)
    if (type(topic) is not str or type(cluster) is not str
            or (type(messages) is not list and type(messages) is not tuple)):
        return _REF["encode_batch"](*args)
    try:
        c_max_body = max_body
        c_file_size = file_size
        c_queue_id = queue_id
        topic_raw = (<str>topic).encode("utf-8")
        store = _host_bytes(store_host)
    except Exception:
        return _REF["encode_batch"](*args)
    topic_len = len(<str>topic)
    if PyBytes_GET_SIZE(topic_raw) > 127 or PyBytes_GET_SIZE(store) != 8:
        return _REF["encode_batch"](*args)
    cluster_part = "CLUSTER\x01" + <str>cluster
    born_host = None
    for item in messages:
        if type(item) is not _MessageIn:
            return _REF["encode_batch"](*args)
        msg = <tuple>item
        body = msg[0]
        if type(body) is not bytes or type(msg[1]) is not dict:
            return _REF["encode_batch"](*args)
        body_len = len(<bytes>body)
        if body_len > c_max_body or body_len + _FIXED_SIZE + topic_len > c_file_size:
            return _REF["encode_batch"](*args)  # refused there
        # the stored properties (`stored_properties`: WAIT dropped, CLUSTER set in its place or
        # last), encoded as `encode_properties` encodes them, without the dict between
        given = <dict>msg[1]
        parts = []
        clustered = False
        for name, value in given.items():
            if type(name) is not str:
                return _REF["encode_batch"](*args)
            if <str>name == _WAIT:
                continue
            if <str>name == "CLUSTER":
                parts.append(cluster_part)
                clustered = True
            elif type(value) is not str:
                return _REF["encode_batch"](*args)
            else:
                parts.append(<str>name + "\x01" + <str>value)
        if not clustered:
            parts.append(cluster_part)
        try:
            props = "\x02".join(parts).encode("utf-8")
            if PyBytes_GET_SIZE(props) > 32767 or (
                _FIXED_SIZE + body_len + PyBytes_GET_SIZE(topic_raw) + PyBytes_GET_SIZE(props)
                > 0x7FFFFFFF
            ):
                return _REF["encode_batch"](*args)
            if born is None or msg[5] != born_host:
                born_host = msg[5]
                born = _host_bytes(born_host)
                if PyBytes_GET_SIZE(born) != 8:
                    return _REF["encode_batch"](*args)
            raw = _stored(
                topic_raw, c_queue_id, <bytes>body, props, msg[2], msg[3] & ~V6_FLAGS, msg[4],
                born, store, msg[6], (_crc32(body) & 0x7FFFFFFF),
            )
            tags = given.get("TAGS")
            code = _tag_hash(tags) if tags else 0
        except Exception:
            return _REF["encode_batch"](*args)
        encoded.append(raw)
        codes.append(code)
    return encoded, codes
