"""The commit log's bytes in page-filling chunks (store format 7, B-475).

RocketMQ's commit log is one byte stream, messages back to back, cut into
files. es-broker keeps the same stream in LMDB database `commitlog_chunks`,
cut into chunks of CHUNK bytes: the chunk holding bytes [k*CHUNK,
(k+1)*CHUNK) is keyed by its first offset k*CHUNK (8 bytes, big-endian), and
only the last chunk (the tail) is shorter. CHUNK is the largest value LMDB
keeps inside a 4 KiB page with an 8-byte key (a node is at most
((4096 - 16) / 2 & ~1) - 2 = 2038 bytes: an 8-byte node header, the key and
2022 bytes), so two chunks fill a leaf page exactly, with no overflow page.
An entry per message cost ~67 bytes more (its key, node header, pointer and
the page's unfilled tail).

A message may straddle two chunks (or more, when it is larger than one): a
reader joins them. The chunks run without a hole from the first to the
tail. Bytes no message occupies are zeros: the blank at a commit-log file's
end (no message straddles two files, B-08), the bytes below phyMin in the
chunk that straddles it (retention deletes the chunks wholly below phyMin
and zeros the rest, `expire`) and the bytes before the first message a
slave or a replay received in its first chunk. The chunks are thus a
function of the surviving messages: the original directory, a replay, a
slave and a rejoin hold the same bytes.

A reader finds a message at its physical offset (`read`, `reader`, whose
compiled twin is in _speedups.pyx): its TOTALSIZE (the first 4 bytes) says
how many bytes follow. A TOTALSIZE of 0 is a gap: no message there
(retention removed it, or it never reached this directory). A walk over the
messages (`messages`) goes message by message by TOTALSIZE, and checks MAGICCODE at
+4 of each: a gap (a file's blank may be 1 to 3 bytes, shorter than a
TOTALSIZE) shows a TOTALSIZE of 0 or no code there. It skips the gap's
zeros and takes as the next message's start the first offset, among the
three before the first non-zero byte and that byte itself, whose 4 bytes
at +4 are MAGICCODE (TOTALSIZE's high bytes may be zero, not all four; a
shifted candidate cannot show the code, whose four bytes differ).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import lmdb

from es_broker import compiled
from es_broker.log.records import seq_key
from es_broker.stored_layout import MAGIC_CODE, PHYSICAL_OFFSET_AT

DATABASE = "commitlog_chunks"
CHUNK = 2022  # two to a 4 KiB leaf page (see the module's docstring)
_SIZE_AT = struct.Struct(">i").unpack_from
_MAGIC = struct.pack(">i", MAGIC_CODE)
_KEY = struct.Struct(">Q")
_PHY = struct.Struct(">q")


class ChunkCorrupt(Exception):
    """The chunks break their layout (a negative size, a gap followed by no message)."""


Read = Callable[[int], "bytes | None"]


def reader(txn: lmdb.Transaction[bytes], db: lmdb._Database | None) -> Read:
    """A function reading the message at a physical offset, None where none is.

    It keeps a window of the bytes it read (a chunk, or a message's start and
    the chunks after it), so a loop over nearby messages (a pull's batch, a
    record's messages) reads each chunk once and joins only what straddles:
    use it within one read loop only, with no write to the chunks in between.
    """
    get, key, size_at, chunk = txn.get, _KEY.pack, _SIZE_AT, CHUNK
    buf_at, buf = 0, b""  # the window: bytes from buf_at on, ending where a chunk ends

    def extend(phy: int, n: int) -> bool:
        """Make the window hold n bytes from phy on (phy is in it), reading the next chunks."""
        nonlocal buf_at, buf
        parts, have, at = [buf[phy - buf_at :]], buf_at + len(buf) - phy, buf_at + len(buf)
        while have < n:
            value = get(key(at), db=db)
            if value is None:
                return False
            parts.append(value)
            have += len(value)
            at += len(value)
        buf_at, buf = phy, b"".join(parts)
        return True

    def read(phy: int) -> bytes | None:
        nonlocal buf_at, buf
        if type(phy) is not int:  # what it does with another type would depend on the window
            raise TypeError(f"a physical offset is an int, not {type(phy).__name__}")
        o = phy - buf_at
        if o < 0 or o >= len(buf):
            at = phy - phy % chunk
            value = get(key(at), db=db)
            if value is None:
                return None
            buf_at, buf, o = at, value, phy - at
        if o + 8 > len(buf):  # its TOTALSIZE and MAGICCODE go on in the next chunk
            if not extend(phy, 8):
                return None
            o = 0
        size = size_at(buf, o)[0]
        if size < 8:
            return None  # zeros: no message here
        if o + size > len(buf):
            if not extend(phy, size):
                return None
            o = 0
        return buf[o : o + size]

    return read


# the pure-Python function that has a compiled twin (es_broker/log/_speedups.pyx)
REFERENCE = {"reader": reader}


def read(txn: lmdb.Transaction[bytes], db: lmdb._Database | None, phy: int) -> bytes | None:
    """The message stored at physical offset phy, None where none is."""
    return reader(txn, db)(phy)


def stored_at(raw: bytes, phy: int) -> bool:
    """Whether `raw`, read at physical offset phy, is a message stored there: its MAGICCODE, and
    its PHYSICALOFFSET field (written when it was placed) phy.

    The readers trust the offset they are given, as a pull trusts its consume queue's units; an
    offset from a request (a send-back's, a message id's) may point inside a message or a
    file's blank, where the bytes are not one. An entry per message answered None there.
    """
    return (
        len(raw) >= PHYSICAL_OFFSET_AT + 8
        and raw[4:8] == _MAGIC
        and _PHY.unpack_from(raw, PHYSICAL_OFFSET_AT)[0] == phy
    )


def write(
    txn: lmdb.Transaction[bytes],
    db: lmdb._Database | None,
    payloads: list[tuple[int, bytes]],
    known_tail: tuple[int, bytes] | None = None,
) -> tuple[int, bytes] | None:
    """Write messages at ascending physical offsets: the tail chunk is read once and rewritten,
    the chunks after it are appended. Offsets past the tail are zero-filled from it; an offset
    inside the bytes already written overwrites them in place (never done by the broker; an
    offset below the first chunk would leave a hole between chunks, which the layout has not).

    `known_tail`, when given, is the last chunk (offset, bytes) as the caller knows it in this
    transaction (what an earlier call returned): it is not read again. Returns the last chunk as
    this call left it when it appended back to back (the usual batch), else None."""
    if not payloads:
        return known_tail
    tail_at, tail = _tail(txn, db) if known_tail is None else known_tail
    end = tail_at + len(tail)
    if tail_at >= 0 and payloads[0][0] == end:  # the usual batch: appended at the end
        datas = [data for _, data in payloads]
        base = tail_at if len(tail) < CHUNK else end
        if base == tail_at:
            datas.insert(0, tail)
        stream = b"".join(datas)
        last_phy, last = payloads[-1]
        if base + len(stream) == last_phy + len(last):  # back to back: no gap to zero-fill
            if stream:
                return _put_stream(txn, db, base, stream, base == tail_at)
            return tail_at, tail
    i = 0
    while i < len(payloads):
        phy = payloads[i][0]
        if tail_at < 0:  # no chunk yet: the first is the one holding phy, zeros before it
            base = phy - phy % CHUNK
            parts, end = [bytes(phy - base)], phy
        elif phy < end:
            _overwrite(txn, db, *payloads[i])
            tail_at, tail = _tail(txn, db)
            end = tail_at + len(tail)
            i += 1
            continue
        elif len(tail) < CHUNK:
            base, parts = tail_at, [tail]
        else:
            base, parts = end, []
        # the run of messages at or past the end, in order
        while i < len(payloads) and payloads[i][0] >= end:
            phy, data = payloads[i]
            if phy > end:
                parts.append(bytes(phy - end))
            parts.append(data)
            end = phy + len(data)
            i += 1
        stream = b"".join(parts)
        if stream:  # nothing when the messages were empty
            tail_at, tail = _put_stream(txn, db, base, stream, base == tail_at)
    return None


def _put_stream(
    txn: lmdb.Transaction[bytes],
    db: lmdb._Database | None,
    base: int,
    stream: bytes,
    rewrite: bool,
) -> tuple[int, bytes]:
    """Write stream's bytes as the chunks from `base` on: the first rewritten when it is the
    partial tail, the others appended. Returns the new tail's offset and bytes (LMDB copies
    each chunk from a view of the stream: no copy of its own)."""
    view = memoryview(stream)
    items = [(_KEY.pack(base + o), view[o : o + CHUNK]) for o in range(0, len(stream), CHUNK)]
    # by position (put: dupdata, overwrite, append, db; putmulti: dupdata, overwrite, append):
    # py-lmdb parses keyword arguments at ~1.8k instructions a call, and a send pays these
    if rewrite:
        key, value = items[0]
        txn.put(key, value, True, True, False, db)
    if len(items) > rewrite:
        txn.cursor(db).putmulti(items[rewrite:], True, True, True)
    return base + (len(stream) - 1) // CHUNK * CHUNK, bytes(items[-1][1])


def _tail(txn: lmdb.Transaction[bytes], db: lmdb._Database | None) -> tuple[int, bytes]:
    """The last chunk's offset and bytes; (-1, b"") when there is none."""
    cur = txn.cursor(db=db)
    if cur.last():
        return int.from_bytes(cur.key(), "big"), cur.value()
    return -1, b""


