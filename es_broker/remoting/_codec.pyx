# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of the remoting frame and JSON header codec (command.py, header.py, frames.py).

Each function here has the name, signature and results of its pure-Python
reference, which stays in those modules (their REFERENCE dicts). The fast path
takes what Java and our own peers send: a JSON header object whose int fields
are plain JSON integers in Java int range, whose strings are strings and whose
extFields map holds strings only. Anything else (another serialize type, a
float or null or numeric string where an int goes, a missing or unknown shape,
invalid JSON, a value out of range) is handed to the reference, so the answer
and every error text are the reference's own.

Strings are decoded as the reference does: the whole header through UTF-8 with
"replace", then JSON strings without escapes are slices of that text and those
with escapes go through the json module's own C `scanstring`. Encoding writes
strings with the json module's own C `encode_basestring`, so the bytes are the
reference's by construction (an ASCII string with nothing to escape is written as
it is, in quotes: what `encode_basestring` writes of it).

Imported at the end of command.py; what it uses of the remoting modules is
bound at the first call.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject_GenericSetAttr
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memchr, memcpy

from json.decoder import scanstring as _scanstring
from json.encoder import encode_basestring as _encode_string


cdef extern from "Python.h":
    int PyUnicode_KIND(object)
    void* PyUnicode_DATA(object)
    uint32_t PyUnicode_READ(int kind, void* data, Py_ssize_t index)
    bint PyUnicode_IS_ASCII(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    object PyUnicode_Substring(object, Py_ssize_t start, Py_ssize_t end)
    object PyUnicode_New(Py_ssize_t size, uint32_t maxchar)
    long long PyLong_AsLongLongAndOverflow(object, int* overflow) except? -1


cdef int64_t I32_MIN = -(1 << 31)
cdef int64_t I32_MAX = (1 << 31) - 1
cdef Py_ssize_t MAX_HEADER = 0xFFFFFF

# bound at the first call (command.py imports this module before the rest exists)
cdef object _Command = None
cdef object _JAVA = None
cdef object _OTHER = None
cdef object _LanguageCode = None
cdef object _JSON = None
cdef object _LANGUAGE_BY_NAME = None
cdef object _CURRENT_VERSION = None
cdef int _FLAG_RESPONSE = 1
cdef dict _REF = None
cdef dict _LANGUAGE_JSON = None  # LanguageCode member -> its name as a JSON string
cdef dict _SHAPES = None  # requests.SHAPES
cdef dict _PLANS = {}  # id(shape) -> (shape, plain plan, wire-name plan)
cdef object _Refusal = None, _NO_HEADER = None
cdef object _GROUPLESS = None, _DERIVING = None  # requests.GROUPLESS_TOPICS, requests.DERIVING
cdef Py_ssize_t _TOPIC_MAX = 0, _GROUP_MAX = 0, _DERIVED_MAX = 0  # requests' name limits
cdef object _new_object = object.__new__
from dataclasses import MISSING as _MISSING
cdef object _STR = None, _INT = None, _LONG = None, _BOOL = None
cdef int _SEND_MESSAGE = 10

# the slots of RemotingCommand, set without its frozen __setattr__ (as the dataclass __init__ does)
cdef str _CODE = "code"
cdef str _LANGUAGE = "language"
cdef str _VERSION = "version"
cdef str _OPAQUE = "opaque"
cdef str _FLAG = "flag"
cdef str _REMARK = "remark"
cdef str _EXT_FIELDS = "ext_fields"
cdef str _BODY = "body"
cdef str _SERIALIZE_TYPE = "serialize_type"
cdef str _HEADER = "header"


cdef int _bind() except -1:
    global _Command, _JAVA, _OTHER, _LanguageCode, _JSON, _LANGUAGE_BY_NAME, _CURRENT_VERSION
    global _FLAG_RESPONSE, _REF, _LANGUAGE_JSON, _SHAPES, _STR, _INT, _LONG, _BOOL, _SEND_MESSAGE
    global _Refusal, _NO_HEADER, _GROUPLESS, _DERIVING, _TOPIC_MAX, _GROUP_MAX, _DERIVED_MAX
    from es_broker.remoting import codes, command, frames, header, requests

    fields = tuple(f.name for f in command.RemotingCommand.__dataclass_fields__.values())
    if fields != (_CODE, _LANGUAGE, _VERSION, _OPAQUE, _FLAG, _REMARK, _EXT_FIELDS, _BODY,
                  _SERIALIZE_TYPE, _HEADER):
        raise ImportError("es_broker.remoting._codec was built for another RemotingCommand")
    _Command = command.RemotingCommand
    _LanguageCode = codes.LanguageCode
    _JAVA = codes.LanguageCode.JAVA
    _OTHER = codes.LanguageCode.OTHER
    _JSON = codes.SerializeType.JSON
    _LANGUAGE_BY_NAME = codes.LanguageCode.__members__
    _CURRENT_VERSION = codes.CURRENT_VERSION
    _FLAG_RESPONSE = codes.FLAG_RESPONSE
    _LANGUAGE_JSON = {member: _encode_string(member.name) for member in codes.LanguageCode}
    _REF = dict(command.REFERENCE)
    _REF.update(header.REFERENCE)
    _REF.update(frames.REFERENCE)
    _REF.update(requests.REFERENCE)
    _SHAPES = requests.SHAPES
    _Refusal = requests.Refusal
    _NO_HEADER = requests.NO_HEADER
    _GROUPLESS = requests.GROUPLESS_TOPICS
    _DERIVING = requests.DERIVING
    _TOPIC_MAX = requests.TOPIC_BYTES_MAX
    _GROUP_MAX = requests.GROUP_BYTES_MAX
    _DERIVED_MAX = requests.DERIVED_GROUP_BYTES_MAX
    _STR, _INT, _LONG, _BOOL = requests.Kind.STR, requests.Kind.INT, requests.Kind.LONG, requests.Kind.BOOL
    _SEND_MESSAGE = codes.RequestCode.SEND_MESSAGE
    return 0


cdef object _new(object code, object language, object version, object opaque, object flag,
                 object remark, object ext_fields, object body, object serialize_type):
    cdef object cmd = _Command.__new__(_Command)
    PyObject_GenericSetAttr(cmd, _CODE, code)
    PyObject_GenericSetAttr(cmd, _LANGUAGE, language)
    PyObject_GenericSetAttr(cmd, _VERSION, version)
    PyObject_GenericSetAttr(cmd, _OPAQUE, opaque)
    PyObject_GenericSetAttr(cmd, _FLAG, flag)
    PyObject_GenericSetAttr(cmd, _REMARK, remark)
    PyObject_GenericSetAttr(cmd, _EXT_FIELDS, ext_fields)
    PyObject_GenericSetAttr(cmd, _BODY, body)
    PyObject_GenericSetAttr(cmd, _SERIALIZE_TYPE, serialize_type)
    PyObject_GenericSetAttr(cmd, _HEADER, None)
    return cmd


# ------------------------------------------------------------------ command.py

def normalize_ext_fields(fields):
    if _REF is None:
        _bind()
    if not fields:
        return {}
    if type(fields) is not dict:
        return _REF["normalize_ext_fields"](fields)
    cdef dict out = {}
    for key, value in (<dict>fields).items():
        if type(value) is str:
            text = value
        elif value is None:
            continue
        elif value is True:
            text = "true"
        elif value is False:
            text = "false"
        elif type(value) is int:
            text = str(value)
        else:
            text = _REF["ext_value_to_str"](value)
            if text is None:
                continue
        out[key if type(key) is str else str(key)] = text
    return out


def response_to(request, code, remark=None, ext_fields=None, body=b""):
    if _REF is None:
        _bind()
    if type(request) is not _Command:
        return _REF["response_to"](request, code, remark, ext_fields, body)
    return _new(int(code), _JAVA, _CURRENT_VERSION, request.opaque, _FLAG_RESPONSE, remark,
                normalize_ext_fields(ext_fields), bytes(body), request.serialize_type)


def with_ext_fields(cmd, ext_fields):
    if _REF is None:
        _bind()
    if type(cmd) is not _Command:
        return _REF["with_ext_fields"](cmd, ext_fields)
    return _new(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, ext_fields,
                cmd.body, cmd.serialize_type)


# ------------------------------------------------------------------ JSON header: encode

cdef inline bint _i32(object value):
    # an int compared with C bounds: the bounds as Python ints compared through the object
    # protocol cost ~400 instructions a value
    cdef int overflow = 0
    cdef long long number = 0
    if type(value) is not int:
        return False
    number = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0 and I32_MIN <= number <= I32_MAX


cdef inline bint _plain(str text):
    # an ASCII text with nothing JSON escapes: written as it is, in quotes
    cdef const unsigned char* p
    cdef Py_ssize_t i
    cdef unsigned char c
    if not PyUnicode_IS_ASCII(text):
        return False
    p = <const unsigned char*>PyUnicode_DATA(text)
    for i in range(PyUnicode_GET_LENGTH(text)):
        c = p[i]
        if c < 0x20 or c == 34 or c == 92:  # control, ", \
            return False
    return True


cdef inline Py_ssize_t _digits(long long value, char* buf) noexcept:
    # `str(value)` right-aligned in buf[24]; the index of its first character
    cdef Py_ssize_t at = 24
    cdef bint negative = value < 0
    cdef unsigned long long rest = <unsigned long long>(-value) if negative else <unsigned long long>value
    while True:
        at -= 1
        buf[at] = <char>(48 + rest % 10)
        rest //= 10
        if rest == 0:
            break
    if negative:
        at -= 1
        buf[at] = 45  # -
    return at


cdef str _decimal(long long value):
    """`str(value)` of an int in Java int range, written into a new ASCII text."""
    cdef char buf[24]
    cdef Py_ssize_t at = _digits(value, buf)
    cdef str out = PyUnicode_New(24 - at, 127)
    memcpy(PyUnicode_DATA(out), &buf[at], 24 - at)
    return out


cdef str _json_string(str text):
    """`encode_basestring(text)`: an ASCII text that holds nothing it escapes (a quote, a
    backslash, a control character) is itself in quotes, written into one new text; anything
    else is its own answer."""
    cdef Py_ssize_t n
    cdef char* q
    if not _plain(text):
        return _encode_string(text)
    n = PyUnicode_GET_LENGTH(text)
    out = PyUnicode_New(n + 2, 127)
    q = <char*>PyUnicode_DATA(out)
    q[0] = 34
    memcpy(q + 1, PyUnicode_DATA(text), n)
    q[n + 1] = 34
    return out


cdef inline char* _put(char* q, const char* text, Py_ssize_t n) noexcept:
    memcpy(q, text, n)
    return q + n


cdef inline char* _put_text(char* q, str text) noexcept:
    # an ASCII text (`_plain`), in quotes
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    q[0] = 34
    memcpy(q + 1, PyUnicode_DATA(text), n)
    q[n + 1] = 34
    return q + n + 2


cdef inline char* _put_number(char* q, const char* name, Py_ssize_t name_len, long long value) noexcept:
    cdef char buf[24]
    cdef Py_ssize_t at = _digits(value, buf)
    q = _put(q, name, name_len)
    return _put(q, &buf[at], 24 - at)


def encode_json_header(cmd):
    if _REF is None:
        _bind()
    if type(cmd) is not _Command:
        return _REF["encode_json_header"](cmd)
    code, version, opaque, flag = cmd.code, cmd.version, cmd.opaque, cmd.flag
    ext = cmd.ext_fields
    language = cmd.language
    remark = cmd.remark
    if not (_i32(code) and _i32(version) and _i32(opaque) and _i32(flag) and type(ext) is dict
            and type(language) is _LanguageCode and (remark is None or type(remark) is str)):
        return _REF["encode_json_header"](cmd)
    cdef list keys = None
    cdef bint plain = remark is None or _plain(remark)
    cdef str lang = _LANGUAGE_JSON[language]
    cdef char buf[24]
    cdef Py_ssize_t fields = 0
    # the fixed text, the four numbers, the language and the remark
    cdef Py_ssize_t total = 83 + PyUnicode_GET_LENGTH(lang)
    total += 24 - _digits(code, buf) + 24 - _digits(flag, buf)
    total += 24 - _digits(opaque, buf) + 24 - _digits(version, buf)
    if remark is not None:
        total += 12 + PyUnicode_GET_LENGTH(remark)
    if ext:
        for key in (<dict>ext):
            if type(key) is not str:
                return _REF["encode_json_header"](cmd)
        keys = sorted(ext)
        total += 15  # ,"extFields":{ and its }
        for key in keys:
            value = (<dict>ext)[key]
            if type(value) is not str:
                if value is not None:
                    return _REF["encode_json_header"](cmd)
                continue
            if plain and not (_plain(key) and _plain(value)):
                plain = False
            total += PyUnicode_GET_LENGTH(key) + PyUnicode_GET_LENGTH(value) + 5  # "k":"v"
            fields += 1
        if fields > 1:
            total += fields - 1  # the commas between them
    if not plain:
        return _encode_parts(code, version, opaque, flag, ext, keys, lang, remark)
    # every text ASCII with nothing to escape: the bytes written at once, as the parts would join
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef char* q = PyBytes_AS_STRING(out)
    cdef bint first = True
    q = _put_number(q, '{"code":', 8, code)
    if keys:
        q = _put(q, ',"extFields":{', 14)
        for key in keys:
            value = (<dict>ext)[key]
            if value is None:
                continue
            if not first:
                q[0] = 44  # ,
                q += 1
            first = False
            q = _put_text(q, <str>key)
            q[0] = 58  # :
            q = _put_text(q + 1, <str>value)
        q[0] = 125  # }
        q += 1
    q = _put_number(q, ',"flag":', 8, flag)
    q = _put(q, ',"language":', 12)
    q = _put(q, <const char*>PyUnicode_DATA(lang), PyUnicode_GET_LENGTH(lang))
    q = _put_number(q, ',"opaque":', 10, opaque)
    if remark is not None:
        q = _put(q, ',"remark":', 10)
        q = _put_text(q, <str>remark)
    q = _put_number(q, ',"serializeTypeCurrentRPC":"JSON","version":', 44, version)
    q[0] = 125  # }
    q += 1
    if q - PyBytes_AS_STRING(out) != total:
        raise AssertionError("encode_json_header: the header's length was miscounted")
    return out


cdef bytes _encode_parts(code, version, opaque, flag, dict ext, list keys, str lang, remark):
    """The header of texts that JSON escapes, or that are not ASCII: parts joined, then UTF-8."""
    cdef list parts = ['{"code":', _decimal(code)]
    cdef bint first = True
    if keys:
        parts.append(',"extFields":{')
        for key in keys:
            value = ext[key]
            if value is None:
                continue
            if not first:
                parts.append(",")
            first = False
            parts.append(_json_string(key))
            parts.append(":")
            parts.append(_json_string(value))
        parts.append("}")
    parts.append(',"flag":')
    parts.append(_decimal(flag))
    parts.append(',"language":')
    parts.append(lang)
    parts.append(',"opaque":')
    parts.append(_decimal(opaque))
    if remark is not None:
        parts.append(',"remark":')
        parts.append(_json_string(remark))
    parts.append(',"serializeTypeCurrentRPC":"JSON","version":')
    parts.append(_decimal(version))
    parts.append("}")
    # "replace": a lone surrogate becomes "?", as in the reference
    return "".join(parts).encode("utf-8", "replace")


# ------------------------------------------------------------------ JSON header: decode

class _Unusual(Exception):
    """Not the shape the fast path takes: the reference decodes it (or names the error)."""


cdef inline Py_ssize_t _ws(int kind, void* data, Py_ssize_t pos, Py_ssize_t end):
    cdef uint32_t c
    while pos < end:
        c = PyUnicode_READ(kind, data, pos)
        if c != 32 and c != 9 and c != 10 and c != 13:
            break
        pos += 1
    return pos


cdef str _string(str text, int kind, void* data, Py_ssize_t pos, Py_ssize_t end,
                 Py_ssize_t* after):
    # pos is just past the opening quote; the string, with `after` set to the index past the
    # closing quote (returned, not appended to a scratch list: an append and a pop a string
    # reallocated the list each time, ~1.8k instructions a string)
    cdef Py_ssize_t at = pos
    cdef uint32_t c
    while at < end:
        c = PyUnicode_READ(kind, data, at)
        if c == 34:  # "
            after[0] = at + 1
            return PyUnicode_Substring(text, pos, at)
        if c == 92 or c < 32:  # an escape, or a control character the strict scanner refuses
            value, stop = _scanstring(text, pos, True)
            after[0] = stop
            return value
        at += 1
    raise _Unusual()


cdef Py_ssize_t _integer(int kind, void* data, Py_ssize_t pos, Py_ssize_t end, int64_t* out) except -1:
    cdef bint negative = False
    cdef int64_t value = 0
    cdef int digits = 0
    cdef uint32_t c
    if pos < end and PyUnicode_READ(kind, data, pos) == 45:  # -
        negative = True
        pos += 1
    while pos < end:
        c = PyUnicode_READ(kind, data, pos)
        if c < 48 or c > 57:
            break
        if digits and value == 0:  # a leading zero: not JSON
            raise _Unusual()
        value = value * 10 + (c - 48)
        digits += 1
        if digits > 10:
            raise _Unusual()
        pos += 1
    if not digits:
        raise _Unusual()
    if pos < end:
        c = PyUnicode_READ(kind, data, pos)
        if c == 46 or c == 101 or c == 69:  # . e E: a float, which the reference keeps as text
            raise _Unusual()
    if negative:
        value = -value
    if value < I32_MIN or value > I32_MAX:
        raise _Unusual()
    out[0] = value
    return pos


cdef object _decode(str text, object body):
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef Py_ssize_t end = PyUnicode_GET_LENGTH(text)
    cdef Py_ssize_t pos
    cdef int64_t code = 0, version = 0, opaque = 0, flag = 0, number = 0
    cdef dict ext = {}
    cdef uint32_t c
    cdef str key
    cdef Py_ssize_t n
    language = _JAVA
    remark = None
    pos = _ws(kind, data, 0, end)
    if pos >= end or PyUnicode_READ(kind, data, pos) != 123:  # {
        raise _Unusual()
    pos = _ws(kind, data, pos + 1, end)
    if pos < end and PyUnicode_READ(kind, data, pos) == 125:  # }
        pos += 1
    else:
        while True:
            if pos >= end or PyUnicode_READ(kind, data, pos) != 34:
                raise _Unusual()
            key = _string(text, kind, data, pos + 1, end, &pos)
            pos = _ws(kind, data, pos, end)
            if pos >= end or PyUnicode_READ(kind, data, pos) != 58:  # :
                raise _Unusual()
            pos = _ws(kind, data, pos + 1, end)
            if pos >= end:
                raise _Unusual()
            c = PyUnicode_READ(kind, data, pos)
            # each name compared only with the names of its length (a text comparison is a call)
            n = PyUnicode_GET_LENGTH(key)
            if n == 4 and key == "code":
                pos = _integer(kind, data, pos, end, &code)
            elif n == 6 and key == "opaque":
                pos = _integer(kind, data, pos, end, &opaque)
            elif n == 4 and key == "flag":
                pos = _integer(kind, data, pos, end, &flag)
            elif n == 7 and key == "version":
                pos = _integer(kind, data, pos, end, &version)
            elif n == 9 and key == "extFields":
                if c != 123:
                    raise _Unusual()
                ext = {}
                pos = _ext_fields(text, kind, data, pos + 1, end, ext)
            elif c == 34:  # a string: language, remark, or a key nobody reads
                value = _string(text, kind, data, pos + 1, end, &pos)
                if n == 8 and key == "language":
                    language = _LANGUAGE_BY_NAME.get(value, _OTHER)
                elif n == 6 and key == "remark":
                    remark = value
            elif not (n == 8 and key == "language") and not (n == 6 and key == "remark") and (
                c == 45 or 48 <= c <= 57
            ):
                pos = _integer(kind, data, pos, end, &number)  # an unknown int key
            else:
                raise _Unusual()
            pos = _ws(kind, data, pos, end)
            if pos >= end:
                raise _Unusual()
            c = PyUnicode_READ(kind, data, pos)
            if c == 44:  # ,
                pos = _ws(kind, data, pos + 1, end)
                continue
            if c == 125:
                pos += 1
                break
            raise _Unusual()
    if _ws(kind, data, pos, end) != end:
        raise _Unusual()
    return _new(code, language, version, opaque, flag, remark, ext, body, _JSON)


cdef Py_ssize_t _ext_fields(str text, int kind, void* data, Py_ssize_t pos, Py_ssize_t end,
                            dict ext) except -1:
    # pos is just past the {; string keys and string values only
    pos = _ws(kind, data, pos, end)
    if pos < end and PyUnicode_READ(kind, data, pos) == 125:
        return pos + 1
    while True:
        if pos >= end or PyUnicode_READ(kind, data, pos) != 34:
            raise _Unusual()
        key = _string(text, kind, data, pos + 1, end, &pos)
        pos = _ws(kind, data, pos, end)
        if pos >= end or PyUnicode_READ(kind, data, pos) != 58:
            raise _Unusual()
        pos = _ws(kind, data, pos + 1, end)
        if pos >= end or PyUnicode_READ(kind, data, pos) != 34:
            raise _Unusual()  # a number, boolean or null value: the reference converts it
        ext[key] = _string(text, kind, data, pos + 1, end, &pos)
        pos = _ws(kind, data, pos, end)
        if pos >= end:
            raise _Unusual()
        c = PyUnicode_READ(kind, data, pos)
        if c == 44:
            pos = _ws(kind, data, pos + 1, end)
            continue
        if c == 125:
            return pos + 1
        raise _Unusual()


def decode_json_header(header, body=b""):
    if _REF is None:
        _bind()
    cdef str text
    if type(header) is bytes:
        text = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(header), PyBytes_GET_SIZE(header), "replace")
    else:
        text = bytes(header).decode("utf-8", "replace")
    try:
        return _decode(text, body)
    except (_Unusual, ValueError, RecursionError):
        return _REF["decode_json_header"](header, body)


