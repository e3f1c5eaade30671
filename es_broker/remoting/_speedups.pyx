# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of the hot functions of `es_broker.remoting.message`.

Each function here has the name, signature and results of its pure-Python
reference in message.py (decode_pull_body's: es_broker/client/messages.py), byte
for byte (tests/test_compiled_identity.py). The fast path handles well-formed
input only; anything else (a bound crossed, a value out of range, a lone
surrogate, an IPv6 host, a type the reference coerces) is handed to the
reference, so errors and their texts are the reference's own.

Imported by message.py at the end of its own import; what it uses of
message.py is bound at the first call.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject_GenericSetAttr
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy

from es_broker._stored_layout cimport _write_stored
from es_broker._bigendian cimport _get16, _get32, _get64, _put32, _put64

import zlib

cdef object _crc32 = zlib.crc32

cdef int32_t MAGIC_CODE = -626843481  # 0xDAA320A7
cdef Py_ssize_t FIXED_SIZE = 91  # every field but body, topic and properties, IPv4 hosts
cdef int32_t V6_FLAGS = 0x10 | 0x20  # FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6
cdef Py_ssize_t BATCH_ENTRY = 20  # TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLENGTH

# byte positions in a stored message, IPv4 hosts: message.py declares them, LAYOUT must equal its
cdef enum:
    QUEUE_ID_AT = 12
    QUEUE_OFFSET_AT = 20  # PHYSICALOFFSET follows
    SYS_FLAG_AT = 36
    STORE_TIMESTAMP_AT = 56
    BODY_LENGTH_AT = 84

LAYOUT = (
    FIXED_SIZE, QUEUE_ID_AT, QUEUE_OFFSET_AT, SYS_FLAG_AT, STORE_TIMESTAMP_AT, BODY_LENGTH_AT,
    BATCH_ENTRY,
)

# bound from message.py at the first call, not at import: message.py imports this module
cdef dict _REF = None
cdef object _StoredMessage = None
cdef object _host_bytes = None


cdef int _bind() except -1:
    global _REF, _StoredMessage, _host_bytes
    from es_broker.remoting import message

    if (message.MAGIC_CODE, message.FIXED_SIZE, message.FLAG_BORNHOST_V6 | message.FLAG_STOREHOST_V6) != \
            (MAGIC_CODE, FIXED_SIZE, V6_FLAGS):
        raise ImportError("es_broker.remoting._speedups was built from another layout than message.py's")
    _StoredMessage = message.StoredMessage
    _host_bytes = message._host_bytes
    _REF = message.REFERENCE
    return 0


# ------------------------------------------------------------------ tags and properties

def tag_hash(tag):
    """Java's String.hashCode() of a tag, over its UTF-16 code units, as a signed 32-bit value."""
    cdef uint32_t h = 0
    cdef Py_UCS4 c
    cdef uint32_t v
    cdef str text
    if _REF is None:
        _bind()
    if type(tag) is not str:
        return _REF["tag_hash"](tag)
    text = tag
    for c in text:
        v = <uint32_t>c  # a code point (Cython would treat Py_UCS4 in arithmetic as a character)
        if v < 0x10000:
            if 0xD800 <= v <= 0xDFFF:  # a surrogate code point: the reference's encoder refuses it
                return _REF["tag_hash"](tag)
            h = 31 * h + v
        else:
            v -= 0x10000
            h = 31 * h + (0xD800 + (v >> 10))
            h = 31 * h + (0xDC00 + (v & 0x3FF))
    return <int32_t>h


def encode_properties(props):
    if _REF is None:
        _bind()
    if not props:
        return b""
    if type(props) is not dict:
        return _REF["encode_properties"](props)
    parts = []
    for name, value in (<dict>props).items():
        if type(name) is not str or type(value) is not str:
            return _REF["encode_properties"](props)
        parts.append(<str>name + "\x01" + <str>value)
    try:
        return "\x02".join(parts).encode("utf-8")
    except UnicodeEncodeError:
        return _REF["encode_properties"](props)


cdef dict _decode_properties(const char* data, Py_ssize_t size):
    # segments split at \x02, each split at its first \x01; both are ASCII, so decoding each
    # piece on its own gives what decoding the whole and then splitting gives
    cdef dict props = {}
    cdef const char* end = data + size
    cdef const char* segment = data
    cdef const char* segment_end
    cdef const char* separator
    while True:
        segment_end = <const char*>memchr(segment, 2, end - segment)
        if segment_end == NULL:
            segment_end = end
        separator = <const char*>memchr(segment, 1, segment_end - segment)
        if separator != NULL and separator > segment:
            props[PyUnicode_DecodeUTF8(segment, separator - segment, "replace")] = \
                PyUnicode_DecodeUTF8(separator + 1, segment_end - separator - 1, "replace")
        if segment_end == end:
            return props
        segment = segment_end + 1


def decode_properties(raw):
    if _REF is None:
        _bind()
    cdef bytes data
    if type(raw) is str:
        # a send's header carries its properties as text: split its UTF-8 bytes, whose pieces
        # between the ASCII separators decode to the text's own pieces (a lone surrogate, which
        # has no UTF-8, goes to the reference)
        try:
            data = (<str>raw).encode("utf-8")
        except UnicodeEncodeError:
            return _REF["decode_properties"](raw)
        return _decode_properties(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    if type(raw) is not bytes:
        return _REF["decode_properties"](raw)
    return _decode_properties(PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw))


# ------------------------------------------------------------------ stored messages

def encode_fields(topic, queue_id, body, properties, flag, sys_flag, queue_offset, physical_offset,
                  born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
                  prepared_transaction_offset, body_crc):
    if _REF is None:
        _bind()
    args = (topic, queue_id, body, properties, flag, sys_flag, queue_offset, physical_offset,
            born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
            prepared_transaction_offset, body_crc)
    if type(topic) is not str or type(body) is not bytes:
        return _REF["encode_fields"](*args)
    cdef bytes topic_raw, props, born, store, out
    cdef int32_t c_queue_id, c_flag, c_sys_flag, c_reconsume, c_crc
    cdef int64_t c_queue_offset, c_physical, c_born_ts, c_store_ts, c_prepared
    cdef Py_ssize_t body_len, topic_len, props_len, total
    cdef char* p
    try:
        topic_raw = (<str>topic).encode("utf-8")
        topic_len = PyBytes_GET_SIZE(topic_raw)
        if topic_len > 127:
            return _REF["encode_fields"](*args)
        props = encode_properties(properties)
        props_len = PyBytes_GET_SIZE(props)
        if props_len > 32767:
            return _REF["encode_fields"](*args)
        body_len = PyBytes_GET_SIZE(body)
        total = FIXED_SIZE + body_len + topic_len + props_len
        if total > 0x7FFFFFFF:
            return _REF["encode_fields"](*args)
        c_crc = (_crc32(body) & 0x7FFFFFFF) if body_crc is None else body_crc
        c_queue_id = queue_id
        c_flag = flag
        c_queue_offset = queue_offset
        c_physical = physical_offset
        c_sys_flag = sys_flag & ~V6_FLAGS
        c_born_ts = born_timestamp
        born = _host_bytes(born_host)
        c_store_ts = store_timestamp
        store = _host_bytes(store_host)
        c_reconsume = reconsume_times
        c_prepared = prepared_transaction_offset
    except Exception:  # out of range, a type the reference coerces or refuses: its answer is the answer
        return _REF["encode_fields"](*args)
    if PyBytes_GET_SIZE(born) != 8 or PyBytes_GET_SIZE(store) != 8:
        return _REF["encode_fields"](*args)
    out = PyBytes_FromStringAndSize(NULL, total)
    _write_stored(
        PyBytes_AS_STRING(out), total, c_crc, c_queue_id, c_flag, c_queue_offset, c_physical,
        c_sys_flag, c_born_ts, born, c_store_ts, store, c_reconsume, c_prepared, body, topic_raw,
        props,
    )
    return out


def stamp(raw, queue_id, queue_offset, physical_offset, store_timestamp):
    cdef int32_t c_queue_id
    cdef int64_t c_queue_offset, c_physical, c_store_ts
    cdef bytes out
    cdef char* p
    if _REF is None:
        _bind()
    if type(raw) is not bytes or PyBytes_GET_SIZE(raw) < 64:
        return _REF["stamp"](raw, queue_id, queue_offset, physical_offset, store_timestamp)
    try:
        c_queue_id = queue_id
        c_queue_offset = queue_offset
        c_physical = physical_offset
        c_store_ts = store_timestamp
    except Exception:
        return _REF["stamp"](raw, queue_id, queue_offset, physical_offset, store_timestamp)
    out = PyBytes_FromStringAndSize(PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw))
    p = PyBytes_AS_STRING(out)
    _put32(p + QUEUE_ID_AT, c_queue_id)
    _put64(p + QUEUE_OFFSET_AT, c_queue_offset)
    _put64(p + 28, c_physical)
    _put64(p + STORE_TIMESTAMP_AT, c_store_ts)
    return out


