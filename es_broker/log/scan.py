"""Ordered scans of the LMDB keys that share a prefix, forwards or backwards.

Every projection keys its entries as a prefix (a queue, an offset entry, a
message key) followed by a position, so "the entries of X from here on" and
"the newest entries of X before there" are the same two scans everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator

import lmdb


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key that starts with prefix.

    None when there is none: the empty prefix and prefixes of 0xff bytes only
    are followed by the end of the key space.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def prefixed(
    txn: lmdb.Transaction[bytes],
    db: lmdb._Database | None,
    prefix: bytes,
    *,
    start: bytes | None = None,
    stop: bytes | None = None,
    reverse: bool = False,
) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every key of db that starts with prefix and lies in [start, stop).

    In ascending key order, or descending with reverse. start and stop are
    optional bounds within the prefix (a position to resume from, a position
    not to reach); a bound outside the prefix is harmless.
    """
    cur = txn.cursor(db=db)
    if not _position(cur, prefix, start, stop, reverse):
        return
    plen = len(prefix)
    if not reverse:
        if stop is None:
            for key, value in cur:
                if key[:plen] != prefix:
                    return
                yield key, value
        else:
            for key, value in cur:
                if key[:plen] != prefix or key >= stop:
                    return
                yield key, value
    elif start is None:
        for key, value in cur.iterprev():
            if key[:plen] != prefix:
                return
            yield key, value
    else:
        for key, value in cur.iterprev():
            if key[:plen] != prefix or key < start:
                return
            yield key, value


def prefixed_keys(
    txn: lmdb.Transaction[bytes],
    db: lmdb._Database | None,
    prefix: bytes,
    *,
    start: bytes | None = None,
    stop: bytes | None = None,
    reverse: bool = False,
) -> Iterator[bytes]:
    """The keys `prefixed` would yield, without reading their values."""
    cur = txn.cursor(db=db)
    if not _position(cur, prefix, start, stop, reverse):
        return
    plen = len(prefix)
    keys = cur.iterprev(values=False) if reverse else cur.iternext(values=False)
    for key in keys:
        if key[:plen] != prefix:
            return
        if reverse:
            if start is not None and key < start:
                return
        elif stop is not None and key >= stop:
            return
        yield key


def _position(
    cur: lmdb.Cursor[bytes], prefix: bytes, start: bytes | None, stop: bytes | None, reverse: bool
) -> bool:
    """Put cur on the first entry of the scan; False when the database has none there."""
    if not reverse:
        return cur.set_range(prefix if start is None or start < prefix else start)
    # backwards: from the last key below both the prefix's end and stop
    end = prefix_end(prefix)
    if stop is not None and (end is None or stop < end):
        end = stop
    return cur.prev() if end is not None and cur.set_range(end) else cur.last()