# ------------------------------------------------------------------ frames

cdef inline void _put32(char* p, uint32_t value) noexcept:
    p[0] = <char>(value >> 24)
    p[1] = <char>(value >> 16)
    p[2] = <char>(value >> 8)
    p[3] = <char>value


def encode_frame(cmd):
    if _REF is None:
        _bind()
    if type(cmd) is not _Command or cmd.serialize_type is not _JSON or type(cmd.body) is not bytes:
        return _REF["encode_frame"](cmd)
    cdef bytes header = encode_json_header(cmd)
    cdef bytes body = cmd.body
    cdef Py_ssize_t header_len = PyBytes_GET_SIZE(header)
    cdef Py_ssize_t body_len = PyBytes_GET_SIZE(body)
    if header_len > MAX_HEADER or 4 + header_len + body_len > 0x7FFFFFFF:
        return _REF["encode_frame"](cmd)  # refused there, with its text
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 8 + header_len + body_len)
    cdef char* p = PyBytes_AS_STRING(out)
    _put32(p, <uint32_t>(4 + header_len + body_len))
    _put32(p + 4, <uint32_t>header_len)  # serialize type JSON (0) in the top byte
    memcpy(p + 8, PyBytes_AS_STRING(header), header_len)
    memcpy(p + 8 + header_len, PyBytes_AS_STRING(body), body_len)
    return out


