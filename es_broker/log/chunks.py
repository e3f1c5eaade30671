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

A reader finds a message at its physical offset (`read`, `Reader`): its
TOTALSIZE (the first 4 bytes) says how many bytes follow. A TOTALSIZE of 0
is a gap: no message there (retention removed it, or it never reached this
directory), as a missing key was before. A walk over the messages
(`messages`) goes message by message by TOTALSIZE; in a gap it skips the
zeros and takes as the next message's start the first offset, among the
three before the first non-zero byte and that byte itself, whose 4 bytes
at +4 are MAGICCODE (TOTALSIZE's high bytes may be zero, its last cannot
all be; a shifted candidate cannot show the code, whose four bytes differ).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import lmdb

from es_broker.log.records import seq_key
from es_broker.remoting.message import MAGIC_CODE

DATABASE = "commitlog_chunks"
CHUNK = 2022  # two to a 4 KiB leaf page (see the module's docstring)
_SIZE_AT = struct.Struct(">i").unpack_from
_MAGIC = struct.pack(">i", MAGIC_CODE)
_KEY = struct.Struct(">Q")


class ChunkCorrupt(Exception):
    """The chunks break their layout (a negative size, a gap followed by no message)."""


Read = Callable[[int], "bytes | None"]


def reader(txn: lmdb.Transaction[bytes], db: lmdb._Database | None) -> Read:
    """A function reading the message at a physical offset, None where none is.

    It keeps the last chunk it read, so a loop over nearby messages (a pull's
    batch, a record's messages) reads each chunk once: use it within one
    read loop only, with no write to the chunks in between.
    """
    get, key, size_at, chunk = txn.get, _KEY.pack, _SIZE_AT, CHUNK
    cached_at, cached = -1, b""

    def read(phy: int) -> bytes | None:
        nonlocal cached_at, cached
        at = phy - phy % chunk
        if at != cached_at:
            value = get(key(at), db=db)
            if value is None:
                return None
            cached_at, cached = at, value
        o = phy - at
        if o + 4 <= len(cached):
            size = size_at(cached, o)[0]
            if size <= 0:
                return None
            if o + size <= len(cached):
                return cached[o : o + size]
        else:
            size = 0
        # the message (or its size) goes on in the next chunks
        span = _span(get, db, at, cached, o, max(size, 4))
        if span is None:
            return None
        if not size:
            size = size_at(span, 0)[0]
            if size <= 0:
                return None
            span = _span(get, db, at, cached, o, size)
            if span is None:
                return None
        return span

    return read


def _span(
    get: Callable[..., bytes | None],
    db: lmdb._Database | None,
    at: int,
    first: bytes,
    o: int,
    n: int,
) -> bytes | None:
    """n bytes from offset o of the chunk `first` at `at` on, reading the next chunks."""
    parts, have = [first[o:]], len(first) - o
    while have < n:
        at += CHUNK
        value = get(_KEY.pack(at), db=db)
        if value is None:
            return None
        parts.append(value)
        have += len(value)
    return b"".join(parts)[:n]


def read(txn: lmdb.Transaction[bytes], db: lmdb._Database | None, phy: int) -> bytes | None:
    """The message stored at physical offset phy, None where none is."""
    return reader(txn, db)(phy)


def write(
    txn: lmdb.Transaction[bytes], db: lmdb._Database | None, payloads: list[tuple[int, bytes]]
) -> None:
    """Write messages at ascending physical offsets: the tail chunk is read once and rewritten,
    the chunks after it are appended. Offsets past the tail are zero-filled from it; an offset
    inside the bytes already written overwrites them in place (never done by the broker)."""
    if not payloads:
        return
    tail_at, tail = _tail(txn, db)
    end = tail_at + len(tail)
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
        items = [(_KEY.pack(base + o), stream[o : o + CHUNK]) for o in range(0, len(stream), CHUNK)]
        rewrite = 1 if base == tail_at else 0  # the partial tail: rewritten, not appended
        if rewrite:
            txn.put(*items[0], db=db)
        if len(items) > rewrite:
            txn.cursor(db=db).putmulti(items[rewrite:], append=True)
        tail_at = base + (len(stream) - 1) // CHUNK * CHUNK
        tail = items[-1][1]


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
    values = cur.iternext(keys=False)
    buf_at = int.from_bytes(cur.key(), "big")
    buf = b""
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

    while fill(4):
        o = pos - buf_at
        size = _SIZE_AT(buf, o)[0]
        if size > 0:
            if not fill(size):
                raise ChunkCorrupt(f"the message at {pos} ({size} bytes) runs past the last chunk")
            o = pos - buf_at
            yield pos, buf[o : o + size]
            pos += size
            continue
        if size < 0:
            raise ChunkCorrupt(f"a negative size at {pos}")
        # a gap: skip its zeros, then find the message that ends it
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
        for candidate in range(max(pos, first_nonzero - 3), first_nonzero + 1):
            pos = candidate
            if fill(8) and buf[pos - buf_at + 4 : pos - buf_at + 8] == _MAGIC:
                break
        else:
            raise ChunkCorrupt(f"no message starts where the gap before {first_nonzero} ends")
