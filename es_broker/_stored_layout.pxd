# cython: language_level=3
"""The stored message's layout written in C, shared by the compiled twins that write it (cimported):
`encode_fields` (remoting/_speedups.pyx) and `encode_batch` (commands/_speedups.pyx).

The offsets are those of `es_broker.remoting.message` (IPv4 hosts: 8 bytes each); each twin
checks them against the module's LAYOUT when it binds.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy

from es_broker._bigendian cimport _put32, _put64

cdef enum:
    STORED_MAGIC_CODE = -626843481  # 0xDAA320A7


cdef inline void _write_stored(
    char* p, Py_ssize_t total, int32_t crc, int32_t queue_id, int32_t flag,
    int64_t queue_offset, int64_t physical_offset, int32_t sys_flag, int64_t born_ts, bytes born,
    int64_t store_ts, bytes store, int32_t reconsume, int64_t prepared, bytes body,
    bytes topic_raw, bytes props,
) noexcept:
    """Write a message of `total` bytes at p: `born` and `store` are 8-byte IPv4 hosts, the topic
    at most 127 bytes and the properties at most 32767 (the callers check)."""
    cdef Py_ssize_t body_len = PyBytes_GET_SIZE(body)
    cdef Py_ssize_t topic_len = PyBytes_GET_SIZE(topic_raw)
    cdef Py_ssize_t props_len = PyBytes_GET_SIZE(props)
    _put32(p, <int32_t>total)
    _put32(p + 4, STORED_MAGIC_CODE)
    _put32(p + 8, crc)
    _put32(p + 12, queue_id)
    _put32(p + 16, flag)
    _put64(p + 20, queue_offset)
    _put64(p + 28, physical_offset)
    _put32(p + 36, sys_flag)
    _put64(p + 40, born_ts)
    memcpy(p + 48, PyBytes_AS_STRING(born), 8)
    _put64(p + 56, store_ts)
    memcpy(p + 64, PyBytes_AS_STRING(store), 8)
    _put32(p + 72, reconsume)
    _put64(p + 76, prepared)
    _put32(p + 84, <int32_t>body_len)
    memcpy(p + 88, PyBytes_AS_STRING(body), body_len)
    p += 88 + body_len
    p[0] = <char>topic_len
    memcpy(p + 1, PyBytes_AS_STRING(topic_raw), topic_len)
    p += 1 + topic_len
    p[0] = <char>(props_len >> 8)
    p[1] = <char>props_len
    memcpy(p + 2, PyBytes_AS_STRING(props), props_len)