# ------------------------------------------------------------------ requests.decode and check

# a field's plan: (name, attr, kind, required, low, high, max_len, choices, pattern, default); kind
# 0 text, 1 integer, 2 boolean; low/high the integer's bounds (the Java type's, narrowed by min/max);
# default what the header class holds when the field is left out
cdef class _Field:
    """One field of a shape's plan, typed: read without unpacking a tuple or converting a bound."""
    cdef str name
    cdef object attr
    cdef int kind
    cdef bint required
    cdef int64_t low, high
    cdef object max_len, choices, pattern, default


cdef _Field _field(str name, object attr, int kind, bint required, object low, object high,
                   object max_len, object choices, object pattern, object default):
    cdef _Field f = _Field.__new__(_Field)
    f.name, f.attr, f.kind, f.required = name, attr, kind, required
    f.low, f.high = low, high
    f.max_len, f.choices, f.pattern, f.default = max_len, choices, pattern, default
    return f


cdef tuple _plans(object shape):
    cdef list plain = [], wire = []
    for spec, wire_name in zip(shape.fields, shape.wire_names):
        if spec.kind is _STR:
            kind = 0
        elif spec.kind is _INT or spec.kind is _LONG:
            kind = 1
        elif spec.kind is _BOOL:
            kind = 2
        else:
            return None
        java = (I32_MIN, I32_MAX) if spec.kind is _INT else (-(1 << 63), (1 << 63) - 1)
        low = java[0] if spec.min is None else max(java[0], spec.min)
        high = java[1] if spec.max is None else min(java[1], spec.max)
        default = None
        if shape.header is not None:
            default = shape.header.__dataclass_fields__[spec.attr].default
            if default is _MISSING:
                if not spec.required:
                    return None
                default = None  # never used: a missing required field is refused
        if not (type(low) is int and type(high) is int and type(spec.name) is str
                and type(wire_name) is str
                and -(1 << 63) <= low <= (1 << 63) - 1 and -(1 << 63) <= high <= (1 << 63) - 1):
            return None
        for name, out in ((spec.name, plain), (wire_name, wire)):
            out.append(_field(name, spec.attr, kind, spec.required, low, high, spec.max_len,
                              spec.choices, spec.pattern, default))
    return (shape, tuple(plain), tuple(wire))


