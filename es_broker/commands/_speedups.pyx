# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of the send path's per-message loop (`encode_batch` in commands/messages.py).

Same name, signature and results as the pure-Python reference (`REFERENCE` in
messages.py), byte for byte (tests/test_compiled_identity.py). Only the loop is
compiled: each message is encoded by `es_broker.remoting.message.encode_fields`
and its tags hashed by `tag_hash` (themselves compiled unless
ES_BROKER_PURE_PYTHON). A message the fast path does not take (a refusal, a
type other than MessageIn, anything that raises) sends the whole batch to the
reference, so its results and its errors are the reference's own.

Imported by messages.py at the end of its own import; what it uses of it is
bound at the first call.
"""

cdef dict _REF = None
cdef object _MessageIn = None
cdef object _encode_fields = None
cdef object _tag_hash = None
cdef Py_ssize_t _FIXED_SIZE = 0
cdef str _WAIT = None


cdef int _bind() except -1:
    global _REF, _MessageIn, _encode_fields, _tag_hash, _FIXED_SIZE, _WAIT
    from es_broker.commands import delay, messages
    from es_broker.remoting import message as wire

    _MessageIn = messages.MessageIn
    _encode_fields = wire.encode_fields
    _tag_hash = wire.tag_hash
    _FIXED_SIZE = wire.FIXED_SIZE
    _WAIT = delay.PROPERTY_WAIT
    _REF = messages.REFERENCE
    return 0


def encode_batch(topic, queue_id, messages, cluster, store_host, max_body, file_size):
    cdef Py_ssize_t c_max_body, c_file_size, topic_len, body_len
    cdef list encoded = [], codes = []
    cdef tuple msg
    cdef dict props
    if _REF is None:
        _bind()
    args = (topic, queue_id, messages, cluster, store_host, max_body, file_size)
    if type(topic) is not str or (type(messages) is not list and type(messages) is not tuple):
        return _REF["encode_batch"](*args)
    try:
        c_max_body = max_body
        c_file_size = file_size
    except Exception:
        return _REF["encode_batch"](*args)
    topic_len = len(<str>topic)
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
        props = {k: v for k, v in (<dict>msg[1]).items() if k != _WAIT}
        props["CLUSTER"] = cluster
        try:
            raw = _encode_fields(
                topic, queue_id, body, props, msg[2], msg[3], 0, 0, msg[4], msg[5], 0, store_host,
                msg[6], 0, None,
            )
            tags = props.get("TAGS")
            code = _tag_hash(tags) if tags else 0
        except Exception:
            return _REF["encode_batch"](*args)
        encoded.append(raw)
        codes.append(code)
    return encoded, codes
