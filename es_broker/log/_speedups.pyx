# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of the commit log's message reader (`reader` in es_broker/log/chunks.py).

A pull reads each message through it, so its per-message work is the hot
path's: `Reader(txn, db)` has the signature and results of the pure-Python
reference (`REFERENCE` in chunks.py), byte for byte
(tests/test_compiled_identity.py). The fast path takes a non-negative int
offset and chunks that are bytes; anything else (a negative or huge offset,
another type, a transaction that answers memoryviews) is handed to the
reference, so its results and its errors are the reference's own.

It also holds the twin of `check` (es_broker/log/records.py), which every
record pays before it is appended: the same walk over the record's fields
without the interpreter's loop. It answers only "every value fits": for a
record that is not a dict, a value of a type it does not know (an IntEnum
member, a str or float subclass, anything else) it asks the reference's
`_fits` of that value, and when anything does not fit it hands the whole
record to the reference `check`, which raises the reference's own error.

And the twin of `fill` (es_broker/log/typed.py), which sets a record
object's slots when it is built: each member descriptor's own setter, called
in C, in one call instead of a call a field. Anything but a tuple of member
descriptors and a tuple of values as long goes to the reference.

And the twin of `packb` (records.py), msgpack's bytes of a record (and of
the entries projections pack): the maps, lists, tuples, texts, bytes, ints,
floats, booleans and None records hold, written as msgpack's Packer
(use_bin_type=True) writes them, byte for byte. Anything else (a subclass,
an int past 64 bits, text that is not UTF-8, a value nested deeper than
records go) hands the whole value to the reference, which packs it or
raises its own error.

Imported by chunks.py, records.py and typed.py at the end of their own
import; what it uses of them is bound at the first call.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_Next
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.object cimport Py_TYPE, PyObject
from cpython.unicode cimport PyUnicode_GET_LENGTH
from libc.stdint cimport uint64_t
from libc.math cimport isfinite
from libc.stdint cimport INT32_MIN, UINT32_MAX, int64_t, uint8_t
from libc.stdlib cimport free, malloc, realloc
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


# ---------------------------------------------------------------------- records.check


cdef extern from "Python.h":
    Py_ssize_t Py_SIZE(object o)
    bint PyUnicode_IS_ASCII(object o)
    Py_ssize_t PyList_GET_SIZE(object o)
    PyObject* PyList_GET_ITEM(object o, Py_ssize_t i)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    PyObject* PyTuple_GET_ITEM(object o, Py_ssize_t i)

cdef object _CHECK = None  # records.REFERENCE["check"]: raises the reference's errors
cdef object _FITS = None  # records._fits: the reference's answer for a value of another type
cdef dict _RANGES = None  # records.FIELD_RANGES itself (read at each call, as check does)
cdef Py_ssize_t MAX_TEXT = 0
# how deep this walk goes before it asks the reference (records are two or three levels deep)
cdef int DEPTH = 16


cdef int _bind_records() except -1:
    global _CHECK, _FITS, _RANGES, MAX_TEXT
    from es_broker.log import records

    if records.INT64_MIN != -(1 << 63) or records.INT64_MAX != (1 << 63) - 1:
        raise ImportError("es_broker.log._speedups was built for other integer bounds than records.py's")
    MAX_TEXT = records.MAX_TEXT
    _RANGES = records.FIELD_RANGES
    _FITS = records._fits
    _CHECK = records.REFERENCE["check"]
    return 0


cdef inline bint _int_fits(object value) except -1:
    """An exact int: True if it fits a signed 64-bit integer."""
    cdef int overflow
    if -2 <= Py_SIZE(value) <= 2:  # at most two 30-bit digits: 60 bits
        return True
    PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0