cdef bint _integer_in(str raw, int64_t low, int64_t high, int64_t* out):
    # what the reference accepts: [+-]?[0-9]+ in ASCII, within the bounds; 18 digits at most here
    # (longer ones, in range or not, are the reference's to judge)
    cdef Py_ssize_t n = len(raw), i = 0
    cdef int64_t value = 0
    cdef bint negative = False
    cdef Py_UCS4 c
    if n and (raw[0] == "+" or raw[0] == "-"):
        negative = raw[0] == "-"
        i = 1
    if i == n or n - i > 18:
        return False
    while i < n:
        c = raw[i]
        if c < "0" or c > "9":
            return False
        value = value * 10 + <int64_t>(<uint32_t>c - 48)
        i += 1
    if negative:
        value = -value
    out[0] = value
    return low <= value <= high


cdef inline bint _is_true(const char* p) noexcept:
    # four ASCII characters: "true" in any case (| 32 lowers an ASCII letter, and maps no other
    # ASCII character onto t, r, u or e)
    return (p[0] | 32) == 116 and (p[1] | 32) == 114 and (p[2] | 32) == 117 and (p[3] | 32) == 101


def decode(cmd, shape=None):
    if _REF is None:
        _bind()
    if shape is None:
        shape = _SHAPES.get(cmd.code)
        if shape is None:
            return None
    if type(cmd) is not _Command or type(cmd.ext_fields) is not dict:
        return _REF["decode"](cmd, shape)
    entry = _PLANS.get(id(shape))
    if entry is None or (<tuple>entry)[0] is not shape:
        entry = _plans(shape)
        if entry is None:
            return _REF["decode"](cmd, shape)
        if len(_PLANS) < 4096:
            _PLANS[id(shape)] = entry
    cdef dict fields = cmd.ext_fields
    cdef tuple plan = (<tuple>entry)[1]
    if shape.renames is not None and cmd.code != _SEND_MESSAGE:
        if not shape.renamed.isdisjoint(fields):
            return _REF["decode"](cmd, shape)
        plan = (<tuple>entry)[2]
    cdef int kind
    cdef int64_t number
    header = shape.header
    # built in place, as dataclasses' own __init__ does for a frozen class (object.__setattr__), with
    # every field set: the read value or the field's default; dropped if the reference must judge
    obj = _new_object(header) if header is not None else None
    cdef _Field f
    for item in plan:
        f = <_Field>item
        raw = fields.get(f.name)
        if raw is None:
            if f.required:
                return _REF["decode"](cmd, shape)  # refused there, with its remark
            value = f.default
        elif type(raw) is not str:
            return _REF["decode"](cmd, shape)
        elif f.kind == 0:
            if ((not raw and f.required) or len(<str>raw) > f.max_len
                    or (f.pattern is not None and f.pattern.fullmatch(raw) is None)
                    or (f.choices is not None and raw not in f.choices)):
                return _REF["decode"](cmd, shape)
            value = raw
        elif f.kind == 1:
            if not _integer_in(<str>raw, f.low, f.high, &number):
                return _REF["decode"](cmd, shape)
            value = number
        elif PyUnicode_IS_ASCII(raw):  # Boolean.parseBoolean without a method call: "true", any case
            value = PyUnicode_GET_LENGTH(raw) == 4 and _is_true(<const char*>PyUnicode_DATA(raw))
        else:
            value = (<str>raw).lower() == "true"
        if obj is not None:
            PyObject_GenericSetAttr(obj, f.attr, value)
    if shape.body is not None and shape.body(cmd) is not None:
        return _REF["decode"](cmd, shape)
    return _NO_HEADER if obj is None else obj


