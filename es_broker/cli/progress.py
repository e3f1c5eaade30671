"""Progress of long work (replay, verify, export, readmodel sync) on a terminal, none in a pipe."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

Tell = Callable[[int, int], None]


@contextmanager
def progress(label: str, stream: TextIO | None = None) -> Iterator[Tell | None]:
    """A `(position, total)` callback drawing a bar with records per second, or None off a terminal.

    Output that goes to a pipe or a file stays what it was: the bar is drawn
    only when `stream` (standard error by default) is a terminal.
    """
    stream = stream if stream is not None else sys.stderr
    if not stream.isatty():
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(desc=label, unit=" records", file=stream)
    started: list[int] = []

    def tell(position: int, total: int) -> None:
        if not started:  # an incremental run starts past its checkpoint: count from there
            started.append(position)
            bar.reset(total=max(total, position))
            bar.update(position)
            return
        bar.total = max(total, position)
        bar.update(position - bar.n)

    try:
        yield tell
    finally:
        bar.close()
