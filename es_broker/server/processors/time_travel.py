"""es-broker's time-travel queries over the wire, answered from the broker's own projections.

What `es-broker offsets --at`, `history` and `explain` read from a data
directory, asked of a running broker instead, so a dashboard or an admin on
another host needs no access to the data directory. Every answer is a JSON
body (standard JSON); a group with no offsets gets an empty answer, not an error.

- OFFSETS_AT (9203): header `group`, optional `topic`, `at` (epoch millis),
  `durable`. Body: `{at, position, group, topic, source, queues}`, the queues
  exactly as `es-broker offsets --at --json` prints them.
- OFFSET_HISTORY (9204): header `group`, optional `topic`, `since`, `until`,
  `maxEntries` (default 200), `changesOnly` (leave out the records that explain
  the changes: each change once, B-294). Body: the newest entries of the window,
  oldest first, as `es-broker history --json`, and `more` when older ones exist.
- OFFSET_TIMELINE (9205): header `group`, optional `topic`, `since`, `until`
  (default: the group's first offset change to the log's last record),
  `points` (default 120), `maxEvents` (default 500). Body: `samples` (the
  offset table at each moment, summed over queues), `queues` (each queue's
  offsets, max offsets and lags at the same moments: one line per queue, B-292)
  and `events` (every record in the window that explains offset changes:
  resets, corrections, merges, newest `maxEvents`).
- EXPLAIN_GROUP (9206): header `group`, `topic`. Body: `es-broker explain --json`.
- ACCOUNT_SCOPE (9207): optional header `topic`, `group`. Body: `{aclEnabled, accessKey,
  admin, everything, reason, topics, groups}`; `topics` and `groups` map each name the
  broker holds (and the ones asked) to `{perm, visible}`, decided by the broker's own
  access check for the calling account (docs/semantics.md B-290). A read: nothing is recorded.
"""

from __future__ import annotations

import trio

from es_broker.acl.access import AccessControl
from es_broker.acl.plain import Perm, group_resource
from es_broker.commands.explain import explain
from es_broker.core.broker import Broker
from es_broker.net.channel import Channel
from es_broker.remoting.codes import EsRequestCode, ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.es_headers import (
    AccountScopeRequestHeader,
    ExplainGroupRequestHeader,
    OffsetHistoryRequestHeader,
    OffsetsAtRequestHeader,
    OffsetTimelineRequestHeader,
)
from es_broker.remoting.query_bodies import (
    AccountScopeBody,
    ExplainBody,
    HistoryRow,
    OffsetAtRow,
    OffsetHistoryBody,
    OffsetsAtBody,
    OffsetTimelineBody,
    PythonJsonBean,
    QueueExplanationRow,
    ResourceScope,
    TimelineQueue,
    TimelineSample,
)
from es_broker.server.edge.remoting_server import Handler
from es_broker.timetravel import timeline
from es_broker.timetravel.query import HistoryEntry, IndexMissing, TimeTravel

DEFAULT_HISTORY_ENTRIES = 200
MAX_HISTORY_ENTRIES = 100_000  # an answer stays far below the 16 MiB frame bound
DEFAULT_POINTS = 120
DEFAULT_EVENTS = 500


