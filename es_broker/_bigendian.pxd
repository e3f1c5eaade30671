# cython: language_level=3
"""Big-endian reads and writes of Java's ints and longs, shared by the compiled twins (cimported)."""

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef inline void _put32(char* p, int32_t value) noexcept:
    cdef uint32_t u = <uint32_t>value
    p[0] = <char>(u >> 24)
    p[1] = <char>(u >> 16)
    p[2] = <char>(u >> 8)
    p[3] = <char>u


cdef inline void _put64(char* p, int64_t value) noexcept:
    cdef uint64_t u = <uint64_t>value
    cdef int i
    for i in range(8):
        p[i] = <char>(u >> (56 - 8 * i))


cdef inline int32_t _get32(const uint8_t* p) noexcept:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int64_t _get64(const uint8_t* p) noexcept:
    return <int64_t>((<uint64_t><uint32_t>_get32(p) << 32) | <uint64_t><uint32_t>_get32(p + 4))


cdef inline int16_t _get16(const uint8_t* p) noexcept:
    return <int16_t>((<uint32_t>p[0] << 8) | <uint32_t>p[1])