cdef bint _text_fits(object value) except -1:
    """An exact str: at most MAX_TEXT characters, writable as UTF-8 (no lone surrogate)."""
    if PyUnicode_GET_LENGTH(value) > MAX_TEXT:
        return False
    if PyUnicode_IS_ASCII(value):
        return True
    try:
        (<str>value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


cdef bint _fits(object value, int depth) except -1:
    """records._fits(value): every value inside fits."""
    cdef type kind = type(value)
    cdef Py_ssize_t pos = 0, i, n
    cdef PyObject* key
    cdef PyObject* item
    if kind is int:
        return _int_fits(value)
    if kind is str:
        return _text_fits(value)
    if kind is bytes or kind is bool or value is None:
        return True
    if kind is float:
        return isfinite(PyFloat_AS_DOUBLE(value))
    if depth >= DEPTH or (kind is not dict and kind is not list and kind is not tuple):
        return _FITS(value)
    depth += 1
    if kind is dict:
        while PyDict_Next(value, &pos, &key, &item):
            if type(<object>key) is not str and not _fits(<object>key, depth):
                return False
            if not _fits(<object>item, depth):
                return False
    elif kind is list:
        i = 0
        while i < PyList_GET_SIZE(value):  # the list is ours to read while no call changes it
            if not _fits(<object>PyList_GET_ITEM(value, i), depth):
                return False
            i += 1
    else:
        n = PyTuple_GET_SIZE(value)
        for i in range(n):
            if not _fits(<object>PyTuple_GET_ITEM(value, i), depth):
                return False
    return True


def check(record):
    """records.check(record): `record` itself if every value fits, else the reference's error."""
    cdef PyObject* found
    if _CHECK is None:
        _bind_records()
    if type(record) is not dict or not _fits(record, 0):
        return _CHECK(record)
    for name, bounds in _RANGES.items():
        found = PyDict_GetItem(record, name)
        if found is not NULL and type(<object>found) is int:
            lo, hi = bounds
            if not lo <= <object>found <= hi:
                return _CHECK(record)
    return record


# ---------------------------------------------------------------------- typed.fill

cdef object _FILL = None  # typed.REFERENCE["fill"]
cdef type _MEMBER = None  # types.MemberDescriptorType: a slot's descriptor


cdef int _bind_typed() except -1:
    global _FILL, _MEMBER
    import types

    from es_broker.log import typed

    _MEMBER = types.MemberDescriptorType
    _FILL = typed.REFERENCE["fill"]
    return 0


def fill(obj, members, values):
    """typed.fill(obj, members, values): each slot of `members` set on obj, in order."""
    cdef Py_ssize_t i, n
    cdef object member
    if _FILL is None:
        _bind_typed()
    if type(members) is not tuple or type(values) is not tuple:
        return _FILL(obj, members, values)
    n = PyTuple_GET_SIZE(members)
    if PyTuple_GET_SIZE(values) != n:
        return _FILL(obj, members, values)
    for i in range(n):
        if type(<object>PyTuple_GET_ITEM(members, i)) is not _MEMBER:
            return _FILL(obj, members, values)
    for i in range(n):
        member = <object>PyTuple_GET_ITEM(members, i)
        # what member.__set__(obj, value) calls, without the bound method and its argument tuple
        Py_TYPE(member).tp_descr_set(member, obj, <object>PyTuple_GET_ITEM(values, i))
    return None


# ---------------------------------------------------------------------- records.packb

cdef object _PACKB = None  # records.REFERENCE["packb"]
# how deep the writer goes before it hands the value to the reference (msgpack's limit is 511)
cdef int PACK_DEPTH = 32

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object o, Py_ssize_t* size) except NULL


cdef struct _Out:
    char* data  # `first` until it outgrows it, then `heap`
    char* heap
    Py_ssize_t n
    Py_ssize_t cap