def _overwrite(
    txn: lmdb.Transaction[bytes], db: lmdb._Database | None, phy: int, data: bytes
) -> None:
    """Put data at phy over bytes already written (and past them), chunk by chunk."""
    at, done = phy - phy % CHUNK, 0
    while done < len(data):
        old = txn.get(_KEY.pack(at), db=db) or b""
        o = phy + done - at
        n = min(CHUNK - o, len(data) - done)
        head = old[:o].ljust(o, b"\x00")
        txn.put(_KEY.pack(at), head + data[done : done + n] + old[o + n :], db=db)
        done += n
        at += CHUNK


def expire(txn: lmdb.Transaction[bytes], db: lmdb._Database | None, phy_min: int) -> None:
    """Retention: delete the chunks wholly below phy_min, zero the straddling chunk's bytes below it."""
    cur = txn.cursor(db=db)
    while cur.first():
        at = int.from_bytes(cur.key(), "big")
        if at >= phy_min:
            return
        value = cur.value()
        if at + len(value) <= phy_min:
            cur.delete()
            continue
        n = phy_min - at
        if value[:n].count(0) != n:
            cur.put(cur.key(), bytes(n) + value[n:])
        return


def messages(
    txn: lmdb.Transaction[bytes], db: lmdb._Database | None, start: int = 0
) -> Iterator[tuple[int, bytes]]:
    """Every (physical offset, message bytes) from the first message at or after `start` on, in
    order. `start` must be a message's offset or lie in zeros (a gap); gaps are skipped as the
    module's docstring says."""
    cur = txn.cursor(db=db)
    if not cur.set_range(seq_key(start - start % CHUNK)):
        return
    buf_at, buf = int.from_bytes(cur.key(), "big"), cur.value()
    values = cur.iternext(keys=False)
    next(values)  # the chunk in buf
    pos = max(start, buf_at)
    more = True

    def fill(n: int) -> bool:
        """Hold at least n bytes from pos in buf (dropping those before pos); False at the end."""
        nonlocal buf, buf_at, more
        if pos - buf_at + n <= len(buf):
            return True
        parts, have = [buf[pos - buf_at :]], len(buf) - (pos - buf_at)
        while have < n and more:
            value = next(values, None)
            if value is None:
                more = False
                break
            parts.append(value)
            have += len(value)
        buf, buf_at = b"".join(parts), pos
        return have >= n

    while fill(8):
        o = pos - buf_at
        size = _SIZE_AT(buf, o)[0]
        if size > 0 and buf[o + 4 : o + 8] == _MAGIC:
            if not fill(size):
                raise ChunkCorrupt(f"the message at {pos} ({size} bytes) runs past the last chunk")
            o = pos - buf_at
            yield pos, buf[o : o + size]
            pos += size
            continue
        # a gap: skip its zeros, then find the message that ends it
        gap_at = pos
        while True:
            o = pos - buf_at
            rest = buf[o:]
            zeros = len(rest) - len(rest.lstrip(b"\x00"))
            if zeros < len(rest):
                break
            pos += zeros
            if not fill(1):
                return
        first_nonzero = pos + zeros
        # the message starts up to 3 bytes before its first non-zero byte (TOTALSIZE's high bytes
        # may be zeros), which may be zeros of a chunk already passed: its code lies after them
        fill(first_nonzero + 8 - pos)
        for candidate in range(max(gap_at, first_nonzero - 3), first_nonzero + 1):
            code = candidate + 4 - buf_at
            if buf[code : code + 4] == _MAGIC:
                if candidate < buf_at:  # the zeros passed, back in front of it
                    buf, buf_at = bytes(buf_at - candidate) + buf, candidate
                pos = candidate
                break
        else:
            raise ChunkCorrupt(f"no message starts where the gap before {first_nonzero} ends")


compiled.install(globals(), "es_broker.log._speedups", reader="Reader")
