"""What the tests of the projections' compiled appliers share: records applied in group commits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from es_broker.log import RecordLog
from es_broker.log.store import AppendContext, Projection


def databases_after(
    path: Path,
    projections: Sequence[Projection],
    batches: list[list[dict[str, Any]]],
    databases: Callable[[], list[Any]],
) -> list[list[tuple[bytes, bytes]]]:
    """Every (key, value) of `databases()` once each batch of records went through `path`'s log
    in one group commit (`write_batch`), in order."""
    log = RecordLog(path, projections)
    try:
        for batch in batches:

            def appending(record: dict[str, Any]) -> Callable[[AppendContext], int]:
                return lambda ctx: ctx.append(record)

            results = log.write_batch([appending(record) for record in batch])
            assert all(ok for ok, _ in results), results
        with log.env.begin() as txn:
            return [list(txn.cursor(db=db)) for db in databases()]
    finally:
        log.close()
