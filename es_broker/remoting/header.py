"""The command header in its two encodings: JSON (docs/protocol.md §3) and ROCKETMQ binary (docs/protocol.md §4).

Decoders take the header bytes and the already-split body and return the whole
`RemotingCommand`, so a frame is built once. They raise `HeaderDecodeError`
(with whatever opaque/flag could be read first); encoders raise `EncodeError`.
"""

from __future__ import annotations

import json
import struct

from es_broker import compiled

from .codes import LanguageCode, SerializeType
from .command import RemotingCommand, ext_value_to_str
from .errors import EncodeError, HeaderDecodeError

_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I16_MAX = (1 << 15) - 1

_LANGUAGE_BY_NAME = LanguageCode.__members__
_LANGUAGE_BY_BYTE = {member.value: member for member in LanguageCode}

# -- JSON (serType 0) ---------------------------------------------------------

# parse_float=str keeps the literal text of a fractional number, which is what
# fastjson stores when it coerces a JSON number into a String-valued map.
_JSON_DECODER = json.JSONDecoder(parse_float=str)
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """Encode the header as the Java server does (fastjson defaults).

    Keys in alphabetical order, null fields omitted, every extFields value a
    JSON string, plus the `serializeTypeCurrentRPC` key Java leaks. extFields
    keys are sorted too: Java writes them in HashMap order, which nobody
    depends on, and sorted output keeps the bytes deterministic.
    """
    _check_i32(cmd)
    obj: dict[str, object] = {"code": int(cmd.code)}
    if cmd.ext_fields:
        ext = {}
        for key in sorted(cmd.ext_fields):
            text = ext_value_to_str(cmd.ext_fields[key])
            if text is not None:
                ext[key] = text
        obj["extFields"] = ext
    obj["flag"] = int(cmd.flag)
    obj["language"] = cmd.language.name
    obj["opaque"] = int(cmd.opaque)
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = int(cmd.version)
    # "replace" turns a lone surrogate into "?", as Java's String.getBytes does.
    return _JSON_ENCODER.encode(obj).encode("utf-8", "replace")


def decode_json_header(header: bytes, body: bytes = b"") -> RemotingCommand:
    """Decode a JSON header as written by Java (fastjson) or ali-ons (JSON.stringify).

    Tolerates missing `remark`/`extFields`, unknown keys, and extFields values
    that are numbers, booleans or null (converted to Java strings; null = absent).
    """
    try:
        # Java decodes malformed UTF-8 to U+FFFD rather than failing.
        obj = _JSON_DECODER.decode(bytes(header).decode("utf-8", "replace"))
    except (ValueError, RecursionError) as exc:
        raise HeaderDecodeError(f"JSON header is not valid JSON: {exc}") from None
    if type(obj) is not dict:
        raise HeaderDecodeError(f"JSON header is a {_json_type(obj)}, not an object")

    get = obj.get
    code, version, opaque, flag = (
        get("code", 0),
        get("version", 0),
        get("opaque", 0),
        get("flag", 0),
    )
    # Hot path: four plain ints in Java int range (what every client sends).
    if not (
        type(code) is type(version) is type(opaque) is type(flag) is int
        and _I32_MIN <= code <= _I32_MAX
        and _I32_MIN <= version <= _I32_MAX
        and _I32_MIN <= opaque <= _I32_MAX
        and _I32_MIN <= flag <= _I32_MAX
    ):
        # Read opaque and flag first so that an error about another field can
        # still name the request.
        opaque, flag = _json_int(get("opaque")), _json_int(get("flag"))
        try:
            code, version = _require_json_int(obj, "code"), _require_json_int(obj, "version")
            opaque, flag = _require_json_int(obj, "opaque"), _require_json_int(obj, "flag")
        except HeaderDecodeError as exc:
            exc.opaque, exc.flag = opaque, flag
            raise
    try:
        ext_fields = _json_ext_fields(get("extFields"))
    except HeaderDecodeError as exc:
        exc.opaque, exc.flag = opaque, flag
        raise
    return RemotingCommand(
        code=code,
        language=_json_language(get("language")),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=ext_value_to_str(get("remark")),
        ext_fields=ext_fields,
        body=body,
        serialize_type=SerializeType.JSON,
    )


def _json_type(value: object) -> str:
    return {list: "array", str: "string", bool: "boolean"}.get(type(value), "number or null")


def _require_json_int(obj: dict[str, object], name: str) -> int:
    number = _json_int(obj.get(name))
    if number is None:
        raise HeaderDecodeError(f"JSON header field {name!r} is not a Java int: {obj.get(name)!r}")
    return number


def _json_int(value: object) -> int | None:
    """An int header field: 0 when absent or null (Java's default), None when invalid."""
    if value is None:
        return 0
    if type(value) is int:
        number = value
    elif type(value) is str:  # numeric strings, and float literals kept as text
        try:
            number = int(value)
        except ValueError:
            try:
                as_float = float(value)
            except ValueError:
                return None
            if not as_float.is_integer():
                return None
            number = int(as_float)
    else:
        return None
    return number if _I32_MIN <= number <= _I32_MAX else None


def _json_language(value: object) -> LanguageCode:
    # Java's default is JAVA; an unknown name (a newer client) is kept as OTHER.
    if value is None:
        return LanguageCode.JAVA
    if type(value) is str:
        return _LANGUAGE_BY_NAME.get(value, LanguageCode.OTHER)
    if type(value) is int:  # fastjson also accepts an enum ordinal
        return _LANGUAGE_BY_BYTE.get(value, LanguageCode.OTHER)
    return LanguageCode.OTHER