def check(cmd, shape=None):
    decoded = decode(cmd, shape)
    return decoded if type(decoded) is _Refusal else None


def check_text(cmd, shape=None):
    """The usual request, every field name and value an ASCII text (so UTF-8) and no remark, whose
    topic and group names hold no NUL, name a group (not a bare retry or dead-letter prefix) and
    fit their keys, is None here; anything else is the reference's to judge (and word)."""
    if _REF is None:
        _bind()
    shape = shape or _SHAPES.get(cmd.code)
    if shape is None:
        return None
    if type(cmd) is not _Command or type(cmd.ext_fields) is not dict or cmd.remark is not None:
        return _REF["check_text"](cmd, shape)
    cdef dict fields = cmd.ext_fields
    for key, value in fields.items():
        if (type(key) is not str or type(value) is not str or not PyUnicode_IS_ASCII(key)
                or not PyUnicode_IS_ASCII(value)):
            return _REF["check_text"](cmd, shape)
    code = cmd.code
    cdef Py_ssize_t n, limit
    cdef bint topic
    for item in (shape.name_fields if code != _SEND_MESSAGE else shape.plain_name_fields):
        wire, declared, what, kind = <tuple>item
        raw = fields.get(wire)
        if raw is None and wire != declared:
            raw = fields.get(declared)
        if raw is None:
            continue
        n = PyUnicode_GET_LENGTH(raw)  # ASCII: its length in UTF-8
        topic = kind == "topic"
        limit = _TOPIC_MAX if topic else _GROUP_MAX
        if declared == "group" and code in _DERIVING and _DERIVED_MAX < limit:
            limit = _DERIVED_MAX
        if (n > limit or memchr(PyUnicode_DATA(raw), 0, n) != NULL
                or (topic and raw in _GROUPLESS)):
            return _REF["check_text"](cmd, shape)
    return None