cdef int _room(_Out* out, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap = out.cap
    cdef char* grown
    if out.n + more <= cap:
        return 0
    while out.n + more > cap:
        cap *= 2
    if out.heap == NULL:
        grown = <char*>malloc(cap)
        if grown == NULL:
            raise MemoryError()
        memcpy(grown, out.data, out.n)
    else:
        grown = <char*>realloc(out.heap, cap)
        if grown == NULL:
            raise MemoryError()
    out.heap = out.data = grown
    out.cap = cap
    return 0


# the writers below answer 1 (written), as _pack does for a value it wrote

cdef inline int _head(_Out* out, uint8_t code, uint64_t value, int width) except -1:
    """`code`, then `value` in `width` big-endian bytes (0: the code alone)."""
    cdef int i
    _room(out, 1 + width)
    out.data[out.n] = <char>code
    for i in range(width):
        out.data[out.n + 1 + i] = <char>(value >> (8 * (width - 1 - i)))
    out.n += 1 + width
    return 1


cdef int _sized(_Out* out, Py_ssize_t n, uint8_t fix, int fix_max, uint8_t c8, uint8_t c16, uint8_t c32) except -1:
    """A str/bin/array/map header for n (a fix form up to fix_max; c8 0 where there is no 8-bit form)."""
    if n <= fix_max:
        return _head(out, fix | <uint8_t>n, 0, 0)
    if c8 != 0 and n <= 0xFF:
        return _head(out, c8, n, 1)
    if n <= 0xFFFF:
        return _head(out, c16, n, 2)
    return _head(out, c32, n, 4)


cdef int _int(_Out* out, long long d) except -1:
    if d >= 0:
        if d < 0x80:
            return _head(out, <uint8_t>d, 0, 0)
        if d <= 0xFF:
            return _head(out, 0xCC, d, 1)
        if d <= 0xFFFF:
            return _head(out, 0xCD, d, 2)
        if d <= UINT32_MAX:
            return _head(out, 0xCE, d, 4)
        return _head(out, 0xCF, d, 8)
    if d >= -0x20:
        return _head(out, <uint8_t>d, 0, 0)
    if d >= -0x80:
        return _head(out, 0xD0, <uint64_t>d, 1)
    if d >= -0x8000:
        return _head(out, 0xD1, <uint64_t>d, 2)
    if d >= INT32_MIN:
        return _head(out, 0xD2, <uint64_t>d, 4)
    return _head(out, 0xD3, <uint64_t>d, 8)


cdef int _raw(_Out* out, const char* data, Py_ssize_t n) except -1:
    _room(out, n)
    memcpy(out.data + out.n, data, n)
    out.n += n
    return 1


cdef int _pack(_Out* out, object value, int depth) except -1:
    """1 when value is written, 0 when the reference is to pack it (nothing is then kept)."""
    cdef type kind = type(value)
    cdef long long d
    cdef int overflow
    cdef double f
    cdef uint64_t bits
    cdef Py_ssize_t n, pos = 0, i
    cdef const char* text
    cdef PyObject* key
    cdef PyObject* item
    if kind is str:
        if PyUnicode_IS_ASCII(value):
            text = PyUnicode_AsUTF8AndSize(value, &n)  # the characters themselves: no copy
        else:
            try:
                text = PyUnicode_AsUTF8AndSize(value, &n)  # what msgpack's Packer reads
            except UnicodeEncodeError:
                return 0
        if n > UINT32_MAX:
            return 0
        _sized(out, n, 0xA0, 0x1F, 0xD9, 0xDA, 0xDB)
        return _raw(out, text, n)
    if kind is int:
        d = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow != 0:
            return 0
        return _int(out, d)
    if value is None:
        return _head(out, 0xC0, 0, 0)
    if kind is bool:
        return _head(out, 0xC3 if value is True else 0xC2, 0, 0)
    if kind is bytes:
        n = PyBytes_GET_SIZE(value)
        if n > UINT32_MAX:
            return 0
        if n <= 0xFF:
            _head(out, 0xC4, n, 1)
        elif n <= 0xFFFF:
            _head(out, 0xC5, n, 2)
        else:
            _head(out, 0xC6, n, 4)
        return _raw(out, PyBytes_AS_STRING(value), n)
    if kind is float:
        f = PyFloat_AS_DOUBLE(value)
        memcpy(&bits, &f, 8)  # its IEEE 754 bits, written big-endian
        return _head(out, 0xCB, bits, 8)
    if depth >= PACK_DEPTH:
        return 0
    if kind is dict:
        n = len(<dict>value)
        if n > UINT32_MAX:
            return 0
        _sized(out, n, 0x80, 0x0F, 0, 0xDE, 0xDF)
        while PyDict_Next(value, &pos, &key, &item):
            if not _pack(out, <object>key, depth + 1) or not _pack(out, <object>item, depth + 1):
                return 0
        return 1
    if kind is list or kind is tuple:
        n = len(value)
        if n > UINT32_MAX:
            return 0
        _sized(out, n, 0x90, 0x0F, 0, 0xDC, 0xDD)
        if kind is list:
            for i in range(n):  # nothing here runs Python code that could change the list
                if not _pack(out, <object>PyList_GET_ITEM(value, i), depth + 1):
                    return 0
        else:
            for i in range(n):
                if not _pack(out, <object>PyTuple_GET_ITEM(value, i), depth + 1):
                    return 0
        return 1
    return 0


def packb(value):
    """records.packb(value): msgpack.packb(value, use_bin_type=True)'s bytes."""
    cdef char first[1024]
    cdef _Out out
    cdef int done
    out.data = first
    out.heap = NULL
    out.n = 0
    out.cap = sizeof(first)
    try:
        done = _pack(&out, value, 0)
        if done:
            return PyBytes_FromStringAndSize(out.data, out.n)
    finally:
        free(out.heap)
    if _PACKB is None:
        _bind_packb()
    return _PACKB(value)


cdef int _bind_packb() except -1:
    global _PACKB
    from es_broker.log import records

    _PACKB = records.REFERENCE["packb"]
    return 0