def place_batch(encoded, tags_codes, queue_id, queue_offset, physical_offset, store_timestamp, file_size,
                id_prefix):
    cdef int64_t phy, size, c_file_size, c_queue_offset, c_ts, i, n, digit
    cdef int32_t c_queue_id
    cdef char hexed[16]
    cdef list payloads = [], units = [], ids = []
    cdef str prefix
    if _REF is None:
        _bind()
    args = (encoded, tags_codes, queue_id, queue_offset, physical_offset, store_timestamp, file_size, id_prefix)
    if (type(encoded) not in (tuple, list) or type(tags_codes) not in (tuple, list)
            or len(encoded) != len(tags_codes) or type(id_prefix) is not str):
        return _REF["place_batch"](*args)
    try:
        phy = physical_offset
        c_file_size = file_size
        c_queue_id = queue_id
        c_queue_offset = queue_offset
        c_ts = store_timestamp
    except Exception:
        return _REF["place_batch"](*args)
    n = len(encoded)
    if phy < 0 or c_file_size <= 0 or c_queue_offset < 0 or c_queue_offset > INT64_MAX - n:
        return _REF["place_batch"](*args)
    prefix = id_prefix
    for i in range(n):
        raw = encoded[i]
        if type(raw) is not bytes or PyBytes_GET_SIZE(raw) < 64:
            return _REF["place_batch"](*args)
        size = PyBytes_GET_SIZE(raw)
        if phy > INT64_MAX - 2 * size - c_file_size:
            return _REF["place_batch"](*args)
        if phy // c_file_size != (phy + size - 1) // c_file_size:
            phy = (phy // c_file_size + 1) * c_file_size
        payloads.append((phy, stamp(raw, c_queue_id, c_queue_offset + i, phy, c_ts)))
        units.append([phy, size, tags_codes[i]])
        for digit in range(16):
            hexed[15 - digit] = b"0123456789ABCDEF"[(phy >> (4 * digit)) & 0xF]
        ids.append(prefix + PyUnicode_DecodeUTF8(hexed, 16, NULL))
        phy += size
    return payloads, units, ids, phy


def message_keys(raw):
    cdef const uint8_t* buf
    cdef Py_ssize_t size, at, topic_len_at, start, end, segment, stop
    cdef int32_t sys_flag, body_len
    cdef const uint8_t* found
    if _REF is None:
        _bind()
    if type(raw) is not bytes or PyBytes_GET_SIZE(raw) < 88:
        return _REF["message_keys"](raw)
    buf = <const uint8_t*>PyBytes_AS_STRING(raw)
    size = PyBytes_GET_SIZE(raw)
    sys_flag = _get32(buf + SYS_FLAG_AT)
    at = BODY_LENGTH_AT + (12 if sys_flag & 0x10 else 0) + (12 if sys_flag & 0x20 else 0)
    if at + 4 > size:
        return _REF["message_keys"](raw)
    body_len = _get32(buf + at)
    topic_len_at = at + 4 + body_len
    if body_len < 0 or topic_len_at >= size:
        return _REF["message_keys"](raw)
    start = topic_len_at + 3 + buf[topic_len_at]
    if start > size:
        return _REF["message_keys"](raw)
    end = start + ((<Py_ssize_t>buf[start - 2] << 8) | buf[start - 1])
    if end > size:
        return _REF["message_keys"](raw)
    keys = uniq = None
    segment = start
    while segment <= end:  # properties split at \x02; a name that starts a segment is a name
        found = <const uint8_t*>memchr(buf + segment, 2, end - segment)
        stop = end if found == NULL else found - buf
        if stop - segment >= 5 and memcmp(buf + segment, b"KEYS\x01", 5) == 0:
            keys = PyBytes_FromStringAndSize(<const char*>buf + segment + 5, stop - segment - 5)
        elif stop - segment >= 9 and memcmp(buf + segment, b"UNIQ_KEY\x01", 9) == 0:
            uniq = PyBytes_FromStringAndSize(<const char*>buf + segment + 9, stop - segment - 9)
        segment = stop + 1
    return keys, uniq, sys_flag


cdef inline str _ipv4(const uint8_t* p):
    return f"{p[0]}.{p[1]}.{p[2]}.{p[3]}"


cdef Py_ssize_t _topic_at(const uint8_t* buf, Py_ssize_t size, Py_ssize_t pos, int32_t refused) noexcept:
    """Where the stored message at pos holds its topic's length byte, if its bytes are whole and
    consistent (IPv4 hosts) and its sysFlag has none of `refused`; -1 if not (the reference decides)."""
    cdef Py_ssize_t total, body_len, topic_len, props_len, p, end
    if pos + 88 > size:
        return -1
    total = _get32(buf + pos)
    if (_get32(buf + pos + 4) != MAGIC_CODE or total < FIXED_SIZE or pos + total > size
            or _get32(buf + pos + SYS_FLAG_AT) & (V6_FLAGS | refused)):
        return -1
    end = pos + total
    body_len = _get32(buf + pos + BODY_LENGTH_AT)
    p = pos + 88 + body_len
    if body_len < 0 or p + 1 > end:
        return -1
    topic_len = <int8_t>buf[p]
    if topic_len < 0 or p + 1 + topic_len + 2 > end:
        return -1
    props_len = _get16(buf + p + 1 + topic_len)
    if props_len < 0 or p + 3 + topic_len + props_len != end:
        return -1
    return p


def decode_one(data, Py_ssize_t pos=0):
    if _REF is None:
        _bind()
    if type(data) is not bytes or pos < 0:
        return _REF["decode_one"](data, pos)
    cdef const uint8_t* buf = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t body_len, topic_len, props_len, p, end
    cdef int32_t sys_flag
    p = _topic_at(buf, PyBytes_GET_SIZE(data), pos, V6_FLAGS)
    if p < 0:
        return _REF["decode_one"](data, pos)
    end = pos + _get32(buf + pos)
    sys_flag = _get32(buf + pos + SYS_FLAG_AT)
    body_len = _get32(buf + pos + BODY_LENGTH_AT)
    topic_len = buf[p]
    props_len = end - (p + 3 + topic_len)
    try:
        topic = PyUnicode_DecodeUTF8(<const char*>buf + p + 1, topic_len, NULL)
    except UnicodeDecodeError:
        return _REF["decode_one"](data, pos)
    message = _StoredMessage(
        topic,
        _get32(buf + pos + QUEUE_ID_AT),
        PyBytes_FromStringAndSize(<const char*>buf + pos + 88, body_len),
        _decode_properties(<const char*>buf + p + 3 + topic_len, props_len),
        _get32(buf + pos + 16),
        sys_flag,
        _get64(buf + pos + QUEUE_OFFSET_AT),
        _get64(buf + pos + 28),
        _get64(buf + pos + 40),
        (_ipv4(buf + pos + 48), _get32(buf + pos + 52)),
        _get64(buf + pos + STORE_TIMESTAMP_AT),
        (_ipv4(buf + pos + 64), _get32(buf + pos + 68)),
        _get32(buf + pos + 72),
        _get64(buf + pos + 76),
        _get32(buf + pos + 8),
    )
    return message, end


def decode_all(data):
    if _REF is None:
        _bind()
    if type(data) is not bytes:
        return _REF["decode_all"](data)
    cdef list out = []
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    while pos < size:
        message, pos = decode_one(data, pos)
        out.append(message)
    return out


def decode_batch(body):
    if _REF is None:
        _bind()
    if type(body) is not bytes:
        return _REF["decode_batch"](body)
    cdef const uint8_t* buf = <const uint8_t*>PyBytes_AS_STRING(body)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(body)
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t start, body_len, props_len, props_at, total
    cdef list out = []
    while pos < end:
        if pos + BATCH_ENTRY > end:
            return _REF["decode_batch"](body)  # refused: the reference names the byte
        total = _get32(buf + pos)
        body_len = _get32(buf + pos + 16)
        start = pos + BATCH_ENTRY
        if body_len < 0 or start + body_len + 2 > end:
            return _REF["decode_batch"](body)
        props_len = _get16(buf + start + body_len)
        props_at = start + body_len + 2
        if props_len < 0 or props_at + props_len > end or total != BATCH_ENTRY + body_len + 2 + props_len:
            return _REF["decode_batch"](body)
        out.append((_get32(buf + pos + 12),
                    PyBytes_FromStringAndSize(<const char*>buf + start, body_len),
                    _decode_properties(<const char*>buf + props_at, props_len)))
        pos += total
    return out


# ------------------------------------------------------------------ a consumer's pull body

# the twin of es_broker.client.messages.decode_pull_body; bound at its first call, so a broker,
# which never calls it, never imports the client
cdef object _pull_reference = None
cdef object _ReceivedMessage = None
cdef object _new_object = object.__new__
cdef str _MIN_OFFSET = "MIN_OFFSET", _MAX_OFFSET = "MAX_OFFSET", _TAGS = "TAGS"
cdef tuple _RECEIVED_FIELDS = (
    "topic", "body", "properties", "queue", "queue_offset", "commit_log_offset", "offset_msg_id",
    "reconsume_times", "flag", "sys_flag", "born_timestamp", "store_timestamp", "born_host",
    "store_host",
)


cdef int _bind_pull() except -1:
    global _pull_reference, _ReceivedMessage
    from es_broker.client import messages

    if tuple(messages.ReceivedMessage.__dataclass_fields__) != _RECEIVED_FIELDS:
        raise ImportError("es_broker.remoting._speedups was built for other ReceivedMessage fields")
    _ReceivedMessage = messages.ReceivedMessage
    _pull_reference = messages.REFERENCE["decode_pull_body"]
    return 0


cdef inline str _hex16(const uint8_t* p):
    """16 upper-case hex digits of 8 bytes."""
    cdef char out[16]
    cdef int i
    for i in range(8):
        out[2 * i] = b"0123456789ABCDEF"[p[i] >> 4]
        out[2 * i + 1] = b"0123456789ABCDEF"[p[i] & 0xF]
    return PyUnicode_DecodeUTF8(out, 16, NULL)


def decode_pull_body(body, queue, tags_set, min_offset, max_offset):
    cdef const uint8_t* buf
    cdef Py_ssize_t size, pos = 0, body_len, topic_len, props_len, p
    cdef list found = [], out = []
    cdef dict props
    cdef tuple values
    cdef int i
    if _pull_reference is None:
        _bind_pull()
    if type(body) is not bytes:
        return _pull_reference(body, queue, tags_set, min_offset, max_offset)
    buf = <const uint8_t*>PyBytes_AS_STRING(body)
    size = PyBytes_GET_SIZE(body)
    # every message is checked before any is built: one that the fast path does not take sends
    # the whole body to the reference (a damaged tail, a compressed body, an IPv6 host)
    while pos < size:
        p = _topic_at(buf, size, pos, 0x1)  # a compressed body too
        if p < 0:
            return _pull_reference(body, queue, tags_set, min_offset, max_offset)
        try:
            topic = PyUnicode_DecodeUTF8(<const char*>buf + p + 1, buf[p], NULL)
        except UnicodeDecodeError:
            return _pull_reference(body, queue, tags_set, min_offset, max_offset)
        found.append((pos, p, topic))
        pos += _get32(buf + pos)
    bounds_min, bounds_max = str(min_offset), str(max_offset)
    for pos, p, topic in found:
        topic_len = <int8_t>buf[p]
        props_len = _get16(buf + p + 1 + topic_len)
        props = _decode_properties(<const char*>buf + p + 3 + topic_len, props_len)
        if tags_set and props.get(_TAGS) not in tags_set:
            continue
        props[_MIN_OFFSET] = bounds_min
        props[_MAX_OFFSET] = bounds_max
        body_len = _get32(buf + pos + BODY_LENGTH_AT)
        values = (
            topic,
            PyBytes_FromStringAndSize(<const char*>buf + pos + 88, body_len),
            props,
            queue,
            _get64(buf + pos + QUEUE_OFFSET_AT),
            _get64(buf + pos + 28),
            _hex16(buf + pos + 64) + _hex16(buf + pos + 28),
            _get32(buf + pos + 72),
            _get32(buf + pos + 16),
            _get32(buf + pos + SYS_FLAG_AT),
            _get64(buf + pos + 40),
            _get64(buf + pos + STORE_TIMESTAMP_AT),
            (_ipv4(buf + pos + 48), _get32(buf + pos + 52)),
            (_ipv4(buf + pos + 64), _get32(buf + pos + 68)),
        )
        message = _new_object(_ReceivedMessage)
        for i in range(14):  # as the frozen dataclass's __init__ sets them: object.__setattr__
            PyObject_GenericSetAttr(message, _RECEIVED_FIELDS[i], values[i])
        out.append(message)
    return out
