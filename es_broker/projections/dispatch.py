"""A projection's handlers by record type: one look-up per record instead of a chain of tests.

A projection lists, in `HANDLERS`, the function applying each record type it
keeps state for; `apply` finds the record's and calls it, and a record of any
other type leaves the projection alone. A handler that reads a hot record's
fields takes its dict view (`es_broker.log.types.as_view`), so mypy checks
each key it reads; a handler of a record the writer applies per message
(`messages_stored`) declares its record parameter as that view instead
(`MessagesStoredRecord`): the same check, without a call per record. A
projection with work for every record as well (the time index's clock) keeps
its own `apply`, which looks its table up the same way; one that marks, at
seq 1, that it was built from the log's start (stats, history) says how in
`mark_built`.

The handlers every message pays (its send's and its pull's records) pass
py-lmdb its arguments by position, as the log's append does:
`txn.get(key, None, db)`, and `txn.put(key, value, True, True, False, db)`
(dupdata, overwrite, append, db). py-lmdb parses keyword arguments at ~1.8k
instructions a call, and a message makes about twenty such calls.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import lmdb

from es_broker.log import Record
from es_broker.log.types import RecordType

# (projection, txn, seq, record); lmdb's Transaction is generic to the type checker only. The
# record is typed Any here so that a handler may take it as its type's dict view (a TypedDict)
Handler = Callable[[Any, "lmdb.Transaction[bytes]", int, Any], None]


H = TypeVar("H")


def handlers(table: Mapping[RecordType, H]) -> dict[str, H]:
    """The table keyed by the record types' text, as records hold it (a plain str looks up fastest)."""
    return {kind.value: handler for kind, handler in table.items()}


class Dispatching:
    """The `apply` of a projection whose work is all in its `HANDLERS`."""

    __slots__ = ()
    HANDLERS: ClassVar[dict[str, Handler]]

    def apply(self, txn: lmdb.Transaction[bytes], seq: int, record: Record) -> None:
        if seq == 1:
            self.mark_built(txn)
        handler = self.HANDLERS.get(record["type"])
        if handler is not None:
            handler(self, txn, seq, record)

    def mark_built(self, txn: lmdb.Transaction[bytes]) -> None:
        """What the projection writes as it applies the log's first record, to tell later that
        it was built from the start (nothing by default). The log applies its first record
        through every projection's `apply` (RecordLog.apply), and later ones through `applier`."""

    def applier(self, kind: str) -> Callable[[lmdb.Transaction[bytes], int, Record], None] | None:
        """What applies a record of type `kind`: its handler bound to this projection, None when
        it keeps nothing of such records, or `apply` itself when the projection has its own.

        The log asks once per record type and calls these in order (RecordLog.apply), so a
        record costs a call to each projection that keeps something of it, and no other.
        """
        if type(self).apply is not Dispatching.apply:
            return self.apply
        handler = self.HANDLERS.get(kind)
        return None if handler is None else types.MethodType(handler, self)
