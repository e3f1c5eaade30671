"""What a broker does differently as a master and as a slave (docs/design.md §8, "Master and slave").

One `Broker` class serves both; it is given a role (`MasterRole`, or a slave's
`core.slave_broker.SlaveRole`) and asks it at the few points where the two
differ: whether anything of its own may enter its log, where an offset commit
and what a pull did are kept, which offsets it answers, how a reset is planned,
and what it adds to its runtime info. A role is chosen when the broker is
opened (`open_broker`); a slave promoted by fail-over is a new broker on the
same data directory (server/failover.py), so a role never changes in place.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

import lmdb

from es_broker.commands.messages import GetResult
from es_broker.commands.offsets import OffsetCommit
from es_broker.commands.pull import PullRequest
from es_broker.store import Store

SLAVE_LOG_REFUSAL = (
    "service not available now. the broker is a slave: its record log only takes the master's "
    "records, run this on the master"
)


class Role(Protocol):
    """The decisions a broker leaves to its role."""

    #: its log takes only its master's records: a change of its own is refused
    #: (SLAVE_LOG_REFUSAL), a read that records goes unrecorded (`Unrecorded.FOLLOWER`), and
    #: its offset commits and what its pulls did are kept by the role (`keep_commit`, `keep_pull`)
    follows_master: bool

    def keep_commit(self, store: Store, commit: OffsetCommit) -> int:
        """An offset commit of a role that follows its master, kept outside the log (a slave's
        journal, B-30); its place there."""
        ...

    def keep_pull(self, store: Store, pull: PullRequest, result: GetResult) -> None:
        """What a pull did on a role that follows its master, kept outside the log (a slave
        journals its delivery and ignores a piggybacked commit, B-31, B-118)."""
        ...

    def own_offset(
        self, store: Store, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> int | None:
        """The offset of a queue the role holds over the offset table (a slave's own commit, B-120);
        None: the table's answers."""
        ...

    def own_offsets(self) -> Collection[tuple[str, str, int]]:
        """The (topic, group, queue id) of every offset the role holds over the offset table."""
        ...

    def reset_as(
        self, mode: str | None, default_mode: str, dry_run: bool
    ) -> tuple[str | None, bool]:
        """The reset mode and dry-run flag a reset plan is made with (a slave records none, B-120)."""
        ...

    def runtime_fields(self) -> dict[str, int]:
        """What the role adds to GET_BROKER_RUNTIME_INFO."""
        ...

    def close(self) -> None:
        """Release what the role holds, after the broker's store is closed."""
        ...


class MasterRole:
    """A master (or a broker without replication): every change of its own is a record of its log."""

    follows_master = False

    def keep_commit(self, store: Store, commit: OffsetCommit) -> int:
        raise RuntimeError("a master records its offset commits")

    def keep_pull(self, store: Store, pull: PullRequest, result: GetResult) -> None:
        raise RuntimeError("a master records its pulls")

    def own_offset(
        self, store: Store, txn: lmdb.Transaction[bytes], topic: str, group: str, queue_id: int
    ) -> int | None:
        return None

    def own_offsets(self) -> Collection[tuple[str, str, int]]:
        return ()

    def reset_as(
        self, mode: str | None, default_mode: str, dry_run: bool
    ) -> tuple[str | None, bool]:
        return mode, dry_run

    def runtime_fields(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        return None