def _json_ext_fields(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if type(value) is not dict:
        raise HeaderDecodeError(
            f"JSON header field 'extFields' is a {_json_type(value)}, not an object"
        )
    # Java peers send only strings: keep their dict as is (the hot path).
    for item in value.values():
        if type(item) is not str:
            break
    else:
        return value
    out: dict[str, str] = {}
    for key, item in value.items():
        text = ext_value_to_str(item)
        if text is not None:
            out[key] = text
    return out


# -- ROCKETMQ binary (serType 1) ------------------------------------------------

# code i16, language i8, version i16, opaque i32, flag i32, remark length i32
_FIXED = struct.Struct(">hbhiii")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
FIXED_BINARY_HEADER_SIZE = _FIXED.size + _I32.size  # 21: fixed fields + both lengths


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    """Encode the header in the ROCKETMQ binary layout of docs/protocol.md §4.

    A null or empty remark and an empty extFields map are written as length 0;
    extFields entries are sorted by key for deterministic bytes.
    """
    remark = cmd.remark.encode("utf-8", "replace") if cmd.remark else b""
    parts: list[bytes] = []
    for key in sorted(cmd.ext_fields):
        text = ext_value_to_str(cmd.ext_fields[key])
        if text is None:
            continue
        key_bytes = key.encode("utf-8", "replace")
        value_bytes = text.encode("utf-8", "replace")
        if len(key_bytes) > _I16_MAX:
            raise EncodeError(
                f"extFields key of {len(key_bytes)} bytes exceeds the 32767-byte limit"
            )
        parts += (_I16.pack(len(key_bytes)), key_bytes, _I32.pack(len(value_bytes)), value_bytes)
    ext = b"".join(parts)
    try:
        fixed = _FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, len(remark))
    except struct.error:
        raise EncodeError(
            f"code {cmd.code} and version {cmd.version} must fit in 16 bits, "
            f"opaque {cmd.opaque} and flag {cmd.flag} in 32 bits for a ROCKETMQ header"
        ) from None
    return b"".join((fixed, remark, _I32.pack(len(ext)), ext))


def decode_rocketmq_header(header: bytes, body: bytes = b"") -> RemotingCommand:
    """Decode a ROCKETMQ binary header (docs/protocol.md §4).

    Zero-length strings decode as absent (a null remark; extFields entries with
    an empty key or value are dropped), as in Java. Lengths that overrun the
    header, and bytes left over after the extFields map, are errors.
    """
    header = bytes(header)  # no copy when it already is bytes
    size = len(header)
    if size < FIXED_BINARY_HEADER_SIZE:
        raise HeaderDecodeError(
            f"ROCKETMQ header has {size} bytes, fewer than the "
            f"{FIXED_BINARY_HEADER_SIZE}-byte minimum"
        )
    code, language, version, opaque, flag, remark_len = _FIXED.unpack_from(header, 0)
    pos = _FIXED.size
    try:
        if remark_len < 0 or remark_len > size - pos - _I32.size:
            raise HeaderDecodeError(
                f"ROCKETMQ header remark length {remark_len} overruns the header"
            )
        remark = header[pos : pos + remark_len].decode("utf-8", "replace") if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(header, pos)
        pos += _I32.size
        if ext_len < 0 or ext_len > size - pos:
            raise HeaderDecodeError(
                f"ROCKETMQ header extFields length {ext_len} overruns the header"
            )
        if pos + ext_len != size:
            raise HeaderDecodeError(
                f"ROCKETMQ header has {size - pos - ext_len} bytes after the extFields map"
            )
        ext_fields = _decode_ext_map(header, pos, size) if ext_len else {}
    except HeaderDecodeError as exc:
        exc.opaque, exc.flag = opaque, flag
        raise
    return RemotingCommand(
        code=code,
        language=_LANGUAGE_BY_BYTE.get(language, LanguageCode.OTHER),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _decode_ext_map(data: bytes, pos: int, end: int) -> dict[str, str]:
    out: dict[str, str] = {}
    unpack_i16 = _I16.unpack_from
    unpack_i32 = _I32.unpack_from
    while pos < end:
        if end - pos < _I16.size:
            raise HeaderDecodeError("ROCKETMQ extFields map ends inside a key length")
        (key_len,) = unpack_i16(data, pos)
        pos += _I16.size
        if key_len < 0 or key_len > end - pos - _I32.size:
            raise HeaderDecodeError(f"ROCKETMQ extFields key length {key_len} overruns the map")
        key = data[pos : pos + key_len]
        pos += key_len
        (value_len,) = unpack_i32(data, pos)
        pos += _I32.size
        if value_len < 0 or value_len > end - pos:
            raise HeaderDecodeError(f"ROCKETMQ extFields value length {value_len} overruns the map")
        if key_len and value_len:
            # bytes that are not UTF-8 are kept as lone surrogates (surrogateescape), so the edge
            # refuses them naming the field rather than storing a name Java would have changed
            out[key.decode("utf-8", "surrogateescape")] = data[pos : pos + value_len].decode(
                "utf-8", "surrogateescape"
            )
        pos += value_len
    return out


# -- dispatch -------------------------------------------------------------------


def encode_header(cmd: RemotingCommand) -> bytes:
    """Encode the header in the command's own serialize type."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        return encode_rocketmq_header(cmd)
    return encode_json_header(cmd)


def _check_i32(cmd: RemotingCommand) -> None:
    for name in ("code", "version", "opaque", "flag"):
        value = getattr(cmd, name)
        if not _I32_MIN <= value <= _I32_MAX:
            raise EncodeError(f"header field {name}={value} does not fit in a Java int")


# -- the compiled hot path (see command.py) ---------------------------------------
REFERENCE = {
    "encode_json_header": encode_json_header,
    "decode_json_header": decode_json_header,
}

compiled.install(globals(), "es_broker.remoting._codec", "encode_json_header", "decode_json_header")
