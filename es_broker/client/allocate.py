"""AllocateMessageQueueAveragely (B-51, B-52): which queues one client of a group takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

Q = TypeVar("Q")


def allocate_averagely(current_cid: str, mq_all: Sequence[Q], cid_all: Sequence[str]) -> list[Q]:
    """This client's share of `mq_all`; both lists must already be sorted (B-50).

    Contiguous blocks, the first `n mod c` clients taking one queue more.
    Raises ValueError for an empty client id, queue list or client list (the
    caller keeps its previous allocation); a client missing from `cid_all`
    gets nothing.
    """
    if not current_cid:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")
    if current_cid not in cid_all:
        return []
    n, c = len(mq_all), len(cid_all)
    index = cid_all.index(current_cid)
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and index < mod:
        size = n // c + 1
    else:
        size = n // c
    start = index * size if mod > 0 and index < mod else index * size + mod
    take = min(size, n - start)
    return list(mq_all[start : start + take]) if take > 0 else []