class TimeTravelProcessors:
    def __init__(self, broker: Broker, access: AccessControl | None = None) -> None:
        self.broker = broker
        self.access = access  # the plain ACL when aclEnable; None: every caller sees everything

    def handlers(self) -> dict[int, Handler]:
        return {
            EsRequestCode.OFFSETS_AT: self.offsets_at,
            EsRequestCode.OFFSET_HISTORY: self.offset_history,
            EsRequestCode.OFFSET_TIMELINE: self.offset_timeline,
            EsRequestCode.EXPLAIN_GROUP: self.explain_group,
            EsRequestCode.ACCOUNT_SCOPE: self.account_scope,
        }

    def _travel(self, req: RemotingCommand) -> TimeTravel | RemotingCommand:
        try:
            return TimeTravel(self.broker.store)
        except IndexMissing as exc:  # the broker builds its index at open: only a race at start
            return response_to(req, ResponseCode.SYSTEM_BUSY, str(exc))

    @staticmethod
    def _answer(req: RemotingCommand, body: PythonJsonBean) -> RemotingCommand:
        return response_to(req, ResponseCode.SUCCESS, body=body.encode())

    async def offsets_at(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = OffsetsAtRequestHeader.of(req)
        group, topic, at, durable = h.group, h.topic or None, h.at, bool(h.durable)
        travel = self._travel(req)
        if isinstance(travel, RemotingCommand):
            return travel
        with self.broker.store.read() as txn:
            rows = travel.offsets_at(txn, at, group=group, topic=topic, durable=durable)
            position = travel.position_at(txn, at)
            tick = travel.persist_tick(txn, at) if durable else None
        body = OffsetsAtBody(
            at=at,
            group=group,
            topic=topic,
            source="the broker's time index",
            queues=tuple(OffsetAtRow(**r.as_dict()) for r in rows),
            position=position,
            durable=durable,
            persist_tick=tick,
        )
        return self._answer(req, body)

    async def offset_history(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = OffsetHistoryRequestHeader.of(req)
        group, topic, since, until = h.group, h.topic or None, h.since, h.until
        limit = h.max_entries or DEFAULT_HISTORY_ENTRIES
        changes_only = bool(h.changes_only)
        if not 0 < limit <= MAX_HISTORY_ENTRIES:
            return response_to(
                req,
                ResponseCode.SYSTEM_ERROR,
                f"maxEntries {limit} is out of range: 1..{MAX_HISTORY_ENTRIES}",
            )
        travel = self._travel(req)
        if isinstance(travel, RemotingCommand):
            return travel
        with self.broker.store.read() as txn:
            entries, more = timeline.recent_changes(
                travel,
                txn,
                group,
                topic=topic,
                since=since,
                until=until,
                limit=limit,
                changes_only=changes_only,
            )
        return self._answer(
            req,
            OffsetHistoryBody(
                group=group,
                topic=topic,
                since=since,
                until=until,
                more=more,
                entries=tuple(_history_row(e) for e in entries),
            ),
        )

    async def offset_timeline(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = OffsetTimelineRequestHeader.of(req)
        group, topic, since, until = h.group, h.topic or None, h.since, h.until
        points = h.points or DEFAULT_POINTS
        max_events = h.max_events or DEFAULT_EVENTS
        travel = self._travel(req)
        if isinstance(travel, RemotingCommand):
            return travel
        with self.broker.store.read() as txn:
            whole = timeline.window(travel, txn, group, topic)
            if whole is None:
                samples: list[timeline.Sample] = []
                lines: list[timeline.QueueLine] = []
                events: list[HistoryEntry] = []
                more = False
            else:
                since = whole[0] if since is None else since
                until = max(whole[1], since) if until is None else until
                samples, lines = timeline.timeline_by_queue(
                    travel, txn, group, topic=topic, since=since, until=until, points=points
                )
                events, more = timeline.recent_changes(
                    travel,
                    txn,
                    group,
                    topic=topic,
                    since=since,
                    until=until,
                    limit=max_events,
                    events_only=True,
                )
        return self._answer(
            req,
            OffsetTimelineBody(
                group=group,
                topic=topic,
                since=since,
                until=until,
                samples=tuple(TimelineSample(**s.as_dict()) for s in samples),
                queues=tuple(
                    TimelineQueue(
                        topic=line.topic,
                        queue_id=line.queue_id,
                        offsets=tuple(line.offsets),
                        max_offsets=tuple(line.max_offsets),
                        lags=tuple(line.lags),
                    )
                    for line in lines
                ),
                events=tuple(_history_row(e) for e in events),
                more_events=more,
            ),
        )

    async def explain_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = ExplainGroupRequestHeader.of(req)
        group, topic = h.group, h.topic
        # a pass over the log: off the trio thread, so requests of other clients go on meanwhile
        store = self.broker.store
        report = await trio.to_thread.run_sync(store.log.off_the_loop(explain), store, group, topic)
        return self._answer(
            req,
            ExplainBody(
                group=report["group"],
                topic=report["topic"],
                consume_from_where=report["consume_from_where"],
                clients=tuple(report["clients"]),
                queues=tuple(QueueExplanationRow(**q) for q in report["queues"]),
            ),
        )

    async def account_scope(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = AccountScopeRequestHeader.of(req)
        topics = set(self.broker.topic_table()[0])
        groups = set(self.broker.group_table()[0])
        if h.topic:
            topics.add(h.topic)
        if h.group:
            groups.add(h.group)
        if self.access is None:
            everyone = ResourceScope(perm="ALL", visible=True)
            return self._answer(
                req,
                AccountScopeBody(
                    acl_enabled=False,
                    access_key=None,
                    admin=True,
                    everything=True,
                    reason="ACL is not enabled on this broker",
                    topics={t: everyone for t in sorted(topics)},
                    groups={g: everyone for g in sorted(groups)},
                ),
            )
        scope = self.access.scope(channel, req)
        if not scope.sees_all:  # names the account may not use stay unnamed (B-351)
            topics = {t for t in topics if scope.may_see(t)} | {h.topic or ""}
            groups = {g for g in groups if scope.may_see(group_resource(g))}
            groups |= {h.group or ""}
            topics.discard("")
            groups.discard("")

        def entry(resource: str) -> ResourceScope:
            perm = scope.perm(resource)
            return ResourceScope(
                perm="ALL" if perm is None else Perm.name(perm),
                visible=scope.may_see(resource),
            )

        return self._answer(
            req,
            AccountScopeBody(
                acl_enabled=True,
                access_key=scope.access_key,
                admin=scope.admin,
                everything=scope.everything,
                reason=scope.reason,
                topics={t: entry(t) for t in sorted(topics)},
                groups={g: entry(group_resource(g)) for g in sorted(groups)},
            ),
        )


def _history_row(entry: HistoryEntry) -> HistoryRow:
    return HistoryRow(**entry.as_dict())
