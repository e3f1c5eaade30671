# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of the commit log's message reader (`reader` in es_broker/log/chunks.py).

A pull reads each message through it, so its per-message work is the hot
path's: `Reader(txn, db)` has the signature and results of the pure-Python
reference (`REFERENCE` in chunks.py), byte for byte
(tests/test_compiled_identity.py). The fast path takes a non-negative int
offset and chunks that are bytes; anything else (a negative or huge offset,
another type, a transaction that answers memoryviews) is handed to the
reference, so its results and its errors are the reference's own.

Imported by chunks.py at the end of its own import; what it uses of it is
bound at the first call.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy

from es_broker._bigendian cimport _get32, _put64

cdef int64_t CHUNK = 2022  # chunks.CHUNK

cdef object _REF = None


cdef int _bind() except -1:
    global _REF
    from es_broker.log import chunks

    if chunks.CHUNK != CHUNK:
        raise ImportError("es_broker.log._speedups was built for another chunk size than chunks.py's")
    _REF = chunks.REFERENCE["reader"]
    return 0


cdef inline bytes _key(int64_t value):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 8)
    _put64(PyBytes_AS_STRING(out), value)
    return out


cdef class Reader:
    """reader(txn, db): the message at a physical offset, None where none is (see chunks.reader)."""

    cdef object get
    cdef object db
    cdef object txn
    cdef object ref
    cdef int64_t buf_at
    cdef bytes buf

    def __cinit__(self, txn, db):
        if _REF is None:
            _bind()
        self.txn = txn
        self.get = txn.get
        self.db = db
        self.ref = None
        self.buf_at = 0
        self.buf = b""

    cdef object _reference(self, phy):
        if self.ref is None:
            self.ref = _REF(self.txn, self.db)
        return self.ref(phy)

    cdef int _extend(self, int64_t phy, int64_t need) except -2:
        """1 when the window holds `need` bytes from phy on, 0 when the chunks end first, -1 for
        a chunk that is not bytes."""
        cdef int64_t n = PyBytes_GET_SIZE(self.buf)
        cdef int64_t have = self.buf_at + n - phy
        cdef int64_t at = self.buf_at + n
        cdef list parts = [self.buf[phy - self.buf_at :]]
        while have < need:
            value = self.get(_key(at), None, self.db)
            if value is None:
                return 0
            if type(value) is not bytes:
                return -1
            parts.append(value)
            have += PyBytes_GET_SIZE(value)
            at += PyBytes_GET_SIZE(value)
        self.buf_at = phy
        self.buf = b"".join(parts)
        return 1

    def __call__(self, phy):
        cdef int64_t p, o, at, n, size
        cdef int done
        if type(phy) is not int:
            return self._reference(phy)
        try:
            p = phy
        except OverflowError:
            return self._reference(phy)
        if p < 0:
            return self._reference(phy)
        o = p - self.buf_at
        n = PyBytes_GET_SIZE(self.buf)
        if o < 0 or o >= n:
            at = p - p % CHUNK
            value = self.get(_key(at), None, self.db)
            if value is None:
                return None
            if type(value) is not bytes:
                return self._reference(phy)
            self.buf_at = at
            self.buf = <bytes>value
            o = p - at
            n = PyBytes_GET_SIZE(self.buf)
        if o + 8 > n:  # its TOTALSIZE and MAGICCODE go on in the next chunk
            done = self._extend(p, 8)
            if done <= 0:
                return None if done == 0 else self._reference(phy)
            o = 0
        size = _get32(<const uint8_t*>PyBytes_AS_STRING(self.buf) + o)
        if size < 8:
            return None  # zeros: no message here
        if o + size > PyBytes_GET_SIZE(self.buf):
            return self._straddling(phy, p, o, size)
        return PyBytes_FromStringAndSize(PyBytes_AS_STRING(self.buf) + o, size)

    cdef object _straddling(self, phy, int64_t p, int64_t o, int64_t size):
        """The message of `size` bytes at window offset o that goes on in the next chunks: copied
        into its own bytes chunk by chunk; the window becomes the last chunk read (where the
        next message starts), so nothing is joined."""
        cdef int64_t n = PyBytes_GET_SIZE(self.buf)
        cdef int64_t at = self.buf_at + n
        cdef int64_t have = n - o
        cdef int64_t take
        cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
        cdef char* dst = PyBytes_AS_STRING(out)
        memcpy(dst, PyBytes_AS_STRING(self.buf) + o, have)
        while have < size:
            value = self.get(_key(at), None, self.db)
            if value is None:
                return None
            if type(value) is not bytes:
                return self._reference(phy)
            take = min(size - have, PyBytes_GET_SIZE(value))
            memcpy(dst + have, PyBytes_AS_STRING(value), take)
            have += take
            self.buf_at = at
            self.buf = <bytes>value
            at += PyBytes_GET_SIZE(value)
        return out
