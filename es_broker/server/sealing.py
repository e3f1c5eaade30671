"""Sealing in a running master (B-411..B-414): by itself every `history_seal_interval`, or when asked.

`history_hot_days` > 0 makes a master seal, every `history_seal_interval`
ms, the segments wholly older than that many days; HISTORY_ARCHIVE (9102,
`es-broker archive -b ADDR --before TIME`) asks for one sealing now. Either
way the same rules as `es-broker archive` on a stopped directory (B-401,
B-404) hold, and two more bounds: what every slave has acknowledged (the
replication master's `slaves_acked`) and the SQL read model follower's
checkpoint (`readmodel.position`).

The segments' Parquet files, their read-back and the snapshot are written by a
child process from LMDB read transactions of its own (seal_process.py, B-675);
only the last step, the `history_archived` records, goes through the writer, as
one job.
One sealing runs at a time. The side task never ends the broker: a failed
sealing is logged and tried again at the next interval. The steps are those of
es_broker/history/seal.py, with the same crash points (`ES_BROKER_SEAL_CRASH_AT`,
B-463): killed at any of them, the broker restarts with the segments hot, or
archived and recorded.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from es_broker.config import BrokerRole
from es_broker.core.broker import Broker
from es_broker.ha.master import ReplicationMaster
from es_broker.history import seal as sealing
from es_broker.net.channel import Channel
from es_broker.readmodel.process import read_position
from es_broker.remoting.codes import EsRequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.es_headers import HistoryArchiveRequestHeader
from es_broker.server.edge.remoting_server import Handler
from es_broker.server.seal_process import SealingProcessFailed, catch_up_apart, prepare_apart

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one sealing did and what bounded it."""

    before: int
    sealed: list[sealing.Sealed]
    bound: int | None  # the last seq every consumer (slaves, read model) holds; None: no bound
    limited_by: list[str]
    held_back: dict[str, Any] | None = None  # why nothing was sealed (sealing.held_back)

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "sealed": [s.to_json() for s in self.sealed],
            "limited_by": self.limited_by,
            "consumers_position": self.bound,
            "held_back": self.held_back,
        }


class HistorySealing:
    """A master's sealing: the periodic side task and the HISTORY_ARCHIVE handler."""

    def __init__(
        self, broker: Broker, replication: ReplicationMaster | None, *, follower: bool = False
    ) -> None:
        self.broker = broker
        self.replication = replication
        self.follower = follower  # a SQL read model follows this log (a child process)
        self._lock = trio.Lock()

    @property
    def data_dir(self) -> Path:
        return Path(self.broker.config.storePathRootDir)

    def bound(self) -> tuple[int | None, list[str]]:
        """The last seq sealing may reach: every slave's acknowledged seq and the read model's."""
        slaves: tuple[int | None, list[str]] = (
            self.replication.sealing_bound() if self.replication is not None else (None, [])
        )
        readmodel: tuple[int | None, list[str]] = (None, [])
        if self.follower:  # a follower that never reported a checkpoint holds nothing yet
            readmodel = (read_position(self.data_dir) or 0, ["the SQL read model"])
        return sealing.lowest(slaves, readmodel)

    async def seal_before(self, before: int, requester: str) -> Outcome:
        """Seal every segment wholly before `before` that every consumer has passed."""
        async with self._lock:
            store, config = self.broker.store, self.broker.config
            limit, limited_by = self.bound()
            segments = await trio.to_thread.run_sync(
                store.log.off_the_loop(sealing.plan),
                store,
                before,
                config.history_segment_records,
                limit,
            )
            if not segments:
                held = await trio.to_thread.run_sync(
                    store.log.off_the_loop(sealing.held_back),
                    store,
                    before,
                    config.history_segment_records,
                    limit,
                    limited_by,
                )
                return Outcome(before, [], limit, limited_by, held)
            location = sealing.archive_location(self.data_dir, config.history_archive)
            # in a process of its own, which reads the store read-only: not the broker's GIL (B-675)
            try:
                prepared = await prepare_apart(self.data_dir, location, segments)
            except SealingProcessFailed as exc:
                log.error("sealing before %d: %s\n%s", before, exc, exc.detail)
                # a killed child's reader slot would keep old pages from reuse until checked
                store.log.env.reader_check()
                raise
            slaves = dict(self.replication.slaves_acked) if self.replication is not None else None
            job = sealing.record_job(
                store, prepared, requester, store.clock.now_ms(), exact=False, slaves=slaves
            )
            seqs = await self.broker.submit(job)
            # on disk before the snapshot the previous record names is removed
            await trio.to_thread.run_sync(store.log.flush)
            sealing.crash_point("recorded")
            sealing.clean_snapshots(self.data_dir, keep=prepared.snapshot_seq)
            sealing.crash_point("cleaned")
            outcome = Outcome(before, sealing.sealed_of(prepared, seqs), limit, limited_by)
            try:  # B-460: time travel before the new horizon, ready before anyone asks (B-675)
                await catch_up_apart(self.data_dir)
            except Exception:  # a cache: the first question builds it instead
                log.exception("the archive index did not catch up after sealing")
        for s in outcome.sealed:
            log.info(
                "sealed records %d..%d (%d) to %s, recorded as #%d",
                s.first_seq,
                s.last_seq,
                s.records,
                s.location,
                s.seq,
            )
        return outcome

    async def run(self) -> None:
        """The side task: every `history_seal_interval` ms, seal what is `history_hot_days` old."""
        while True:
            config = self.broker.config
            await trio.sleep(config.history_seal_interval / 1000)
            before = sealing.default_before(
                self.broker.store.clock.now_ms(), config.history_hot_days
            )
            try:
                await self.seal_before(before, "history_hot_days")
            except Exception:  # never the broker's fate: logged, tried again next time
                log.exception(
                    "sealing before %d failed; tried again in %d ms",
                    before,
                    config.history_seal_interval,
                )

    # ------------------------------------------------------------------ HISTORY_ARCHIVE
    def handlers(self) -> dict[int, Handler]:
        return {EsRequestCode.HISTORY_ARCHIVE: self.archive}

    async def archive(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """HISTORY_ARCHIVE: header `before` (epoch ms). Body: `es-broker archive --json`."""
        if self.broker.config.brokerRole == BrokerRole.SLAVE:
            return response_to(
                req,
                ResponseCode.SYSTEM_ERROR,
                "a slave follows its master's log: seal on the master",
            )
        before = HistoryArchiveRequestHeader.of(req).before
        requester = f"es-broker archive -b ({channel.remote_addr})"
        try:
            outcome = await self.seal_before(before, requester)
        except SealingProcessFailed as exc:  # nothing recorded; the log has the child's stderr
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"sealing failed: {exc}")
        body = json.dumps(outcome.to_json()).encode()
        return response_to(req, ResponseCode.SUCCESS, body=body)
