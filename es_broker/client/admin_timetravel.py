"""The admin client's time-travel queries over the wire (es-broker's own request codes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from es_broker.client.admin_base import AdminBase
from es_broker.remoting.body_view import plain
from es_broker.remoting.codes import EsRequestCode
from es_broker.remoting.command import request
from es_broker.remoting.es_headers import (
    AccountScopeRequestHeader,
    ExplainGroupRequestHeader,
    OffsetHistoryRequestHeader,
    OffsetsAtRequestHeader,
    OffsetTimelineRequestHeader,
)
from es_broker.remoting.header_fields import CustomHeader
from es_broker.remoting.query_bodies import (
    AccountScopeBody,
    ExplainBody,
    OffsetHistoryBody,
    OffsetsAtBody,
    OffsetTimelineBody,
    PythonJsonBean,
)

B = TypeVar("B", bound=PythonJsonBean)


@dataclass(frozen=True, slots=True)
class BrokerAnswer(Generic[B]):
    """One broker's answer to a query asked of the whole cluster, with the broker's name and address."""

    broker_name: str
    broker: str
    body: B

    def __json_view__(self) -> dict[str, Any]:
        """The answer as the broker wrote it, with `brokerName` and `broker` after its fields."""
        view: dict[str, Any] = plain(self.body)
        return dict(view, brokerName=self.broker_name, broker=self.broker)


class TimeTravelAdmin(AdminBase):
    """es-broker's queries of the past, asked of every broker of the cluster."""

    async def _group_query(
        self, code: int, what: str, header: CustomHeader, body: type[B]
    ) -> list[BrokerAnswer[B]]:
        """One es-broker query on every master (else a slave) of the cluster; each answer names its broker."""
        answers = []
        for name, addrs in sorted((await self.broker_names()).items()):
            addr = addrs.get(0) or next(iter(addrs.values()))
            r = await self._ok(addr, what, request(code, header), timeout=60.0)
            answers.append(BrokerAnswer(name, addr, body.decode(r.body)))
        return answers

    async def offsets_at(
        self, group: str, at: int, topic: str | None = None, durable: bool = False
    ) -> list[BrokerAnswer[OffsetsAtBody]]:
        """OFFSETS_AT: `es-broker offsets --at` of every broker, from its own time index."""
        header = OffsetsAtRequestHeader(group=group, topic=topic, at=at, durable=durable)
        return await self._group_query(
            EsRequestCode.OFFSETS_AT, f"offsets of {group}", header, OffsetsAtBody
        )

    async def offset_history(
        self,
        group: str,
        topic: str | None = None,
        since: int | None = None,
        until: int | None = None,
        max_entries: int | None = None,
        changes_only: bool = False,
    ) -> list[BrokerAnswer[OffsetHistoryBody]]:
        """OFFSET_HISTORY: the newest offset changes of a group (and their explaining records) per broker.

        `changes_only`: the offset changes alone, each once (not the reset or merge record beside them).
        """
        header = OffsetHistoryRequestHeader(
            group=group,
            topic=topic,
            since=since,
            until=until,
            max_entries=max_entries,
            changes_only=changes_only or None,
        )
        return await self._group_query(
            EsRequestCode.OFFSET_HISTORY, f"history of {group}", header, OffsetHistoryBody
        )

    async def offset_timeline(
        self,
        group: str,
        topic: str | None = None,
        since: int | None = None,
        until: int | None = None,
        points: int | None = None,
    ) -> list[BrokerAnswer[OffsetTimelineBody]]:
        """OFFSET_TIMELINE: a group's offsets and lag sampled over a window, and its events, per broker."""
        header = OffsetTimelineRequestHeader(
            group=group, topic=topic, since=since, until=until, points=points
        )
        return await self._group_query(
            EsRequestCode.OFFSET_TIMELINE, f"timeline of {group}", header, OffsetTimelineBody
        )

    async def account_scope(
        self, topic: str | None = None, group: str | None = None
    ) -> list[BrokerAnswer[AccountScopeBody]]:
        """ACCOUNT_SCOPE of every broker: the topics and groups this client's account may see."""
        return await self._group_query(
            EsRequestCode.ACCOUNT_SCOPE,
            "account scope",
            AccountScopeRequestHeader(topic=topic, group=group),
            AccountScopeBody,
        )

    async def explain_group(self, group: str, topic: str) -> list[BrokerAnswer[ExplainBody]]:
        """EXPLAIN_GROUP: `es-broker explain` of every broker."""
        return await self._group_query(
            EsRequestCode.EXPLAIN_GROUP,
            f"explain {group}",
            ExplainGroupRequestHeader(group=group, topic=topic),
            ExplainBody,
        )
